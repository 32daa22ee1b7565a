//! A configuration whose server this command starts and stops: the memory cap (a memory cgroup,
//! or a skip/note where cgroups are missing), a cold page cache, `cellar serve` on a free port,
//! the sweep, and what the server showed when it stopped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cellar_core::io::cache;
use cellar_core::{CellarError, Result};
use cellar_search::Mode;

use super::client::send;
use super::config::ConfigSpec;
use super::levels::{run_sweep, Server};
use super::queries::http_requests;
use super::report::{ConfigResult, Status};
use super::server_proc::{ServerProc, ServerSpec, Stopped};
use super::sweep::RequestCycle;
use super::Bench;
use crate::harness::cgroup::MemoryCgroup;

/// Runs configuration number `n` (numbers its cgroup and log file).
pub fn run(bench: &Bench, spec: ConfigSpec, bodies: &[Vec<u8>], n: usize) -> ConfigResult {
    let mut result = ConfigResult::new(spec);
    let spec = result.spec.clone();
    let index = spec.index.clone().expect("a spawned configuration has an index");
    let reader = spec.reader.clone().unwrap_or_else(|| "mmap".into());
    result.index_bytes = Some(cellar_search::disk::dir_bytes(&index));
    if spec.cap_over_footprint {
        match fixed_footprint(bench, &spec, &index, &reader, bodies, n) {
            Ok(measured) => {
                result.footprint_bytes = Some(measured.steady);
                result.footprint_peak_bytes = measured.peak;
            }
            Err(e) => return skipped(result, format!("could not measure the server's fixed footprint: {e}")),
        }
    }
    let cgroup = match memory_cap(&spec, &reader, n, &mut result) {
        Ok(cgroup) => cgroup,
        Err(why) => return skipped(result, why),
    };
    if bench.args.evict_cache {
        if let Err(e) = evict_dir(&index) {
            result.notes.push(format!("could not evict the index from the page cache: {e}"));
        }
    }
    let log = std::env::temp_dir().join(format!("cellar-bench-{}-{n}.server.log", std::process::id()));
    let server_spec = server_spec(bench, &spec, &index, &reader, log.clone());
    let Some(mut server) = start_healthy(bench, &server_spec, cgroup, &mut result) else { return result };
    let target = server.target.clone();
    let mut cycle = RequestCycle::for_args(http_requests(bodies, &target), bench.args);
    let pid = Some(server.pid());
    run_sweep(bench, Server { target: &target, pid, proc: Some(&mut server) }, &mut cycle, &mut result);
    record_stop(&mut result, server.stop());
    keep_log_on_failure(&mut result, &log);
    result
}

/// The cgroup that caps the server (`None`: no cap asked, or cgroups are missing and the
/// direct reader runs uncapped with a note), or why the configuration cannot run here.
fn memory_cap(
    spec: &ConfigSpec,
    reader: &str,
    n: usize,
    result: &mut ConfigResult,
) -> std::result::Result<Option<MemoryCgroup>, String> {
    let (Some(pct), Some(index_bytes)) = (spec.cap_pct, result.index_bytes) else { return Ok(None) };
    let share = (index_bytes as f64 * pct / 100.0) as u64;
    let cap = (result.footprint_bytes.unwrap_or(0) + share).max(1 << 20);
    result.cap_bytes = Some(cap);
    match MemoryCgroup::create(&format!("cellar-bench-load-{}-{n}", std::process::id()), cap) {
        Ok(cg) => {
            result.capped = true;
            Ok(Some(cg))
        }
        Err(e) if reader == "direct" => {
            let note = format!(
                "memory cap NOT applied: cgroups unavailable ({e}); the direct reader (O_DIRECT) \
                 bypasses the page cache, so it runs uncapped"
            );
            eprintln!("cellar-bench load: {}: WARNING: {note}", spec.name);
            result.notes.push(note);
            Ok(None)
        }
        Err(e) => Err(format!(
            "a memory cap needs a memory cgroup (v1, or v2 with the memory controller), which is \
             unavailable here ({e}); without one only the direct reader can run a capped configuration"
        )),
    }
}

/// Warm-up queries sent before the fixed footprint is read.
const FOOTPRINT_QUERIES: usize = 16;

/// What [`fixed_footprint`] measured.
struct Footprint {
    /// The charge after the warm-up queries: what the cap is built on.
    steady: u64,
    /// The peak charge over the start and the warm-up queries (none without cgroups).
    peak: Option<u64>,
}

