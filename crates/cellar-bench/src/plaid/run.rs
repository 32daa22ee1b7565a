//! `cellar-bench plaid search`: one system opened alone in this process, measured against the
//! reference of `plaid exact`: quality at depth `exact::DEPTH`, single-query latency, and P95
//! against offered QPS in an open-loop sweep.
//!
//! The sweep: per rate, `round(rate × window)` requests (at most `--max-requests`) are due at
//! Poisson times (`load::schedule::send_offsets`); `--workers` threads take them in order, wait
//! for each one's due time and serve it; a request's latency runs from its due time to its
//! answer, so time spent queued counts. Requests not started `--grace-secs` after the window
//! are not served and count as infinitely slow: a P95 is reported only while at most 5% of a
//! rate's requests were left, otherwise the rate is marked saturated.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cellar_core::stats::{as_ms, ms_since};
use cellar_core::{CellarError, IoContext, Result};
use cellar_search::embeddings::read_in_order;
use cellar_search::metrics::score_query;
use serde::Serialize;

use super::systems::{self, System};
use super::{cpu_secs, dir_bytes, peak_rss_bytes, Reference};
use crate::exact::DEPTH;
use crate::harness::stats::{mean, percentile, percentile_of};
use crate::ivf::common::parse_list;
use crate::load::schedule::send_offsets;

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum SystemName {
    Cellar,
    NextPlaid,
}

