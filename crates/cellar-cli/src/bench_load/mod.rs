//! `cellar bench`: an open-loop load generator for `cellar serve`. Requests leave on a seeded
//! Poisson schedule at each offered rate whether or not earlier ones returned; per level it
//! records latency percentiles (from the scheduled send time), achieved throughput, errors, 429s
//! and timeouts, with the warm-up excluded. Each configuration is a server this command starts
//! itself (optionally inside a cgroup-v1 memory cap that counts page cache, with its peak RSS,
//! the cgroup's peak and disk bytes read per query), or one already running (`--url`, loopback
//! only). With `--qrels`, it also scores what each server answered (nDCG@10, Recall@10). Writes
//! PREFIX.json, PREFIX.md and PREFIX.png (P95 against offered QPS).

mod client;
mod config;
mod metrics;
mod plot;
mod quality;
mod report;
mod schedule;
mod server_proc;
mod stats;
mod sweep;
#[cfg(test)]
mod testserver;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cellar_core::io::cache;
use cellar_core::{CellarError, Result};
use cellar_search::corpus::{read_qrels, read_queries, Qrels, Query};
use cellar_search::{Index, Mode, OpenOptions};
use tokio::runtime::Runtime;

use crate::cgroup::MemoryCgroup;
use client::Target;
use config::{ConfigSpec, Vectors};
use quality::ServedAnswers;
use report::{ConfigResult, LevelRecord, Report, Settings, Status};
use server_proc::{proc_read_bytes, vm_hwm_bytes, ServerProc, ServerSpec};
use sweep::{LevelPlan, LevelStats, RequestCycle};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// A server to start and load, as comma-separated key=value: name=NAME, index=DIR,
    /// reader=ram|mmap|direct (default mmap), cap=PCT (memory cap, % of the index size on disk;
    /// omitted: uncapped), threads=N (intra-op threads, default 1), ssd_latency_us=US (direct
    /// reader only), vectors=server|client (client: the bench encodes the queries and sends
    /// query_vectors; the server starts with --lazy-encoder and never loads the model),
    /// workers=N and queue=N (the server's --workers and --queue). Repeat for several
    /// configurations.
    #[arg(long = "config", value_name = "SPEC")]
    pub configs: Vec<String>,
    /// Load a server that is already running instead (http://127.0.0.1:PORT, localhost or [::1]).
    #[arg(long, conflicts_with = "configs")]
    pub url: Option<String>,
    /// Name of the --url configuration.
    #[arg(long, requires = "url")]
    pub name: Option<String>,
    /// With --url: the server's process id, for its peak RSS and /proc/PID/io reads.
    #[arg(long, requires = "url")]
    pub pid: Option<u32>,
    /// With --url: server (default) or client (needs --index, whose model encodes the queries).
    #[arg(long, requires = "url")]
    pub vectors: Option<String>,
    /// With --url and --vectors client: the index whose encoder turns queries into vectors.
    #[arg(long, requires = "url")]
    pub index: Option<PathBuf>,
    /// BEIR queries.jsonl ({"_id", "text"} per line).
    #[arg(long)]
    pub queries: PathBuf,
    /// Keep only the queries judged in this qrels TSV, and score the answers each server
    /// returned against it (nDCG@10 and Recall@10 of the first 200 answer per query).
    #[arg(long)]
    pub qrels: Option<PathBuf>,
    /// Offered loads to sweep, in queries per second.
    #[arg(long, value_delimiter = ',', default_value = "5,10,20,40,80")]
    pub qps: Vec<f64>,
    /// Measured seconds per level.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds sent before each level's measured window, excluded from its statistics.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Longest wait, in seconds, for a level's stragglers after its last send time.
    #[arg(long, default_value_t = 10.0)]
    pub drain: f64,
    /// Per-request limit in seconds (from the scheduled send time); past it: a timeout.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Requests in flight above which a due request is dropped by the client (counted).
    #[arg(long, default_value_t = 2000)]
    pub max_in_flight: usize,
    /// Stop a configuration's sweep after the first level where achieved < 0.8 x offered or more
    /// than 5% of requests failed (errors, 429, timeouts, client drops).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub stop_at_saturation: bool,
    /// Search mode of every request: bm25, dense, rerank or hybrid.
    #[arg(long, default_value = "hybrid")]
    pub mode: String,
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// Sent only when given (otherwise the server's default).
    #[arg(long)]
    pub rerank_k: Option<usize>,
    /// Sent only when given (otherwise the server's default).
    #[arg(long)]
    pub alpha: Option<f32>,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Output path prefix: writes PREFIX.json, PREFIX.md and PREFIX.png.
    #[arg(long, default_value = "bench/results/bench-load")]
    pub out: PathBuf,
    /// Configuration the P95 ratios are taken against (default: the first).
    #[arg(long)]
    pub baseline: Option<String>,
    /// Seconds to wait for a started server's GET /healthz.
    #[arg(long, default_value_t = 120)]
    pub health_timeout: u64,
    /// Evict the index's pages from the page cache before each server starts (so every
    /// configuration starts cold, and a capped server's page cache is charged to its cgroup).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub evict_cache: bool,
}

