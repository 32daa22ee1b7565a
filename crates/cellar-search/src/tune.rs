//! `cellar tune`: sweeps the fusion method, alpha and rerank_k on a development split (or, with
//! `--cv K`, cross-validates the choice on the only split there is) and keeps the cheapest point
//! within `epsilon` of the best. An index with a token stage also has its `nprobe` swept in the
//! dense mode, then its depth (the documents dense mode re-ranks) at that nprobe. With a latency bound (`--p95-ms X`), each setting's single-query P95 on the split
//! (encoding included) is measured, and the best quality within X is kept instead.
//!
//! Each query's BM25 candidates and their MaxSim scores are computed once; every (alpha,
//! rerank_k) pair is then fused with the same function the query pipeline uses. A query reads
//! `rerank_k` records, so the choice weighs cost: the smallest rerank_k whose nDCG@10 is within
//! `epsilon` of the sweep's best (SciFact's train split gave rerank_k 128 for +0.0007 over 64, at
//! twice the bytes read per query).

use cellar_core::{CellarError, Result};
use indicatif::ProgressBar;
use serde::Serialize;

use cellar_core::stats::percentile_of;

use crate::config::{CvRecord, SearchDefaults, TuneRecord};
use crate::corpus::{Qrels, Query};
use crate::eval::{evaluate_row, score_all, RowSpec, EVAL_DEPTH};
use crate::fusion::{self, Fusion};
use crate::index::Index;
use crate::metrics::{mean, score_query, Metrics};
use crate::mode::{DenseStage, Mode};
use crate::query::{PreparedQuery, QueryEncoding};
use crate::request::{QueryVectorsIn, SearchRequest};
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
    pub fusion: Fusion,
    pub alpha: f32,
    pub rerank_k: usize,
    pub metrics: Metrics,
}

/// How `cellar tune` chooses.
#[derive(Clone, Copy, Debug)]
pub struct TuneOptions<'a> {
    /// nDCG@10 a cheaper choice may give up against the best (no latency bound).
    pub epsilon: f64,
    /// k-fold cross-validation of the choice.
    pub cv: Option<usize>,
    /// The P95 (ms) every setting chosen is held to.
    pub p95_limit_ms: Option<f64>,
    /// The queries' own vectors (one per query, in order: `eval::read_query_vectors`), ranked
    /// instead of encoding their text: collections without a model tune too.
    pub query_vectors: Option<&'a [QueryVectorsIn]>,
}

/// nprobe values tried for the token stage (those up to its leaves).
pub const TOKEN_NPROBE_GRID: [usize; 5] = [8, 16, 32, 64, 128];
/// Depths tried for dense mode over the token stage (its documents re-ranked with MaxSim).
pub const TOKEN_DEPTH_GRID: [usize; 5] = [100, 200, 500, 1000, 2000];

/// One setting run over every query: its quality and its single-query latency (encoding and
/// search, one query at a time; the text of the hits is not fetched).
#[derive(Clone, Debug, Serialize)]
pub struct TimedPoint {
    /// What the sweep varies: `rerank_k` (hybrid), `nprobe` or `depth` (the token stage).
    pub value: usize,
    pub metrics: Metrics,
    pub p50_ms: f64,
    pub p95_ms: f64,
}

/// The token stage's sweep and the nprobe chosen: `None` when a latency bound left none (the
/// stage's default then stays as it is; the hybrid choice is still made and saved).
#[derive(Clone, Debug, Serialize)]
pub struct TokenTune {
    pub points: Vec<TimedPoint>,
    pub chosen: Option<TimedPoint>,
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
    /// With cross-validation: the folds and what the choice made on the other folds scored on
    /// each held-out fold, over all queries (an estimate of the procedure, not a held-out set).
    pub cv: Option<CvEstimate>,
    pub defaults: SearchDefaults,
    /// With a latency bound: the P95 it held the choice to, and each rerank_k's measured latency
    /// (hybrid, with that rerank_k's best fusion and alpha).
    pub p95_limit_ms: Option<f64>,
    pub latency: Vec<TimedPoint>,
    /// The token stage's nprobe sweep, when the index has one.
    pub tokens: Option<TokenTune>,
    /// Then its depth's (dense mode's candidates and rerank_k), at the nprobe chosen.
    pub token_depth: Option<TokenTune>,
}

