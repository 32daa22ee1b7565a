//! `cellar-bench retrain`: what written documents from another distribution do to the IVF, and
//! what a retrain gives back. On two copies of a built index (with its IVF), one is written the
//! index's own collection again (same distribution) and the other a different collection (the
//! `--other` embeddings folder): the drift of each (`LiveStats::ivf_drift`) is what the threshold
//! of the automatic retrain (1.5) is set against. On the second copy, the recall@10 of the dense
//! mode at the IVF's default nprobe against a probe of every cluster, for queries that are the
//! written documents' own vectors and for the collection's queries, before and after
//! `Index::retrain_ivf`; the retrain's time, and the search latency beside it against idle.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use cellar_core::stats::ms_since;
use cellar_core::{IoContext, Result};
use cellar_search::embeddings::EmbeddingsDir;
use cellar_search::{DocIn, Index, Mode, OpenOptions, QueryVectorsIn, SearchRequest, WriteOp, WriteRequest};
use clap::Args;
use serde::Serialize;

use crate::filter::{encode_queries, BenchQuery};
use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;
use crate::harness::stats::{summarize, LatencySummary};
use crate::live::written_from;

#[derive(Args)]
pub struct RetrainArgs {
    /// A built index with an IVF (copied into --work; never written).
    #[arg(long)]
    pub index: PathBuf,
    /// The index's BEIR folder (its test queries).
    #[arg(long)]
    pub data: PathBuf,
    /// Embeddings of the index's own collection (`cellar-bench embeddings encode`).
    #[arg(long)]
    pub same: PathBuf,
    /// Embeddings of another collection, written to move the distribution.
    #[arg(long)]
    pub other: PathBuf,
    #[arg(long, default_value = "bench/work/retrain")]
    pub work: PathBuf,
    #[arg(long, default_value = "bench/results/ivf-retrain")]
    pub out: PathBuf,
    /// Documents written from each folder (at most its size).
    #[arg(long, default_value_t = 1000)]
    pub docs: usize,
    /// Queries per recall measurement.
    #[arg(long, default_value_t = 200)]
    pub queries: usize,
}

#[derive(Serialize)]
struct Recall {
    queries: String,
    when: String,
    clusters: usize,
    nprobe: usize,
    recall_at_10: f64,
}

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    provenance: Provenance,
    base_docs: usize,
    written_same: usize,
    drift_same: Option<f64>,
    written_other: usize,
    drift_other: Option<f64>,
    retrain_advised: bool,
    retrain_secs: f64,
    drift_after: Option<f64>,
    recall: Vec<Recall>,
    search_idle: Option<LatencySummary>,
    search_during_retrain: Option<LatencySummary>,
}

pub fn run(args: RetrainArgs) -> Result<()> {
    let provenance = Provenance::now();
    let same = copy(&args.index, &args.work.join("same"))?;
    let written_same = write_from(&same, &args.same, args.docs, "same")?;
    let drift_same = same.live_stats().ivf_drift;
    drop(same);
    let index = copy(&args.index, &args.work.join("other"))?;
    let base_docs = index.len();
    let written_other = write_from(&index, &args.other, args.docs, "other")?;
    let stats = index.live_stats();
    println!(
        "drift: {:?} with {written_same} documents like the build's, {:?} with {written_other} from {}",
        drift_same,
        stats.ivf_drift,
        args.other.display()
    );
    let own = own_queries(&args.other, args.queries)?;
    let collection = encode_queries(&args.data, &args.work, args.queries)?;
    let mut recall = Vec::new();
    measure(&index, &own, "the written documents' own vectors", "before", &mut recall)?;
    measure(&index, &collection, "the collection's queries", "before", &mut recall)?;

    let idle = latencies(&index, &collection, &AtomicBool::new(false), 2)?;
    let stop = AtomicBool::new(false);
    let (retrain_secs, during) = std::thread::scope(|scope| -> Result<(f64, Vec<f64>)> {
        let searcher = scope.spawn(|| latencies(&index, &collection, &stop, usize::MAX));
        let start = Instant::now();
        let retrained = index.retrain_ivf();
        let secs = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::SeqCst);
        let during = searcher.join().expect("the searching thread")?;
        retrained?;
        Ok((secs, during))
    })?;
    println!("retrained in {retrain_secs:.2} s");
    measure(&index, &own, "the written documents' own vectors", "after", &mut recall)?;
    measure(&index, &collection, "the collection's queries", "after", &mut recall)?;
    // New documents like the ones written: the drift against the retrained IVF.
    let drift_after = index.live_stats().ivf_drift;
    let report = Report {
        provenance,
        base_docs,
        written_same,
        drift_same,
        written_other,
        drift_other: stats.ivf_drift,
        retrain_advised: stats.ivf_retrain_advised,
        retrain_secs,
        drift_after,
        recall,
        search_idle: summarize(&idle),
        search_during_retrain: summarize(&during),
    };
    let (json, md) = write_report(&args.out, &report, &markdown(&report, &args))?;
    println!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

/// A fresh copy of the index at `to`, opened.
fn copy(from: &Path, to: &Path) -> Result<Index> {
    let _ = std::fs::remove_dir_all(to);
    copy_dir(from, to)?;
    Index::open(to, OpenOptions::default())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).at(to)?;
    for entry in std::fs::read_dir(from).at(from)?.flatten() {
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if source.is_dir() {
            copy_dir(&source, &target)?;
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(&source, &target).at(&source)?;
        }
    }
    Ok(())
}