fn invalid(msg: impl Into<String>) -> CellarError {
    CellarError::InvalidInput(msg.into())
}

fn validate(args: &BenchArgs) -> Result<()> {
    if args.qps.is_empty() {
        return Err(invalid("--qps: give at least one level"));
    }
    for &q in &args.qps {
        if !(q > 0.0 && q <= 100_000.0) {
            return Err(invalid(format!("--qps {q}: each level must be > 0 and at most 100000")));
        }
    }
    let seconds = [
        ("--duration", args.duration, false),
        ("--warmup", args.warmup, true),
        ("--drain", args.drain, true),
        ("--timeout", args.timeout, false),
    ];
    for (flag, v, zero_ok) in seconds {
        if !(v.is_finite() && v <= 3600.0 && (v > 0.0 || (zero_ok && v == 0.0))) {
            let need = if zero_ok { ">= 0" } else { "> 0" };
            return Err(invalid(format!("{flag} {v}: seconds must be {need} and at most 3600")));
        }
    }
    if args.max_in_flight == 0 {
        return Err(invalid("--max-in-flight must be at least 1"));
    }
    if args.k == 0 {
        return Err(invalid("-k must be at least 1"));
    }
    if !Mode::ALL.iter().any(|m| m.name() == args.mode) {
        return Err(invalid(format!("--mode {:?}: expected bm25, dense, rerank or hybrid", args.mode)));
    }
    if args.rerank_k == Some(0) {
        return Err(invalid("--rerank-k must be at least 1"));
    }
    if let Some(a) = args.alpha.filter(|a| !(0.0..=1.0).contains(a)) {
        return Err(invalid(format!("--alpha {a}: must be within [0, 1]")));
    }
    if !args.queries.is_file() {
        return Err(invalid(format!("--queries {}: no such file", args.queries.display())));
    }
    if let Some(q) = args.qrels.as_ref().filter(|q| !q.is_file()) {
        return Err(invalid(format!("--qrels {}: no such file", q.display())));
    }
    Ok(())
}

/// The configurations to run: every `--config`, or the one `--url` server.
fn configurations(args: &BenchArgs) -> Result<Vec<ConfigSpec>> {
    let configs = if let Some(url) = &args.url {
        client::parse_loopback_url(url)?;
        let vectors: Vectors = args.vectors.as_deref().unwrap_or("server").parse()?;
        if vectors == Vectors::Client {
            let index = args.index.as_ref().ok_or_else(|| invalid("--vectors client needs --index DIR"))?;
            if !index.join("index.json").is_file() {
                return Err(invalid(format!("--index {}: not an index (no index.json)", index.display())));
            }
        }
        vec![ConfigSpec {
            name: args.name.clone().unwrap_or_else(|| "server".into()),
            index: args.index.clone(),
            reader: None,
            cap_pct: None,
            threads: 1,
            ssd_latency_us: None,
            workers: None,
            queue: None,
            vectors,
            url: Some(url.clone()),
        }]
    } else {
        if args.configs.is_empty() {
            return Err(invalid("give one or more --config SPEC, or --url URL of a running server"));
        }
        args.configs.iter().map(|s| config::parse(s)).collect::<Result<Vec<_>>>()?
    };
    for (i, c) in configs.iter().enumerate() {
        if configs[..i].iter().any(|o| o.name == c.name) {
            return Err(invalid(format!("two configurations are named {:?}", c.name)));
        }
    }
    if let Some(b) = args.baseline.as_ref().filter(|b| !configs.iter().any(|c| &&c.name == b)) {
        return Err(invalid(format!("--baseline {b:?} names no configuration")));
    }
    Ok(configs)
}

