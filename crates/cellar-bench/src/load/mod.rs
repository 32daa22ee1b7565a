//! `cellar-bench load`: an open-loop load generator for `cellar serve`. Requests leave on a seeded
//! Poisson schedule at each offered rate whether or not earlier ones returned; per level it
//! records latency percentiles (from the scheduled send time), achieved throughput, errors, 429s
//! and timeouts, with the warm-up excluded. Each configuration is a server this command starts
//! itself (optionally inside a memory cgroup cap that counts page cache, with its peak RSS,
//! the cgroup's peak and disk bytes read per query), or one already running (`--url`, loopback
//! only). With `--qrels`, it also scores what each server answered (nDCG@10, Recall@10). Writes
//! PREFIX.json, PREFIX.md and PREFIX.png (P95 against offered QPS).

mod args;
mod attached;
mod client;
mod config;
mod levels;
mod metrics;
mod output;
mod plot;
mod provenance;
mod quality;
mod queries;
mod report;
pub(crate) mod schedule;
pub(crate) mod server_proc;
mod spawned;
mod sweep;
#[cfg(test)]
mod testserver;

use std::path::PathBuf;

use cellar_core::{CellarError, Result};
use tokio::runtime::Runtime;

use queries::{QuerySet, RequestBodies};

#[derive(clap::Args)]
pub struct LoadArgs {
    /// The `cellar` binary whose `serve` the configurations start (default: the `cellar` beside
    /// this executable, as `cargo build -p cellar-cli` leaves it).
    #[arg(long, value_name = "PATH")]
    pub cellar: Option<PathBuf>,
    /// A server to start and load, as comma-separated key=value: name=NAME, index=DIR,
    /// reader=ram|mmap|direct (default mmap), cap=PCT (memory cap, % of the index size on disk;
    /// omitted: uncapped), threads=N (intra-op threads, default 1), ssd_latency_us=US (direct
    /// reader only), vectors=server|client|compact (client: the bench encodes the queries and
    /// sends query_vectors as JSON numbers, compact: as base64 f32; either way the server starts
    /// with --lazy-encoder and never loads the model),
    /// workers=N and queue=N (the server's --workers and --queue), model_weights=f32|f16 (its
    /// --model-weights). Repeat for several
    /// configurations.
    #[arg(long = "config", value_name = "SPEC")]
    pub configs: Vec<String>,
    /// Load a server that is already running instead (http://127.0.0.1:PORT, localhost or [::1]).
    #[arg(long, conflicts_with = "configs")]
    pub url: Option<String>,
    /// Name of the --url configuration.
    #[arg(long, requires = "url")]
    pub name: Option<String>,
    /// With --url: the server's process id, for its peak RSS and /proc/PID/io reads.
    #[arg(long, requires = "url")]
    pub pid: Option<u32>,
    /// With --url: server (default) or client (needs --index, whose model encodes the queries).
    #[arg(long, requires = "url")]
    pub vectors: Option<String>,
    /// With --url and --vectors client: the index whose encoder turns queries into vectors.
    #[arg(long, requires = "url")]
    pub index: Option<PathBuf>,
    /// BEIR queries.jsonl ({"_id", "text"} per line).
    #[arg(long)]
    pub queries: PathBuf,
    /// The queries' own vectors, for the configurations whose vectors come from the client:
    /// an embeddings folder whose corpus.jsonl lines are the queries (`cellar-bench corpus`
    /// writes one as query-vectors/), instead of encoding them with the index's model.
    #[arg(long)]
    pub query_vectors: Option<PathBuf>,
    /// Keep only the queries judged in this qrels TSV, and score the answers each server
    /// returned against it (nDCG@10 and Recall@10 of the first 200 answer per query).
    #[arg(long)]
    pub qrels: Option<PathBuf>,
    /// Offered loads to sweep, in queries per second.
    #[arg(long, value_delimiter = ',', default_value = "5,10,20,40,80")]
    pub qps: Vec<f64>,
    /// Measured seconds per level.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds sent before each level's measured window, excluded from its statistics.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Longest wait, in seconds, for a level's stragglers after its last send time.
    #[arg(long, default_value_t = 10.0)]
    pub drain: f64,
    /// Per-request limit in seconds (from the scheduled send time); past it: a timeout.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Requests in flight above which a due request is dropped by the client (counted).
    #[arg(long, default_value_t = 2000)]
    pub max_in_flight: usize,
    /// Stop a configuration's sweep after the first level where achieved < 0.8 x offered or more
    /// than 5% of requests failed (errors, 429, timeouts, client drops).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub stop_at_saturation: bool,
    /// Search mode of every request: bm25, dense-exact, ivf, dense, rerank or hybrid.
    #[arg(long, default_value = "hybrid")]
    pub mode: String,
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// Sent only when given (otherwise the server's default).
    #[arg(long)]
    pub rerank_k: Option<usize>,
    /// Sent only when given (otherwise the server's default).
    #[arg(long)]
    pub alpha: Option<f32>,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Draw queries with Zipf popularity of this exponent (e.g. 1.0: a few queries come back
    /// often) instead of cycling through them all in a seeded order.
    #[arg(long)]
    pub zipf: Option<f64>,
    /// Output path prefix: writes PREFIX.json, PREFIX.md and PREFIX.png.
    #[arg(long, default_value = "bench/results/bench-load")]
    pub out: PathBuf,
    /// Configuration the P95 ratios are taken against (default: the first).
    #[arg(long)]
    pub baseline: Option<String>,
    /// Seconds to wait for a started server's GET /healthz.
    #[arg(long, default_value_t = 120)]
    pub health_timeout: u64,
    /// Evict the index's pages from the page cache before each server starts (so every
    /// configuration starts cold, and a capped server's page cache is charged to its cgroup).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub evict_cache: bool,
}

/// What every configuration's run shares.
struct Bench<'a> {
    rt: &'a Runtime,
    args: &'a LoadArgs,
    queries: &'a QuerySet,
    /// The `cellar` binary started for each `--config` (unused with `--url`).
    cellar: PathBuf,
}

pub fn run(args: LoadArgs) -> Result<()> {
    args::validate(&args)?;
    let configs = args::configurations(&args)?;
    let cellar = args::cellar_binary(&args)?;
    let queries = QuerySet::load(&args)?;
    let bodies = RequestBodies::build(&args, &configs, &queries.queries)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| CellarError::internal(format!("cannot start the tokio runtime: {e}")))?;
    let bench = Bench { rt: &rt, args: &args, queries: &queries, cellar };
    let mut results = Vec::new();
    for (n, spec) in configs.into_iter().enumerate() {
        let list = bodies.for_config(&spec);
        let result = if spec.url.is_some() {
            attached::run(&bench, spec, list)?
        } else {
            spawned::run(&bench, spec, list, n)
        };
        results.push(result);
    }
    output::write(&args, &provenance::new_report(&args, queries.queries.len(), results))
}
