//! `cellar-bench ivf`: the studies of the IVF first stage and the prefetcher.
//!
//! - `recall`: recall@100 (and @10) of the IVF against the exact pooled scan, over nprobe, with and
//!   without rescoring, with the probe's latency and bytes;
//! - `prefetch`: the prefetcher's hit rate, bytes and wait against the prefetch step (ESPN fig. 7);
//! - `rerank-k`: nDCG@10 against rerank_k, normalised to re-ranking every candidate (ESPN fig. 5);
//! - `ram`: IVF latency and recall against a memory cap on a synthetic collection (the DiskBBQ
//!   table), each cap in its own memory-cgroup child process with a cold page cache, and the build
//!   itself under a cap.
//!
//! Every study writes `PREFIX.json` and `PREFIX.md`; `bench/ivf_plots.py` draws the plots.

pub(crate) mod common;
mod prefetch;
mod ram;
mod recall;
mod rerank_k;
mod synthetic;

use cellar_core::Result;
use clap::{Args, Subcommand};

#[derive(Args)]
pub struct IvfArgs {
    #[command(subcommand)]
    pub study: Study,
}

#[derive(Subcommand)]
pub enum Study {
    /// Recall of the IVF against the exact scan, over nprobe, with and without rescoring.
    Recall(recall::RecallArgs),
    /// The prefetcher's hit rate and cost against the prefetch step.
    Prefetch(prefetch::PrefetchArgs),
    /// Quality against rerank_k, normalised to re-ranking every candidate.
    RerankK(rerank_k::RerankKArgs),
    /// IVF latency against a memory cap on a synthetic collection (and the build under a cap).
    Ram(ram::RamArgs),
    /// Internal: one capped measurement of `ram`, run in a child process.
    #[command(hide = true)]
    RamWorker(ram::WorkerArgs),
    /// Internal: the IVF build of `ram`, run in a capped child process.
    #[command(hide = true)]
    RamBuild(ram::BuildArgs),
}

pub fn run(args: IvfArgs) -> Result<()> {
    match args.study {
        Study::Recall(a) => recall::run(a),
        Study::Prefetch(a) => prefetch::run(a),
        Study::RerankK(a) => rerank_k::run(a),
        Study::Ram(a) => ram::run(a),
        Study::RamWorker(a) => ram::worker(a),
        Study::RamBuild(a) => ram::build_child(a),
    }
}
