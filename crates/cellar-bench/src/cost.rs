//! `cellar-bench cost` (issue 17.5): turns a measured `cellar-bench load` run into ColBERT-serve's
//! Table 1. For one configuration of the run it takes what was measured — the memory the server
//! was allowed (its cgroup cap, page cache counted; the peak RSS when uncapped), the index's size
//! on disk, the bytes read and CPU time per query at the busiest level whose P95 met the target —
//! turns them into per-document and per-query figures, and sizes the smallest machine that holds
//! a collection of each size asked at the target P95 and QPS: RAM and disk scale with the
//! documents, cores with the QPS; then its monthly cost at the prices given, and the cost of a
//! million queries. The scaling is linear by construction: the report says so, and names what
//! it leaves out.

use std::fmt::Write as _;
use std::path::PathBuf;

use cellar_core::{CellarError, IoContext, Result};
use serde::Serialize;
use serde_json::Value;

use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;

/// Seconds in the month the prices are for (365.25 / 12 days).
const SECONDS_PER_MONTH: f64 = 365.25 / 12.0 * 86_400.0;

#[derive(clap::Args)]
pub struct CostArgs {
    /// A `cellar-bench load` result (its .json).
    #[arg(long)]
    pub load: PathBuf,
    /// The configuration of that run to cost (its name).
    #[arg(long)]
    pub config: String,
    /// Latency target: the busiest level whose P95 is within it sets the CPU per query.
    #[arg(long)]
    pub p95_ms: f64,
    /// Queries per second the machine must serve at that P95.
    #[arg(long)]
    pub qps: f64,
    /// Collection sizes to size a machine for, in documents (default: the measured one, 100M, 1B).
    #[arg(long, value_delimiter = ',')]
    pub docs: Vec<f64>,
    /// Price of a GiB of RAM for a month.
    #[arg(long)]
    pub ram_gib_month: f64,
    /// Price of a core for a month.
    #[arg(long)]
    pub core_month: f64,
    /// Price of a GiB of SSD for a month.
    #[arg(long)]
    pub disk_gib_month: f64,
    /// Share of a core's time a query may use before latency climbs (headroom).
    #[arg(long, default_value_t = 0.7)]
    pub utilization: f64,
    /// Output prefix: writes PREFIX.json and PREFIX.md.
    #[arg(long)]
    pub out: PathBuf,
}

/// What the run measured, per document and per query.
#[derive(Debug, Serialize, PartialEq)]
pub struct Measured {
    pub config: String,
    pub docs: f64,
    pub index_bytes: f64,
    /// The memory the server had: its cgroup cap, or its peak RSS when uncapped.
    pub memory_bytes: f64,
    pub capped: bool,
    pub peak_rss_bytes: f64,
    /// The busiest level within the P95 target.
    pub level_qps: f64,
    pub level_p95_ms: f64,
    pub cpu_ms_per_query: f64,
    pub read_bytes_per_query: f64,
    pub ndcg_at_10: Option<f64>,
}

/// One machine, sized for `docs` documents.
#[derive(Debug, Serialize, PartialEq)]
pub struct Sized {
    pub docs: f64,
    pub ram_gib: f64,
    pub cores: f64,
    pub disk_gib: f64,
    pub read_mib_per_s: f64,
    pub month: f64,
    pub per_million_queries: f64,
}

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    provenance: Provenance,
    load: PathBuf,
    p95_ms: f64,
    qps: f64,
    prices: [f64; 3],
    utilization: f64,
    measured: Measured,
    machines: Vec<Sized>,
}