/// The server's fixed footprint: the memory charge (RSS + page cache: the model's weights, its
/// runtime, the small structures, the pooled buffers) of an uncapped server of the same
/// settings once it has started and answered [`FOOTPRINT_QUERIES`] queries sent one at a time,
/// read from a cgroup without a limit; where cgroups are missing, its anonymous resident memory
/// (`RssAnon`) then. Its peak over the start is reported beside it but not used: the start's
/// transient (the model file read while its tensors are copied out) is reclaimable page cache
/// a capped server gives back, and pages of the model or the `cellar` binary are charged only
/// to the cgroup that read them first, so the peak moved by 40-90 MiB with the cache's history
/// and, measured cold, made caps that never bound (bench/results/footprint-cold-eviction-trial.md).
/// A hot-record cache is left out: it grows into the share of the index, not the footprint.
fn fixed_footprint(
    bench: &Bench,
    spec: &ConfigSpec,
    index: &Path,
    reader: &str,
    bodies: &[Vec<u8>],
    n: usize,
) -> Result<Footprint> {
    let log = std::env::temp_dir().join(format!("cellar-bench-{}-{n}.footprint.log", std::process::id()));
    let mut server_spec = server_spec(bench, spec, index, reader, log.clone());
    // The cache is inside the X%: the footprint is measured without it.
    server_spec.cache_mib = None;
    let unlimited =
        MemoryCgroup::create(&format!("cellar-bench-footprint-{}-{n}", std::process::id()), 1 << 40).ok();
    let mut server = ServerProc::start(&server_spec, unlimited)?;
    let measured = (|| {
        server.wait_healthy(bench.rt, Duration::from_secs(bench.args.health_timeout))?;
        for request in http_requests(bodies, &server.target).iter().take(FOOTPRINT_QUERIES) {
            let response = bench
                .rt
                .block_on(send(server.target.addr, request))
                .map_err(|e| CellarError::internal(format!("a warm-up query failed: {e}")))?;
            if response.status != 200 {
                return Err(CellarError::internal(format!("a warm-up query answered {}", response.status)));
            }
        }
        let anon = rss_anon_bytes(server.pid())
            .ok_or_else(|| CellarError::internal("no RssAnon in /proc/PID/status"))?;
        Ok(server.cgroup_usage_now().map_or(anon, |charged| charged.max(anon)))
    })();
    let stopped = server.stop();
    let _ = std::fs::remove_file(&log);
    Ok(Footprint { steady: measured?, peak: stopped.cgroup.map(|usage| usage.peak_bytes) })
}

fn rss_anon_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

fn skipped(mut result: ConfigResult, why: String) -> ConfigResult {
    eprintln!("cellar-bench load: {}: SKIPPED: {why}", result.spec.name);
    result.status = Status::Skipped;
    result.reason = Some(why);
    result
}

/// Evicts every file under `dir` from the page cache.
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

fn server_spec<'a>(
    bench: &'a Bench,
    spec: &ConfigSpec,
    index: &'a Path,
    reader: &'a str,
    log: PathBuf,
) -> ServerSpec<'a> {
    ServerSpec {
        cellar: &bench.cellar,
        index,
        reader,
        intra_op_threads: spec.threads,
        inject_latency_us: spec.ssd_latency_us,
        workers: spec.workers,
        queue: spec.queue,
        io_waiters: spec.io_waiters,
        cache_mib: spec.cache_mib,
        model_weights: spec.model_weights,
        lazy_encoder: spec.vectors.by_client() || bench.args.mode == Mode::Bm25.name(),
        log,
    }
}

/// Starts the server and waits for its /healthz; `None` (the failure recorded in `result`) when
/// it does not start or never becomes healthy.
fn start_healthy(
    bench: &Bench,
    spec: &ServerSpec,
    cgroup: Option<MemoryCgroup>,
    result: &mut ConfigResult,
) -> Option<ServerProc> {
    let name = result.spec.name.clone();
    let mut server = match ServerProc::start(spec, cgroup) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cellar-bench load: {name}: FAILED: {e}");
            fail(result, e.to_string());
            return None;
        }
    };
    result.server_args = server.args.clone();
    eprintln!(
        "cellar-bench load: {name}: started cellar serve (pid {}) on {}",
        server.pid(),
        server.target.url()
    );
    match server.wait_healthy(bench.rt, Duration::from_secs(bench.args.health_timeout)) {
        Ok(h) => {
            result.healthz = Some(h);
            Some(server)
        }
        Err(e) => {
            eprintln!("cellar-bench load: {name}: FAILED: {e}");
            record_stop(result, server.stop());
            fail(result, e.to_string());
            result.notes.push(format!("the server's output is kept in {}", spec.log.display()));
            None
        }
    }
}

fn fail(result: &mut ConfigResult, reason: String) {
    result.status = Status::Failed;
    result.reason = Some(reason);
}

/// What the stopped server showed; a server that had died during the sweep fails it.
fn record_stop(result: &mut ConfigResult, stopped: Stopped) {
    result.peak_rss_bytes = stopped.peak_rss_bytes;
    result.cgroup_max_usage_bytes = stopped.cgroup.map(|u| u.peak_bytes);
    result.cgroup_failcnt = stopped.cgroup.map(|u| u.fail_count);
    if let (Status::Completed, Some(why)) = (result.status, stopped.died) {
        fail(result, format!("cellar serve {why}"));
    }
}

/// Deletes the server's log after a clean run; keeps it, and names it, otherwise.
fn keep_log_on_failure(result: &mut ConfigResult, log: &Path) {
    if result.status == Status::Completed {
        let _ = std::fs::remove_file(log);
    } else {
        result.notes.push(format!("the server's output is kept in {}", log.display()));
    }
}
