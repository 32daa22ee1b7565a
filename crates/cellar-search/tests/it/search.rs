//! The query pipeline on the fixture index: modes, fusion, partial re-ranking, bad input.

use cellar_core::io::ReaderKind;
use cellar_core::{CellarError, DocId};
use cellar_search::fusion::Stage;
use cellar_search::{Mode, SearchRequest};

use crate::fixture::open;

fn options(k: usize, mode: Mode) -> SearchRequest {
    SearchRequest { k: Some(k), mode: Some(mode), ..Default::default() }
}

#[test]
fn every_mode_finds_the_topic_of_the_query() {
    let index = open(ReaderKind::Mmap);
    for mode in Mode::ALL {
        let response = index
            .search(crate::fixture::ask("which instrument is played with a bow", &options(5, mode)))
            .unwrap();
        assert_eq!(response.hits.len(), 5, "{mode}");
        assert!(response.hits[0].id.starts_with("violin-"), "{mode}: top hit {}", response.hits[0].id);
        assert!(
            response.hits[0].text.contains("\"detail\"\n") && response.hits[0].text.ends_with("ünïcode.")
        );
    }
}

#[test]
fn readers_give_identical_rankings() {
    let query = "glaciers retreating in a warming climate";
    let rankings: Vec<Vec<(String, f32)>> = ReaderKind::ALL
        .into_iter()
        .map(|reader| {
            let response =
                open(reader).search(crate::fixture::ask(query, &options(10, Mode::Hybrid))).unwrap();
            response.hits.into_iter().map(|h| (h.id, h.score)).collect()
        })
        .collect();
    assert_eq!(rankings[0], rankings[1]);
    assert_eq!(rankings[0], rankings[2]);
}

#[test]
fn rerank_orders_by_maxsim_and_reports_io_and_timings() {
    let index = open(ReaderKind::Direct);
    let response = index
        .search(crate::fixture::ask("magma rising through the crust", &options(10, Mode::Rerank)))
        .unwrap();
    let maxsim: Vec<f32> = response.hits.iter().map(|h| h.maxsim.expect("re-ranked")).collect();
    assert!(maxsim.windows(2).all(|w| w[0] >= w[1]), "rerank must sort by MaxSim: {maxsim:?}");
    assert!(response.io.bytes_read > 0 && response.io.read_calls > 0);
    assert!(response.timings.read_ms > 0.0 && response.timings.maxsim_ms > 0.0);
    assert_eq!(response.params.alpha, 0.0);
}

#[test]
fn the_chunked_read_pipeline_scores_every_record_as_one_batch_does() {
    let ram = open(ReaderKind::Ram);
    let query = cellar_search::eval::prepare(&ram, "magma rising through the crust", Mode::Rerank).unwrap();
    // Out of order, with a duplicate: chunks of one page hold one record each.
    let ids: Vec<DocId> = [7u32, 0, 29, 3, 3, 12, 21, 5].into_iter().map(DocId).collect();
    let want = ram.read_and_score(&query, &ids).unwrap();
    for reader in [ReaderKind::Mmap, ReaderKind::Direct] {
        let index = open(reader);
        for chunk_bytes in [1, 4096, 1 << 30] {
            let got = index.read_and_score_in(&query, &ids, chunk_bytes).unwrap();
            assert_eq!(got.scores, want.scores, "{reader:?}, chunks of {chunk_bytes} bytes");
            assert!(got.io.pages >= 1 && got.read_ms > 0.0, "{reader:?}: {got:?}");
        }
        let err = index.read_and_score_in(&query, &[DocId(0), DocId(9_999)], 1).unwrap_err();
        assert!(err.to_string().contains("9999"), "{reader:?}: {err}");
    }
}

/// Issue 13.1: the candidates known only after the encoding are read while the early reads are
/// scored; each set is scored exactly as one read of both would score it, on every reader.
#[test]
fn early_and_late_reads_score_as_one_read_does() {
    let ram = open(ReaderKind::Ram);
    let query = cellar_search::eval::prepare(&ram, "magma rising through the crust", Mode::Rerank).unwrap();
    let early: Vec<DocId> = [7u32, 0, 29, 3].into_iter().map(DocId).collect();
    let late: Vec<DocId> = [12u32, 21, 5].into_iter().map(DocId).collect();
    let both: Vec<DocId> = early.iter().chain(&late).copied().collect();
    let want = ram.read_and_score(&query, &both).unwrap();
    for reader in ReaderKind::ALL {
        let index = open(reader);
        for missing in [&late[..], &[]] {
            let (e, l) = index.read_early_then_late(&query, &early, missing).unwrap();
            assert_eq!(e.scores.len(), early.len(), "{reader:?}");
            assert_eq!(l.scores.len(), missing.len(), "{reader:?}");
            for (id, score) in e.scores.iter().chain(&l.scores) {
                assert_eq!(want.scores[id], *score, "{reader:?}: document {}", id.0);
            }
            assert!(e.io.pages >= 1 && (missing.is_empty() || l.io.pages >= 1), "{reader:?}");
        }
        let err = index.read_early_then_late(&query, &early, &[DocId(9_999)]).unwrap_err();
        assert!(err.to_string().contains("9999"), "{reader:?}: {err}");
    }
}

