//! `cellar-bench store`: the readers side by side on a store of at least 2 GiB, with the page
//! cache evicted before each run, mmap and direct also under a cgroup memory cap, fio's figures
//! for the same disk. Each reader runs in a child process (this binary's hidden `store-worker`),
//! so a cap applies to it alone. Writes JSON and a markdown table. The MaxSim kernels' timings
//! are `cargo bench -p cellar-core --bench kernels`.

mod fio;
mod report;
pub mod worker;

use std::path::PathBuf;

use cellar_core::codec::CodecKind;
use cellar_core::format::manifest::MANIFEST_FILE;
use cellar_core::format::Manifest;
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::{CellarError, Result};

use crate::harness::cgroup::{CgroupUsage, MemoryCgroup};
use crate::harness::child::run_self;
use report::{ReaderRow, Report};
use worker::WorkerReport;

#[derive(clap::Args)]
pub struct StoreArgs {
    /// Store to measure; a synthetic one is written there first if it holds none.
    #[arg(long, default_value = "bench/work/store-2g")]
    pub store: PathBuf,
    /// Size of the synthetic store to write, in GiB.
    #[arg(long, default_value_t = 2.0)]
    pub min_gib: f64,
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    #[arg(long, default_value_t = 100)]
    pub tokens: usize,
    #[arg(long, default_value = "f16")]
    pub codec: CodecKind,
    /// Random batches per reader.
    #[arg(long, default_value_t = 500)]
    pub batches: usize,
    #[arg(long, default_value_t = 200)]
    pub batch_size: usize,
    /// Concurrent batch streams per reader.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Memory cap for the capped runs, as a fraction of the store's size.
    #[arg(long, default_value_t = 0.10)]
    pub cap_fraction: f64,
    /// Seconds per fio job (0 skips fio).
    #[arg(long, default_value_t = 10)]
    pub fio_seconds: u32,
    /// Output path prefix: writes PREFIX.json and PREFIX.md.
    #[arg(long, default_value = "bench/results/bench-store")]
    pub out: PathBuf,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

pub fn run(args: StoreArgs) -> Result<()> {
    validate(&args)?;
    let (manifest, build) = ensure_store(&args)?;
    let store_bytes: u64 = manifest.files.iter().map(|f| f.bytes).sum();
    let cap_bytes = (store_bytes as f64 * args.cap_fraction) as u64;
    let mut report = Report::new(&args, &manifest, store_bytes, cap_bytes);
    report.build = build;

    if args.fio_seconds > 0 {
        for (block_kib, depth) in fio_jobs(&manifest, store_bytes) {
            eprintln!(
                "cellar-bench store: fio {block_kib} KiB random reads, queue depth {depth} ({} s)",
                args.fio_seconds
            );
            report.add_fio(fio::random_read(
                &args.store.join("vectors.bin"),
                block_kib,
                depth,
                args.fio_seconds,
            ));
        }
    }
    for run in READER_RUNS {
        eprintln!("cellar-bench store: {}", run.label());
        let row = match run_worker(&args, &run, run.capped.then_some(cap_bytes)) {
            Ok((worker, cgroup_peak)) => ReaderRow::measured(worker, run.capped, cgroup_peak),
            Err(e) => ReaderRow::failed(run.reader, run.capped, e.to_string()),
        };
        report.readers.push(row);
    }
    report.write(&args.out)
}

fn validate(args: &StoreArgs) -> Result<()> {
    let bad = |what: String| Err(CellarError::InvalidInput(what));
    if !(args.cap_fraction > 0.0 && args.cap_fraction <= 1.0) {
        return bad(format!("--cap-fraction {} must be in (0, 1]", args.cap_fraction));
    }
    if args.batches == 0 || args.batch_size == 0 || args.threads == 0 {
        return bad("--batches, --batch-size and --threads must be at least 1".into());
    }
    if args.min_gib.is_nan() || args.min_gib <= 0.0 {
        return bad(format!("--min-gib {} must be positive", args.min_gib));
    }
    Ok(())
}

/// Opens the store's manifest, writing a synthetic store of `min_gib` first if there is none.
/// The writer runs in a child process under the same memory cap as the capped readers, to show
/// that a store much larger than the memory available can be built.
fn ensure_store(args: &StoreArgs) -> Result<(Manifest, Option<BuildRow>)> {
    if args.store.join(MANIFEST_FILE).exists() {
        return Ok((Manifest::read(&args.store)?, None));
    }
    let bytes_per_token = args.codec.bytes_per_vector(args.dim);
    // Mean record ≈ (tokens + pooled) vectors; ~3% page padding.
    let per_doc = ((args.tokens + 1) * bytes_per_token) as f64 * 1.03;
    let docs = (args.min_gib * (1u64 << 30) as f64 / per_doc).ceil() as u64;
    let cap_bytes = (args.min_gib * (1u64 << 30) as f64 * args.cap_fraction) as u64;
    eprintln!(
        "cellar-bench store: writing a synthetic store of {docs} docs (~{:.1} GiB) to {} under a {} MiB memory cap",
        args.min_gib,
        args.store.display(),
        cap_bytes >> 20
    );
    let started = std::time::Instant::now();
    let child_args = [
        "synth".to_string(),
        format!("--docs={docs}"),
        format!("--tokens={}", args.tokens),
        format!("--dim={}", args.dim),
        format!("--codec={}", args.codec.name()),
        format!("--seed={}", args.seed),
        format!("--out={}", args.store.display()),
    ];
    let cgroup = memory_cgroup("synth", cap_bytes).inspect_err(|e| {
        eprintln!("WARNING: cellar-bench store: writing the store without a memory cap: {e}")
    });
    let (_, usage) = run_self(&child_args, cgroup.as_ref().ok(), "synth")?;
    let build = BuildRow {
        docs,
        seconds: started.elapsed().as_secs_f64(),
        cap_mib: cgroup.as_ref().ok().map(|_| cap_bytes as f64 / MIB),
        cgroup_peak_mib: usage.map(|u| u.peak_bytes as f64 / MIB),
        uncapped_because: cgroup.err().map(|e| e.to_string()),
    };
    Ok((Manifest::read(&args.store)?, Some(build)))
}

const MIB: f64 = (1u64 << 20) as f64;

/// How the synthetic store was written (when this run wrote it).
#[derive(Clone, Debug, serde::Serialize)]
pub struct BuildRow {
    pub docs: u64,
    pub seconds: f64,
    pub cap_mib: Option<f64>,
    pub cgroup_peak_mib: Option<f64>,
    pub uncapped_because: Option<String>,
}

/// One reader configuration measured side by side with the others.
struct ReaderRun {
    reader: ReaderKind,
    willneed: bool,
    capped: bool,
}

impl ReaderRun {
    const fn new(reader: ReaderKind, willneed: bool, capped: bool) -> Self {
        ReaderRun { reader, willneed, capped }
    }