/// The queries in file order; with `--qrels`, only the judged ones, and the judgments.
fn load_queries(args: &BenchArgs) -> Result<(Vec<Query>, Option<Qrels>)> {
    let mut queries = read_queries(&args.queries)?;
    let qrels = args.qrels.as_deref().map(read_qrels).transpose()?;
    if let Some(judged) = &qrels {
        queries.retain(|q| judged.contains_key(&q.id));
    }
    if queries.is_empty() {
        return Err(invalid(format!("no queries to send from {}", args.queries.display())));
    }
    Ok((queries, qrels))
}

/// The queries (in the order the requests are built) and their judgments, for served quality.
type Judged<'a> = Option<(&'a [Query], &'a Qrels)>;

/// Query vectors as the server takes them: one row per token, and the pooled vector.
type QueryVectors = (Vec<Vec<f32>>, Vec<f32>);

/// Encodes every query once with the index's model (vectors=client).
fn encode_queries(index_dir: &Path, queries: &[Query]) -> Result<Vec<QueryVectors>> {
    eprintln!("bench: encoding {} queries with the model of {}", queries.len(), index_dir.display());
    let index = Index::open(index_dir, OpenOptions::default())?;
    let encoder = index.encoder()?;
    queries
        .iter()
        .map(|q| {
            let e = encoder.encode_query(&q.text)?;
            let dim = e.tokens.len() / e.n_tokens.max(1);
            Ok((e.tokens.chunks(dim.max(1)).map(<[f32]>::to_vec).collect(), e.pooled))
        })
        .collect()
}

/// The JSON body of one search request.
fn search_body(args: &BenchArgs, text: &str, vectors: Option<&QueryVectors>) -> Vec<u8> {
    let mut body = serde_json::json!({
        "query": text,
        "k": args.k,
        "mode": args.mode,
        "include_text": false,
    });
    if let Some(r) = args.rerank_k {
        body["rerank_k"] = r.into();
    }
    if let Some(a) = args.alpha {
        body["alpha"] = f64::from(a).into();
    }
    if let Some((tokens, pooled)) = vectors {
        body["query_vectors"] = serde_json::json!({ "tokens": tokens, "pooled": pooled });
    }
    serde_json::to_vec(&body).expect("a JSON value serialises")
}

/// Complete HTTP requests for one server, in query order.
fn http_requests(bodies: &[Vec<u8>], target: &Target) -> Vec<Arc<[u8]>> {
    bodies
        .iter()
        .map(|b| Arc::from(client::build_request("POST", "/v1/search", &target.host_header, Some(b))))
        .collect()
}

fn evict_dir(dir: &Path) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| CellarError::Io { path: dir.to_path_buf(), source: e })?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            evict_dir(&path)?;
        } else if path.is_file() {
            cache::evict_file(&path)?;
        }
    }
    Ok(())
}

fn scrape(rt: &Runtime, target: &Target) -> Option<String> {
    let r = rt.block_on(client::get(target, "/metrics", Duration::from_secs(5))).ok()?;
    (r.status == 200).then(|| r.text())
}

fn metric(text: &Option<String>, name: &str) -> Option<f64> {
    metrics::sum_metric(text.as_deref()?, name)
}

