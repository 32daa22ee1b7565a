//! `cellar-bench exact` (issue 17.4's quality check at scale): exact MaxSim over every document
//! of an index for a sample of judged queries, given as vectors (`--query-vectors`), against what
//! the served modes rank. One pass over the store scores every sampled query against each
//! record (the records read once, on every core); per query the exact top 100 is kept. Reports,
//! per mode: nDCG@10 and Recall@100 against the qrels, and the overlap with the exact ranking
//! (the share of the exact top 10 and top 100 the mode returns), next to the exact ranking's own
//! nDCG@10 and Recall@100 (MaxSim's ceiling on this collection).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Instant;

use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::kernels::Isa;
use cellar_core::stats::ms_since;
use cellar_core::store::VectorStore;
use cellar_core::{CellarError, DocId, Result};
use cellar_search::embeddings::read_in_order;
use cellar_search::metrics::score_query;
use cellar_search::names::VECTORS_DIR;
use cellar_search::request::VectorDtype;
use cellar_search::topk::TopK;
use cellar_search::{Mode, QueryVectorsIn, SearchRequest};
use serde::Serialize;

use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;
use crate::harness::stats::mean;
use crate::ivf::common::{QueryArgs, Workload};

/// Depth of the exact ranking and of the modes' answers.
pub(crate) const DEPTH: usize = 100;
/// Records read at once by each thread of the scan.
const SCAN_BATCH: usize = 2048;

#[derive(clap::Args)]
pub struct ExactArgs {
    /// The index, its collection, the queries' vectors (required here) and `--max-queries`, the
    /// sample (default 50).
    #[command(flatten)]
    pub queries: QueryArgs,
    /// Modes compared with the exact ranking, at their stored defaults.
    #[arg(long, value_delimiter = ',', default_value = "dense,rerank,hybrid")]
    pub modes: Vec<Mode>,
    /// A labelled request compared too, `NAME=JSON` (fields of a search request, e.g.
    /// `tokens-32={"mode":"dense","nprobe":32}`); repeatable. Its query, k (100) and vectors are
    /// the sample's.
    #[arg(long = "variant", value_name = "NAME=JSON")]
    pub variants: Vec<String>,
    /// Keep the exact rankings in this JSON file: read when it is there (for the same queries),
    /// written after the scan otherwise, so further variants skip the scan.
    #[arg(long)]
    pub exact_cache: Option<std::path::PathBuf>,
}

/// Judged queries in the sample when `--max-queries` is not given.
const DEFAULT_SAMPLE: usize = 50;

#[derive(Serialize)]
struct Row {
    system: String,
    ndcg_at_10: f64,
    recall_at_100: f64,
    /// Share of the exact top 10 (top 100) in the system's top 10 (top 100).
    exact_overlap_at_10: f64,
    exact_overlap_at_100: f64,
    /// Single-query latency over the sample, one search at a time (0 for the exact scan).
    p50_ms: f64,
    p95_ms: f64,
    /// Mean of the searches' first stage (`Timings::first_stage_ms`): what a change to a first
    /// stage moves, apart from the re-ranking's reads and MaxSim.
    first_stage_ms: f64,
    /// Mean bytes of token lists a search read (0 where the token stage did not run): what the
    /// stage costs a reader that goes to the disk.
    lists_kib: f64,
}

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    provenance: Provenance,
    documents: usize,
    queries: usize,
    scan_secs: f64,
    rows: Vec<Row>,
}