/// A k-fold cross-validated estimate of tuning.
#[derive(Clone, Debug, Serialize)]
pub struct CvEstimate {
    pub folds: usize,
    pub metrics: Metrics,
}

/// Most folds of `cellar tune --cv`.
pub const MAX_FOLDS: usize = 20;

/// One query's first-stage candidates and the MaxSim scores of every one of them, computed once
/// and fused many ways.
#[derive(Clone)]
pub struct QueryStages {
    pub id: String,
    pub candidates: Vec<Scored>,
    pub maxsim: Vec<f32>,
    /// How its text was encoded (whole, in windows, cut).
    pub encoding: Option<QueryEncoding>,
}

/// The stages of every query (`prepared`: each one's encoding, from `eval::prepare_all`), with
/// the hybrid defaults' candidates (`candidates` deep).
pub fn stages(index: &Index, queries: &[Query], prepared: &[PreparedQuery]) -> Result<Vec<QueryStages>> {
    let depth = index.config().search.candidates;
    queries
        .iter()
        .zip(prepared)
        .map(|(query, prepared)| {
            let (candidates, maxsim) = index.candidates_with_maxsim(prepared, depth)?;
            Ok(QueryStages { id: query.id.clone(), candidates, maxsim, encoding: prepared.encoding })
        })
        .collect()
}

/// Each query's ranking (collection ids, `EVAL_DEPTH` deep) under one setting.
pub fn rankings(
    stages: &[QueryStages],
    ids: &[String],
    fusion: Fusion,
    alpha: f32,
    rerank_k: usize,
) -> Vec<(String, Vec<String>)> {
    stages
        .iter()
        .map(|s| {
            let k = rerank_k.min(s.maxsim.len());
            let fused = fusion::fuse(&s.candidates, &s.maxsim[..k], alpha, fusion);
            let ranked = fused.iter().take(EVAL_DEPTH).map(|f| ids[f.id.0 as usize].clone()).collect();
            (s.id.clone(), ranked)
        })
        .collect()
}

/// Every point of the grid (`fusions` × alphas × rerank_k up to `depth`) on `stages`.
pub fn sweep(
    stages: &[QueryStages],
    qrels: &Qrels,
    ids: &[String],
    fusions: &[Fusion],
    depth: usize,
) -> Vec<TunePoint> {
    let mut points = Vec::new();
    for &fusion in fusions {
        for rerank_k in RERANK_K_GRID.into_iter().filter(|k| *k <= depth) {
            for alpha in alpha_grid() {
                let metrics = score_all(&rankings(stages, ids, fusion, alpha, rerank_k), qrels);
                points.push(TunePoint { fusion, alpha, rerank_k, metrics });
            }
        }
    }
    points
}

/// k-fold cross-validation of the choice of [`choose`]: query `i` is in fold `i % folds`; each
/// fold is ranked with the point chosen on the others, and the per-query metrics of all folds
/// are averaged.
pub fn cross_validate(
    stages: &[QueryStages],
    qrels: &Qrels,
    ids: &[String],
    fusions: &[Fusion],
    depth: usize,
    folds: usize,
    epsilon: f64,
) -> Result<CvEstimate> {
    if !(2..=MAX_FOLDS).contains(&folds) || folds > stages.len() {
        return Err(CellarError::invalid(format!(
            "{folds} folds: 2 to {MAX_FOLDS} allowed, and no more than the {} judged queries",
            stages.len()
        )));
    }
    let mut per_query = Vec::with_capacity(stages.len());
    for fold in 0..folds {
        let in_fold = |want: bool| -> Vec<QueryStages> {
            stages
                .iter()
                .enumerate()
                .filter(|(i, _)| (i % folds == fold) == want)
                .map(|(_, s)| s.clone())
                .collect()
        };
        let (held, rest) = (in_fold(true), in_fold(false));
        let points = sweep(&rest, qrels, ids, fusions, depth);
        let (chosen, _) = choose(&points, epsilon);
        for (qid, ranked) in rankings(&held, ids, chosen.fusion, chosen.alpha, chosen.rerank_k) {
            let refs: Vec<&str> = ranked.iter().map(String::as_str).collect();
            per_query.push(score_query(&refs, &qrels[&qid]));
        }
    }
    Ok(CvEstimate { folds, metrics: mean(&per_query) })
}

