//! Recall of the IVF against the exact pooled scan, over nprobe, with and without rescoring.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Instant;

use cellar_core::stats::ms_since;
use cellar_core::{DocId, Result};
use cellar_search::ivf::ProbeParams;
use clap::Args;
use serde::Serialize;

use super::common::{mean, p95, parse_list, write_outputs, QueryArgs};

#[derive(Args)]
pub struct RecallArgs {
    #[command(flatten)]
    pub queries: QueryArgs,
    /// Clusters probed, comma-separated (values above the cluster count are dropped).
    #[arg(long, default_value = "1,2,4,6,8,12,16,24,32,48,64")]
    pub nprobe: String,
    /// Shortlist sizes as multiples of the depth (100), comma-separated; rescored rows only (the
    /// codes-only ranking does not depend on it).
    #[arg(long, default_value = "1,2,4")]
    pub oversample: String,
}

#[derive(Serialize)]
struct Row {
    nprobe: usize,
    clusters: usize,
    rescore: bool,
    oversample: f32,
    recall_at_10: f64,
    recall_at_100: f64,
    mean_ms: f64,
    p95_ms: f64,
    codes_per_query: f64,
    rescored_per_query: f64,
    kib_read_per_query: f64,
}

const DEPTH: usize = 100;

fn overlap(a: &[DocId], b: &[DocId], n: usize) -> f64 {
    let truth: HashSet<&DocId> = a.iter().take(n).collect();
    let n = truth.len().max(1);
    b.iter().take(n).filter(|id| truth.contains(id)).count() as f64 / n as f64
}

pub fn run(args: RecallArgs) -> Result<()> {
    let w = args.queries.load()?;
    let ivf = w.index.ivf()?;
    let clusters = ivf.clusters();
    let mut nprobes = parse_list::<usize>(&args.nprobe, "nprobe", |n| n >= 1)?;
    nprobes.retain(|n| *n <= clusters);
    if !nprobes.contains(&clusters) {
        nprobes.push(clusters);
    }
    let pooled = w.index.pooled()?;
    let exact: Vec<Vec<DocId>> =
        w.prepared.iter().map(|p| pooled.search(&p.pooled, DEPTH).iter().map(|s| s.id).collect()).collect();
    let oversamples = parse_list::<f32>(&args.oversample, "oversample", |o| (1.0..=100.0).contains(&o))?;
    let mut variants = vec![(false, 1.0)];
    variants.extend(oversamples.iter().map(|o| (true, *o)));
    let mut rows = Vec::new();
    for &nprobe in &nprobes {
        for &(rescore, oversample) in &variants {
            let params = ProbeParams { nprobe, depth: DEPTH, oversample, rescore };
            let (mut r10, mut r100, mut ms, mut codes, mut rescored, mut kib) =
                (vec![], vec![], vec![], vec![], vec![], vec![]);
            for (prep, truth) in w.prepared.iter().zip(&exact) {
                let start = Instant::now();
                let (hits, stats) = ivf.probe(&prep.pooled, params).finish()?;
                ms.push(ms_since(start));
                let got: Vec<DocId> = hits.iter().map(|s| s.id).collect();
                r10.push(overlap(truth, &got, 10));
                r100.push(overlap(truth, &got, DEPTH));
                codes.push(stats.codes as f64);
                rescored.push(stats.rescored as f64);
                kib.push(stats.bytes_read as f64 / 1024.0);
            }
            rows.push(Row {
                nprobe,
                clusters,
                rescore,
                oversample,
                recall_at_10: mean(&r10),
                recall_at_100: mean(&r100),
                mean_ms: mean(&ms),
                p95_ms: p95(&ms),
                codes_per_query: mean(&codes),
                rescored_per_query: mean(&rescored),
                kib_read_per_query: mean(&kib),
            });
        }
    }
    let setup = format!(
        "{}; IVF: {clusters} clusters, depth {DEPTH}; rescoring reads the full vectors of an oversampled shortlist \
         (`oversample` x {DEPTH}) pruned by the estimator's error bound; truth: the exact scan of the pooled vectors (top {DEPTH}).",
        args.queries.describe(&w)
    );
    write_outputs(&args.queries.out, &setup, &rows, &table(&rows))
}

fn table(rows: &[Row]) -> String {
    let mut md = String::from(
        "| nprobe | % of clusters | rescore (oversample) | recall@10 | recall@100 | mean ms | P95 ms | codes/query | rescored/query | KiB read/query |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {:.0}% | {} | {:.3} | {:.3} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} |",
            r.nprobe,
            100.0 * r.nprobe as f64 / r.clusters as f64,
            if r.rescore { format!("yes ({}x)", r.oversample) } else { "no".to_string() },
            r.recall_at_10,
            r.recall_at_100,
            r.mean_ms,
            r.p95_ms,
            r.codes_per_query,
            r.rescored_per_query,
            r.kib_read_per_query
        );
    }
    md
}
