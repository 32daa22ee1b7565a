//! A `cellar serve` child for one configuration: the `cellar` binary started on a free loopback
//! port (placed in a memory cgroup before it runs, when capped), waited for until `/healthz` answers,
//! stopped with SIGTERM (SIGKILL after 10 s). Its peak RSS and disk reads come from /proc
//! (`harness::child`). A server that exits or never answers is `Internal` (a vanished child),
//! with the end of its log.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cellar_core::{CellarError, IoContext, Result};

use super::client::{self, Target};
use crate::harness::cgroup::{CgroupUsage, MemoryCgroup};
use crate::harness::child::{self, describe_exit, vm_hwm_bytes};

/// How to start the server.
pub struct ServerSpec<'a> {
    /// The `cellar` binary.
    pub cellar: &'a Path,
    pub index: &'a Path,
    pub reader: &'a str,
    pub intra_op_threads: usize,
    pub inject_latency_us: Option<u64>,
    pub workers: Option<usize>,
    pub queue: Option<usize>,
    pub io_waiters: Option<usize>,
    pub cache_mib: Option<usize>,
    /// `--model-weights`, if given.
    pub model_weights: Option<cellar_encode::WeightPrecision>,
    /// The bench sends query vectors: the server never needs the model (`--lazy-encoder`).
    pub lazy_encoder: bool,
    /// Where the server's stdout and stderr go.
    pub log: PathBuf,
}

pub struct ServerProc {
    child: Child,
    pub target: Target,
    cgroup: Option<MemoryCgroup>,
    log: PathBuf,
    pub args: Vec<String>,
}

/// What stopping the server found.
pub struct Stopped {
    pub peak_rss_bytes: Option<u64>,
    pub cgroup: Option<CgroupUsage>,
    /// Set when the server had already exited before it was asked to stop.
    pub died: Option<String>,
}

/// A port nothing listens on right now (bound to port 0, read, released).
pub fn free_port() -> Result<u16> {
    let any = Path::new("127.0.0.1:0");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").at(any)?;
    listener.local_addr().map(|a| a.port()).at(any)
}

/// The last `max` bytes of the server's log, for error messages.
fn tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else { return format!("(no log at {})", path.display()) };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut bytes = Vec::new();
    let _ = f.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    if text.is_empty() {
        "(the server wrote nothing)".into()
    } else {
        format!("last lines of its log:\n{text}")
    }
}

impl ServerProc {
    /// Starts `cellar serve` on a free port; inside `cgroup` when given.
    pub fn start(spec: &ServerSpec, cgroup: Option<MemoryCgroup>) -> Result<ServerProc> {
        let port = free_port()?;
        let mut args = vec![
            "serve".to_string(),
            "--index".into(),
            spec.index.display().to_string(),
            "--reader".into(),
            spec.reader.to_string(),
            "--bind".into(),
            format!("127.0.0.1:{port}"),
            "--intra-op-threads".into(),
            spec.intra_op_threads.to_string(),
        ];
        if let Some(us) = spec.inject_latency_us {
            args.extend(["--inject-latency-us".into(), us.to_string()]);
        }
        if let Some(n) = spec.workers {
            args.extend(["--workers".into(), n.to_string()]);
        }
        if let Some(n) = spec.queue {
            args.extend(["--queue".into(), n.to_string()]);
        }
        if let Some(n) = spec.io_waiters {
            args.extend(["--io-waiters".into(), n.to_string()]);
        }
        if let Some(n) = spec.cache_mib {
            args.extend(["--cache-mib".into(), n.to_string()]);
        }
        if let Some(w) = spec.model_weights {
            args.extend(["--model-weights".into(), w.name().into()]);
        }
        if spec.lazy_encoder {
            args.push("--lazy-encoder".into());
        }
        let log = File::create(&spec.log).at(&spec.log)?;
        let log2 = log.try_clone().at(&spec.log)?;
        // Placed in the cgroup before exec: the server opens nothing outside the cap.
        let mut command = child::command(spec.cellar, &args, cgroup.as_ref());
        command.stdin(Stdio::null()).stdout(log).stderr(log2);
        let child = child::spawn(&mut command, spec.cellar)?;
        Ok(ServerProc { child, target: Target::loopback(port), cgroup, log: spec.log.clone(), args })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn capped(&self) -> bool {
        self.cgroup.is_some()
    }

    /// Memory charged to the cgroup right now (RSS + page cache), when capped.
    pub fn cgroup_usage_now(&self) -> Option<u64> {
        self.cgroup.as_ref()?.usage_now().ok()
    }

    /// `Some(why)` once the server has exited.
    pub fn exited(&mut self) -> Option<String> {
        let capped = self.capped();
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("{}; {}", describe_exit(status, capped), tail(&self.log, 2000))),
            Ok(None) => None,
            Err(e) => Some(format!("cannot wait for the server: {e}")),
        }
    }

    /// Polls `GET /healthz` until it answers 200 (the parsed body) or `limit` passes.
    pub fn wait_healthy(
        &mut self,
        rt: &tokio::runtime::Runtime,
        limit: Duration,
    ) -> Result<serde_json::Value> {
        let started = Instant::now();
        loop {
            if let Some(why) = self.exited() {
                return Err(CellarError::internal(format!("cellar serve {why}")));
            }
            let answer = rt.block_on(client::get(&self.target, "/healthz", Duration::from_secs(2)));
            if let Ok(r) = answer {
                if r.status == 200 {
                    return Ok(serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null));
                }
            }
            if started.elapsed() > limit {
                return Err(CellarError::internal(format!(
                    "cellar serve did not answer GET /healthz with 200 within {} s; {}",
                    limit.as_secs(),
                    tail(&self.log, 2000)
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM, SIGKILL after 10 s; reads the peak RSS first and the cgroup's peak after.
    pub fn stop(mut self) -> Stopped {
        let died = self.exited();
        let peak_rss_bytes = vm_hwm_bytes(self.pid());
        if died.is_none() {
            // SAFETY: signalling our own child, which has not been reaped yet.
            unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) };
            let asked = Instant::now();
            while matches!(self.child.try_wait(), Ok(None)) && asked.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if matches!(self.child.try_wait(), Ok(None)) {
                eprintln!("cellar-bench load: cellar serve ignored SIGTERM for 10 s: SIGKILL");
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
        let cgroup = self.cgroup.as_ref().and_then(|cg| cg.usage().ok());
        // Dropping the cgroup (now empty) removes it.
        drop(self.cgroup.take());
        Stopped { peak_rss_bytes, cgroup, died }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        // Never leave a server behind (an early return or a panic in the bench).
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_nonzero() {
        assert_ne!(free_port().unwrap(), 0);
    }
}
