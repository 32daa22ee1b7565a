//! The prefetcher against its step: after `step x nprobe` clusters, the current best `rerank_k`
//! candidates' records are read while the probe goes on. Hit rate, bytes prefetched and wasted,
//! the time the query waited for records after the probe, and the search time, next to the same
//! searches without prefetching (ESPN's figure 7).

use std::fmt::Write as _;

use cellar_core::Result;
use cellar_search::metrics::score_query;
use cellar_search::{Mode, SearchRequest};
use clap::Args;
use serde::Serialize;

use super::common::{mean, p95, parse_list, write_outputs, QueryArgs, Workload};

#[derive(Args)]
pub struct PrefetchArgs {
    #[command(flatten)]
    pub queries: QueryArgs,
    /// dense (IVF → MaxSim) or hybrid (BM25 + IVF candidates → fused MaxSim).
    #[arg(long, default_value = "dense")]
    pub mode: Mode,
    #[arg(long, default_value = "4,8,16,24")]
    pub nprobe: String,
    /// Prefetch steps as fractions of nprobe.
    #[arg(long, default_value = "0.05,0.1,0.2,0.3,0.5,1.0")]
    pub steps: String,
    #[arg(long, default_value_t = 64)]
    pub rerank_k: usize,
    /// First-stage depth (IVF depth for dense; BM25 depth for hybrid).
    #[arg(long, default_value_t = 200)]
    pub candidates: usize,
    /// Hybrid only: IVF candidates joined to BM25's.
    #[arg(long, default_value_t = 100)]
    pub hybrid_candidates: usize,
    /// Rescore the IVF shortlist with full vectors (default: the IVF's), true or false.
    #[arg(long)]
    pub rescore: Option<bool>,
}

#[derive(Serialize)]
struct Row {
    nprobe: usize,
    /// `None`: prefetching off.
    step: Option<f32>,
    after_clusters: f64,
    hit_rate: f64,
    kib_prefetched: f64,
    kib_wasted: f64,
    misses: f64,
    wait_ms_mean: f64,
    search_ms_mean: f64,
    search_ms_p95: f64,
    ndcg_at_10: f64,
}

pub fn run(args: PrefetchArgs) -> Result<()> {
    let w = args.queries.load()?;
    let clusters = w.index.ivf()?.clusters();
    let mut nprobes = parse_list::<usize>(&args.nprobe, "nprobe", |n| n >= 1)?;
    nprobes.retain(|n| *n <= clusters);
    let steps = parse_list::<f32>(&args.steps, "steps", |s| s > 0.0 && s <= 1.0)?;
    let mut rows = Vec::new();
    let variants: Vec<Option<f32>> = std::iter::once(None).chain(steps.iter().copied().map(Some)).collect();
    for &nprobe in &nprobes {
        rows.extend(measure(&args, &w, nprobe, &variants)?);
    }
    let setup = format!(
        "{}; mode {}, IVF {clusters} clusters, rescore {}, candidates {}, rerank_k {}{}; search time leaves out query encoding.",
        args.queries.describe(&w),
        args.mode,
        args.rescore.map_or("default".into(), |r| r.to_string()),
        args.candidates,
        args.rerank_k,
        if args.mode == Mode::Hybrid { format!(", {} IVF candidates joined", args.hybrid_candidates) } else { String::new() }
    );
    write_outputs(&args.queries.out, &setup, &rows, &table(&rows))
}

/// Runs every variant (no prefetch, then each step) on each query in turn, so drifts of the
/// machine (other work, the disk's cache) fall on all variants alike.
fn measure(args: &PrefetchArgs, w: &Workload, nprobe: usize, variants: &[Option<f32>]) -> Result<Vec<Row>> {
    let params = variants
        .iter()
        .map(|step| w.index.params(&options(args, nprobe, *step)))
        .collect::<Result<Vec<_>>>()?;
    let mut cols: Vec<[Vec<f64>; 8]> = variants.iter().map(|_| Default::default()).collect();
    for (query, prep) in w.queries.iter().zip(&w.prepared) {
        for (p, c) in params.iter().zip(cols.iter_mut()) {
            let ranking = w.index.rank(prep, p)?;
            let ranked: Vec<&str> = ranking.hits.iter().map(|h| w.ids[h.id.0 as usize].as_str()).collect();
            c[0].push(score_query(&ranked, &w.qrels[&query.id]).ndcg_at_10);
            c[1].push(ranking.timings.total_ms - ranking.timings.encode_ms);
            if let Some(p) = ranking.prefetch {
                c[2].push(p.after_clusters as f64);
                c[3].push(p.hit_rate);
                c[4].push(p.bytes_prefetched as f64 / 1024.0);
                c[5].push(p.bytes_wasted as f64 / 1024.0);
                c[6].push(p.misses_read as f64);
                c[7].push(p.wait_ms);
            }
        }
    }
    Ok(variants.iter().zip(&cols).map(|(step, c)| row(nprobe, *step, c)).collect())
}

fn options(args: &PrefetchArgs, nprobe: usize, step: Option<f32>) -> SearchRequest {
    SearchRequest {
        k: Some(10),
        mode: Some(args.mode),
        candidates: Some(args.candidates),
        rerank_k: Some(args.rerank_k),
        nprobe: Some(nprobe),
        prefetch: Some(step.is_some()),
        prefetch_step: step,
        rescore: args.rescore,
        hybrid_candidates: (args.mode == Mode::Hybrid).then_some(args.hybrid_candidates),
        ..SearchRequest::default()
    }
}

fn row(nprobe: usize, step: Option<f32>, cols: &[Vec<f64>; 8]) -> Row {
    Row {
        nprobe,
        step,
        after_clusters: mean(&cols[2]),
        hit_rate: mean(&cols[3]),
        kib_prefetched: mean(&cols[4]),
        kib_wasted: mean(&cols[5]),
        misses: mean(&cols[6]),
        wait_ms_mean: mean(&cols[7]),
        search_ms_mean: mean(&cols[1]),
        search_ms_p95: p95(&cols[1]),
        ndcg_at_10: mean(&cols[0]),
    }
}

fn table(rows: &[Row]) -> String {
    let mut md = String::from(
        "| nprobe | prefetch step | after clusters | hit rate | KiB prefetched | KiB wasted | misses read | wait ms | search ms (mean) | search ms (P95) | nDCG@10 |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let step = r.step.map_or("off".to_string(), |s| format!("{:.0}%", s * 100.0));
        let _ = writeln!(
            md,
            "| {} | {step} | {:.1} | {:.3} | {:.0} | {:.0} | {:.1} | {:.2} | {:.2} | {:.2} | {:.4} |",
            r.nprobe,
            r.after_clusters,
            r.hit_rate,
            r.kib_prefetched,
            r.kib_wasted,
            r.misses,
            r.wait_ms_mean,
            r.search_ms_mean,
            r.search_ms_p95,
            r.ndcg_at_10
        );
    }
    md
}