pub fn run(mut args: ExactArgs) -> Result<()> {
    let folder = args.queries.query_vectors.clone().ok_or_else(|| {
        CellarError::invalid("--query-vectors is required: the exact scan scores the queries' own vectors")
    })?;
    args.queries.max_queries.get_or_insert(DEFAULT_SAMPLE);
    let Workload { index, queries, qrels, ids, .. } = args.queries.load()?;
    let (_, given) = read_in_order(&folder, queries.iter().map(|q| q.id.as_str()))?;
    let store =
        VectorStore::open(&args.queries.index.join(VECTORS_DIR), &ReaderOptions::new(ReaderKind::Mmap))?;
    let started = Instant::now();
    let exact = match args.exact_cache.as_deref().filter(|p| p.exists()) {
        Some(path) => read_cache(path, queries.len())?,
        None => {
            let exact = scan(&store, &given)?;
            if let Some(path) = &args.exact_cache {
                let json = serde_json::to_vec(&exact).map_err(|e| CellarError::internal(e.to_string()))?;
                std::fs::write(path, json).map_err(|e| CellarError::io(path, e))?;
            }
            exact
        }
    };
    let scan_secs = started.elapsed().as_secs_f64();
    let mut rows =
        vec![row("exact MaxSim (every document)", &queries, &qrels, &exact, &exact, &ids, &[], &[], &[])];
    let mut asked: Vec<(String, SearchRequest)> = args
        .modes
        .iter()
        .map(|&mode| (format!("{mode} (served defaults)"), SearchRequest::new(String::new(), mode)))
        .collect();
    for variant in &args.variants {
        let (name, json) = variant
            .split_once('=')
            .ok_or_else(|| CellarError::invalid(format!("--variant {variant:?}: expected NAME=JSON")))?;
        let request: SearchRequest = serde_json::from_str(json)
            .map_err(|e| CellarError::invalid(format!("--variant {name}: not a search request: {e}")))?;
        asked.push((name.to_string(), request));
    }
    for (name, asked) in &asked {
        let (mut ms, mut stage) = (Vec::with_capacity(queries.len()), Vec::with_capacity(queries.len()));
        let mut kib = Vec::with_capacity(queries.len());
        let answers: Vec<Vec<u32>> = queries
            .iter()
            .zip(&given)
            .map(|(q, (tokens, pooled))| {
                let mut request = asked.clone();
                request.query = q.text.clone();
                request.k = Some(DEPTH);
                request.include_text = Some(false);
                request.query_vectors = Some(QueryVectorsIn::compact(tokens, Some(pooled), VectorDtype::F32));
                let start = Instant::now();
                let response = index.search(request)?;
                ms.push(ms_since(start));
                stage.push(response.timings.first_stage_ms);
                kib.push(response.tokens.map_or(0.0, |t| t.bytes_read as f64 / 1024.0));
                Ok(response.hits.iter().map(|h| h.internal_id).collect())
            })
            .collect::<Result<_>>()?;
        rows.push(row(name, &queries, &qrels, &answers, &exact, &ids, &ms, &stage, &kib));
    }
    let report = Report {
        provenance: Provenance::now(),
        documents: store.len(),
        queries: queries.len(),
        scan_secs,
        rows,
    };
    let markdown = markdown(&report);
    write_report(&args.queries.out, &report, &markdown)?;
    print!("{markdown}");
    Ok(())
}

/// The exact rankings kept by `--exact-cache`, for a sample of `queries` queries.
pub(crate) fn read_cache(path: &std::path::Path, queries: usize) -> Result<Vec<Vec<u32>>> {
    let bytes = std::fs::read(path).map_err(|e| CellarError::io(path, e))?;
    let cached: Vec<Vec<u32>> = serde_json::from_slice(&bytes)
        .map_err(|e| CellarError::invalid(format!("{}: not an exact cache: {e}", path.display())))?;
    if cached.len() != queries {
        return Err(CellarError::invalid(format!(
            "{} holds {} queries' rankings, the sample has {queries}",
            path.display(),
            cached.len()
        )));
    }
    Ok(cached)
}