/// The sweep over offered levels against one server, filling `result.levels` (and
/// `result.quality` with qrels).
#[allow(clippy::too_many_arguments)]
fn run_sweep(
    rt: &Runtime,
    args: &BenchArgs,
    target: &Target,
    pid: Option<u32>,
    mut server: Option<&mut ServerProc>,
    cycle: &mut RequestCycle,
    judged: Judged,
    result: &mut ConfigResult,
) {
    let name = result.spec.name.clone();
    let answers = judged.map(|(queries, _)| Arc::new(ServedAnswers::new(queries.len())));
    let mut metrics_before = scrape(rt, target);
    if metrics_before.is_none() {
        result.notes.push("GET /metrics did not answer 200: no server-side read bytes or RSS".into());
    }
    let mut io_before = pid.and_then(proc_read_bytes);
    for (i, &qps) in args.qps.iter().enumerate() {
        let plan = LevelPlan {
            qps,
            warmup: Duration::from_secs_f64(args.warmup),
            duration: Duration::from_secs_f64(args.duration),
            drain: Duration::from_secs_f64(args.drain),
            timeout: Duration::from_secs_f64(args.timeout),
            max_in_flight: args.max_in_flight,
            // The same schedules for every configuration.
            seed: args.seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        };
        let raw = rt.block_on(sweep::run_level(target.addr, cycle, &plan, Instant::now(), answers.as_ref()));
        let stats = LevelStats::from_raw(&raw, &plan);
        let metrics_after = scrape(rt, target);
        let io_after = pid.and_then(proc_read_bytes);
        let per_query = |delta: f64| (stats.ok_whole_level > 0).then(|| delta / stats.ok_whole_level as f64);
        let server_bytes = match (
            metric(&metrics_before, "cellar_read_bytes_total"),
            metric(&metrics_after, "cellar_read_bytes_total"),
        ) {
            (Some(a), Some(b)) => per_query(b - a),
            _ => None,
        };
        let proc_bytes = match (io_before, io_after) {
            (Some(a), Some(b)) => per_query(b.saturating_sub(a) as f64),
            _ => None,
        };
        let saturated = stats.saturated();
        let lat = stats.latency.as_ref();
        eprintln!(
            "bench: {name} {qps} qps: achieved {:.1}, P50 {} P95 {} P99 {} ms, ok {}/{} sent, 429 {}, errors {}, \
             timeouts {}, dropped {}{}",
            stats.achieved_qps,
            lat.map_or("-".into(), |l| format!("{:.1}", l.p50_ms)),
            lat.map_or("-".into(), |l| format!("{:.1}", l.p95_ms)),
            lat.map_or("-".into(), |l| format!("{:.1}", l.p99_ms)),
            stats.completed_ok,
            stats.sent,
            stats.http_429,
            stats.errors.values().sum::<u64>(),
            stats.timeouts + stats.cut_at_drain,
            stats.client_dropped,
            if saturated { " (saturated)" } else { "" }
        );
        result.levels.push(LevelRecord {
            server_read_bytes_per_query: server_bytes,
            proc_read_bytes_per_query: proc_bytes,
            server_rss_bytes: metric(&metrics_after, "cellar_process_rss_bytes").map(|v| v as u64),
            cgroup_usage_bytes: server.as_deref().and_then(ServerProc::cgroup_usage_now),
            saturated,
            stats,
        });
        metrics_before = metrics_after;
        io_before = io_after;
        if let Some(why) = server.as_deref_mut().and_then(ServerProc::exited) {
            eprintln!("bench: {name}: cellar serve {why}");
            result.status = Status::Failed;
            result.reason = Some(format!("cellar serve {why}"));
            break;
        }
        if saturated && args.stop_at_saturation {
            eprintln!("bench: {name}: saturated at {qps} qps offered; the sweep stops here");
            break;
        }
    }
    result.saturation_qps = result.levels.iter().map(|l| l.stats.achieved_qps).reduce(f64::max);
    if let (Some(answers), Some((queries, qrels))) = (&answers, judged) {
        result.quality = Some(quality::score(answers, queries, qrels));
    }
}

