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
fn deletes_filters_and_written_documents_are_respected_before_and_after_a_reopen() {
    let (_tmp, dir) = with_splade();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    let splade = |index: &Index, query: &str, mode: Mode| {
        let mut request = request(query, mode, Lexical::Splade);
        request.k = Some(10);
        index.search(request).unwrap().hits
    };
    let before = splade(&index, "lava from a volcano", Mode::Bm25);
    let first = before[0].id.clone();
    index.write(WriteRequest { ops: vec![WriteOp::Delete(first.clone())] }).unwrap();
    let after = splade(&index, "lava from a volcano", Mode::Bm25);
    assert!(after.iter().all(|h| h.id != first), "a deleted document is never answered");
    let filter = serde_json::from_value(serde_json::json!({"eq": {"field": "nope", "value": "x"}})).unwrap();
    let none =
        SearchRequest { filter: Some(filter), ..request("lava from a volcano", Mode::Bm25, Lexical::Splade) };
    assert!(index.search(none).unwrap().hits.is_empty(), "a filter nothing matches leaves nothing");

    // Written documents: an add, and an update of a document of the build (its old version is
    // deleted, its new one written), then a second write after the first search.
    let violin = splade(&index, "violin played with a bow", Mode::Bm25);
    let old = violin.iter().find(|h| h.id == "violin-0").expect("violin-0 answers its topic").internal_id;
    let doc = |id: &str, text: &str| DocIn { id: id.into(), text: text.into(), ..DocIn::default() };
    let ops = vec![
        WriteOp::Add(doc("new", "A new volcano erupts: magma and lava flow from the crater.")),
        WriteOp::Update(doc("violin-0", "The saxophone is a reed instrument of jazz improvisation.")),
    ];
    index.write(WriteRequest { ops }).unwrap();
    let check = |index: &Index, stage: &str| {
        for mode in [Mode::Bm25, Mode::Rerank, Mode::Hybrid] {
            let volcano = splade(index, "volcano lava", mode);
            assert!(volcano.iter().any(|h| h.id == "new"), "{stage} {mode}: a written document is found");
            assert!(volcano.iter().all(|h| h.id != first), "{stage} {mode}: a deleted one is not");
            let sax = splade(index, "saxophone jazz", mode);
            assert_eq!(sax[0].id, "violin-0", "{stage} {mode}: an updated document is found by its new text");
            assert!(sax[0].internal_id != old, "{stage} {mode}");
            let violin = splade(index, "violin played with a bow", mode);
            assert!(violin.iter().all(|h| h.internal_id != old), "{stage} {mode}: its old version is not");
        }
    };
    check(&index, "written");
    index
        .write(WriteRequest { ops: vec![WriteOp::Add(doc("later", "Glaciers of ice carve a fjord."))] })
        .unwrap();
    assert!(
        splade(&index, "fjord glaciers", Mode::Bm25).iter().any(|h| h.id == "later"),
        "a later write too"
    );
    index.write(WriteRequest { ops: vec![WriteOp::Delete("later".into())] }).unwrap();
    assert!(
        splade(&index, "fjord glaciers", Mode::Bm25).iter().all(|h| h.id != "later"),
        "a written one deleted"
    );
    drop(index);
    // After a reopen, the written documents are encoded again from their texts.
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    check(&index, "reopened");
    index.flush().unwrap();
    check(&index, "flushed");
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
