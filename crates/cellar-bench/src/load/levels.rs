//! One configuration's sweep over the offered levels against a running server: each level
//! (`sweep::run_level`), the server's read counters and RSS around it, a line on stderr, the stop
//! at saturation or when the server dies, and, with qrels, the quality of what it answered.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{self, Target};
use super::metrics::{sum_labelled, sum_metric};
use super::quality::{self, ServedAnswers};
use super::report::{ConfigResult, LevelRecord, Status, STAGES_REPORTED};
use super::server_proc::ServerProc;
use super::sweep::{self, LevelPlan, LevelStats, RequestCycle};
use super::Bench;
use crate::harness::child::{proc_cpu_seconds, proc_read_bytes};

/// The server's side of one configuration: where it listens, its pid when known, and the
/// process when this command started it.
pub struct Server<'a> {
    pub target: &'a Target,
    pub pid: Option<u32>,
    pub proc: Option<&'a mut ServerProc>,
}

/// The sweep over offered levels against one server, filling `result.levels` (and
/// `result.quality` when qrels were given).
pub fn run_sweep(bench: &Bench, mut server: Server, cycle: &mut RequestCycle, result: &mut ConfigResult) {
    let answers =
        bench.queries.qrels.as_ref().map(|_| Arc::new(ServedAnswers::new(bench.queries.queries.len())));
    let mut before = Counters::read(bench, &server);
    if before.metrics.is_none() {
        result.notes.push("GET /metrics did not answer 200: no server-side read bytes or RSS".into());
    }
    for (i, &qps) in bench.args.qps.iter().enumerate() {
        let plan = level_plan(bench, i, qps);
        let raw = bench.rt.block_on(sweep::run_level(
            server.target.addr,
            cycle,
            &plan,
            Instant::now(),
            answers.as_ref(),
        ));
        let stats = LevelStats::from_raw(&raw, &plan);
        let after = Counters::read(bench, &server);
        log_level(&result.spec.name, &stats);
        result.levels.push(level_record(stats, &before, &after, &server));
        before = after;
        if stop_after_level(bench, &mut server, result, qps) {
            break;
        }
    }
    result.saturation_qps = result.levels.iter().map(|l| l.stats.achieved_qps).reduce(f64::max);
    if let (Some(answers), Some(qrels)) = (&answers, &bench.queries.qrels) {
        result.quality = Some(quality::score(answers, &bench.queries.queries, qrels));
    }
}

fn level_plan(bench: &Bench, i: usize, qps: f64) -> LevelPlan {
    let args = bench.args;
    LevelPlan {
        qps,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        drain: Duration::from_secs_f64(args.drain),
        timeout: Duration::from_secs_f64(args.timeout),
        max_in_flight: args.max_in_flight,
        // The same schedules for every configuration.
        seed: args.seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    }
}

/// Whether the sweep ends after this level: the server died (the configuration failed), or the
/// level saturated it and `--stop-at-saturation` holds.
fn stop_after_level(bench: &Bench, server: &mut Server, result: &mut ConfigResult, qps: f64) -> bool {
    let name = &result.spec.name;
    if let Some(why) = server.proc.as_deref_mut().and_then(ServerProc::exited) {
        eprintln!("cellar-bench load: {name}: cellar serve {why}");
        result.status = Status::Failed;
        result.reason = Some(format!("cellar serve {why}"));
        return true;
    }
    let saturated = result.levels.last().is_some_and(|l| l.saturated);
    if saturated && bench.args.stop_at_saturation {
        eprintln!("cellar-bench load: {name}: saturated at {qps} qps offered; the sweep stops here");
        return true;
    }
    false
}

/// The server's counters at one moment: its /metrics page, `/proc/PID/io` read bytes and
/// `/proc/PID/stat` CPU seconds.
struct Counters {
    metrics: Option<String>,
    io: Option<u64>,
    cpu_s: Option<f64>,
    at: std::time::Instant,
}

