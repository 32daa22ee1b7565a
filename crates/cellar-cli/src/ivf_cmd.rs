//! `cellar ivf build`: adds (or rebuilds) the IVF of an index over the build's documents;
//! `cellar ivf retrain`: re-trains it on every document alive, written ones included; and the
//! IVF query flags shared by `cellar search` and `cellar eval`.

use std::path::PathBuf;

use cellar_core::Result;
use cellar_search::ivf::{build_ivf, IvfBuildOptions, IvfConfig};
use clap::{Args, Subcommand};

#[derive(Args)]
pub struct IvfArgs {
    #[command(subcommand)]
    pub action: IvfAction,
}

#[derive(Subcommand)]
pub enum IvfAction {
    /// Build the IVF over an index's pooled vectors (streams them; replaces an existing IVF).
    Build(IvfBuildArgs),
    /// Re-train the IVF of an index that was written to on every document alive (the build's
    /// and the written ones), with its cluster size and seed: for when written documents have
    /// moved the distribution (`cellar inspect` shows the drift; a server retrains on its own
    /// past 1.5).
    Retrain(IvfRetrainArgs),
}

#[derive(Args)]
pub struct IvfRetrainArgs {
    #[arg(long)]
    pub index: PathBuf,
}

/// How the IVF is built, and the query defaults stored with it.
#[derive(Args, Clone)]
pub struct IvfBuildFlags {
    /// Target documents per cluster.
    #[arg(long, default_value_t = 256)]
    pub cluster_size: usize,
    /// Pooled vectors the k-means trains on at least (the only ones held in RAM): raised to 16
    /// per cluster within 256 MiB; when smaller than the collection, one refinement pass over
    /// every document follows.
    #[arg(long, default_value_t = 32_768)]
    pub train_sample: usize,
    /// Default clusters probed per query (default: half of the clusters, 4 to 64).
    #[arg(long)]
    pub default_nprobe: Option<usize>,
    /// Default shortlist size as a multiple of the depth.
    #[arg(long, default_value_t = 2.0)]
    pub default_oversample: f32,
    /// Prefetch by default (dense and hybrid modes): true or false.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub default_prefetch: bool,
    /// Default prefetch step (fraction of nprobe probed before the prefetch starts).
    #[arg(long, default_value_t = 0.5)]
    pub default_prefetch_step: f32,
    /// Default IVF candidates joined to BM25's in hybrid mode (0: BM25 only).
    #[arg(long, default_value_t = cellar_search::ivf::build::DEFAULT_HYBRID_CANDIDATES)]
    pub default_hybrid_candidates: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

impl IvfBuildFlags {
    pub fn options(&self) -> IvfBuildOptions {
        let mut options = IvfBuildOptions {
            cluster_size: self.cluster_size,
            train_sample: self.train_sample,
            seed: self.seed,
            progress: true,
            ..IvfBuildOptions::default()
        };
        options.defaults.nprobe = self.default_nprobe.unwrap_or(0);
        options.defaults.oversample = self.default_oversample;
        options.defaults.prefetch = self.default_prefetch;
        options.defaults.prefetch_step = self.default_prefetch_step;
        options.defaults.hybrid_candidates = self.default_hybrid_candidates;
        options
    }
}

#[derive(Args)]
pub struct IvfBuildArgs {
    #[arg(long)]
    pub index: PathBuf,
    #[command(flatten)]
    pub flags: IvfBuildFlags,
}

pub fn run(args: IvfArgs) -> Result<()> {
    match args.action {
        IvfAction::Build(build) => {
            let config = build_ivf(&build.index, &build.flags.options())?;
            print_report(&config);
            Ok(())
        }
        IvfAction::Retrain(args) => {
            let index = cellar_search::Index::open(&args.index, cellar_search::OpenOptions::default())?;
            let before = index.live_stats().ivf_drift;
            let config = index.retrain_ivf()?;
            print_report(&config);
            let drift = |d: Option<f64>| d.map_or("-".to_string(), |d| format!("{d:.2}"));
            println!("drift of the written documents: {} before", drift(before));
            Ok(())
        }
    }
}

pub fn print_report(config: &IvfConfig) {
    let b = &config.build;
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    println!(
        "ivf: {} docs in {} clusters ({}..{} per cluster) in {:.1} s (train {:.1} s, assign {:.1} s, write {:.1} s); on disk: centroids {:.2} MiB (in RAM), postings {:.2} MiB, vectors {:.2} MiB; default nprobe {}",
        config.docs,
        config.clusters,
        b.smallest_cluster,
        b.largest_cluster,
        b.total_secs,
        b.train_secs,
        b.assign_secs,
        b.write_secs,
        mib(b.centroids_bytes),
        mib(b.postings_bytes),
        mib(b.vectors_bytes),
        config.search.nprobe
    );
}
