//! `cellar tune`: sweeps the fusion method, alpha and rerank_k on a development split (or, with
//! `--cv K`, cross-validates the choice on the only split there is) and keeps the cheapest point
//! within `epsilon` of the best. Where hybrid joins a token stage, its first-stage depths are
//! swept too (BM25's candidates × the stage's candidates joined to them). An index with a token
//! stage also has its `nprobe` swept in the dense mode, then its depth (the documents dense mode
//! re-ranks) at that nprobe. With a latency bound (`--p95-ms X`), each setting's single-query
//! P95 on the split (encoding included) is measured, and the best quality within X is kept
//! instead.
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
/// rerank_k tried beyond [`RERANK_K_GRID`] where the candidates go that deep.
pub const DEEP_RERANK_K_GRID: [usize; 2] = [500, 1000];
/// BM25 depths (a hybrid search's `candidates`, which bound its `rerank_k`) tried, with the
/// index's own, where hybrid joins a token stage.
pub const HYBRID_CANDIDATES_GRID: [usize; 2] = [200, 1000];
/// Token-stage candidates joined to BM25's (`hybrid_candidates`) tried, with the stage's own.
/// On the 2M synthetic collection 1,000 joined and 1,200 re-ranked gave 0.692 nDCG@10 against
/// the defaults' 0.611 (bench/results/tokens-hybrid-2m.md), a depth no grid of rerank_k up to
/// the index's 200 candidates could reach.
pub const HYBRID_JOINED_GRID: [usize; 3] = [100, 300, 1000];

/// The rerank_k values of the grids up to `candidates` (a search re-ranks no more).
fn rerank_grid(candidates: usize) -> impl Iterator<Item = usize> {
    RERANK_K_GRID.into_iter().chain(DEEP_RERANK_K_GRID).filter(move |k| *k <= candidates)
}

/// nDCG@10 a cheaper choice may give up against the best point of the sweep.
pub const DEFAULT_EPSILON: f64 = 0.002;
/// Largest `epsilon` accepted.
pub const MAX_EPSILON: f64 = 0.05;

/// A hybrid search's first-stage depths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HybridDepth {
    /// BM25's candidates (`candidates`).
    pub candidates: usize,
    /// The dense stage's candidates joined to them (`hybrid_candidates`; 0: none).
    pub joined: usize,
}

impl HybridDepth {
    /// BM25's `candidates` alone (or joined by a dense stage the sweep does not vary).
    pub fn bm25(candidates: usize) -> Self {
        HybridDepth { candidates, joined: 0 }
    }

    /// First-stage documents listed: what ties between equal points are broken by.
    fn listed(&self) -> usize {
        self.candidates + self.joined
    }
}

/// One point of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct TunePoint {
    pub fusion: Fusion,
    pub alpha: f32,
    pub rerank_k: usize,
    pub depth: HybridDepth,
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

/// nprobe values tried for the token stage (those up to its leaves). From 2: with the imputed
/// score taken from a deeper leaf (`tokens::default_impute`), 2 leaves a query token find 0.980
/// of the exact top 10 on SciFact (bench/results/tokens-impute.md).
pub const TOKEN_NPROBE_GRID: [usize; 7] = [2, 4, 8, 16, 32, 64, 128];
/// Depths tried for dense mode over the token stage (its documents re-ranked with MaxSim).
pub const TOKEN_DEPTH_GRID: [usize; 5] = [100, 200, 500, 1000, 2000];