impl Counters {
    fn read(bench: &Bench, server: &Server) -> Self {
        let page = bench.rt.block_on(client::get(server.target, "/metrics", Duration::from_secs(5)));
        let metrics = page.ok().filter(|r| r.status == 200).map(|r| r.text());
        let (io, cpu_s) = (server.pid.and_then(proc_read_bytes), server.pid.and_then(proc_cpu_seconds));
        Counters { metrics, io, cpu_s, at: std::time::Instant::now() }
    }

    fn metric(&self, name: &str) -> Option<f64> {
        sum_metric(self.metrics.as_deref()?, name)
    }

    /// (sum in seconds, count) of one stage's histogram.
    fn stage(&self, stage: &str) -> Option<(f64, f64)> {
        let (text, label) = (self.metrics.as_deref()?, format!("stage=\"{stage}\""));
        let sum = sum_labelled(text, "cellar_stage_seconds_sum", &label)?;
        Some((sum, sum_labelled(text, "cellar_stage_seconds_count", &label)?))
    }
}

/// The server's mean time per search in each stage over the level (from its histograms), in ms.
fn stage_means(before: &Counters, after: &Counters) -> BTreeMap<String, f64> {
    let mut means = BTreeMap::new();
    for stage in STAGES_REPORTED {
        if let Some(((s0, n0), (s1, n1))) = before.stage(stage).zip(after.stage(stage)) {
            if n1 > n0 {
                means.insert(stage.to_string(), (s1 - s0) / (n1 - n0) * 1e3);
            }
        }
    }
    means
}

/// A level's record: the client's figures, and the server's read bytes per 200 answer (from
/// its counter and from /proc) and memory at the end of the level.
fn level_record(stats: LevelStats, before: &Counters, after: &Counters, server: &Server) -> LevelRecord {
    let per_query = |delta: f64| (stats.ok_whole_level > 0).then(|| delta / stats.ok_whole_level as f64);
    let counter = "cellar_read_bytes_total";
    let server_bytes = before.metric(counter).zip(after.metric(counter)).and_then(|(a, b)| per_query(b - a));
    let proc_bytes = before.io.zip(after.io).and_then(|(a, b)| per_query(b.saturating_sub(a) as f64));
    let wall_s = after.at.duration_since(before.at).as_secs_f64();
    let cpu_cores = before.cpu_s.zip(after.cpu_s).map(|(a, b)| (b - a) / wall_s.max(1e-9));
    let delta = |name: &str| before.metric(name).zip(after.metric(name)).map(|(a, b)| b - a);
    let hot_cache_hit_rate = delta("cellar_hot_cache_hits_total")
        .zip(delta("cellar_hot_cache_misses_total"))
        .and_then(|(hits, misses)| (hits + misses > 0.0).then(|| hits / (hits + misses)));
    LevelRecord {
        server_cpu_cores: cpu_cores,
        stage_ms: stage_means(before, after),
        server_read_bytes_per_query: server_bytes,
        proc_read_bytes_per_query: proc_bytes,
        server_rss_bytes: after.metric("cellar_process_rss_bytes").map(|v| v as u64),
        cgroup_usage_bytes: server.proc.as_deref().and_then(ServerProc::cgroup_usage_now),
        hot_cache_hit_rate,
        saturated: stats.saturated(),
        stats,
    }
}

fn log_level(name: &str, stats: &LevelStats) {
    let lat = stats.latency.as_ref();
    let ms = |f: fn(&crate::harness::stats::LatencySummary) -> f64| {
        lat.map_or("-".into(), |l| format!("{:.1}", f(l)))
    };
    eprintln!(
        "cellar-bench load: {name} {} qps: achieved {:.1}, P50 {} P95 {} P99 {} ms, ok {}/{} sent, 429 {}, errors {}, \
         timeouts {}, dropped {}{}",
        stats.offered_qps,
        stats.achieved_qps,
        ms(|l| l.p50_ms),
        ms(|l| l.p95_ms),
        ms(|l| l.p99_ms),
        stats.completed_ok,
        stats.sent,
        stats.http_429,
        stats.errors.values().sum::<u64>(),
        stats.timeouts + stats.cut_at_drain,
        stats.client_dropped,
        if stats.saturated() { " (saturated)" } else { "" }
    );
}
