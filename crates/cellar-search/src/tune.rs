//! `cellar tune`: sweeps alpha and rerank_k on a development split and keeps the cheapest pair
//! within `epsilon` of the best.
//!
//! Each query's BM25 candidates and their MaxSim scores are computed once; every (alpha,
//! rerank_k) pair is then fused with the same function the query pipeline uses. A query reads
//! `rerank_k` records, so the choice weighs cost: the smallest rerank_k whose nDCG@10 is within
//! `epsilon` of the sweep's best (SciFact's train split gave rerank_k 128 for +0.0007 over 64, at
//! twice the bytes read per query).

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

/// nDCG@10 a cheaper choice may give up against the best point of the sweep.
pub const DEFAULT_EPSILON: f64 = 0.002;
/// Largest `epsilon` accepted.
pub const MAX_EPSILON: f64 = 0.05;

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
    /// The chosen point: the smallest rerank_k within `epsilon` of `top`.
    pub best: TunePoint,
    /// The point of highest nDCG@10.
    pub top: TunePoint,
    pub epsilon: f64,
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
    epsilon: f64,
    bar: &ProgressBar,
) -> Result<TuneReport> {
    if queries.is_empty() {
        return Err(CellarError::InvalidInput("no judged queries to tune on".into()));
    }
    if !(0.0..=MAX_EPSILON).contains(&epsilon) {
        return Err(CellarError::InvalidInput(format!("epsilon {epsilon}: 0 to {MAX_EPSILON} allowed")));
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
    let (best, top) = choose(&points, epsilon);
    let (best, top) = (best.clone(), top.clone());
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
    Ok(TuneReport { points, best, top, epsilon, defaults })
}

/// Highest nDCG@10; on ties, the smaller rerank_k (cheaper), then the smaller alpha.
fn better(a: &TunePoint, b: &TunePoint) -> std::cmp::Ordering {
    a.metrics
        .ndcg_at_10
        .total_cmp(&b.metrics.ndcg_at_10)
        .then(b.rerank_k.cmp(&a.rerank_k))
        .then(b.alpha.total_cmp(&a.alpha))
}

/// (chosen, top): `top` has the highest nDCG@10; the chosen point has the smallest rerank_k
/// among the points within `epsilon` of it, and the best nDCG@10 at that rerank_k.
fn choose(points: &[TunePoint], epsilon: f64) -> (&TunePoint, &TunePoint) {
    let top = points.iter().max_by(|a, b| better(a, b)).expect("the grid is never empty");
    let floor = top.metrics.ndcg_at_10 - epsilon;
    let close = points.iter().filter(|p| p.metrics.ndcg_at_10 >= floor);
    let cheapest = close.clone().map(|p| p.rerank_k).min().expect("top is within epsilon of itself");
    let chosen = close.filter(|p| p.rerank_k == cheapest).max_by(|a, b| better(a, b)).expect("non-empty");
    (chosen, top)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(alpha: f32, rerank_k: usize, ndcg: f64) -> TunePoint {
        TunePoint { alpha, rerank_k, metrics: Metrics { ndcg_at_10: ndcg, ..Metrics::default() } }
    }

    #[test]
    fn the_cheapest_rerank_k_within_epsilon_of_the_best_is_chosen() {
        let points = [
            point(0.2, 32, 0.690),
            point(0.3, 64, 0.6995),
            point(0.4, 64, 0.7000),
            point(0.3, 128, 0.7007),
            point(0.3, 200, 0.7001),
        ];
        let (chosen, top) = choose(&points, DEFAULT_EPSILON);
        assert_eq!((top.rerank_k, top.metrics.ndcg_at_10), (128, 0.7007));
        assert_eq!((chosen.rerank_k, chosen.alpha), (64, 0.4), "best alpha at the cheapest close rerank_k");
        let (chosen, _) = choose(&points, 0.0);
        assert_eq!(chosen.rerank_k, 128, "epsilon 0 is the arg-max");
        let (chosen, _) = choose(&points, 0.02);
        assert_eq!(chosen.rerank_k, 32);
    }
}