#[derive(clap::Args)]
pub struct SearchArgs {
    #[arg(long, value_enum)]
    pub system: SystemName,
    /// The Cellar index (searched by `cellar`; its vectors' dimension for next-plaid's queries).
    #[arg(long)]
    pub index: PathBuf,
    /// next-plaid's index (`plaid build`).
    #[arg(long)]
    pub plaid: Option<PathBuf>,
    /// Cellar's reader (its peak RSS counts the store's pages it maps with mmap, not what the
    /// direct reader reads into its buffers).
    #[arg(long, default_value = "mmap")]
    pub reader: cellar_core::io::ReaderKind,
    /// Direct reader only: emulated SSD latency per read call, µs (32 reads in flight).
    #[arg(long)]
    pub inject_latency_us: Option<u64>,
    /// The queries' vectors (the folder `plaid exact` read).
    #[arg(long)]
    pub query_vectors: PathBuf,
    /// The reference written by `plaid exact`.
    #[arg(long)]
    pub reference: PathBuf,
    /// Rounds of the single-query latency pass over every query (one search at a time).
    #[arg(long, default_value_t = 2)]
    pub latency_rounds: usize,
    /// Offered rates of the open-loop sweep, queries per second (comma-separated).
    #[arg(long, default_value = "5,10,20")]
    pub rates: String,
    /// Seconds of arrivals per rate.
    #[arg(long, default_value_t = 10.0)]
    pub window_secs: f64,
    /// Most requests per rate.
    #[arg(long, default_value_t = 300)]
    pub max_requests: usize,
    /// Seconds after a rate's window past which queued requests are dropped (counted as
    /// unanswered).
    #[arg(long, default_value_t = 5.0)]
    pub grace_secs: f64,
    /// Threads serving the sweep's requests.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Where the figures go (JSON).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Serialize)]
struct Quality {
    exact_top10_found: f64,
    exact_top100_found: f64,
    ndcg_at_10: f64,
    /// nDCG@10 of the exact ranking itself (the same for both systems: MaxSim's ceiling).
    exact_ndcg_at_10: f64,
}

#[derive(Serialize)]
struct Latency {
    searches: usize,
    p50_ms: Option<f64>,
    p95_ms: Option<f64>,
    mean_ms: Option<f64>,
}

#[derive(Serialize)]
struct SweepRow {
    offered_qps: f64,
    requests: usize,
    answered: usize,
    /// Answered requests over the time from the first due time to the last answer.
    achieved_qps: f64,
    p50_ms: Option<f64>,
    /// `None` when more than 5% of the requests were left unanswered (saturated).
    p95_ms: Option<f64>,
    saturated: bool,
}

#[derive(Serialize)]
struct SearchReport {
    system: &'static str,
    params: serde_json::Value,
    documents: usize,
    queries: usize,
    depth: usize,
    open_secs: f64,
    /// Bytes of every file of the system's index (Cellar's: store, first stages, BM25, texts).
    index_bytes: u64,
    quality: Quality,
    single_query: Latency,
    sweep_workers: usize,
    sweep_window_secs: f64,
    sweep: Vec<SweepRow>,
    /// Peak RSS of this process (VmHWM): the system opened, every measurement above run.
    peak_rss_bytes: Option<u64>,
    cpu_user_secs: f64,
    cpu_sys_secs: f64,
}

pub fn search(args: SearchArgs) -> Result<()> {
    let rates = parse_list::<f64>(&args.rates, "rates", |r| r > 0.0 && r.is_finite())?;
    if args.workers == 0 || args.latency_rounds == 0 {
        return Err(CellarError::invalid("--workers and --latency-rounds must be at least 1"));
    }
    let reference = Reference::read(&args.reference)?;
    let (dim, given) = read_in_order(&args.query_vectors, reference.query_ids.iter().map(String::as_str))?;
    let n = given.len();
    let opened = Instant::now();
    // Each system keeps one copy of the queries' vectors (its own form), so the harness weighs
    // the same in both peak RSS figures.
    let (system, name): (Box<dyn System>, _) = match args.system {
        SystemName::Cellar => {
            let texts = reference.query_ids.iter().map(|id| format!("query {id}")).collect();
            let options = crate::ivf::common::open_options(args.reader, args.inject_latency_us);
            (Box::new(systems::Cellar::open(&args.index, options, texts, given)?), "cellar dense")
        }
        SystemName::NextPlaid => {
            let dir = args.plaid.as_ref().ok_or_else(|| CellarError::invalid("--plaid is required"))?;
            let system = systems::open_plaid(dir, &given, dim)?;
            drop(given);
            (system, "next-plaid")
        }
    };
    let open_secs = opened.elapsed().as_secs_f64();
    let index_bytes = dir_bytes(
        args.plaid.as_ref().filter(|_| args.system == SystemName::NextPlaid).unwrap_or(&args.index),
    )?;
    eprintln!("{name}: opened in {open_secs:.2} s; {n} queries");

    // Quality (this pass also warms what the system keeps in RAM or the page cache).
    let answers: Vec<Vec<u32>> = (0..n).map(|q| system.search(q, DEPTH)).collect::<Result<_>>()?;
    let quality = quality(&reference, &answers);

    let mut single = Vec::with_capacity(n * args.latency_rounds);
    for _ in 0..args.latency_rounds {
        for q in 0..n {
            let start = Instant::now();
            system.search(q, DEPTH)?;
            single.push(ms_since(start));
        }
    }
    let single_query = Latency {
        searches: single.len(),
        p50_ms: percentile_of(&single, 50.0),
        p95_ms: percentile_of(&single, 95.0),
        mean_ms: mean(&single),
    };
    eprintln!("{name}: single-query P50 {:?} ms, P95 {:?} ms", single_query.p50_ms, single_query.p95_ms);

    let mut sweep = Vec::new();
    for (i, &rate) in rates.iter().enumerate() {
        let row = sweep_rate(system.as_ref(), n, rate, &args, args.seed + i as u64)?;
        eprintln!(
            "{name}: {rate} QPS offered: {}/{} answered, P95 {:?} ms{}",
            row.answered,
            row.requests,
            row.p95_ms,
            if row.saturated { " (saturated)" } else { "" }
        );
        let saturated = row.saturated;
        sweep.push(row);
        if saturated {
            break; // higher rates only queue more
        }
    }
    let (cpu_user_secs, cpu_sys_secs) = cpu_secs();
    let report = SearchReport {
        system: name,
        params: system.params(),
        documents: reference.documents,
        queries: n,
        depth: DEPTH,
        open_secs,
        index_bytes,
        quality,
        single_query,
        sweep_workers: args.workers,
        sweep_window_secs: args.window_secs,
        sweep,
        peak_rss_bytes: peak_rss_bytes(),
        cpu_user_secs,
        cpu_sys_secs,
    };
    let json = serde_json::to_vec_pretty(&report).expect("plain values");
    std::fs::write(&args.out, &json).at(&args.out)?;
    println!("{}", String::from_utf8_lossy(&json));
    Ok(())
}

fn quality(reference: &Reference, answers: &[Vec<u32>]) -> Quality {
    let n = answers.len().max(1) as f64;
    let overlap = |answer: &[u32], exact: &[u32], depth: usize| {
        let want: HashSet<u32> = exact.iter().take(depth).copied().collect();
        answer.iter().take(depth).filter(|i| want.contains(i)).count() as f64 / want.len().max(1) as f64
    };
    let ndcg = |answer: &[u32], judged| {
        let named: Vec<String> = answer.iter().map(u32::to_string).collect();
        let named: Vec<&str> = named.iter().map(String::as_str).collect();
        score_query(&named, judged).ndcg_at_10
    };
    let (mut at10, mut at100, mut nd, mut exact_nd) = (0.0, 0.0, 0.0, 0.0);
    for ((answer, exact), judged) in answers.iter().zip(&reference.exact).zip(&reference.judged) {
        at10 += overlap(answer, exact, 10);
        at100 += overlap(answer, exact, DEPTH);
        nd += ndcg(answer, judged);
        exact_nd += ndcg(exact, judged);
    }
    Quality {
        exact_top10_found: at10 / n,
        exact_top100_found: at100 / n,
        ndcg_at_10: nd / n,
        exact_ndcg_at_10: exact_nd / n,
    }
}

fn sweep_rate(
    system: &dyn System,
    queries: usize,
    rate: f64,
    args: &SearchArgs,
    seed: u64,
) -> Result<SweepRow> {
    let window = Duration::from_secs_f64(args.window_secs);
    let mut due = send_offsets(rate, window, seed);
    due.truncate(args.max_requests.max(1));
    let last_start = due.last().copied().unwrap_or_default() + Duration::from_secs_f64(args.grace_secs);
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(f64, Duration)>> = Mutex::new(Vec::new());
    let start = Instant::now();
    let outcome: Vec<Result<()>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..args.workers)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&at) = due.get(i) else { return Ok(()) };
                        let now = start.elapsed();
                        if now > last_start {
                            return Ok(());
                        }
                        if now < at {
                            std::thread::sleep(at - now);
                        }
                        system.search(i % queries, DEPTH)?;
                        let answered = start.elapsed();
                        let ms = as_ms(answered - at);
                        done.lock().expect("no panic holds it").push((ms, answered));
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a sweep worker panicked")).collect()
    });
    outcome.into_iter().collect::<Result<Vec<()>>>()?;
    let done = done.into_inner().expect("no panic holds it");
    let requests = due.len();
    let mut latencies: Vec<f64> = done.iter().map(|(ms, _)| *ms).collect();
    latencies.resize(requests, f64::INFINITY);
    latencies.sort_by(f64::total_cmp);
    let finite = |v: Option<f64>| v.filter(|x| x.is_finite());
    let p95 = finite(percentile(&latencies, 95.0));
    let span = done.iter().map(|(_, at)| *at).max().unwrap_or_default().saturating_sub(due[0]);
    Ok(SweepRow {
        offered_qps: rate,
        requests,
        answered: done.len(),
        achieved_qps: done.len() as f64 / span.as_secs_f64().max(1e-9),
        p50_ms: finite(percentile(&latencies, 50.0)),
        p95_ms: p95,
        saturated: p95.is_none(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Overlaps count the exact ids found within the same depth, and nDCG@10 reads the
    /// judgments keyed by internal id (a judged document absent from the index still counts in
    /// the ideal ranking).
    #[test]
    fn quality_against_the_exact_ranking_and_internal_judgments() {
        let exact: Vec<u32> = (0..100).collect();
        let reference = Reference {
            index: PathBuf::from("i"),
            documents: 1000,
            query_ids: vec!["q".into()],
            exact: vec![exact.clone()],
            judged: vec![[("0".to_string(), 1), ("missing:x".to_string(), 1)].into_iter().collect()],
            scan_secs: 0.0,
        };
        // Half of the exact top 10 in the top 10; 55 of the top 100 within 100.
        let mut answer: Vec<u32> = (0..5).chain(500..505).collect();
        answer.extend(5..55);
        answer.extend(600..640);
        let q = quality(&reference, &[answer]);
        assert_eq!(q.exact_top10_found, 0.5);
        assert_eq!(q.exact_top100_found, 0.55);
        // Document 0 at rank 1 of 2 relevant: DCG 1, ideal 1 + 1/log2(3).
        let ideal = 1.0 + 1.0 / 3f64.log2();
        assert!((q.ndcg_at_10 - 1.0 / ideal).abs() < 1e-9);
        assert!((q.exact_ndcg_at_10 - 1.0 / ideal).abs() < 1e-9);
    }
}
