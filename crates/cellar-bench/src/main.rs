//! `cellar-bench`: Cellar's benchmarks, kept out of the `cellar` binary users install. Each
//! benchmark lives in its own module; what they share (percentiles, child processes in memory
//! cgroups, provenance) is in `harness`. This file only parses arguments and turns errors into a
//! message and exit code 2.

mod codecs;
mod corpus;
mod cost;
mod embeddings;
mod exact;
mod filter;
mod fusion;
mod fuzz;
mod harness;
mod ivf;
mod live;
mod load;
mod plaid;
mod retrain;
mod store;
mod stream;
mod synth;
mod tokens_met;
mod tokens_retrain;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Allocations fail above a cap while `fuzz` runs a parser, and never otherwise.
#[global_allocator]
static ALLOCATOR: fuzz::CappedAlloc = fuzz::CappedAlloc;

#[derive(Parser)]
#[command(name = "cellar-bench", version, about = "Benchmarks of Cellar (not part of the cellar binary)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Open-loop load benchmark of `cellar serve`: Poisson arrivals over a sweep of offered QPS,
    /// latency percentiles, throughput, errors; optional memory caps; JSON, markdown and a plot.
    Load(load::LoadArgs),
    /// Bytes per token against nDCG@10 for every codec, with and without PCA, each recoded
    /// from one f16 index.
    Codecs(codecs::CodecsArgs),
    /// A synthetic retrieval collection of any size with known judgments: BEIR text, token
    /// vectors for `cellar index --vectors`, and the queries' vectors (no encoder runs).
    Corpus(corpus::CorpusArgs),
    /// The smallest machine that holds a collection at a P95 and QPS, and its monthly cost,
    /// from a measured load run (ColBERT-serve's Table 1).
    Cost(cost::CostArgs),
    /// Exact MaxSim over every document for a sample of queries given as vectors, against the
    /// served modes' rankings.
    Exact(exact::ExactArgs),
    /// Hybrid fusion without judgments: every fusion method at fixed weights, cross-validated
    /// and tuned, against BM25 and rerank on each collection; the safest fixed setting.
    Fusion(fusion::FusionArgs),
    /// Folders of embeddings for `cellar index --vectors`: synthetic, or an index's exported.
    Embeddings(embeddings::EmbeddingsArgs),
    /// A living index under writes: ingest rates, time to visibility, search latency beside
    /// ingest and a merge, disk and RAM per written document.
    Live(live::LiveArgs),
    /// Filtered search: recall@10 against exact filtered MaxSim at 50%, 10%, 1% and 0.1%
    /// selectivity, first-stage filtering against the exact switch and a post-filter.
    Filter(filter::FilterArgs),
    /// IVF drift of documents from the same and from another collection, and what a retrain
    /// gives back: recall at the default nprobe before and after, its time, search beside it.
    Retrain(retrain::RetrainArgs),
    /// Documents written after a token stage was built: the first query after an open, the RAM
    /// their lists hold and the dense mode's recall, before and after `Index::retrain_tokens`.
    TokensRetrain(tokens_retrain::TokensRetrainArgs),
    /// Whether the token stage meets, per query token, the exact top 10's documents and the
    /// token MaxSim takes from each, by nprobe and route, with each token in one leaf or spilled
    /// to a second.
    TokensMet(tokens_met::TokensMetArgs),
    /// Cellar's dense mode side by side with next-plaid on identical vectors: recall of the
    /// exact top 10/100, nDCG@10, latency, P95 against QPS, peak RSS, index bytes, build CPU
    /// (next-plaid needs the `next-plaid` feature).
    Plaid(plaid::PlaidArgs),
    /// Benchmark the ram, mmap and direct readers side by side, with fio and memory caps.
    Store(store::StoreArgs),
    /// Studies of the IVF first stage: recall over nprobe, the prefetcher, rerank_k, RAM caps.
    Ivf(ivf::IvfArgs),
    /// Benchmark streaming collections: feed rate, cold per-group latency vs group size, scan
    /// rate vs disk bandwidth, RAM per document, and a global collection filtered by user.
    Stream(stream::StreamArgs),
    /// Structure-aware random fuzzing of every byte parser: executions, refusals by error code
    /// and panics per target.
    Fuzz(fuzz::FuzzArgs),
    /// Write a store of clustered synthetic token vectors (scale tests without a model).
    Synth(synth::SynthArgs),
    /// Internal: one reader's measurement, run by `store` in a child process.
    #[command(hide = true)]
    StoreWorker(store::worker::WorkerArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Load(args) => load::run(args),
        Command::Codecs(args) => codecs::run(args),
        Command::Corpus(args) => corpus::run(args),
        Command::Cost(args) => cost::run(args),
        Command::Embeddings(args) => embeddings::run(args),
        Command::Exact(args) => exact::run(args),
        Command::Fusion(args) => fusion::run(args),
        Command::Live(args) => live::run(args),
        Command::Filter(args) => filter::run(args),
        Command::Retrain(args) => retrain::run(args),
        Command::TokensRetrain(args) => tokens_retrain::run(args),
        Command::TokensMet(args) => tokens_met::run(args),
        Command::Plaid(args) => plaid::run(args),
        Command::Store(args) => store::run(args),
        Command::Ivf(args) => ivf::run(args),
        Command::Stream(args) => stream::run(args),
        Command::Synth(args) => synth::run(args),
        Command::Fuzz(args) => fuzz::run(args),
        Command::StoreWorker(args) => store::worker::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cellar-bench: error: {e}");
            ExitCode::from(2)
        }
    }
}
