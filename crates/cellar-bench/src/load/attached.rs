//! The one configuration of `--url`: a server someone else started (loopback only). Its peak
//! RSS and /proc/PID/io reads need `--pid`.

use std::time::Duration;

use cellar_core::{CellarError, Result};

use super::client::{self, Target};
use super::config::ConfigSpec;
use super::levels::{run_sweep, Server};
use super::queries::http_requests;
use super::report::ConfigResult;
use super::sweep::RequestCycle;
use super::Bench;
use crate::harness::child::vm_hwm_bytes;

pub fn run(bench: &Bench, spec: ConfigSpec, bodies: &[Vec<u8>]) -> Result<ConfigResult> {
    let url = spec.url.clone().expect("an attached configuration has a url");
    let target = client::parse_loopback_url(&url)?;
    let healthz = check_health(bench, &url, &target)?;
    let mut result = ConfigResult::new(spec);
    result.healthz = healthz;
    if let Some(index) = &result.spec.index {
        result.index_bytes = Some(cellar_search::disk::dir_bytes(index));
    }
    let pid = bench.args.pid;
    if pid.is_none() {
        result.notes.push("no --pid: no peak RSS or /proc/PID/io reads for this server".into());
    }
    let mut cycle = RequestCycle::for_args(http_requests(bodies, &target), bench.args);
    run_sweep(bench, Server { target: &target, pid, proc: None }, &mut cycle, &mut result);
    result.peak_rss_bytes = pid.and_then(vm_hwm_bytes);
    Ok(result)
}

/// `GET /healthz` must answer 200; returns its body when it is JSON.
fn check_health(bench: &Bench, url: &str, target: &Target) -> Result<Option<serde_json::Value>> {
    let health = bench
        .rt
        .block_on(client::get(target, "/healthz", Duration::from_secs(10)))
        .map_err(|e| CellarError::invalid(format!("--url {url}: GET /healthz: {e}")))?;
    if health.status != 200 {
        return Err(CellarError::invalid(format!("--url {url}: GET /healthz answered {}", health.status)));
    }
    Ok(serde_json::from_slice(&health.body).ok())
}