#[test]
fn partial_rerank_keeps_the_tail_in_first_stage_order() {
    let index = open(ReaderKind::Mmap);
    let query = "hot water and hot ovens";
    let bm25 = index.search(crate::fixture::ask(query, &options(30, Mode::Bm25))).unwrap();
    let mut request = options(30, Mode::Hybrid);
    request.rerank_k = Some(4);
    request.hybrid_candidates = Some(0);
    let hybrid = index.search(crate::fixture::ask(query, &request)).unwrap();
    assert_eq!(hybrid.reranked, 4);
    let head: Vec<&str> = hybrid.hits[..4].iter().map(|h| h.id.as_str()).collect();
    let mut bm25_head: Vec<&str> = bm25.hits[..4].iter().map(|h| h.id.as_str()).collect();
    let mut sorted_head = head.clone();
    sorted_head.sort();
    bm25_head.sort();
    assert_eq!(sorted_head, bm25_head, "the re-ranked head is the BM25 top 4, reordered");
    let tail: Vec<&str> = hybrid.hits[4..].iter().map(|h| h.id.as_str()).collect();
    let bm25_tail: Vec<&str> = bm25.hits[4..hybrid.hits.len()].iter().map(|h| h.id.as_str()).collect();
    assert_eq!(tail, bm25_tail);
    assert!(hybrid.hits[4..].iter().all(|h| h.stage == Stage::FirstStage && h.maxsim.is_none()));
}

#[test]
fn alpha_one_keeps_bm25_order() {
    let index = open(ReaderKind::Mmap);
    let query = "football championship final";
    let bm25 = index.search(crate::fixture::ask(query, &options(10, Mode::Bm25))).unwrap();
    let mut request = options(10, Mode::Hybrid);
    request.alpha = Some(1.0);
    request.candidates = Some(10);
    request.hybrid_candidates = Some(0);
    let hybrid = index.search(crate::fixture::ask(query, &request)).unwrap();
    let ids = |r: &cellar_search::SearchResponse| r.hits.iter().map(|h| h.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&bm25), ids(&hybrid));
}

#[test]
fn bad_requests_are_typed_errors() {
    let index = open(ReaderKind::Mmap);
    let invalid = |result: cellar_core::Result<cellar_search::SearchResponse>| {
        matches!(result, Err(CellarError::InvalidInput(_)))
    };
    assert!(invalid(index.search(crate::fixture::ask("", &options(5, Mode::Hybrid)))));
    assert!(invalid(index.search(crate::fixture::ask("   ", &options(5, Mode::Bm25)))));
    assert!(invalid(index.search(crate::fixture::ask(&"word ".repeat(2000), &options(5, Mode::Hybrid)))));
    assert!(invalid(index.search(crate::fixture::ask("bread", &options(0, Mode::Hybrid)))));
    let mut bad_alpha = options(5, Mode::Hybrid);
    bad_alpha.alpha = Some(1.5);
    assert!(invalid(index.search(crate::fixture::ask("bread", &bad_alpha))));
    assert!(matches!("fuzzy".parse::<Mode>(), Err(CellarError::InvalidInput(m)) if m.contains("hybrid")));
    // The index keeps answering after bad requests.
    assert_eq!(index.search(crate::fixture::ask("bread", &options(3, Mode::Bm25))).unwrap().hits.len(), 3);
}

