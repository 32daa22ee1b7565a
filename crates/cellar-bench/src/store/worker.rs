//! One reader's measurement, run in a child process so a memory cap applies to it alone and its
//! peak RSS is its own. Prints one JSON report on stdout.

use std::path::PathBuf;
use std::time::Instant;

use cellar_core::io::{cache, ReaderKind, ReaderOptions};
use cellar_core::stats::ms_since;
use cellar_core::store::VectorStore;
use cellar_core::{DocId, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::harness::child::vm_hwm_bytes;

#[derive(clap::Args)]
pub struct WorkerArgs {
    #[arg(long)]
    pub store: PathBuf,
    #[arg(long)]
    pub reader: ReaderKind,
    #[arg(long)]
    pub batches: usize,
    #[arg(long)]
    pub batch_size: usize,
    #[arg(long)]
    pub threads: usize,
    #[arg(long)]
    pub seed: u64,
    /// Mmap reader: announce each batch's pages with MADV_WILLNEED before faulting them in.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub willneed: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WorkerReport {
    pub reader: String,
    pub engine: String,
    pub open_s: f64,
    pub records: u64,
    pub wall_s: f64,
    pub batch_ms: Vec<f64>,
    pub bytes: u64,
    pub pages: u64,
    pub read_calls: u64,
    pub peak_rss_bytes: u64,
}

pub fn run(args: WorkerArgs) -> Result<()> {
    let report = measure(&args)?;
    println!("{}", serde_json::to_string(&report).expect("report serialises"));
    Ok(())
}

/// The id batches every reader sees: same seed, same sequence.
pub fn id_batches(docs: usize, batches: usize, batch_size: usize, seed: u64) -> Vec<Vec<DocId>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..batches).map(|_| (0..batch_size).map(|_| DocId(rng.gen_range(0..docs as u32))).collect()).collect()
}

/// One batch's latency in milliseconds and what it read.
type Timed = (f64, cellar_core::io::ReadStats);

fn measure(args: &WorkerArgs) -> Result<WorkerReport> {
    let vectors = args.store.join("vectors.bin");
    cache::evict_file(&vectors)?;
    let opened = Instant::now();
    let mut options = ReaderOptions::new(args.reader);
    options.mmap_willneed = args.willneed;
    let store = VectorStore::open(&args.store, &options)?;
    let open_s = opened.elapsed().as_secs_f64();
    let batches = id_batches(store.len(), args.batches, args.batch_size, args.seed);
    let started = Instant::now();
    let per_thread: Vec<Result<Vec<Timed>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.threads.max(1))
            .map(|t| {
                let (store, batches) = (&store, &batches);
                scope.spawn(move || {
                    batches
                        .iter()
                        .skip(t)
                        .step_by(args.threads.max(1))
                        .map(|ids| {
                            let began = Instant::now();
                            let batch = store.read_batch(ids)?;
                            Ok((ms_since(began), batch.stats()))
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("bench thread panicked")).collect()
    });
    let wall_s = started.elapsed().as_secs_f64();
    let mut report = WorkerReport {
        reader: args.reader.name().into(),
        engine: store.reader_engine().into(),
        open_s,
        records: (args.batches * args.batch_size) as u64,
        wall_s,
        batch_ms: Vec::new(),
        bytes: 0,
        pages: 0,
        read_calls: 0,
        peak_rss_bytes: vm_hwm_bytes(std::process::id()).unwrap_or(0),
    };
    for (ms, stats) in per_thread.into_iter().collect::<Result<Vec<_>>>()?.into_iter().flatten() {
        report.batch_ms.push(ms);
        report.bytes += stats.bytes;
        report.pages += stats.pages;
        report.read_calls += stats.read_calls;
    }
    Ok(report)
}
