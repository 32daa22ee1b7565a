//! The learned-sparse first stage (issue 18.3) on a copy of the fixture index: built, searched
//! alone and as the candidates of rerank and hybrid, joined with BM25, under deletes, filters
//! and writes, damaged, verified.

use cellar_core::io::ReaderKind;
use cellar_core::CellarError;
use cellar_search::mode::Lexical;
use cellar_search::splade::{build_splade, SpladeBuildOptions, SPLADE_DIR};
use cellar_search::{DocIn, Index, Mode, OpenOptions, SearchRequest, WriteOp, WriteRequest};

use crate::fixture::copy_index;

fn request(query: &str, mode: Mode, lexical: Lexical) -> SearchRequest {
    SearchRequest {
        query: query.into(),
        mode: Some(mode),
        lexical: Some(lexical),
        k: Some(5),
        ..Default::default()
    }
}

fn with_splade() -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, dir) = copy_index();
    let options = SpladeBuildOptions { threads: 1, ..SpladeBuildOptions::default() };
    let built = build_splade(&dir, &options).unwrap();
    assert_eq!(built.docs, 30);
    assert!(built.postings > 30 && built.terms_per_doc() > 1.0, "{built:?}");
    (tmp, dir)
}

#[test]
fn splade_ranks_alone_and_feeds_rerank_and_hybrid_alone_or_joined_with_bm25() {
    let (_tmp, dir) = with_splade();
    let index = Index::open(&dir, OpenOptions { reader: ReaderKind::Mmap, ..Default::default() }).unwrap();
    assert!(index.splade_config().is_some());
    for lexical in Lexical::ALL {
        for mode in [Mode::Bm25, Mode::Rerank, Mode::Hybrid] {
            let response =
                index.search(request("which instrument is played with a bow", mode, lexical)).unwrap();
            assert_eq!(response.params.lexical, lexical);
            assert!(response.hits[0].id.starts_with("violin-"), "{mode} {lexical}: {}", response.hits[0].id);
        }
    }
    // SPLADE alone is its own ranking: scores are sums of impacts, best first.
    let alone = index.search(request("lava from a volcano", Mode::Bm25, Lexical::Splade)).unwrap();
    assert!(alone.hits.iter().take(5).all(|h| h.id.starts_with("volcano-")));
    assert!(alone.hits.windows(2).all(|w| w[0].score >= w[1].score));
    // The same ranking from every reader.
    for reader in ReaderKind::ALL {
        let other = Index::open(&dir, OpenOptions { reader, ..Default::default() }).unwrap();
        let again = other.search(request("lava from a volcano", Mode::Bm25, Lexical::Splade)).unwrap();
        let ids = |r: &cellar_search::SearchResponse| {
            r.hits.iter().map(|h| (h.id.clone(), h.score)).collect::<Vec<_>>()
        };
        assert_eq!(ids(&again), ids(&alone), "{reader:?}");
    }
    // Verification covers the stage's files.
    let mut files = Vec::new();
    index.verify(|c| files.push(c.file.clone())).unwrap();
    assert!(files.iter().any(|f| f.ends_with("splade_postings.bin")), "{files:?}");
}

#[test]
fn deletes_and_filters_are_respected_and_writes_since_the_build_are_refused() {
    let (_tmp, dir) = with_splade();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    let before = index.search(request("lava from a volcano", Mode::Bm25, Lexical::Splade)).unwrap();
    let first = before.hits[0].id.clone();
    index.write(WriteRequest { ops: vec![WriteOp::Delete(first.clone())] }).unwrap();
    let after = index.search(request("lava from a volcano", Mode::Bm25, Lexical::Splade)).unwrap();
    assert!(after.hits.iter().all(|h| h.id != first), "a deleted document is never answered");
    let filter = serde_json::from_value(serde_json::json!({"eq": {"field": "nope", "value": "x"}})).unwrap();
    let none =
        SearchRequest { filter: Some(filter), ..request("lava from a volcano", Mode::Bm25, Lexical::Splade) };
    assert!(index.search(none).unwrap().hits.is_empty(), "a filter nothing matches leaves nothing");
    let add = WriteOp::Add(DocIn { id: "new".into(), text: "a new volcano".into(), ..DocIn::default() });
    index.write(WriteRequest { ops: vec![add] }).unwrap();
    match index.search(request("volcano", Mode::Rerank, Lexical::Splade)) {
        Err(CellarError::InvalidInput(m)) => {
            assert!(m.contains("written since") && m.contains("cellar splade build"), "{m}")
        }
        other => panic!("expected a refusal, got {:?}", other.map(|r| r.hits.len())),
    }
    // BM25 still covers the written document.
    let bm25 = index.search(request("new volcano", Mode::Bm25, Lexical::Bm25)).unwrap();
    assert!(bm25.hits.iter().any(|h| h.id == "new"));
}

#[test]
fn an_index_without_the_stage_refuses_it_and_a_damaged_stage_is_named() {
    let (_tmp, plain) = copy_index();
    let index = Index::open(&plain, OpenOptions::default()).unwrap();
    match index.search(request("volcano", Mode::Bm25, Lexical::Both)) {
        Err(CellarError::InvalidInput(m)) => assert!(m.contains("cellar splade build"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|r| r.hits.len())),
    }
    drop(index);
    let (_tmp2, dir) = with_splade();
    let terms = dir.join(SPLADE_DIR).join("splade_terms.bin");
    let mut bytes = std::fs::read(&terms).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x40;
    std::fs::write(&terms, bytes).unwrap();
    match Index::open(&dir, OpenOptions::default()) {
        Err(CellarError::Corrupted { path, .. }) => assert!(path.ends_with("splade_terms.bin"), "{path:?}"),
        other => panic!("expected Corrupted, got {:?}", other.err()),
    }
}
