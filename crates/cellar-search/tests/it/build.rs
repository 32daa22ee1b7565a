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

#[test]
fn long_documents_split_into_passages_keep_them_in_their_records() {
    use cellar_core::io::{ReaderKind, ReaderOptions};
    use cellar_core::store::VectorStore;
    use cellar_core::DocId;
    use cellar_search::{BuildOptions, DocIn, Overflow, WriteOp, WriteRequest};

    let tmp = TempDir::new().unwrap();
    let data = tmp.path().join("data");
    write_collection(&data);
    let out = tmp.path().join("passages");
    let mut opts = options(&data, &out);
    opts.doc_max_tokens = 12;
    opts.doc_overflow = Overflow::Passages;
    opts.codec = CodecKind::F16;
    let report = Index::build(&opts).unwrap();
    let long = report.build.long_docs.expect("counted");
    assert!(long.windowed > 0 && long.cut == 0, "{long:?}");
    // Each document split in several passages carries its table; the others none.
    let store = VectorStore::open(&out.join("vectors"), &ReaderOptions::new(ReaderKind::Mmap)).unwrap();
    let ids: Vec<DocId> = (0..store.len() as u32).map(DocId).collect();
    let batch = store.read_batch(&ids).unwrap();
    let tabled = (0..ids.len()).filter(|&i| batch.record(i).passage_ends.is_some()).count();
    assert!(tabled > 0 && tabled as u64 <= long.windowed, "{tabled} records with passages, {long:?}");
    for i in 0..ids.len() {
        let record = batch.record(i);
        let ranges: Vec<_> = record.passages().collect();
        assert_eq!(ranges.last().unwrap().end, record.n_tokens);
        // 12 tokens with [CLS] and [SEP]: at most 10 kept per passage.
        assert!(ranges.iter().all(|r| r.len() <= 10), "doc {i}: {ranges:?}");
    }
    // Every token is in one passage: as many as windows overlapping by half keep, each once.
    let windowed = tmp.path().join("windows");
    Index::build(&BuildOptions { out: windowed.clone(), doc_overflow: Overflow::Windows, ..opts.clone() })
        .unwrap();
    let other = VectorStore::open(&windowed.join("vectors"), &ReaderOptions::new(ReaderKind::Mmap)).unwrap();
    let other_batch = other.read_batch(&ids).unwrap();
    for i in 0..ids.len() {
        assert_eq!(batch.record(i).n_tokens, other_batch.record(i).n_tokens, "doc {i}");
    }
    let index = Index::open(&out, OpenOptions::default()).unwrap();
    assert_eq!(index.config().encoder.doc_overflow, Overflow::Passages);
    for mode in [Mode::Rerank, Mode::Hybrid] {
        let found = index.search(SearchRequest::new("harpsichord strings plucked", mode).with_k(3)).unwrap();
        assert!(!found.hits.is_empty() && found.hits[0].maxsim.is_some());
    }
    // A written document within the limit is one passage; a longer one is refused, clearly.
    let short = DocIn { id: "short".into(), text: "a harp".into(), ..DocIn::default() };
    index.write(WriteRequest { ops: vec![WriteOp::Add(short)] }).unwrap();
    let long_text = "the harpsichord is a keyboard instrument whose strings are plucked by quills ".repeat(4);
    let long_doc = DocIn { id: "long".into(), text: long_text, ..DocIn::default() };
    let err = index.write(WriteRequest { ops: vec![WriteOp::Add(long_doc)] }).unwrap_err();
    assert!(matches!(err, CellarError::Unsupported(_)) && err.to_string().contains("passages"), "{err}");
}