/// Sweeps the grid on `queries` (judged in `qrels`) over every fusion method and returns the
/// new defaults; the caller decides whether to save them. With `cv`, the report also holds the
/// k-fold estimate of the choice (for collections whose only judgments are the test split).
pub fn tune(
    index: &Index,
    queries: &[Query],
    qrels: &Qrels,
    qrels_name: &str,
    options: TuneOptions<'_>,
    bar: &ProgressBar,
) -> Result<TuneReport> {
    let TuneOptions { epsilon, cv, p95_limit_ms, query_vectors } = options;
    if queries.is_empty() {
        return Err(CellarError::InvalidInput("no judged queries to tune on".into()));
    }
    if !(0.0..=MAX_EPSILON).contains(&epsilon) {
        return Err(CellarError::InvalidInput(format!("epsilon {epsilon}: 0 to {MAX_EPSILON} allowed")));
    }
    if let Some(limit) = p95_limit_ms.filter(|l| !(l.is_finite() && *l > 0.0)) {
        return Err(CellarError::InvalidInput(format!("p95_ms {limit}: a positive number of milliseconds")));
    }
    let depth = index.config().search.candidates;
    let prepared = crate::eval::prepare_all_with(index, queries, query_vectors, bar)?;
    let stages = stages(index, queries, &prepared)?;
    let ids = crate::eval::doc_ids(index)?;
    let points = sweep(&stages, qrels, &ids, &Fusion::ALL, depth);
    let cv = match cv {
        Some(folds) => Some(cross_validate(&stages, qrels, &ids, &Fusion::ALL, depth, folds, epsilon)?),
        None => None,
    };
    let (best, top) = choose(&points, epsilon);
    let (mut best, top) = (best.clone(), top.clone());
    let timed = Timed { index, queries, prepared: &prepared, qrels, ids: &ids };
    let mut latency = Vec::new();
    if let Some(limit) = p95_limit_ms {
        for rerank_k in RERANK_K_GRID.into_iter().filter(|k| *k <= depth) {
            let at = best_at(&points, rerank_k);
            let mut request = SearchRequest::new("", Mode::Hybrid).with_k(EVAL_DEPTH);
            (request.fusion, request.alpha, request.rerank_k) =
                (Some(at.fusion), Some(at.alpha), Some(rerank_k));
            latency.push(timed.run(&request, rerank_k)?);
        }
        best = within_limit(&points, &latency, limit)
            .ok_or_else(|| over_limit("hybrid rerank_k", &latency, limit))?
            .clone();
    }
    let (tokens, token_depth) = match index.current_tokens() {
        Some(stage) => {
            let config = stage.config();
            let nprobe = tune_tokens(&timed, config.leaves, epsilon, p95_limit_ms)?;
            let at = nprobe.chosen.as_ref().map_or(config.search.nprobe, |c| c.value);
            let depth = tune_token_depth(&timed, at, epsilon, p95_limit_ms)?;
            (Some(nprobe), Some(depth))
        }
        None => (None, None),
    };
    let defaults = SearchDefaults {
        mode: Mode::Hybrid,
        candidates: depth,
        rerank_k: best.rerank_k,
        alpha: best.alpha,
        fusion: best.fusion,
        lexical: index.config().search.lexical,
        tuned: Some(TuneRecord {
            qrels: qrels_name.to_string(),
            queries: queries.len(),
            metric: "nDCG@10".into(),
            value: best.metrics.ndcg_at_10,
            cv: cv.as_ref().map(|c| CvRecord { folds: c.folds, value: c.metrics.ndcg_at_10 }),
        }),
    };
    Ok(TuneReport { points, best, top, epsilon, cv, defaults, p95_limit_ms, latency, tokens, token_depth })
}

/// The highest nDCG@10 at `rerank_k` (its fusion and alpha).
fn best_at(points: &[TunePoint], rerank_k: usize) -> &TunePoint {
    points
        .iter()
        .filter(|p| p.rerank_k == rerank_k)
        .max_by(|a, b| better(a, b))
        .expect("a point per rerank_k")
}

