//! `cellar tune` over an index with a token stage: the candidates and depths it sweeps are the
//! ones a served hybrid search ranks.

use super::*;

/// `cellar tune` fuses the candidates a served hybrid search re-ranks: on an index whose hybrid
/// joins the token stage, the stage's candidates too, so a query BM25 cannot match still has
/// them (tuning over BM25's alone chose the fusion for a first stage no search runs).
#[test]
fn tune_sweeps_the_candidates_of_the_hybrid_search_it_tunes() {
    use cellar_search::corpus::Query;
    use cellar_search::{eval, tune};
    let index = Index::open(&built().dir, OpenOptions::default()).unwrap();
    let text = "nothingmatchesthis";
    let vectors = QueryVectorsIn {
        tokens: query_of(3).chunks(DIM).map(<[f32]>::to_vec).collect(),
        ..Default::default()
    };
    let queries = [Query { id: "q".into(), text: text.into() }];
    let bar = indicatif::ProgressBar::hidden();
    let prepared =
        eval::prepare_all_with(&index, &queries, Some(std::slice::from_ref(&vectors)), &bar).unwrap();
    let stages = tune::stages(&index, &queries, &prepared).unwrap();
    let request = SearchRequest {
        query: text.into(),
        mode: Some(Mode::Hybrid),
        query_vectors: Some(vectors),
        ..dense(&query_of(3), 10)
    };
    let served = index.search(request).unwrap();
    assert!(served.params.tokens.is_some(), "no IVF: hybrid joins the token stage");
    let stage = &stages[0];
    assert_eq!(stage.candidates.len(), served.candidates);
    assert_eq!(stage.candidates.len(), index.tokens_config().unwrap().search.hybrid_candidates);
    assert_eq!(stage.maxsim.len(), stage.candidates.len());
    // Its best MaxSim is the served hybrid's first hit (BM25 gave nothing to fuse).
    let best = (0..stage.maxsim.len()).max_by(|&a, &b| stage.maxsim[a].total_cmp(&stage.maxsim[b])).unwrap();
    assert_eq!(served.hits[0].internal_id, stage.candidates[best].id.0);
}

/// `cellar tune` sweeps hybrid's first-stage depths where it joins the token stage: at every
/// pair of depths (BM25's candidates, the stage's joined) the ranking tune scores is the one a
/// served search with those settings returns, and the choice names the joined depth to save.
#[test]
fn tune_sweeps_hybrid_depths_over_the_token_stage_as_served_searches_rank_them() {
    use cellar_search::corpus::Query;
    use cellar_search::fusion::Fusion;
    use cellar_search::{eval, tune};
    let index = Index::open(&built().dir, OpenOptions::default()).unwrap();
    let ids = eval::doc_ids(&index).unwrap();
    let queries: Vec<Query> =
        (0..4).map(|i| Query { id: format!("q{i}"), text: format!("document {}", 7 * i) }).collect();
    let vectors: Vec<QueryVectorsIn> = (0..4)
        .map(|i| QueryVectorsIn {
            tokens: query_of(7 * i).chunks(DIM).map(<[f32]>::to_vec).collect(),
            ..Default::default()
        })
        .collect();
    let bar = indicatif::ProgressBar::hidden();
    let prepared = eval::prepare_all_with(&index, &queries, Some(&vectors), &bar).unwrap();
    // Every depth of the grids (the collection's size left out of the filter).
    let sets = tune::depth_stages(&index, &queries, &prepared, usize::MAX).unwrap();
    let depths: Vec<(usize, usize)> = sets.iter().map(|s| (s.depth.candidates, s.depth.joined)).collect();
    assert_eq!(depths, [(200, 100), (200, 300), (200, 1000), (1000, 100), (1000, 300), (1000, 1000)]);
    for set in &sets {
        for (fusion, alpha, rerank_k) in [(Fusion::Z, 0.3, 16), (Fusion::Rrf, 0.6, 64)] {
            let tuned = tune::rankings(&set.stages, &ids, fusion, alpha, rerank_k);
            for (i, (qid, ranked)) in tuned.iter().enumerate() {
                let request = SearchRequest {
                    query: queries[i].text.clone(),
                    mode: Some(Mode::Hybrid),
                    query_vectors: Some(vectors[i].clone()),
                    candidates: Some(set.depth.candidates),
                    hybrid_candidates: Some(set.depth.joined),
                    rerank_k: Some(rerank_k),
                    alpha: Some(alpha),
                    fusion: Some(fusion),
                    ..dense(&query_of(7 * i), 10)
                };
                let served = index.search(request).unwrap();
                assert!(served.params.tokens.is_some(), "hybrid joins the token stage");
                let served: Vec<&str> = served.hits.iter().map(|h| h.id.as_str()).collect();
                assert_eq!(
                    served,
                    ranked[..served.len()],
                    "{qid} at {:?}, {fusion} {alpha} {rerank_k}",
                    set.depth
                );
            }
        }
    }
    // On the fixture's own size the grids keep the defaults alone; the report names the joined
    // depth chosen, which `cellar tune` saves as the stage's `hybrid_candidates`.
    let qrels =
        queries.iter().map(|q| (q.id.clone(), [("d7".to_string(), 1)].into_iter().collect())).collect();
    let options =
        tune::TuneOptions { epsilon: 0.0, cv: Some(2), p95_limit_ms: None, query_vectors: Some(&vectors) };
    let report = tune::tune(&index, &queries, &qrels, "qrels", options, &bar).unwrap();
    assert_eq!(report.hybrid_candidates, Some(100));
    assert_eq!((report.best.depth.candidates, report.defaults.candidates), (200, 200));
}