/// The exact top `DEPTH` of every query over every record of `store`, on every core (also the
/// reference of `cellar-bench plaid`).
pub(crate) fn scan(store: &VectorStore, queries: &[(Vec<f32>, Vec<f32>)]) -> Result<Vec<Vec<u32>>> {
    let codec = store.codec();
    let isa = Isa::detected();
    let prepared: Vec<Vec<f32>> = queries.iter().map(|(tokens, _)| codec.prepare_query(tokens)).collect();
    let docs = store.len() as u32;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let per = docs.div_ceil(threads).max(1);
    let bar = cellar_search::progress::bar(docs as u64, "exact MaxSim");
    let parts: Vec<Result<Vec<TopK>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..docs)
            .step_by(per as usize)
            .map(|from| {
                let (prepared, bar) = (&prepared, &bar);
                scope.spawn(move || -> Result<Vec<TopK>> {
                    let mut best: Vec<TopK> = prepared.iter().map(|_| TopK::new(DEPTH)).collect();
                    let end = (from + per).min(docs);
                    for first in (from..end).step_by(SCAN_BATCH) {
                        let batch_ids: Vec<DocId> =
                            (first..(first + SCAN_BATCH as u32).min(end)).map(DocId).collect();
                        let batch = store.read_batch(&batch_ids)?;
                        for (i, id) in batch_ids.iter().enumerate() {
                            let record = batch.record(i);
                            for (q, best) in prepared.iter().zip(best.iter_mut()) {
                                best.push(*id, record.score(codec.as_ref(), isa, q));
                            }
                        }
                        bar.inc(batch_ids.len() as u64);
                    }
                    Ok(best)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a scan thread panicked")).collect()
    });
    bar.finish_and_clear();
    let mut merged: Vec<TopK> = queries.iter().map(|_| TopK::new(DEPTH)).collect();
    for part in parts {
        for (best, kept) in merged.iter_mut().zip(part?) {
            kept.into_sorted().into_iter().for_each(|s| best.push(s.id, s.score));
        }
    }
    Ok(merged.into_iter().map(|best| best.into_sorted().into_iter().map(|s| s.id.0).collect()).collect())
}

#[allow(clippy::too_many_arguments)]
fn row(
    system: &str,
    queries: &[cellar_search::corpus::Query],
    qrels: &cellar_search::corpus::Qrels,
    answers: &[Vec<u32>],
    exact: &[Vec<u32>],
    ids: &[String],
    ms: &[f64],
    stage: &[f64],
    kib: &[f64],
) -> Row {
    let mut sorted = ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |p: f64| {
        sorted.get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0)
    };
    let n = queries.len() as f64;
    let (mut ndcg, mut recall, mut at10, mut at100) = (0.0, 0.0, 0.0, 0.0);
    for ((q, answer), exact) in queries.iter().zip(answers).zip(exact) {
        let named: Vec<&str> = answer.iter().map(|&i| ids[i as usize].as_str()).collect();
        let m = score_query(&named, &qrels[&q.id]);
        ndcg += m.ndcg_at_10;
        recall += m.recall_at_100;
        let overlap = |depth: usize| {
            let want: HashSet<u32> = exact.iter().take(depth).copied().collect();
            answer.iter().take(depth).filter(|i| want.contains(i)).count() as f64 / want.len().max(1) as f64
        };
        at10 += overlap(10);
        at100 += overlap(DEPTH);
    }
    Row {
        system: system.to_string(),
        ndcg_at_10: ndcg / n,
        recall_at_100: recall / n,
        exact_overlap_at_10: at10 / n,
        exact_overlap_at_100: at100 / n,
        p50_ms: at(0.5),
        p95_ms: at(0.95),
        first_stage_ms: mean(stage).unwrap_or(0.0),
        lists_kib: mean(kib).unwrap_or(0.0),
    }
}

fn markdown(r: &Report) -> String {
    let mut s = String::from("# Served rankings against exact MaxSim over the whole collection\n\n");
    s.push_str(&r.provenance.markdown());
    let _ = writeln!(
        s,
        "\n{} judged queries given as vectors; exact MaxSim over all {} documents (the index's own codec, one \
         pass over the store on every core) took {:.0} s.\n",
        r.queries, r.documents, r.scan_secs
    );
    s.push_str(
        "| system | nDCG@10 | Recall@100 | exact top-10 found | exact top-100 found | P50 ms | P95 ms | first stage ms (mean) | lists KiB read (mean) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in &r.rows {
        let _ = writeln!(
            s,
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {:.1} | {:.1} | {:.0} |",
            row.system,
            row.ndcg_at_10,
            row.recall_at_100,
            row.exact_overlap_at_10,
            row.exact_overlap_at_100,
            row.p50_ms,
            row.p95_ms,
            row.first_stage_ms,
            row.lists_kib
        );
    }
    s.push_str(
        "\nLatency: one search at a time on this machine, k = 100, every other setting as the row says.\n",
    );
    s
}
