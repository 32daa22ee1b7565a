//! IVF latency and recall against a memory cap (DiskBBQ's table), on a synthetic collection:
//! each (reader, cap) runs in a child process inside a memory cgroup (v1 or v2) whose limit
//! counts the page cache, after the IVF's files were evicted from it. The build itself also runs
//! in a capped child, to show that it streams the vectors.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cellar_core::format::FileKind;
use cellar_core::io::{cache, InjectedLatency, ReaderKind, ReaderOptions};
use cellar_core::stats::ms_since;
use cellar_core::{CellarError, Result};
use cellar_search::ivf::{build_ivf_over, Ivf, IvfBuildOptions, IvfConfig, ProbeParams};
use cellar_search::pooled::PooledMatrix;
use clap::Args;
use serde::{Deserialize, Serialize};

use super::common::{mean, write_outputs};
use super::synthetic::Synthetic;
use crate::harness::cgroup::MemoryCgroup;
use crate::harness::child::{proc_read_bytes, run_self, vm_hwm_bytes};
use crate::harness::stats::{summarize, LatencySummary};

/// The synthetic collection (shared by the study, its build child and its workers).
#[derive(Args, Clone)]
pub struct SynthArgs {
    /// Work directory: pooled.bin, ivf/ and the exact answers (reused when they match).
    #[arg(long, default_value = "bench/work/ivf-synth")]
    pub dir: PathBuf,
    #[arg(long, default_value_t = 250_000)]
    pub docs: usize,
    #[arg(long, default_value_t = 384)]
    pub dim: usize,
    #[arg(long, default_value_t = 2000)]
    pub topics: usize,
    #[arg(long, default_value_t = 1.0)]
    pub noise: f32,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

impl SynthArgs {
    fn synthetic(&self) -> Synthetic {
        Synthetic { docs: self.docs, dim: self.dim, topics: self.topics, noise: self.noise, seed: self.seed }
    }

    fn pooled(&self) -> PathBuf {
        self.dir.join(FileKind::Pooled.file_name())
    }

    fn to_args(&self) -> Vec<String> {
        let pairs = [
            ("--dir", self.dir.display().to_string()),
            ("--docs", self.docs.to_string()),
            ("--dim", self.dim.to_string()),
            ("--topics", self.topics.to_string()),
            ("--noise", self.noise.to_string()),
            ("--seed", self.seed.to_string()),
        ];
        pairs.into_iter().flat_map(|(k, v)| [k.to_string(), v]).collect()
    }
}

#[derive(Args)]
pub struct RamArgs {
    #[command(flatten)]
    pub synth: SynthArgs,
    #[arg(long, default_value_t = 256)]
    pub cluster_size: usize,
    #[arg(long, default_value_t = 16_384)]
    pub train_sample: usize,
    /// Memory cap of the IVF build, as % of the pooled vectors' size.
    #[arg(long, default_value_t = 25.0)]
    pub build_cap_pct: f64,
    /// Rebuild the IVF even if one matching the settings exists.
    #[arg(long)]
    pub rebuild: bool,
    /// Memory caps, as % of the IVF's size on disk.
    #[arg(long, default_value = "100,50,25,10,5,2.5")]
    pub caps: String,
    #[arg(long, default_value = "mmap,direct")]
    pub readers: String,
    #[arg(long, default_value_t = 300)]
    pub queries: usize,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Clusters probed (default: the IVF's).
    #[arg(long)]
    pub nprobe: Option<usize>,
    #[arg(long, default_value_t = 2.0)]
    pub oversample: f32,
    /// Direct reader only: emulated SSD latency per read call, µs.
    #[arg(long)]
    pub inject_latency_us: Option<u64>,
    #[arg(long, default_value = "bench/results/ivf-ram")]
    pub out: PathBuf,
}

#[derive(Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub synth: SynthArgs,
    #[arg(long)]
    pub cluster_size: usize,
    #[arg(long)]
    pub train_sample: usize,
}

#[derive(Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub synth: SynthArgs,
    #[arg(long)]
    pub reader: ReaderKind,
    #[arg(long)]
    pub queries: usize,
    #[arg(long)]
    pub k: usize,
    #[arg(long)]
    pub nprobe: usize,
    #[arg(long)]
    pub oversample: f32,
    #[arg(long)]
    pub inject_latency_us: Option<u64>,
    #[arg(long)]
    pub truth: PathBuf,
}