pub fn run(args: CostArgs) -> Result<()> {
    for (name, value) in [
        ("--p95-ms", args.p95_ms),
        ("--qps", args.qps),
        ("--ram-gib-month", args.ram_gib_month),
        ("--core-month", args.core_month),
        ("--disk-gib-month", args.disk_gib_month),
    ] {
        if !(value.is_finite() && value >= 0.0) || (value == 0.0 && matches!(name, "--p95-ms" | "--qps")) {
            return Err(CellarError::invalid(format!("{name} must be a positive number, got {value}")));
        }
    }
    if !(args.utilization > 0.0 && args.utilization <= 1.0) {
        return Err(CellarError::invalid(format!(
            "--utilization must be within (0, 1], got {}",
            args.utilization
        )));
    }
    let text = std::fs::read(&args.load).at(&args.load)?;
    let run: Value = serde_json::from_slice(&text)
        .map_err(|e| CellarError::invalid(format!("{}: not a load result: {e}", args.load.display())))?;
    let measured = measure(&run, &args.config, args.p95_ms)?;
    let mut docs = args.docs.clone();
    if docs.is_empty() {
        docs = vec![measured.docs, 1e8, 1e9];
    }
    if let Some(bad) = docs.iter().find(|d| !(d.is_finite() && **d >= 1.0)) {
        return Err(CellarError::invalid(format!("--docs must be document counts >= 1, got {bad}")));
    }
    let prices = [args.ram_gib_month, args.core_month, args.disk_gib_month];
    let machines: Vec<Sized> =
        docs.iter().map(|&d| size(&measured, d, args.qps, args.utilization, prices)).collect();
    let report = Report {
        provenance: Provenance::now(),
        load: args.load.clone(),
        p95_ms: args.p95_ms,
        qps: args.qps,
        prices,
        utilization: args.utilization,
        measured,
        machines,
    };
    let markdown = markdown(&report);
    write_report(&args.out, &report, &markdown)?;
    print!("{markdown}");
    Ok(())
}

fn num(value: &Value, key: &str) -> Option<f64> {
    value.get(key).and_then(Value::as_f64)
}

/// The per-document and per-query figures of configuration `name` of a load run.
pub fn measure(run: &Value, name: &str, p95_ms: f64) -> Result<Measured> {
    let configs = run.get("configurations").and_then(Value::as_array).ok_or_else(|| {
        CellarError::invalid("not a cellar-bench load result (no \"configurations\")".to_string())
    })?;
    let config =
        configs.iter().find(|c| c.get("name").and_then(Value::as_str) == Some(name)).ok_or_else(|| {
            let names: Vec<&str> =
                configs.iter().filter_map(|c| c.get("name").and_then(Value::as_str)).collect();
            CellarError::invalid(format!(
                "no configuration {name:?} in the run (it has {})",
                names.join(", ")
            ))
        })?;
    let missing = |what: &str| CellarError::invalid(format!("configuration {name:?} has no {what}"));
    let docs =
        config.pointer("/healthz/docs").and_then(Value::as_f64).ok_or_else(|| missing("healthz.docs"))?;
    let index_bytes = num(config, "index_bytes").ok_or_else(|| missing("index_bytes"))?;
    let peak_rss = num(config, "peak_rss_bytes").ok_or_else(|| missing("peak_rss_bytes"))?;
    let cap = num(config, "cap_bytes");
    let levels = config.get("levels").and_then(Value::as_array).ok_or_else(|| missing("levels"))?;
    let within = levels
        .iter()
        .filter(|l| {
            num(l, "failed_fraction") == Some(0.0)
                && !l.get("saturated").and_then(Value::as_bool).unwrap_or(true)
                && l.pointer("/latency/p95_ms").and_then(Value::as_f64).is_some_and(|p| p <= p95_ms)
                && num(l, "server_cpu_cores").is_some()
        })
        .max_by(|a, b| {
            num(a, "achieved_qps").unwrap_or(0.0).total_cmp(&num(b, "achieved_qps").unwrap_or(0.0))
        })
        .ok_or_else(|| {
            CellarError::invalid(format!(
                "no level of {name:?} met a P95 of {p95_ms} ms unsaturated, with the server's CPU measured"
            ))
        })?;
    let qps = num(within, "achieved_qps").ok_or_else(|| missing("achieved_qps"))?;
    let cores = num(within, "server_cpu_cores").unwrap_or(0.0);
    let read =
        num(within, "server_read_bytes_per_query").or_else(|| num(within, "proc_read_bytes_per_query"));
    Ok(Measured {
        config: name.to_string(),
        docs,
        index_bytes,
        memory_bytes: cap.unwrap_or(peak_rss),
        capped: cap.is_some(),
        peak_rss_bytes: peak_rss,
        level_qps: qps,
        level_p95_ms: within.pointer("/latency/p95_ms").and_then(Value::as_f64).unwrap_or(0.0),
        cpu_ms_per_query: cores * 1000.0 / qps.max(1e-9),
        read_bytes_per_query: read.unwrap_or(0.0),
        ndcg_at_10: config.pointer("/quality/ndcg_at_10").and_then(Value::as_f64),
    })
}