/// One configuration whose server this command starts and stops.
fn run_spawned(
    rt: &Runtime,
    args: &BenchArgs,
    spec: ConfigSpec,
    bodies: &[Vec<u8>],
    n: usize,
    judged: Judged,
) -> ConfigResult {
    let mut result = ConfigResult::new(spec);
    let spec = result.spec.clone();
    let name = &spec.name;
    let index = spec.index.clone().expect("a spawned configuration has an index");
    let reader = spec.reader.clone().unwrap_or_else(|| "mmap".into());
    let index_bytes = cellar_search::disk::dir_bytes(&index);
    result.index_bytes = Some(index_bytes);
    let mut cgroup = None;
    if let Some(pct) = spec.cap_pct {
        let cap = ((index_bytes as f64 * pct / 100.0) as u64).max(1 << 20);
        result.cap_bytes = Some(cap);
        match MemoryCgroup::create(&format!("cellar-bench-load-{}-{n}", std::process::id()), cap) {
            Ok(cg) => {
                result.capped = true;
                cgroup = Some(cg);
            }
            Err(e) if reader == "direct" => {
                let note = format!(
                    "memory cap NOT applied: cgroups unavailable ({e}); the direct reader (O_DIRECT) \
                     bypasses the page cache, so it runs uncapped"
                );
                eprintln!("bench: {name}: WARNING: {note}");
                result.notes.push(note);
            }
            Err(e) => {
                let why = format!(
                    "a memory cap needs a cgroup-v1 memory controller, which is unavailable here ({e}); \
                     without one only the direct reader can run a capped configuration"
                );
                eprintln!("bench: {name}: SKIPPED: {why}");
                result.status = Status::Skipped;
                result.reason = Some(why);
                return result;
            }
        }
    }
    if args.evict_cache {
        if let Err(e) = evict_dir(&index) {
            result.notes.push(format!("could not evict the index from the page cache: {e}"));
        }
    }
    let log = std::env::temp_dir().join(format!("cellar-bench-{}-{n}.server.log", std::process::id()));
    let server_spec = ServerSpec {
        index: &index,
        reader: &reader,
        intra_op_threads: spec.threads,
        inject_latency_us: spec.ssd_latency_us,
        workers: spec.workers,
        queue: spec.queue,
        lazy_encoder: spec.vectors == Vectors::Client || args.mode == Mode::Bm25.name(),
        log: log.clone(),
    };
    let mut server = match ServerProc::start(&server_spec, cgroup) {
        Ok(s) => s,
        Err(e) => {
            result.status = Status::Failed;
            result.reason = Some(e.to_string());
            eprintln!("bench: {name}: FAILED: {e}");
            return result;
        }
    };
    result.server_args = server.args.clone();
    eprintln!("bench: {name}: started cellar serve (pid {}) on {}", server.pid(), server.target.url());
    match server.wait_healthy(rt, Duration::from_secs(args.health_timeout)) {
        Ok(h) => result.healthz = Some(h),
        Err(e) => {
            eprintln!("bench: {name}: FAILED: {e}");
            let stopped = server.stop();
            result.peak_rss_bytes = stopped.peak_rss_bytes;
            result.cgroup_max_usage_bytes = stopped.cgroup.map(|u| u.peak_bytes);
            result.cgroup_failcnt = stopped.cgroup.map(|u| u.fail_count);
            result.status = Status::Failed;
            result.reason = Some(e.to_string());
            result.notes.push(format!("the server's output is kept in {}", log.display()));
            return result;
        }
    }
    let target = server.target.clone();
    let mut cycle = RequestCycle::new(http_requests(bodies, &target), args.seed);
    let pid = server.pid();
    run_sweep(rt, args, &target, Some(pid), Some(&mut server), &mut cycle, judged, &mut result);
    let stopped = server.stop();
    result.peak_rss_bytes = stopped.peak_rss_bytes;
    result.cgroup_max_usage_bytes = stopped.cgroup.map(|u| u.peak_bytes);
    result.cgroup_failcnt = stopped.cgroup.map(|u| u.fail_count);
    if let (Status::Completed, Some(why)) = (result.status, stopped.died) {
        result.status = Status::Failed;
        result.reason = Some(format!("cellar serve {why}"));
    }
    if result.status == Status::Completed {
        let _ = std::fs::remove_file(&log);
    } else {
        result.notes.push(format!("the server's output is kept in {}", log.display()));
    }
    result
}

/// The one configuration of `--url`: a server someone else started.
fn run_attached(
    rt: &Runtime,
    args: &BenchArgs,
    spec: ConfigSpec,
    bodies: &[Vec<u8>],
    judged: Judged,
) -> Result<ConfigResult> {
    let url = spec.url.clone().expect("an attached configuration has a url");
    let target = client::parse_loopback_url(&url)?;
    let health = rt
        .block_on(client::get(&target, "/healthz", Duration::from_secs(10)))
        .map_err(|e| CellarError::Unsupported(format!("GET {url}/healthz: {e}")))?;
    if health.status != 200 {
        return Err(CellarError::Unsupported(format!("GET {url}/healthz answered {}", health.status)));
    }
    let mut result = ConfigResult::new(spec);
    result.healthz = serde_json::from_slice(&health.body).ok();
    if let Some(index) = &result.spec.index {
        result.index_bytes = Some(cellar_search::disk::dir_bytes(index));
    }
    if args.pid.is_none() {
        result.notes.push("no --pid: no peak RSS or /proc/PID/io reads for this server".into());
    }
    let mut cycle = RequestCycle::new(http_requests(bodies, &target), args.seed);
    run_sweep(rt, args, &target, args.pid, None, &mut cycle, judged, &mut result);
    result.peak_rss_bytes = args.pid.and_then(vm_hwm_bytes);
    Ok(result)
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c)) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