/// What one capped worker measured.
#[derive(Serialize, Deserialize)]
struct WorkerReport {
    #[serde(flatten)]
    latency: LatencySummary,
    recall: f64,
    peak_rss_bytes: u64,
    kib_read_per_query: f64,
    disk_kib_per_query: f64,
    ivf_ram_bytes: usize,
}

#[derive(Serialize)]
struct Row {
    reader: String,
    cap_pct: Option<f64>,
    cap_mib: Option<f64>,
    cgroup_peak_mib: Option<f64>,
    /// `None` when the worker did not finish (`failure` says why: under a cap, the OOM killer).
    #[serde(flatten)]
    report: Option<WorkerReport>,
    failure: Option<String>,
}

#[derive(Serialize)]
struct BuildRow {
    secs: f64,
    cap_mib: f64,
    cgroup_peak_mib: f64,
    pooled_mib: f64,
    clusters: usize,
    train_sample: usize,
}

fn mib(bytes: f64) -> f64 {
    bytes / (1u64 << 20) as f64
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn ivf_files(dir: &Path) -> Vec<PathBuf> {
    let ivf = IvfConfig::dir(dir);
    [FileKind::IvfCentroids, FileKind::IvfPostings, FileKind::IvfVectors]
        .map(|k| ivf.join(k.file_name()))
        .to_vec()
}

pub fn run(args: RamArgs) -> Result<()> {
    if args.queries == 0 || args.k == 0 {
        return Err(CellarError::invalid("--queries and --k must be at least 1"));
    }
    let synth = &args.synth;
    let pooled_bytes = (synth.docs * synth.dim * 2) as u64;
    if file_len(&synth.pooled()) != pooled_bytes + cellar_core::format::HEADER_BYTES as u64 {
        eprintln!(
            "cellar-bench ivf: writing {} synthetic vectors to {}",
            synth.docs,
            synth.pooled().display()
        );
        synth.synthetic().write(&synth.dir)?;
    }
    let build = ensure_ivf(&args, pooled_bytes)?;
    let config = IvfConfig::load(&synth.dir)?
        .ok_or_else(|| CellarError::InvalidInput("the IVF build left no ivf.json".into()))?;
    let nprobe = args.nprobe.unwrap_or(config.search.nprobe);
    let truth = ensure_truth(&args)?;
    let ivf_bytes: u64 = ivf_files(&synth.dir).iter().map(|p| file_len(p)).sum();
    let caps = super::common::parse_list::<f64>(&args.caps, "caps", |c| c > 0.0)?;
    let readers: Vec<ReaderKind> =
        args.readers.split(',').map(|r| r.trim().parse()).collect::<Result<_>>()?;
    let mut rows = vec![measure(&args, &truth, nprobe, ReaderKind::Ram, None, ivf_bytes)?];
    for reader in readers {
        for &cap in &caps {
            rows.push(measure(&args, &truth, nprobe, reader, Some(cap), ivf_bytes)?);
        }
    }
    let setup = format!(
        "Synthetic collection: {} docs of {} dims ({} topics, noise {}), pooled vectors {:.0} MiB; IVF {} clusters \
         (target {}), on disk {:.1} MiB (centroids {:.1} MiB read into RAM at open); {} queries, k {}, nprobe {nprobe}, \
         oversample {}, rescored; each row a child process in a memory cgroup (page cache counted) after \
         evicting the IVF's pages{}. Build: {}.",
        synth.docs,
        synth.dim,
        synth.topics,
        synth.noise,
        mib(pooled_bytes as f64),
        config.clusters,
        config.cluster_size,
        mib(ivf_bytes as f64),
        mib(config.build.centroids_bytes as f64),
        args.queries,
        args.k,
        args.oversample,
        args.inject_latency_us.map_or(String::new(), |us| format!("; emulated SSD {us} µs per read (direct)")),
        build.as_ref().map_or("reused from an earlier run".to_string(), |b| format!(
            "{:.1} s under a cap of {:.0} MiB ({:.0}% of the pooled vectors), cgroup peak {:.0} MiB, train sample {}",
            b.secs, b.cap_mib, args.build_cap_pct, b.cgroup_peak_mib, b.train_sample
        ))
    );
    let json = serde_json::json!({ "build": build, "caps": rows });
    write_outputs(&args.out, &setup, &json, &table(&rows))
}

/// Builds the IVF in a capped child unless one with these settings exists.
fn ensure_ivf(args: &RamArgs, pooled_bytes: u64) -> Result<Option<BuildRow>> {
    let synth = &args.synth;
    let existing = IvfConfig::load(&synth.dir)?;
    let matches = existing.as_ref().is_some_and(|c| {
        c.docs == synth.docs as u64
            && c.cluster_size == args.cluster_size
            && c.train_sample == args.train_sample
    });
    if matches && !args.rebuild {
        return Ok(None);
    }
    let cap = (pooled_bytes as f64 * args.build_cap_pct / 100.0) as u64;
    cache::evict_file(&synth.pooled())?;
    let cgroup = MemoryCgroup::create(&format!("cellar-ivf-build-{}", std::process::id()), cap)?;
    let mut child = vec!["ivf".to_string(), "ram-build".to_string()];
    child.extend(synth.to_args());
    child.extend([
        "--cluster-size".into(),
        args.cluster_size.to_string(),
        "--train-sample".into(),
        args.train_sample.to_string(),
    ]);
    let start = Instant::now();
    let (_, usage) = run_self(&child, Some(&cgroup), "ivf build")?;
    let config = IvfConfig::load(&synth.dir)?
        .ok_or_else(|| CellarError::InvalidInput("the IVF build left no ivf.json".into()))?;
    Ok(Some(BuildRow {
        secs: start.elapsed().as_secs_f64(),
        cap_mib: mib(cap as f64),
        cgroup_peak_mib: usage.map_or(0.0, |u| mib(u.peak_bytes as f64)),
        pooled_mib: mib(pooled_bytes as f64),
        clusters: config.clusters,
        train_sample: args.train_sample,
    }))
}

pub fn build_child(args: BuildArgs) -> Result<()> {
    let options = IvfBuildOptions {
        cluster_size: args.cluster_size,
        train_sample: args.train_sample,
        progress: true,
        ..IvfBuildOptions::default()
    };
    let s = &args.synth;
    build_ivf_over(&s.dir, &s.pooled(), s.dim, s.docs, &options).map(|_| ())
}

/// The exact top-k of every query (a full scan, in this uncapped parent), cached in the work dir.
fn ensure_truth(args: &RamArgs) -> Result<PathBuf> {
    let s = &args.synth;
    let path = s.dir.join(format!("truth-{}-{}-{}.json", args.queries, args.k, s.seed));
    if path.is_file() {
        return Ok(path);
    }
    eprintln!("cellar-bench ivf: exact top-{} of {} queries by a full scan", args.k, args.queries);
    let matrix = PooledMatrix::load(&s.dir, s.dim, s.docs)?;
    let truth: Vec<Vec<u32>> = s
        .synthetic()
        .queries(args.queries)
        .iter()
        .map(|q| matrix.search(q, args.k).iter().map(|h| h.id.0).collect())
        .collect();
    let json = serde_json::to_vec(&truth).map_err(|e| CellarError::internal(e.to_string()))?;
    std::fs::write(&path, json).map_err(|e| CellarError::Io { path: path.clone(), source: e })?;
    Ok(path)
}

fn measure(
    args: &RamArgs,
    truth: &Path,
    nprobe: usize,
    reader: ReaderKind,
    cap_pct: Option<f64>,
    ivf_bytes: u64,
) -> Result<Row> {
    for file in ivf_files(&args.synth.dir) {
        cache::evict_file(&file)?;
    }
    let cap = cap_pct.map(|p| (ivf_bytes as f64 * p / 100.0) as u64);
    let name = format!("cellar-ivf-{}-{}-{}", std::process::id(), reader.name(), cap.unwrap_or(0));
    let cgroup = cap.map(|bytes| MemoryCgroup::create(&name, bytes)).transpose()?;
    let mut child = vec!["ivf".to_string(), "ram-worker".to_string()];
    child.extend(args.synth.to_args());
    child.extend(
        [
            ("--reader", reader.name().to_string()),
            ("--queries", args.queries.to_string()),
            ("--k", args.k.to_string()),
            ("--nprobe", nprobe.to_string()),
            ("--oversample", args.oversample.to_string()),
            ("--truth", truth.display().to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v]),
    );
    if let Some(us) = args.inject_latency_us.filter(|_| reader == ReaderKind::Direct) {
        child.extend(["--inject-latency-us".to_string(), us.to_string()]);
    }
    eprintln!(
        "cellar-bench ivf: {} reader, cap {}",
        reader.name(),
        cap.map_or("none".into(), |b| format!("{:.1} MiB", mib(b as f64)))
    );
    let mut row = Row {
        reader: reader.name().to_string(),
        cap_pct,
        cap_mib: cap.map(|b| mib(b as f64)),
        cgroup_peak_mib: None,
        report: None,
        failure: None,
    };
    match run_self(&child, cgroup.as_ref(), "ivf worker") {
        Ok((stdout, usage)) => {
            row.cgroup_peak_mib = usage.map(|u| mib(u.peak_bytes as f64));
            row.report =
                Some(serde_json::from_slice(&stdout).map_err(|e| {
                    CellarError::internal(format!("the ivf worker's report is not JSON: {e}"))
                })?);
        }
        // Below some cap the process itself no longer fits (a worker that died is `Internal`):
        // that is a result, not an abort.
        Err(CellarError::Internal(why)) if cgroup.is_some() => {
            eprintln!("cellar-bench ivf: {why}");
            row.failure = Some(why);
        }
        Err(e) => return Err(e),
    }
    Ok(row)
}

pub fn worker(args: WorkerArgs) -> Result<()> {
    let s = &args.synth;
    let mut options = ReaderOptions::new(args.reader);
    options.inject_latency = args
        .inject_latency_us
        .map(|us| InjectedLatency { per_read: Duration::from_micros(us), max_in_flight: 32 });
    let ivf = Ivf::open(&s.dir, s.docs as u64, s.dim, &options)?
        .ok_or_else(|| CellarError::InvalidInput(format!("{} has no IVF", s.dir.display())))?;
    let truth: Vec<Vec<u32>> = serde_json::from_slice(
        &std::fs::read(&args.truth).map_err(|e| CellarError::Io { path: args.truth.clone(), source: e })?,
    )
    .map_err(|e| CellarError::InvalidInput(format!("{}: {e}", args.truth.display())))?;
    let queries = s.synthetic().queries(args.queries);
    let params =
        ProbeParams { nprobe: args.nprobe, depth: args.k, oversample: args.oversample, rescore: true };
    let disk_before = proc_read_bytes(std::process::id()).unwrap_or(0);
    let (mut ms, mut recall, mut bytes) = (Vec::new(), Vec::new(), 0u64);
    for (query, expected) in queries.iter().zip(&truth) {
        let start = Instant::now();
        let (hits, stats) = ivf.probe(query, params).finish()?;
        ms.push(ms_since(start));
        bytes += stats.bytes_read;
        let found = hits.iter().filter(|h| expected.contains(&h.id.0)).count();
        recall.push(found as f64 / expected.len().max(1) as f64);
    }
    let disk = proc_read_bytes(std::process::id()).unwrap_or(0).saturating_sub(disk_before);
    let n = queries.len().max(1) as f64;
    let latency = summarize(&ms).ok_or_else(|| CellarError::invalid("--queries must be at least 1"))?;
    let report = WorkerReport {
        latency,
        recall: mean(&recall),
        peak_rss_bytes: vm_hwm_bytes(std::process::id()).unwrap_or(0),
        kib_read_per_query: bytes as f64 / 1024.0 / n,
        disk_kib_per_query: disk as f64 / 1024.0 / n,
        ivf_ram_bytes: ivf.ram_bytes(),
    };
    println!("{}", serde_json::to_string(&report).map_err(|e| CellarError::internal(e.to_string()))?);
    Ok(())
}

fn table(rows: &[Row]) -> String {
    let mut md = String::from(
        "| reader | RAM cap | cap MiB | cgroup peak MiB | peak RSS MiB | recall@k | mean ms | P50 ms | P95 ms | P99 ms | KiB read/query | disk KiB/query |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let Some(w) = &r.report else {
            let why = r.failure.as_deref().unwrap_or("failed");
            let _ = writeln!(
                md,
                "| {} | {} | {} | - | - | {why} | | | | | | |",
                r.reader,
                r.cap_pct.map_or("none".into(), |p| format!("{p}%")),
                r.cap_mib.map_or("-".into(), |m| format!("{m:.1}"))
            );
            continue;
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} |",
            r.reader,
            r.cap_pct.map_or("none".into(), |p| format!("{p}%")),
            r.cap_mib.map_or("-".into(), |m| format!("{m:.1}")),
            r.cgroup_peak_mib.map_or("-".into(), |m| format!("{m:.1}")),
            mib(w.peak_rss_bytes as f64),
            w.recall,
            w.latency.mean_ms,
            w.latency.p50_ms,
            w.latency.p95_ms,
            w.latency.p99_ms,
            w.kib_read_per_query,
            w.disk_kib_per_query
        );
    }
    md
}