/// One setting run over every query: its quality and its single-query latency (encoding and
/// search, one query at a time; the text of the hits is not fetched).
#[derive(Clone, Debug, Serialize)]
pub struct TimedPoint {
    /// What the sweep varies: `rerank_k` (hybrid), `nprobe` or `depth` (the token stage).
    pub value: usize,
    /// Hybrid: the first-stage depths it was timed at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hybrid: Option<HybridDepth>,
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
    /// Where hybrid joins the token stage: the stage's candidates joined to BM25's at the
    /// chosen point (its `hybrid_candidates` default).
    pub hybrid_candidates: Option<usize>,
    /// With a latency bound: the P95 it held the choice to, and the latency of each setting
    /// timed (hybrid: the best fusion and alpha of each depths and rerank_k, best first, up to
    /// the first within the bound).
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

/// Every query's stages at one pair of first-stage depths.
#[derive(Clone)]
pub struct DepthStages {
    pub depth: HybridDepth,
    pub stages: Vec<QueryStages>,
}

impl DepthStages {
    /// The same depths over the queries `keep` takes (by position).
    fn only(&self, keep: impl Fn(usize) -> bool) -> DepthStages {
        let stages =
            self.stages.iter().enumerate().filter(|(i, _)| keep(*i)).map(|(_, s)| s.clone()).collect();
        DepthStages { depth: self.depth, stages }
    }
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

/// The stages a tune sweeps: where a hybrid search joins the token stage, every query's at each
/// depth of the grids ([`HYBRID_CANDIDATES_GRID`] × [`HYBRID_JOINED_GRID`], with the defaults,
/// below the collection's `docs`); otherwise at the defaults alone ([`stages`]).
pub fn depth_stages(
    index: &Index,
    queries: &[Query],
    prepared: &[PreparedQuery],
    docs: usize,
) -> Result<Vec<DepthStages>> {
    let params = index.params(&SearchRequest { mode: Some(Mode::Hybrid), ..Default::default() })?;
    let Some(tokens) = params.tokens else {
        let depth = HybridDepth { candidates: params.candidates, joined: params.hybrid_dense().unwrap_or(0) };
        return Ok(vec![DepthStages { depth, stages: stages(index, queries, prepared)? }]);
    };
    let grid = |own: usize, grid: &[usize]| -> Vec<usize> {
        let mut values: Vec<usize> = grid.iter().copied().filter(|n| *n < docs).chain([own]).collect();
        values.sort_unstable();
        values.dedup();
        values
    };
    let joined = grid(tokens.hybrid_candidates, &HYBRID_JOINED_GRID);
    let pairs: Vec<(usize, usize)> = grid(params.candidates, &HYBRID_CANDIDATES_GRID)
        .into_iter()
        .flat_map(|c| joined.iter().map(move |j| (c, *j)))
        .collect();
    let mut sets: Vec<DepthStages> = pairs
        .iter()
        .map(|&(candidates, joined)| DepthStages {
            depth: HybridDepth { candidates, joined },
            stages: Vec::with_capacity(queries.len()),
        })
        .collect();
    for (query, prepared) in queries.iter().zip(prepared) {
        for (set, (candidates, maxsim)) in
            sets.iter_mut().zip(index.hybrid_depths_with_maxsim(prepared, &pairs)?)
        {
            let id = query.id.clone();
            set.stages.push(QueryStages { id, candidates, maxsim, encoding: prepared.encoding });
        }
    }
    Ok(sets)
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

/// Every point of the grid (`fusions` × alphas × rerank_k up to `depth`) on `stages`, whose
/// candidates are BM25's `depth` (with whatever the defaults join).
pub fn sweep(
    stages: &[QueryStages],
    qrels: &Qrels,
    ids: &[String],
    fusions: &[Fusion],
    depth: usize,
) -> Vec<TunePoint> {
    let set = DepthStages { depth: HybridDepth::bm25(depth), stages: stages.to_vec() };
    sweep_depths(std::slice::from_ref(&set), qrels, ids, fusions)
}

/// Every point of the grid (`fusions` × alphas × rerank_k up to the candidates) at each depth.
pub fn sweep_depths(
    sets: &[DepthStages],
    qrels: &Qrels,
    ids: &[String],
    fusions: &[Fusion],
) -> Vec<TunePoint> {
    let mut points = Vec::new();
    for set in sets {
        for &fusion in fusions {
            for rerank_k in rerank_grid(set.depth.candidates) {
                for alpha in alpha_grid() {
                    let metrics = score_all(&rankings(&set.stages, ids, fusion, alpha, rerank_k), qrels);
                    points.push(TunePoint { fusion, alpha, rerank_k, depth: set.depth, metrics });
                }
            }
        }
    }
    points
}

/// The stages at `point`'s depths.
fn at_depth<'a>(sets: &'a [DepthStages], point: &TunePoint) -> &'a [QueryStages] {
    &sets.iter().find(|s| s.depth == point.depth).expect("every point comes from a set").stages
}

/// k-fold cross-validation of the choice of [`choose`] on `stages` (BM25's `depth`): see
/// [`cross_validate_depths`].
pub fn cross_validate(
    stages: &[QueryStages],
    qrels: &Qrels,
    ids: &[String],
    fusions: &[Fusion],
    depth: usize,
    folds: usize,
    epsilon: f64,
) -> Result<CvEstimate> {
    let set = DepthStages { depth: HybridDepth::bm25(depth), stages: stages.to_vec() };
    cross_validate_depths(std::slice::from_ref(&set), qrels, ids, fusions, folds, epsilon)
}

/// k-fold cross-validation of the choice of [`choose`] over every depth of `sets`: query `i`
/// is in fold `i % folds`; each fold is ranked with the point chosen on the others, and the
/// per-query metrics of all folds are averaged.
pub fn cross_validate_depths(
    sets: &[DepthStages],
    qrels: &Qrels,
    ids: &[String],
    fusions: &[Fusion],
    folds: usize,
    epsilon: f64,
) -> Result<CvEstimate> {
    let queries = sets.first().map_or(0, |s| s.stages.len());
    if !(2..=MAX_FOLDS).contains(&folds) || folds > queries {
        return Err(CellarError::invalid(format!(
            "{folds} folds: 2 to {MAX_FOLDS} allowed, and no more than the {queries} judged queries"
        )));
    }
    let mut per_query = Vec::with_capacity(queries);
    for fold in 0..folds {
        let part = |held: bool| -> Vec<DepthStages> {
            sets.iter().map(|s| s.only(|i| (i % folds == fold) == held)).collect()
        };
        let (held, rest) = (part(true), part(false));
        let points = sweep_depths(&rest, qrels, ids, fusions);
        let (chosen, _) = choose(&points, epsilon);
        let ranked = rankings(at_depth(&held, chosen), ids, chosen.fusion, chosen.alpha, chosen.rerank_k);
        for (qid, ranked) in ranked {
            let refs: Vec<&str> = ranked.iter().map(String::as_str).collect();
            per_query.push(score_query(&refs, &qrels[&qid]));
        }
    }
    Ok(CvEstimate { folds, metrics: mean(&per_query) })
}

/// Sweeps the grid on `queries` (judged in `qrels`) over every fusion method and returns the
/// new defaults; the caller decides whether to save them. With `cv`, the report also holds the
/// k-fold estimate of the choice (for collections whose only judgments are the test split).
/// Where hybrid joins a token stage, its depths are swept too ([`depth_stages`]), at the
/// stage's default nprobe.
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
    let prepared = crate::eval::prepare_all_with(index, queries, query_vectors, bar)?;
    let ids = crate::eval::doc_ids(index)?;
    let sets = depth_stages(index, queries, &prepared, ids.len())?;
    let points = sweep_depths(&sets, qrels, &ids, &Fusion::ALL);
    let cv = match cv {
        Some(folds) => Some(cross_validate_depths(&sets, qrels, &ids, &Fusion::ALL, folds, epsilon)?),
        None => None,
    };
    let (best, top) = choose(&points, epsilon);
    let (mut best, top) = (best.clone(), top.clone());
    let timed = Timed { index, queries, prepared: &prepared, qrels, ids: &ids };
    let mut latency = Vec::new();
    if let Some(limit) = p95_limit_ms {
        best = fastest_within(&timed, &points, limit, &mut latency)?.clone();
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
    let hybrid = SearchRequest { mode: Some(Mode::Hybrid), ..Default::default() };
    let joins_tokens = index.params(&hybrid)?.tokens.is_some();
    let defaults = SearchDefaults {
        mode: Mode::Hybrid,
        candidates: best.depth.candidates,
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
    let hybrid_candidates = joins_tokens.then_some(best.depth.joined);
    Ok(TuneReport {
        points,
        best,
        top,
        epsilon,
        cv,
        defaults,
        hybrid_candidates,
        p95_limit_ms,
        latency,
        tokens,
        token_depth,
    })
}

/// A hybrid search with `point`'s settings.
fn hybrid_request(point: &TunePoint) -> SearchRequest {
    let mut request = SearchRequest::new("", Mode::Hybrid).with_k(EVAL_DEPTH);
    (request.fusion, request.alpha, request.rerank_k) =
        (Some(point.fusion), Some(point.alpha), Some(point.rerank_k));
    request.candidates = Some(point.depth.candidates);
    if point.depth.joined > 0 {
        request.hybrid_candidates = Some(point.depth.joined);
    }
    request
}

/// The best point whose setting's P95 is within `limit`: the best of each (depths, rerank_k)
/// is timed, best first, until one is within it (each timing is pushed to `timed_points`); an
/// error names the fastest when none is.
fn fastest_within<'a>(
    timed: &Timed<'_>,
    points: &'a [TunePoint],
    limit: f64,
    timed_points: &mut Vec<TimedPoint>,
) -> Result<&'a TunePoint> {
    let mut settings = best_of_each_setting(points);
    settings.sort_by(|a, b| better(b, a));
    for setting in settings {
        let mut point = timed.run(&hybrid_request(setting), setting.rerank_k)?;
        point.hybrid = Some(setting.depth);
        let within = point.p95_ms <= limit;
        timed_points.push(point);
        if within {
            return Ok(setting);
        }
    }
    Err(over_limit("hybrid rerank_k", timed_points, limit))
}