/// The best point whose rerank_k's measured P95 is within `limit`.
fn within_limit<'a>(points: &'a [TunePoint], latency: &[TimedPoint], limit: f64) -> Option<&'a TunePoint> {
    let fast = |k: usize| latency.iter().any(|t| t.value == k && t.p95_ms <= limit);
    points.iter().filter(|p| fast(p.rerank_k)).max_by(|a, b| better(a, b))
}

/// No setting met the bound: the error names the fastest.
fn over_limit(what: &str, timed: &[TimedPoint], limit: f64) -> CellarError {
    let fastest = timed.iter().min_by(|a, b| a.p95_ms.total_cmp(&b.p95_ms));
    CellarError::invalid(match fastest {
        Some(t) => format!(
            "no setting keeps P95 within {limit} ms: the fastest, {what} {}, took P95 {:.1} ms on these \
             queries (nothing was saved)",
            t.value, t.p95_ms
        ),
        None => format!("no setting of {what} to measure (nothing was saved)"),
    })
}

/// What a timed sweep runs over: the queries, their encodings and judgments.
struct Timed<'a> {
    index: &'a Index,
    queries: &'a [Query],
    prepared: &'a [PreparedQuery],
    qrels: &'a Qrels,
    ids: &'a [String],
}

impl Timed<'_> {
    /// Every query ranked with `request`'s settings, one at a time (`eval::evaluate_row`):
    /// quality and latency.
    fn run(&self, request: &SearchRequest, value: usize) -> Result<TimedPoint> {
        let spec = RowSpec { label: String::new(), request: request.clone() };
        let row = evaluate_row(self.index, self.queries, self.prepared, self.qrels, self.ids, &spec)?;
        let at = |p: f64| percentile_of(&row.total_ms, p).unwrap_or(f64::NAN);
        Ok(TimedPoint { value, metrics: row.metrics, p50_ms: at(50.0), p95_ms: at(95.0) })
    }
}

/// The token stage's nprobe: each of [`TOKEN_NPROBE_GRID`] up to `leaves` (all the leaves when
/// there are fewer), dense mode.
fn tune_tokens(timed: &Timed<'_>, leaves: usize, epsilon: f64, limit: Option<f64>) -> Result<TokenTune> {
    let mut grid: Vec<usize> = TOKEN_NPROBE_GRID.into_iter().filter(|n| *n <= leaves).collect();
    if grid.is_empty() {
        grid.push(leaves);
    }
    sweep_tokens(timed, &grid, epsilon, limit, |request, nprobe| request.nprobe = Some(nprobe))
}

/// Dense mode's depth over the token stage at `nprobe`: each of [`TOKEN_DEPTH_GRID`].
fn tune_token_depth(timed: &Timed<'_>, nprobe: usize, epsilon: f64, limit: Option<f64>) -> Result<TokenTune> {
    sweep_tokens(timed, &TOKEN_DEPTH_GRID, epsilon, limit, |request, depth| {
        (request.nprobe, request.candidates, request.rerank_k) = (Some(nprobe), Some(depth), Some(depth));
    })
}

/// Dense mode through the token stage at each value of `grid` (`set` puts it in the request).
/// Chosen: with a bound, the best nDCG@10 whose P95 is within it (none when none is); without,
/// the smallest value within `epsilon` of the best.
fn sweep_tokens(
    timed: &Timed<'_>,
    grid: &[usize],
    epsilon: f64,
    limit: Option<f64>,
    set: impl Fn(&mut SearchRequest, usize),
) -> Result<TokenTune> {
    let mut points = Vec::new();
    for &value in grid {
        let mut request = SearchRequest::new("", Mode::Dense).with_k(EVAL_DEPTH);
        request.dense_stage = Some(DenseStage::Tokens);
        set(&mut request, value);
        points.push(timed.run(&request, value)?);
    }
    // Highest nDCG@10; on ties the smaller value.
    let best = |a: &&TimedPoint, b: &&TimedPoint| {
        a.metrics.ndcg_at_10.total_cmp(&b.metrics.ndcg_at_10).then(b.value.cmp(&a.value))
    };
    let chosen = match limit {
        Some(limit) => points.iter().filter(|p| p.p95_ms <= limit).max_by(best),
        None => {
            let top = points.iter().max_by(best).expect("a point");
            let floor = top.metrics.ndcg_at_10 - epsilon;
            points.iter().filter(|p| p.metrics.ndcg_at_10 >= floor).min_by_key(|p| p.value)
        }
    };
    let chosen = chosen.cloned();
    Ok(TokenTune { points, chosen })
}

