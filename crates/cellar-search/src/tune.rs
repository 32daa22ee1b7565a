//! `cellar tune`: sweeps alpha and rerank_k on a development split and keeps the best pair.
//!
//! Each query's BM25 candidates and their MaxSim scores are computed once; every (alpha,
//! rerank_k) pair is then fused with the same function the query pipeline uses.

use cellar_core::{CellarError, Result};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::config::{SearchDefaults, TuneRecord};
use crate::corpus::{Qrels, Query};
use crate::eval::{score_all, EVAL_DEPTH};
use crate::fusion;
use crate::index::Index;
use crate::metrics::Metrics;
use crate::mode::Mode;
use crate::query::PreparedQuery;
use crate::scored::Scored;

/// Alphas tried: 0, 0.05, ..., 1.
pub fn alpha_grid() -> Vec<f32> {
    (0..=20).map(|i| i as f32 * 0.05).collect()
}

pub const RERANK_K_GRID: [usize; 5] = [16, 32, 64, 128, 200];

/// One point of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct TunePoint {
    pub alpha: f32,
    pub rerank_k: usize,
    pub metrics: Metrics,
}

/// The whole sweep and the chosen point.
#[derive(Clone, Debug, Serialize)]
pub struct TuneReport {
    pub points: Vec<TunePoint>,
    pub best: TunePoint,
    pub defaults: SearchDefaults,
}

struct QueryStages {
    id: String,
    candidates: Vec<Scored>,
    maxsim: Vec<f32>,
}

/// Sweeps the grid on `queries` (judged in `qrels`, which must not be the test split) and
/// returns the new defaults; the caller decides whether to save them.
pub fn tune(
    index: &Index,
    queries: &[Query],
    qrels: &Qrels,
    qrels_name: &str,
    bar: &ProgressBar,
) -> Result<TuneReport> {
    if queries.is_empty() {
        return Err(CellarError::InvalidInput("no judged queries to tune on".into()));
    }
    let depth = index.config().search.candidates;
    let mut stages = Vec::with_capacity(queries.len());
    for query in queries {
        let prepared: PreparedQuery = crate::eval::prepare(index, &query.text, Mode::Hybrid)?;
        let (candidates, maxsim) = index.candidates_with_maxsim(&prepared, depth)?;
        stages.push(QueryStages { id: query.id.clone(), candidates, maxsim });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let ids = crate::eval::doc_ids(index)?;
    let mut points = Vec::new();
    for rerank_k in RERANK_K_GRID.into_iter().filter(|k| *k <= depth) {
        for alpha in alpha_grid() {
            let rankings: Vec<(String, Vec<String>)> = stages
                .iter()
                .map(|s| {
                    let k = rerank_k.min(s.maxsim.len());
                    let fused = fusion::fuse(&s.candidates, &s.maxsim[..k], alpha);
                    let ranked =
                        fused.iter().take(EVAL_DEPTH).map(|f| ids[f.id.0 as usize].clone()).collect();
                    (s.id.clone(), ranked)
                })
                .collect();
            points.push(TunePoint { alpha, rerank_k, metrics: score_all(&rankings, qrels) });
        }
    }
    let best = best_point(&points).clone();
    let defaults = SearchDefaults {
        mode: Mode::Hybrid,
        candidates: depth,
        rerank_k: best.rerank_k,
        alpha: best.alpha,
        tuned: Some(TuneRecord {
            qrels: qrels_name.to_string(),
            queries: queries.len(),
            metric: "nDCG@10".into(),
            value: best.metrics.ndcg_at_10,
        }),
    };
    Ok(TuneReport { points, best, defaults })
}

/// Highest nDCG@10; on ties, the smaller rerank_k (cheaper), then the smaller alpha.
fn best_point(points: &[TunePoint]) -> &TunePoint {
    points
        .iter()
        .max_by(|a, b| {
            a.metrics
                .ndcg_at_10
                .total_cmp(&b.metrics.ndcg_at_10)
                .then(b.rerank_k.cmp(&a.rerank_k))
                .then(b.alpha.total_cmp(&a.alpha))
        })
        .expect("the grid is never empty")
}