/// The smallest machine for `docs` documents at `qps`: memory and disk in proportion to the
/// documents, whole cores for the CPU per query at `utilization`, whole GiB of RAM.
pub fn size(m: &Measured, docs: f64, qps: f64, utilization: f64, prices: [f64; 3]) -> Sized {
    let gib = (1u64 << 30) as f64;
    let scale = docs / m.docs;
    let ram_gib = (m.memory_bytes * scale / gib).ceil().max(1.0);
    let cores = (qps * m.cpu_ms_per_query / 1000.0 / utilization).ceil().max(1.0);
    let disk_gib = (m.index_bytes * scale / gib).ceil().max(1.0);
    let month = ram_gib * prices[0] + cores * prices[1] + disk_gib * prices[2];
    Sized {
        docs,
        ram_gib,
        cores,
        disk_gib,
        read_mib_per_s: qps * m.read_bytes_per_query / (1u64 << 20) as f64,
        month,
        per_million_queries: month / (qps * SECONDS_PER_MONTH / 1e6),
    }
}

fn markdown(r: &Report) -> String {
    let m = &r.measured;
    let mut s = String::from("# Cost per million queries (ColBERT-serve's Table 1, from a measured run)\n\n");
    s.push_str(&r.provenance.markdown());
    let _ = writeln!(
        s,
        "\nFrom `{}`, configuration `{}`: {:.0} documents, index {:.2} GiB on disk, memory {:.0} MiB ({}), \
         peak RSS {:.0} MiB; the busiest level within P95 {} ms served {:.1} QPS at P95 {:.1} ms with \
         {:.2} CPU-ms and {:.0} KiB read per query{}.\n",
        r.load.display(),
        m.config,
        m.docs,
        m.index_bytes / (1u64 << 30) as f64,
        m.memory_bytes / (1u64 << 20) as f64,
        if m.capped { "its cgroup cap, page cache counted" } else { "uncapped: its peak RSS" },
        m.peak_rss_bytes / (1u64 << 20) as f64,
        r.p95_ms,
        m.level_qps,
        m.level_p95_ms,
        m.cpu_ms_per_query,
        m.read_bytes_per_query / 1024.0,
        m.ndcg_at_10.map_or(String::new(), |n| format!(", nDCG@10 {n:.3}"))
    );
    let _ = writeln!(
        s,
        "Per document: {:.0} B of memory, {:.0} B of disk. Prices: {} per GiB of RAM, {} per core, {} per GiB of \
         SSD, a month; cores sized at {:.0}% busy. Target: {} QPS at P95 ≤ {} ms.\n",
        m.memory_bytes / m.docs,
        m.index_bytes / m.docs,
        r.prices[0],
        r.prices[1],
        r.prices[2],
        r.utilization * 100.0,
        r.qps,
        r.p95_ms
    );
    s.push_str(
        "| documents | RAM GiB | cores | SSD GiB | SSD reads MiB/s | per month | per million queries |\n",
    );
    s.push_str("|---:|---:|---:|---:|---:|---:|---:|\n");
    for x in &r.machines {
        let _ = writeln!(
            s,
            "| {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.2} | {:.4} |",
            x.docs, x.ram_gib, x.cores, x.disk_gib, x.read_mib_per_s, x.month, x.per_million_queries
        );
    }
    s.push_str(
        "\nLinear by construction: memory and disk per document as measured, CPU and bytes per query as \
         measured at this collection's size. Left out: that the first stage's cost per query grows with \
         the collection (more IVF clusters to probe, longer BM25 posting lists), a bigger machine's other \
         parts (network, redundancy), and the build's own machine.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Value {
        serde_json::json!({"configurations": [{
        "name": "direct-cap5", "index_bytes": 1e9, "cap_bytes": 5e7, "peak_rss_bytes": 4e7,
        "healthz": {"docs": 1e6}, "quality": {"ndcg_at_10": 0.5},
        "levels": [
            {"achieved_qps": 50.0, "failed_fraction": 0.0, "saturated": false, "server_cpu_cores": 0.25,
             "server_read_bytes_per_query": 1e5, "latency": {"p95_ms": 8.0}},
            {"achieved_qps": 100.0, "failed_fraction": 0.0, "saturated": false, "server_cpu_cores": 0.5,
             "server_read_bytes_per_query": 2e5, "latency": {"p95_ms": 20.0}},
            {"achieved_qps": 150.0, "failed_fraction": 0.0, "saturated": true, "server_cpu_cores": 1.9,
             "server_read_bytes_per_query": 2e5, "latency": {"p95_ms": 9.0}}
        ]}]})
    }

    #[test]
    fn the_busiest_unsaturated_level_within_the_target_sets_the_figures() {
        let m = measure(&run(), "direct-cap5", 10.0).unwrap();
        assert_eq!((m.level_qps, m.cpu_ms_per_query, m.read_bytes_per_query), (50.0, 5.0, 1e5));
        assert_eq!((m.memory_bytes, m.capped, m.ndcg_at_10), (5e7, true, Some(0.5)));
        let looser = measure(&run(), "direct-cap5", 25.0).unwrap();
        assert_eq!(looser.level_qps, 100.0);
        let err = measure(&run(), "direct-cap5", 1.0).unwrap_err().to_string();
        assert!(err.contains("no level"), "{err}");
        let err = measure(&run(), "ram", 10.0).unwrap_err().to_string();
        assert!(err.contains("direct-cap5"), "{err}");
    }

    #[test]
    fn a_machine_scales_memory_and_disk_with_documents_and_cores_with_qps() {
        let m = measure(&run(), "direct-cap5", 10.0).unwrap();
        // 1e9 documents: 1000x the memory (5e10 B = 46.6 -> 47 GiB) and disk (931.3 -> 932 GiB);
        // 200 QPS x 5 ms = 1 core, at 50% busy 2 cores.
        let x = size(&m, 1e9, 200.0, 0.5, [2.0, 10.0, 0.1]);
        assert_eq!((x.ram_gib, x.cores, x.disk_gib), (47.0, 2.0, 932.0));
        assert!((x.month - (47.0 * 2.0 + 2.0 * 10.0 + 932.0 * 0.1)).abs() < 1e-9);
        let queries_millions = 200.0 * SECONDS_PER_MONTH / 1e6;
        assert!((x.per_million_queries - x.month / queries_millions).abs() < 1e-12);
        assert!((x.read_mib_per_s - 200.0 * 1e5 / 1048576.0).abs() < 1e-9);
        // Never less than one of each.
        let tiny = size(&m, 1.0, 0.001, 1.0, [1.0, 1.0, 1.0]);
        assert_eq!((tiny.ram_gib, tiny.cores, tiny.disk_gib), (1.0, 1.0, 1.0));
    }
}
