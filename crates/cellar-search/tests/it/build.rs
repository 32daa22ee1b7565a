//! Building indexes: bad corpora, output directories, codecs and PCA, interrupted builds.

use std::path::Path;

use cellar_core::codec::CodecKind;
use cellar_core::CellarError;
use cellar_search::{Index, Mode, OpenOptions, SearchRequest};
use tempfile::TempDir;

use crate::fixture::{corpus_lines, options, write_collection};

fn build_error(corpus: &str) -> String {
    let tmp = TempDir::new().unwrap();
    let path = tmp.path().join("corpus.jsonl");
    std::fs::write(&path, corpus).unwrap();
    match Index::build(&options(&path, &tmp.path().join("index"))) {
        Err(CellarError::InvalidInput(message)) => message,
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[test]
fn bad_corpus_lines_name_their_line_number() {
    let good = corpus_lines()[0].clone();
    let message = build_error(&format!("{good}\n\nnot json at all\n"));
    assert!(message.contains("line 3") && message.contains("not a JSON object"), "{message}");
    let message = build_error(&format!("{good}\n{{\"title\": \"t\", \"text\": \"no id\"}}\n"));
    assert!(message.contains("line 2") && message.contains("missing \"_id\""), "{message}");
    let message = build_error(&format!("{good}\n{good}\n"));
    assert!(
        message.contains("line 2") && message.contains("duplicate id") && message.contains("line 1"),
        "{message}"
    );
    let message = build_error("");
    assert!(message.contains("no documents"), "{message}");
}

#[test]
fn a_non_empty_output_directory_is_refused() {
    let tmp = TempDir::new().unwrap();
    write_collection(&tmp.path().join("data"));
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("precious.txt"), "keep me").unwrap();
    let result = Index::build(&options(&tmp.path().join("data"), &out));
    assert!(matches!(result, Err(CellarError::InvalidInput(m)) if m.contains("not empty")));
    assert_eq!(std::fs::read_to_string(out.join("precious.txt")).unwrap(), "keep me");
}

#[test]
fn an_interrupted_build_is_refused_on_open_and_cleared_by_the_next_build() {
    let tmp = TempDir::new().unwrap();
    let data = tmp.path().join("data");
    write_collection(&data);
    let out = tmp.path().join("index");
    Index::build(&options(&data, &out)).unwrap();
    // Simulate a crash before the commit point: the marker is back and index.json is gone.
    std::fs::remove_file(out.join("index.json")).unwrap();
    std::fs::write(out.join(".cellar-building"), b"").unwrap();
    let opened = Index::open(&out, OpenOptions::default());
    assert!(matches!(opened, Err(CellarError::InvalidInput(m)) if m.contains("interrupted")));
    Index::build(&options(&data, &out)).unwrap();
    assert_eq!(Index::open(&out, OpenOptions::default()).unwrap().len(), 30);
}

fn top_ids(dir: &Path, mode: Mode) -> Vec<String> {
    let index = Index::open(dir, OpenOptions::default()).unwrap();
    let request = SearchRequest { k: Some(5), mode: Some(mode), ..Default::default() };
    index
        .search(crate::fixture::ask("lava and magma in an eruption", &request))
        .unwrap()
        .hits
        .into_iter()
        .map(|h| h.id)
        .collect()
}

#[test]
fn int8_and_pca_indexes_are_smaller_and_still_find_the_topic() {
    let tmp = TempDir::new().unwrap();
    let data = tmp.path().join("data");
    write_collection(&data);
    let f16 = Index::build(&options(&data, &tmp.path().join("f16"))).unwrap();
    let mut small = options(&data, &tmp.path().join("int8-pca"));
    small.codec = CodecKind::Int8;
    small.pca_dim = Some(32);
    small.sample_tokens = 200;
    let compact = Index::build(&small).unwrap();
    assert_eq!(compact.pca_dim, Some(32));
    assert!(compact.build.vectors_bytes * 4 < f16.build.vectors_bytes, "{compact:?} vs {f16:?}");
    let ids = top_ids(&tmp.path().join("int8-pca"), Mode::Rerank);
    assert!(ids.iter().all(|id| id.starts_with("volcano-")), "{ids:?}");
}

#[test]
fn pca_larger_than_the_model_is_refused() {
    let tmp = TempDir::new().unwrap();
    write_collection(&tmp.path().join("data"));
    let mut bad = options(&tmp.path().join("data"), &tmp.path().join("index"));
    bad.pca_dim = Some(4096);
    assert!(matches!(Index::build(&bad), Err(CellarError::InvalidInput(m)) if m.contains("pca_dim")));
}

#[test]
fn a_missing_model_is_a_model_error_naming_the_path() {
    let tmp = TempDir::new().unwrap();
    write_collection(&tmp.path().join("data"));
    let mut bad = options(&tmp.path().join("data"), &tmp.path().join("index"));
    bad.model_dir = Some(tmp.path().join("no-model-here"));
    match Index::build(&bad) {
        Err(CellarError::Model { path, .. }) => assert!(path.starts_with(tmp.path())),
        other => panic!("expected a Model error, got {other:?}"),
    }
}