    fn label(&self) -> String {
        let hint = if self.reader == ReaderKind::Mmap && self.willneed { "+willneed" } else { "" };
        let cap = if self.capped { " under the memory cap" } else { "" };
        format!("{} reader{hint}{cap}", self.reader.name())
    }
}

/// RAM uncapped is the control; mmap (plain and with MADV_WILLNEED) and direct run uncapped and
/// capped.
const READER_RUNS: [ReaderRun; 7] = [
    ReaderRun::new(ReaderKind::Ram, false, false),
    ReaderRun::new(ReaderKind::Mmap, false, false),
    ReaderRun::new(ReaderKind::Mmap, true, false),
    ReaderRun::new(ReaderKind::Direct, false, false),
    ReaderRun::new(ReaderKind::Mmap, false, true),
    ReaderRun::new(ReaderKind::Mmap, true, true),
    ReaderRun::new(ReaderKind::Direct, false, true),
];

/// fio jobs: 4 KiB at queue depth 1 and 32 (the disk's headline limits), and reads the size of
/// a mean record at the direct reader's queue depth (the limit for this store's access pattern).
fn fio_jobs(manifest: &Manifest, store_bytes: u64) -> [(u64, u32); 3] {
    let mean_record_kib = (store_bytes / manifest.counts.docs.max(1)).div_ceil(4096) * 4;
    let depth = ReaderOptions::new(ReaderKind::Direct).queue_depth as u32;
    [(4, 1), (4, 32), (mean_record_kib, depth)]
}

/// Runs one reader in a child process, optionally inside a fresh memory cgroup.
fn run_worker(
    args: &StoreArgs,
    run: &ReaderRun,
    cap_bytes: Option<u64>,
) -> Result<(WorkerReport, Option<CgroupUsage>)> {
    let reader = run.reader;
    let child_args = [
        "store-worker".to_string(),
        format!("--store={}", args.store.display()),
        format!("--reader={}", reader.name()),
        format!("--batches={}", args.batches),
        format!("--batch-size={}", args.batch_size),
        format!("--threads={}", args.threads),
        format!("--seed={}", args.seed),
        format!("--willneed={}", run.willneed),
    ];
    let cgroup = cap_bytes.map(|limit| memory_cgroup(reader.name(), limit)).transpose()?;
    let (stdout, usage) = run_self(&child_args, cgroup.as_ref(), reader.name())?;
    let worker: WorkerReport = serde_json::from_slice(&stdout)
        .map_err(|e| CellarError::internal(format!("unreadable {} worker report: {e}", reader.name())))?;
    Ok((worker, usage))
}

/// A fresh memory cgroup for one child, removed when dropped.
fn memory_cgroup(name: &str, limit_bytes: u64) -> Result<MemoryCgroup> {
    MemoryCgroup::create(&format!("cellar-bench-{}-{name}", std::process::id()), limit_bytes)
}
