//! The disk's own limits, measured by fio on the store's file in the same session.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct FioResult {
    pub job: String,
    pub iops: f64,
    pub mb_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// Random reads of `block_kib` KiB, O_DIRECT, io_uring, at queue depth `depth`. Err(reason) if
/// fio is missing or fails; the caller prints the reason in the report.
pub fn random_read(file: &Path, block_kib: u64, depth: u32, seconds: u32) -> Result<FioResult, String> {
    let output = Command::new("fio")
        .args(["--name=randread", "--rw=randread", "--ioengine=io_uring", "--direct=1", "--readonly"])
        .arg(format!("--bs={block_kib}k"))
        .arg(format!("--iodepth={depth}"))
        .arg(format!("--runtime={seconds}"))
        .args(["--time_based", "--output-format=json"])
        .arg(format!("--filename={}", file.display()))
        .output()
        .map_err(|e| format!("fio not runnable ({e}); install it with `apt-get install -y fio`"))?;
    if !output.status.success() {
        return Err(format!("fio failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| format!("unreadable fio output: {e}"))?;
    let read = &json["jobs"][0]["read"];
    let pct = |p: &str| read["clat_ns"]["percentile"][p].as_f64().unwrap_or(f64::NAN) / 1e3;
    Ok(FioResult {
        job: format!("fio {block_kib}k randread io_uring direct qd{depth}"),
        iops: read["iops"].as_f64().unwrap_or(f64::NAN),
        mb_per_s: read["bw_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6,
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
    })
}