pub fn run(args: BenchArgs) -> Result<()> {
    validate(&args)?;
    let configs = configurations(&args)?;
    let (queries, qrels) = load_queries(&args)?;
    let judged = qrels.as_ref().map(|q| (queries.as_slice(), q));
    let baseline = args.baseline.clone().unwrap_or_else(|| configs[0].name.clone());

    // Request bodies per (index, vectors): encoded once, shared by configurations.
    let mut bodies: HashMap<(Option<PathBuf>, Vectors), Vec<Vec<u8>>> = HashMap::new();
    let needs_vectors = args.mode != Mode::Bm25.name();
    for c in &configs {
        let vectors = if needs_vectors { c.vectors } else { Vectors::Server };
        let key = (if vectors == Vectors::Client { c.index.clone() } else { None }, vectors);
        if bodies.contains_key(&key) {
            continue;
        }
        let encoded = match &key.0 {
            Some(dir) => Some(encode_queries(dir, &queries)?),
            None => None,
        };
        let list = queries
            .iter()
            .enumerate()
            .map(|(i, q)| search_body(&args, &q.text, encoded.as_ref().map(|e| &e[i])))
            .collect();
        bodies.insert(key, list);
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| CellarError::Unsupported(format!("cannot start the tokio runtime: {e}")))?;
    let mut results = Vec::new();
    for (n, spec) in configs.into_iter().enumerate() {
        let vectors = if needs_vectors { spec.vectors } else { Vectors::Server };
        let key = (if vectors == Vectors::Client { spec.index.clone() } else { None }, vectors);
        let list = &bodies[&key];
        let result = if spec.url.is_some() {
            run_attached(&rt, &args, spec, list, judged)?
        } else {
            run_spawned(&rt, &args, spec, list, n, judged)
        };
        results.push(result);
    }

    let report = Report {
        command_line: std::env::args().map(|a| shell_quote(&a)).collect::<Vec<_>>().join(" "),
        date_utc: utc_now(),
        git_commit: crate::bench_store::git_commit(),
        cpu_model: crate::bench_store::cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        client: "this process: a tokio runtime with 1 worker thread, one TCP connection per request \
                 (Connection: close); it shares the machine's cores with the server"
            .into(),
        settings: Settings {
            queries: args.queries.clone(),
            qrels: args.qrels.clone(),
            n_queries: queries.len(),
            qps: args.qps.clone(),
            warmup_s: args.warmup,
            duration_s: args.duration,
            drain_s: args.drain,
            timeout_s: args.timeout,
            max_in_flight: args.max_in_flight,
            stop_at_saturation: args.stop_at_saturation,
            mode: args.mode.clone(),
            k: args.k,
            rerank_k: args.rerank_k,
            alpha: args.alpha,
            seed: args.seed,
            evict_cache: args.evict_cache,
        },
        baseline,
        configurations: results,
    };
    let (json, md) = report.write(&args.out)?;
    print!("{}", report.to_markdown());
    eprintln!("bench: wrote {} and {}", json.display(), md.display());
    let png = report::with_suffix(&args.out, ".png");
    plot::draw(&json, &png)?;
    eprintln!("bench: wrote {}", png.display());
    for c in report.configurations.iter().filter(|c| c.status == Status::Failed) {
        eprintln!("bench: WARNING: {} failed: {}", c.spec.name, c.reason.as_deref().unwrap_or("?"));
    }
    let skipped: Vec<&str> = report
        .configurations
        .iter()
        .filter(|c| c.status == Status::Skipped)
        .map(|c| c.spec.name.as_str())
        .collect();
    if !skipped.is_empty() {
        return Err(CellarError::Unsupported(format!(
            "configuration(s) {} were skipped (see {}): their memory cap cannot be applied here",
            skipped.join(", "),
            md.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        let d = utc_now();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("--qps=5,10"), "--qps=5,10");
        assert_eq!(shell_quote("name=a b"), "'name=a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