/// Writes the first `n` documents of `folder` under new ids, from their vectors, in batches.
fn write_from(index: &Index, folder: &Path, n: usize, tag: &str) -> Result<usize> {
    let vectors = EmbeddingsDir::open(folder)?;
    let dim = vectors.dim();
    let mut written = 0;
    let mut batch = Vec::new();
    for doc in vectors.docs()?.take(n) {
        let doc = written_from(doc?, dim);
        batch.push(WriteOp::Add(DocIn { id: format!("{tag}-{}", doc.id), ..doc }));
        if batch.len() == 64 {
            written += batch.len();
            index.write(WriteRequest { ops: std::mem::take(&mut batch) })?;
        }
    }
    if !batch.is_empty() {
        written += batch.len();
        index.write(WriteRequest { ops: batch })?;
    }
    Ok(written)
}

/// Queries made of written documents' own vectors: every `step`-th of the folder's first ones.
fn own_queries(folder: &Path, n: usize) -> Result<Vec<BenchQuery>> {
    let vectors = EmbeddingsDir::open(folder)?;
    let dim = vectors.dim();
    let step = (vectors.len() / n.max(1)).max(1);
    let queries = vectors
        .docs()?
        .step_by(step)
        .take(n)
        .map(|doc| {
            let doc = doc?;
            let tokens: Vec<Vec<f32>> = doc.tokens.chunks(dim).take(32).map(<[f32]>::to_vec).collect();
            let pooled = doc.pooled.unwrap_or_else(|| tokens[0].clone());
            Ok(BenchQuery {
                text: String::new(),
                vectors: QueryVectorsIn { tokens, pooled: Some(pooled), ..QueryVectorsIn::default() },
            })
        })
        .collect();
    queries
}

fn dense(index: &Index, query: &BenchQuery, nprobe: Option<usize>) -> Result<Vec<String>> {
    let request = SearchRequest {
        query: query.text.clone(),
        k: Some(10),
        mode: Some(Mode::Dense),
        nprobe,
        include_text: Some(false),
        query_vectors: Some(query.vectors.clone()),
        ..SearchRequest::default()
    };
    Ok(index.search(request)?.hits.into_iter().map(|h| h.id).collect())
}

/// Recall@10 of the default nprobe against every cluster probed.
fn measure(
    index: &Index,
    queries: &[BenchQuery],
    what: &str,
    when: &str,
    out: &mut Vec<Recall>,
) -> Result<()> {
    let ivf = index.ivf_config().expect("the benchmark's index has an IVF");
    let (mut found, mut total) = (0usize, 0usize);
    for q in queries {
        let truth = dense(index, q, Some(ivf.clusters))?;
        let got = dense(index, q, None)?;
        found += got.iter().filter(|id| truth.contains(id)).count();
        total += truth.len();
    }
    let row = Recall {
        queries: what.to_string(),
        when: when.to_string(),
        clusters: ivf.clusters,
        nprobe: ivf.search.nprobe,
        recall_at_10: found as f64 / total.max(1) as f64,
    };
    println!(
        "{what}, {when}: recall@10 {:.3} at nprobe {} of {}",
        row.recall_at_10, row.nprobe, row.clusters
    );
    out.push(row);
    Ok(())
}

/// Dense searches of `queries` one after another (at least `min_rounds` passes, then until
/// `stop`), each one's milliseconds.
fn latencies(
    index: &Index,
    queries: &[BenchQuery],
    stop: &AtomicBool,
    max_rounds: usize,
) -> Result<Vec<f64>> {
    let mut ms = Vec::new();
    for _ in 0..max_rounds {
        for q in queries {
            let start = Instant::now();
            dense(index, q, None)?;
            ms.push(ms_since(start));
            if stop.load(Ordering::SeqCst) {
                return Ok(ms);
            }
        }
    }
    Ok(ms)
}

fn markdown(r: &Report, args: &RetrainArgs) -> String {
    let drift = |d: Option<f64>| d.map_or("-".to_string(), |d| format!("{d:.3}"));
    let mut md = format!(
        "# IVF drift and retrain\n\n{}\n\
         A copy of `{}` ({} documents) written {} documents of its own collection again (`{}`), \
         and another copy {} documents of another collection (`{}`), from their vectors.\n\n\
         | written | drift (mean squared distance to the nearest centroid / the build's) |\n|---|---|\n\
         | {} of the same collection | {} |\n| {} of another collection | {} |\n\n\
         Retrain advised (drift > 1.5): {}. `Index::retrain_ivf` on the second copy: {:.2} s \
         (writes wait, searches go on). Drift of the written documents against the retrained IVF: {} \
         (none written since: `-`).\n\n\
         Recall@10 of the dense mode at the IVF's default nprobe against a probe of every cluster:\n\n\
         | queries | when | clusters | nprobe | recall@10 |\n|---|---|---|---|---|\n",
        r.provenance.markdown(),
        args.index.display(),
        r.base_docs,
        r.written_same,
        args.same.display(),
        r.written_other,
        args.other.display(),
        r.written_same,
        drift(r.drift_same),
        r.written_other,
        drift(r.drift_other),
        r.retrain_advised,
        r.retrain_secs,
        drift(r.drift_after),
    );
    for row in &r.recall {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {:.3} |\n",
            row.queries, row.when, row.clusters, row.nprobe, row.recall_at_10
        ));
    }
    let p = |s: &Option<LatencySummary>| {
        s.as_ref().map_or("-".to_string(), |s| format!("{:.1} ms (P50 {:.1})", s.p95_ms, s.p50_ms))
    };
    md.push_str(&format!(
        "\nDense search P95, one query at a time in this process: idle {}, during the retrain {}.\n",
        p(&r.search_idle),
        p(&r.search_during_retrain)
    ));
    md
}
