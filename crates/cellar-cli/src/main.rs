//! `cellar`: the command-line tool. Each subcommand lives in its own module; this file only
//! parses arguments and turns errors into a message and exit code 2.

mod bench_ivf;
mod bench_load;
mod bench_store;
mod bench_stream;
mod cgroup;
mod eval_cmd;
mod feed_cmd;
mod index_cmd;
mod inspect;
mod ivf_cmd;
mod progress;
mod search_cmd;
mod serve_cmd;
mod stream_search_cmd;
mod synth;
mod tune_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cellar", version, about = "SSD-resident late-interaction retrieval")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Internal: join this cgroup-v1 memory cgroup before doing anything (used by bench-store).
    #[arg(long, global = true, hide = true)]
    cgroup: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Build an index (vectors, BM25, texts) from a BEIR folder or a corpus.jsonl.
    Index(index_cmd::IndexArgs),
    /// Build the IVF (the dense first stage on disk) of an existing index.
    Ivf(ivf_cmd::IvfArgs),
    /// Answer one query: bm25, dense-exact, ivf, dense, rerank or hybrid.
    Search(search_cmd::SearchArgs),
    /// Evaluate every mode against a split's relevance judgments and print one table.
    Eval(eval_cmd::EvalArgs),
    /// Sweep alpha and rerank_k on a development split and save the best as defaults.
    Tune(tune_cmd::TuneArgs),
    /// Serve an index and/or streaming collections over HTTP/JSON (search, batch search, streams,
    /// health, metrics, OpenAPI).
    Serve(serve_cmd::ServeArgs),
    /// Write a JSONL file of documents into a streaming collection (batches, group commit).
    Feed(feed_cmd::FeedArgs),
    /// Exact search inside one group of a streaming collection.
    StreamSearch(stream_search_cmd::StreamSearchArgs),
    /// Print an index's manifest and file headers without loading its vectors.
    Inspect(inspect::InspectArgs),
    /// Write a store of clustered synthetic token vectors (scale tests without a model).
    Synth(synth::SynthArgs),
    /// Benchmark the ram, mmap and direct readers side by side, with fio and memory caps.
    BenchStore(bench_store::BenchStoreArgs),
    /// Open-loop load benchmark of `cellar serve`: Poisson arrivals over a sweep of offered QPS,
    /// latency percentiles, throughput, errors; optional memory caps; JSON, markdown and a plot.
    Bench(bench_load::BenchArgs),
    /// Studies of the IVF first stage: recall over nprobe, the prefetcher, rerank_k, RAM caps.
    BenchIvf(bench_ivf::BenchIvfArgs),
    /// Benchmark streaming collections: feed rate, cold per-group latency vs group size, scan
    /// rate vs disk bandwidth, RAM per document, and a global collection filtered by user.
    BenchStream(bench_stream::BenchStreamArgs),
    /// Internal: one reader's measurement, run by bench-store in a child process.
    #[command(hide = true)]
    BenchStoreWorker(bench_store::worker::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let joined = cli.cgroup.as_deref().map_or(Ok(()), bench_store::join_cgroup);
    let result = joined.and_then(|()| match cli.command {
        Command::Index(args) => index_cmd::run(args),
        Command::Ivf(args) => ivf_cmd::run(args),
        Command::Search(args) => search_cmd::run(args),
        Command::Eval(args) => eval_cmd::run(args),
        Command::Tune(args) => tune_cmd::run(args),
        Command::Serve(args) => serve_cmd::run(args),
        Command::Feed(args) => feed_cmd::run(args),
        Command::StreamSearch(args) => stream_search_cmd::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Synth(args) => synth::run(args),
        Command::BenchStore(args) => bench_store::run(args),
        Command::Bench(args) => bench_load::run(args),
        Command::BenchIvf(args) => bench_ivf::run(args),
        Command::BenchStream(args) => bench_stream::run(args),
        Command::BenchStoreWorker(args) => bench_store::worker::run(args),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cellar: error: {e}");
            ExitCode::from(2)
        }
    }
}
