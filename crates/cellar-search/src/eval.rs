//! Evaluation: runs the real pipeline over judged queries and scores it against qrels.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use cellar_core::{CellarError, DocId, IoContext, Result};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::config::IndexConfig;
use crate::corpus::{Qrels, Query};
use crate::index::Index;
use crate::ivf::IvfConfig;
use crate::metrics::{mean, score_query, Metrics, QueryMetrics};
use crate::mode::{DenseStage, Lexical, Mode};
use crate::params::SearchParams;
use crate::query::PreparedQuery;
use crate::request::{QueryVectorsIn, SearchRequest, VectorDtype};
use crate::splade::SpladeConfig;
use crate::tokens::TokensConfig;

/// Depth every evaluated ranking is cut at (Recall@100 needs 100).
pub const EVAL_DEPTH: usize = 100;

/// One row of an evaluation table: a label and the search settings it runs with (the query
/// of `request` is ignored: every judged query is ranked with these settings).
#[derive(Clone, Debug)]
pub struct RowSpec {
    pub label: String,
    pub request: SearchRequest,
}

impl RowSpec {
    pub fn new(label: impl Into<String>, mode: Mode) -> RowSpec {
        RowSpec { label: label.into(), request: SearchRequest::new("", mode).with_k(EVAL_DEPTH) }
    }
}

/// The measured result of one row.
#[derive(Clone, Debug, Serialize)]
pub struct RowResult {
    pub label: String,
    pub params: SearchParams,
    pub metrics: Metrics,
    /// Mean per-query search time without encoding, ms (encoding is shared by all rows).
    pub mean_search_ms: f64,
    pub mean_encode_ms: f64,
    pub mean_bytes_read: f64,
    /// Bytes on disk of the parts this row needs.
    pub size_bytes: u64,
    /// Build seconds of the parts this row needs.
    pub build_secs: f64,
    #[serde(skip)]
    pub run: Vec<(String, Vec<String>)>,
    /// Each query's single-search time, encoding included, ms (`cellar tune --p95-ms`).
    #[serde(skip)]
    pub total_ms: Vec<f64>,
}

/// The queries that have judgments, in file order.
pub fn judged_queries(queries: &[Query], qrels: &Qrels) -> Vec<Query> {
    queries.iter().filter(|q| qrels.contains_key(&q.id)).cloned().collect()
}

/// The rows of `cellar eval`'s table, from the index's stored (tuned) defaults; the IVF rows
/// when the index has an IVF, the token stage's when it has one, the SPLADE rows when it has a
/// SPLADE stage.
pub fn default_rows(
    config: &IndexConfig,
    ivf: Option<&IvfConfig>,
    tokens: Option<&TokensConfig>,
    splade: bool,
) -> Vec<RowSpec> {
    let alpha = config.search.alpha;
    let mut rows = vec![
        RowSpec::new("bm25", Mode::Bm25),
        RowSpec::new("dense pooled (exact)", Mode::DenseExact),
        rerank_row(),
        hybrid_row(config, None),
    ];
    if let Some(ivf) = ivf {
        rows.extend(ivf_rows(config, ivf));
    }
    if let Some(tokens) = tokens {
        rows.extend(token_rows(config, tokens));
    }
    if splade {
        rows.extend(splade_rows(config));
    }
    for rerank_k in [16, 32, 64, 128, 200] {
        let mut row = hybrid_row(config, Some(rerank_k));
        row.label = format!("hybrid α={alpha:.2} rerank_k={rerank_k}");
        rows.push(row);
    }
    rows
}

/// The IVF alone, IVF → MaxSim, and hybrid with IVF candidates joined, at the IVF's defaults.
fn ivf_rows(config: &IndexConfig, ivf: &IvfConfig) -> Vec<RowSpec> {
    let d = ivf.search;
    let rescore = if d.rescore { "rescored" } else { "codes only" };
    let mut dense = RowSpec::new(format!("dense: IVF nprobe={} → MaxSim", d.nprobe), Mode::Dense);
    dense.request.rerank_k = Some(config.search.rerank_k);
    // The IVF's row even where a token stage would be dense mode's default.
    dense.request.dense_stage = Some(DenseStage::Pooled);
    // The default hybrid row already joins the IVF's candidates when its default says so: the
    // extra row is the other choice.
    let mut joined = hybrid_row(config, None);
    let (label, n) = match d.hybrid_candidates {
        0 => ("+ 100 IVF candidates".to_string(), 100),
        n => (format!("BM25 candidates only (default joins {n} IVF)"), 0),
    };
    joined.label = format!("hybrid α={:.2} {label}", config.search.alpha);
    joined.request.hybrid_candidates = Some(n);
    vec![
        RowSpec::new(format!("ivf nprobe={} ({rescore}, {} clusters)", d.nprobe, ivf.clusters), Mode::Ivf),
        dense,
        joined,
    ]
}