/// Highest nDCG@10; on ties, the smaller rerank_k (cheaper), then the smaller alpha, then the
/// earlier fusion method of [`Fusion::ALL`].
fn better(a: &TunePoint, b: &TunePoint) -> std::cmp::Ordering {
    let order = |f: Fusion| Fusion::ALL.iter().position(|g| *g == f);
    a.metrics
        .ndcg_at_10
        .total_cmp(&b.metrics.ndcg_at_10)
        .then(b.rerank_k.cmp(&a.rerank_k))
        .then(b.alpha.total_cmp(&a.alpha))
        .then(order(b.fusion).cmp(&order(a.fusion)))
}

/// (chosen, top): `top` has the highest nDCG@10; the chosen point has the smallest rerank_k
/// among the points within `epsilon` of it, and the best nDCG@10 at that rerank_k.
pub fn choose(points: &[TunePoint], epsilon: f64) -> (&TunePoint, &TunePoint) {
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
    use cellar_core::DocId;

    /// Query `q` has two candidates: BM25 prefers document 0, MaxSim document 1, and the
    /// judgments say `relevant`.
    fn two_way(q: usize) -> QueryStages {
        let candidates = vec![Scored { id: DocId(0), score: 2.0 }, Scored { id: DocId(1), score: 1.0 }];
        QueryStages { id: format!("q{q}"), candidates, maxsim: vec![0.1, 0.9], encoding: None }
    }

    fn judged(relevant: &[&str]) -> Qrels {
        relevant
            .iter()
            .enumerate()
            .map(|(q, doc)| (format!("q{q}"), [(doc.to_string(), 1)].into_iter().collect()))
            .collect()
    }

    #[test]
    fn cross_validation_ranks_each_fold_with_the_choice_made_on_the_others() {
        let ids = vec!["d0".to_string(), "d1".to_string()];
        let stages: Vec<QueryStages> = (0..4).map(two_way).collect();
        // Every query wants MaxSim's document: any fold's choice gets all of them right.
        let qrels = judged(&["d1", "d1", "d1", "d1"]);
        let cv = cross_validate(&stages, &qrels, &ids, &Fusion::ALL, 200, 2, 0.0).unwrap();
        assert_eq!((cv.folds, cv.metrics.queries, cv.metrics.ndcg_at_10), (2, 4, 1.0));
        // Folds disagree: fold 0 (q0, q2) wants BM25's document, fold 1 MaxSim's. Each fold is
        // ranked with the other's choice, so the estimate is 0.63 (the second place of every
        // query), below what one choice on all queries gets in-sample (half right, half second).
        let qrels = judged(&["d0", "d1", "d0", "d1"]);
        let cv = cross_validate(&stages, &qrels, &ids, &Fusion::ALL, 200, 2, 0.0).unwrap();
        let second = 1.0 / 3f64.log2();
        assert!((cv.metrics.ndcg_at_10 - second).abs() < 1e-9, "{:?}", cv.metrics);
        let points = sweep(&stages, &qrels, &ids, &Fusion::ALL, 200);
        let (chosen, _) = choose(&points, 0.0);
        assert!((chosen.metrics.ndcg_at_10 - (1.0 + second) / 2.0).abs() < 1e-9);
        for folds in [1, 5, 21] {
            assert!(cross_validate(&stages, &qrels, &ids, &Fusion::ALL, 200, folds, 0.0).is_err(), "{folds}");
        }
    }

    fn point(alpha: f32, rerank_k: usize, ndcg: f64) -> TunePoint {
        TunePoint {
            fusion: Fusion::Z,
            alpha,
            rerank_k,
            metrics: Metrics { ndcg_at_10: ndcg, ..Metrics::default() },
        }
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
