//! `cellar`: the command-line tool. Each subcommand lives in its own module; this file only
//! parses arguments and turns errors into a message and the exit code of their kind (`exit.rs`).
//! Benchmarks are not here: they are the `cellar-bench` binary (crates/cellar-bench).

mod eval_cmd;
mod exit;
mod feed_cmd;
mod index_cmd;
mod inspect;
mod ivf_cmd;
mod search_cmd;
mod serve_cmd;
mod splade_cmd;
mod stream_search_cmd;
mod tokens_cmd;
mod tune_cmd;
mod write_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cellar",
    version,
    about = "SSD-resident late-interaction retrieval",
    after_help = exit::help()
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build an index (vectors, BM25, texts) from a BEIR folder or a corpus.jsonl.
    Index(index_cmd::IndexArgs),
    /// Build the IVF (the dense first stage on disk) of an existing index.
    Ivf(ivf_cmd::IvfArgs),
    /// Build the learned-sparse (SPLADE) first stage of an index.
    Splade(splade_cmd::SpladeArgs),
    /// Build the token-level first stage (a quantizer of the token vectors and its document
    /// lists) of an index: dense searches without text then find what MaxSim ranks first.
    Tokens(tokens_cmd::TokensArgs),
    /// Answer one query: bm25, dense-exact, ivf, dense, rerank or hybrid.
    Search(search_cmd::SearchArgs),
    /// Evaluate every mode against a split's relevance judgments and print one table.
    Eval(eval_cmd::EvalArgs),
    /// Sweep alpha and rerank_k on a development split and save the best as defaults.
    Tune(tune_cmd::TuneArgs),
    /// Add (or with --update replace) documents of a JSONL file to an index, durably.
    Add(write_cmd::AddArgs),
    /// Delete documents from an index by id, durably.
    Delete(write_cmd::DeleteArgs),
    /// Serve an index and/or streaming collections over HTTP/JSON (search, batch search, streams,
    /// health, metrics, OpenAPI).
    Serve(serve_cmd::ServeArgs),
    /// Write a JSONL file of documents into a streaming collection (batches, group commit).
    Feed(feed_cmd::FeedArgs),
    /// Exact search inside one group of a streaming collection.
    StreamSearch(stream_search_cmd::StreamSearchArgs),
    /// Print an index's (or a vector store's) manifest and file headers; --verify reads every file
    /// against its checksums.
    Inspect(inspect::InspectArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors (stdout, 0); a usage error is the input's.
            let code = if e.use_stderr() { exit::Exit::Input.code() } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Index(args) => index_cmd::run(args),
        Command::Ivf(args) => ivf_cmd::run(args),
        Command::Splade(args) => splade_cmd::run(args),
        Command::Tokens(args) => tokens_cmd::run(args),
        Command::Search(args) => search_cmd::run(args),
        Command::Eval(args) => eval_cmd::run(args),
        Command::Tune(args) => tune_cmd::run(args),
        Command::Add(args) => write_cmd::add(args),
        Command::Delete(args) => write_cmd::delete(args),
        Command::Serve(args) => serve_cmd::run(args),
        Command::Feed(args) => feed_cmd::run(args),
        Command::StreamSearch(args) => stream_search_cmd::run(args),
        Command::Inspect(args) => inspect::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cellar: error: {e}");
            ExitCode::from(exit::Exit::of(&e).code())
        }
    }
}