/// The token stage → MaxSim at its defaults, and hybrid with its candidates joined to BM25's
/// (the default hybrid row joins the IVF's where there is one).
fn token_rows(config: &IndexConfig, tokens: &TokensConfig) -> Vec<RowSpec> {
    let d = tokens.search;
    let mut dense = RowSpec::new(
        format!("dense: token stage nprobe={} → MaxSim of its best {}", d.nprobe, tokens.depth()),
        Mode::Dense,
    );
    dense.request.dense_stage = Some(DenseStage::Tokens);
    let mut joined = hybrid_row(config, None);
    joined.label = format!(
        "hybrid {} α={:.2} + {} token-stage candidates",
        config.search.fusion, config.search.alpha, d.hybrid_candidates
    );
    joined.request.dense_stage = Some(DenseStage::Tokens);
    if d.hybrid_candidates == 0 {
        return vec![dense];
    }
    vec![dense, joined]
}

/// SPLADE alone, as rerank's candidates, as hybrid's, and joined with BM25 for hybrid (each
/// with BM25's candidates only: the IVF's joined ones are the IVF rows' question).
fn splade_rows(config: &IndexConfig) -> Vec<RowSpec> {
    let with = |mut row: RowSpec, label: &str, lexical: Lexical| {
        row.label = label.to_string();
        row.request.lexical = Some(lexical);
        row.request.hybrid_candidates = Some(0);
        row
    };
    let hybrid = || hybrid_row(config, None);
    vec![
        with(RowSpec::new("", Mode::Bm25), "splade", Lexical::Splade),
        with(rerank_row(), "splade → rerank", Lexical::Splade),
        with(
            hybrid(),
            &format!("hybrid {} α={:.2}, SPLADE candidates", config.search.fusion, config.search.alpha),
            Lexical::Splade,
        ),
        with(RowSpec::new("", Mode::Bm25), "bm25 + splade (joined)", Lexical::Both),
        with(
            hybrid(),
            &format!(
                "hybrid {} α={:.2}, BM25 + SPLADE candidates",
                config.search.fusion, config.search.alpha
            ),
            Lexical::Both,
        ),
    ]
}

/// MaxSim over every candidate (rerank_k is capped at the candidate count).
fn rerank_row() -> RowSpec {
    let mut row = RowSpec::new("rerank", Mode::Rerank);
    row.request.rerank_k = Some(crate::request::MAX_CANDIDATES);
    row
}

fn hybrid_row(config: &IndexConfig, rerank_k: Option<usize>) -> RowSpec {
    let tuned = match &config.search.tuned {
        Some(t) => match t.cv {
            Some(cv) => format!(
                "chosen by {}-fold cross-validation on {}, CV estimate {:.3}; this row is not held out",
                cv.folds, t.qrels, cv.value
            ),
            None => format!("tuned on {}", t.qrels),
        },
        None => "untuned default".to_string(),
    };
    let d = &config.search;
    let label = format!("hybrid {} α={:.2} ({tuned})", d.fusion, d.alpha);
    let mut row = RowSpec::new(label, Mode::Hybrid);
    row.request.alpha = Some(config.search.alpha);
    row.request.rerank_k = rerank_k.or(Some(config.search.rerank_k));
    row
}

/// Every document's collection id, by internal id (written and deleted ones included).
pub fn doc_ids(index: &Index) -> Result<Vec<String>> {
    (0..index.live_view().next_id).map(|i| index.document(DocId(i)).map(|d| d.id)).collect()
}