/// The best point (fusion and alpha) of each setting of the sweep — its depths and rerank_k —
/// in the sweep's order.
pub fn best_of_each_setting(points: &[TunePoint]) -> Vec<&TunePoint> {
    let mut settings: Vec<&TunePoint> = Vec::new();
    for p in points {
        match settings.iter_mut().find(|s| s.rerank_k == p.rerank_k && s.depth == p.depth) {
            Some(s) if better(p, s).is_gt() => *s = p,
            Some(_) => {}
            None => settings.push(p),
        }
    }
    settings
}

/// No setting met the bound: the error names the fastest.
fn over_limit(what: &str, timed: &[TimedPoint], limit: f64) -> CellarError {
    let fastest = timed.iter().min_by(|a, b| a.p95_ms.total_cmp(&b.p95_ms));
    CellarError::invalid(match fastest {
        Some(t) => format!(
            "no setting keeps P95 within {limit} ms: the fastest, {what} {}{}, took P95 {:.1} ms on these \
             queries (nothing was saved)",
            t.value,
            t.hybrid.map_or(String::new(), |d| format!(" (BM25's {}, {} joined)", d.candidates, d.joined)),
            t.p95_ms
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
        Ok(TimedPoint { value, hybrid: None, metrics: row.metrics, p50_ms: at(50.0), p95_ms: at(95.0) })
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

/// Highest nDCG@10; on ties, the smaller rerank_k (cheaper), then the shallower first stage,
/// then the smaller alpha, then the earlier fusion method of [`Fusion::ALL`].
fn better(a: &TunePoint, b: &TunePoint) -> std::cmp::Ordering {
    let order = |f: Fusion| Fusion::ALL.iter().position(|g| *g == f);
    a.metrics
        .ndcg_at_10
        .total_cmp(&b.metrics.ndcg_at_10)
        .then(b.rerank_k.cmp(&a.rerank_k))
        .then(b.depth.listed().cmp(&a.depth.listed()))
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
            depth: HybridDepth::bm25(200),
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