#[test]
fn a_query_of_stop_words_only_returns_no_bm25_hits() {
    let index = open(ReaderKind::Mmap);
    let mut bm25_only = options(5, Mode::Hybrid);
    bm25_only.hybrid_candidates = Some(0);
    assert!(index.search(crate::fixture::ask("the and of", &bm25_only)).unwrap().hits.is_empty());
    // By default the hybrid mode joins the IVF's candidates, which need no shared word.
    let response = index.search(crate::fixture::ask("the and of", &options(5, Mode::Hybrid))).unwrap();
    assert_eq!(response.hits.len(), 5);
    assert_eq!(
        index.search(crate::fixture::ask("the and of", &options(5, Mode::DenseExact))).unwrap().hits.len(),
        5
    );
    assert_eq!(
        index.search(crate::fixture::ask("the and of", &options(5, Mode::Dense))).unwrap().hits.len(),
        5
    );
}

/// Issue 13.1: a text query of rerank or hybrid runs BM25 first and reads its candidates while
/// the text is encoded; the ranking is the one the same query gets with its vectors given (no
/// early read), and the response says how much read time the encoding hid.
#[test]
fn text_queries_read_bm25_candidates_under_the_encoding_and_rank_as_with_given_vectors() {
    for reader in [ReaderKind::Mmap, ReaderKind::Direct] {
        let index = open(reader);
        let dim = index.config().encoder.model_dim;
        for mode in [Mode::Rerank, Mode::Hybrid] {
            let text = "magma rising through the crust";
            let early = index.search(crate::fixture::ask(text, &options(10, mode))).unwrap();
            let encoded = index.encoder().unwrap().encode_query(text).unwrap();
            let mut given = crate::fixture::ask(text, &options(10, mode));
            given.query_vectors = Some(cellar_search::QueryVectorsIn {
                tokens: encoded.tokens.chunks(dim).map(<[f32]>::to_vec).collect(),
                pooled: Some(encoded.pooled),
                ..Default::default()
            });
            let late = index.search(given).unwrap();
            let ranking = |r: &cellar_search::SearchResponse| {
                r.hits.iter().map(|h| (h.id.clone(), h.score, h.maxsim)).collect::<Vec<_>>()
            };
            assert_eq!(ranking(&early), ranking(&late), "{reader:?} {mode}");
            assert_eq!(early.reranked, late.reranked);
            if mode == Mode::Rerank {
                // The same records, read once either way (hybrid's IVF prefetch may read others).
                assert_eq!(early.io.bytes_read, late.io.bytes_read);
            }
            assert!(early.reranked > 0 && early.io.bytes_read > 0);
            let t = early.timings;
            assert!(t.read_hidden_ms >= 0.0 && t.read_hidden_ms <= t.read_ms, "{t:?}");
            assert!(t.encode_ms > 0.0 && t.total_ms >= t.encode_ms, "{t:?}");
            assert_eq!(late.timings.read_hidden_ms, 0.0, "given vectors: nothing to hide the read under");
            let mut off = crate::fixture::ask(text, &options(10, mode));
            off.early_read = Some(false);
            let off = index.search(off).unwrap();
            assert_eq!(ranking(&off), ranking(&early));
            assert!(!off.params.early_read && early.params.early_read);
            assert_eq!(off.timings.read_hidden_ms, 0.0);
        }
    }
}

#[test]
fn a_long_query_is_encoded_whole_and_the_response_says_how() {
    let index = open(ReaderKind::Mmap);
    let short = index
        .search(crate::fixture::ask("magma rising through the crust", &options(5, Mode::Rerank)))
        .unwrap();
    let encoding = short.query.expect("a text query reports its encoding");
    assert_eq!((encoding.windows, encoding.tokens_cut), (1, 0));
    // Past the fixture's 64-token query limit: windows, nothing cut, and the tail still counts.
    let filler = "the committee discussed the schedule of the meeting at length ".repeat(12);
    let long = format!("{filler} magma rising through the crust");
    for mode in [Mode::Rerank, Mode::Hybrid, Mode::Dense] {
        let response = index.search(crate::fixture::ask(&long, &options(5, mode))).unwrap();
        let encoding = response.query.expect("encoded");
        assert!(
            encoding.tokens > 64 && encoding.windows > 1 && encoding.tokens_cut == 0,
            "{mode}: {encoding:?}"
        );
    }
    let rerank = index.search(crate::fixture::ask(&long, &options(3, Mode::Rerank))).unwrap();
    assert!(
        rerank.hits.iter().any(|h| h.id.starts_with("volcano-")),
        "the query's last words, past the first window, still find their topic: {:?}",
        rerank.hits.iter().map(|h| &h.id).collect::<Vec<_>>()
    );
    // BM25 encodes nothing and reports nothing.
    let bm25 = index.search(crate::fixture::ask(&long, &options(3, Mode::Bm25))).unwrap();
    assert!(bm25.query.is_none());
}