/// Encodes every query once (rows then share the encodings).
pub fn prepare_all(index: &Index, queries: &[Query], bar: &ProgressBar) -> Result<Vec<PreparedQuery>> {
    prepare_all_with(index, queries, None, bar)
}

/// Prepares every query once; with `vectors` (one per query, in order: `read_query_vectors`; any
/// other count is refused) a query is ranked with its own vectors and never encoded.
pub fn prepare_all_with(
    index: &Index,
    queries: &[Query],
    vectors: Option<&[QueryVectorsIn]>,
    bar: &ProgressBar,
) -> Result<Vec<PreparedQuery>> {
    if let Some(given) = vectors.filter(|v| v.len() != queries.len()) {
        return Err(CellarError::InvalidInput(format!(
            "{} query vectors for {} queries: give one per query, in order",
            given.len(),
            queries.len()
        )));
    }
    let prepared = queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            bar.inc(1);
            let mut request = SearchRequest::new(q.text.clone(), Mode::Hybrid);
            request.query_vectors = vectors.map(|v| v[i].clone());
            prepare_request(index, request).map_err(|e| with_query(e, &q.id))
        })
        .collect();
    bar.finish_and_clear();
    prepared
}

/// The vectors of `queries`, in order, from an embeddings folder whose corpus lines are the
/// queries (ids and texts; docs/embeddings.md), in the compact form.
pub fn read_query_vectors(dir: &Path, queries: &[Query]) -> Result<Vec<QueryVectorsIn>> {
    let (_, given) = crate::embeddings::read_in_order(dir, queries.iter().map(|q| q.id.as_str()))?;
    Ok(given
        .iter()
        .map(|(tokens, pooled)| QueryVectorsIn::compact(tokens, Some(pooled), VectorDtype::F32))
        .collect())
}

/// Plans and prepares (encodes) one query for `mode`, so rows can rank it many ways.
pub fn prepare(index: &Index, text: &str, mode: Mode) -> Result<PreparedQuery> {
    prepare_request(index, SearchRequest::new(text, mode))
}

fn prepare_request(index: &Index, request: SearchRequest) -> Result<PreparedQuery> {
    index.prepare(index.plan(request)?)
}

/// Names the query in a user error.
pub fn with_query(error: CellarError, id: &str) -> CellarError {
    match error {
        CellarError::InvalidInput(detail) => CellarError::InvalidInput(format!("query {id:?}: {detail}")),
        other => other,
    }
}

/// Runs one row over all prepared queries and scores it.
pub fn evaluate_row(
    index: &Index,
    queries: &[Query],
    prepared: &[PreparedQuery],
    qrels: &Qrels,
    ids: &[String],
    spec: &RowSpec,
) -> Result<RowResult> {
    if spec.request.filter.is_some() {
        return Err(CellarError::invalid(
            "an evaluation judges rankings of the whole collection: its searches take no filter",
        ));
    }
    let params = index.params(&spec.request)?;
    let (mut per_query, mut run, mut total_ms) = (Vec::new(), Vec::new(), Vec::new());
    let (mut search_ms, mut encode_ms, mut bytes) = (0.0, 0.0, 0u64);
    for (query, prep) in queries.iter().zip(prepared) {
        let ranking = index.rank(prep, &params)?;
        search_ms += ranking.timings.total_ms - ranking.timings.encode_ms;
        total_ms.push(ranking.timings.total_ms);
        encode_ms += ranking.timings.encode_ms;
        bytes += ranking.io.bytes;
        let ranked: Vec<String> = ranking.hits.iter().map(|h| ids[h.id.0 as usize].clone()).collect();
        let refs: Vec<&str> = ranked.iter().map(String::as_str).collect();
        per_query.push(score_query(&refs, &qrels[&query.id]));
        run.push((query.id.clone(), ranked));
    }
    let n = queries.len().max(1) as f64;
    let (size_bytes, build_secs) =
        row_cost(index.config(), index.ivf_config().as_ref(), index.splade_config(), &params);
    Ok(RowResult {
        label: spec.label.clone(),
        params,
        metrics: mean(&per_query),
        mean_search_ms: search_ms / n,
        mean_encode_ms: encode_ms / n,
        mean_bytes_read: bytes as f64 / n,
        size_bytes,
        build_secs,
        run,
        total_ms,
    })
}

/// Bytes on disk and build seconds of what a search needs. Encoding is one pass that yields both
/// token and pooled vectors, so the dense and MaxSim rows both carry its full time.
/// The sparse stage's share is BM25's, SPLADE's (its files and its own encoding pass) or both.
pub fn row_cost(
    config: &IndexConfig,
    ivf: Option<&IvfConfig>,
    splade: Option<&SpladeConfig>,
    params: &SearchParams,
) -> (u64, f64) {
    let (bytes, secs) = bm25_row_cost(config, ivf, params);
    let b = &config.build;
    let lexical = matches!(params.mode, Mode::Bm25 | Mode::Rerank | Mode::Hybrid);
    match (splade, params.lexical) {
        (Some(s), Lexical::Splade) if lexical => {
            (bytes - b.bm25_bytes + s.terms_bytes + s.postings_bytes, secs - b.bm25_secs + s.total_secs)
        }
        (Some(s), Lexical::Both) if lexical => {
            (bytes + s.terms_bytes + s.postings_bytes, secs + s.total_secs)
        }
        _ => (bytes, secs),
    }
}

/// [`row_cost`] with BM25 as the sparse stage.
fn bm25_row_cost(config: &IndexConfig, ivf: Option<&IvfConfig>, params: &SearchParams) -> (u64, f64) {
    let b = &config.build;
    let encode = b.encode_secs + b.fit_secs + b.write_secs;
    let (ivf_bytes, ivf_secs) = ivf.map_or((0, 0.0), |i| {
        let r = &i.build;
        (r.centroids_bytes + r.postings_bytes + r.vectors_bytes, r.total_secs)
    });
    let joins_ivf = params.ivf.is_some_and(|p| p.hybrid_candidates > 0);
    match params.mode {
        Mode::Bm25 => (b.bm25_bytes, b.bm25_secs),
        Mode::DenseExact => (b.pooled_bytes, encode),
        Mode::Ivf => (ivf_bytes, encode + ivf_secs),
        Mode::Dense => (ivf_bytes + b.vectors_bytes, encode + ivf_secs),
        Mode::Hybrid if joins_ivf => {
            (b.bm25_bytes + b.vectors_bytes + ivf_bytes, encode + b.bm25_secs + ivf_secs)
        }
        Mode::Rerank | Mode::Hybrid => (b.bm25_bytes + b.vectors_bytes, encode + b.bm25_secs),
    }
}

/// Per-query metrics of a whole set, for tuning.
pub fn score_all(rankings: &[(String, Vec<String>)], qrels: &Qrels) -> Metrics {
    let per_query: Vec<QueryMetrics> = rankings
        .iter()
        .map(|(qid, ranked)| {
            let refs: Vec<&str> = ranked.iter().map(String::as_str).collect();
            score_query(&refs, &qrels[qid])
        })
        .collect();
    mean(&per_query)
}

/// Writes a row's rankings as a TREC run file (`qid Q0 docid rank score tag`); the score is
/// derived from the rank, so tools that re-sort by score keep our order exactly.
pub fn write_run(path: &Path, row: &RowResult, tag: &str) -> Result<()> {
    let mut out = String::new();
    for (qid, ranked) in &row.run {
        for (rank, doc) in ranked.iter().enumerate() {
            let _ = writeln!(out, "{qid} Q0 {doc} {} {} {tag}", rank + 1, ranked.len() - rank);
        }
    }
    let mut file = std::fs::File::create(path).at(path)?;
    file.write_all(out.as_bytes()).at(path)
}

/// The evaluation table in Markdown.
pub fn table(rows: &[RowResult]) -> String {
    let mut out = String::from(
        "| system | nDCG@10 | MRR@10 | R@100 | S@5 | index size on disk | build time | search ms/query | KiB read/query |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let m = &r.metrics;
        let _ = writeln!(
            out,
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} MiB | {:.1} s | {:.2} | {:.0} |",
            r.label,
            m.ndcg_at_10,
            m.mrr_at_10,
            m.recall_at_100,
            m.success_at_5,
            r.size_bytes as f64 / (1 << 20) as f64,
            r.build_secs,
            r.mean_search_ms,
            r.mean_bytes_read / 1024.0
        );
    }
    out
}
