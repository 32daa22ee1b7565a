//! `cellar tokens build`: adds (or rebuilds) the token-level first stage of an index: a
//! quantizer of 4·√tokens leaves trained on a sample of its token vectors, and per leaf its
//! tokens' postings (document, residual sign bits), under `tokens/`. Dense searches then take their candidates
//! from it (and hybrid joins them to BM25's); `--dense-stage pooled` still asks for the IVF.
//! `cellar tokens retrain` rebuilds it over every document alive, the written ones included.

use std::path::PathBuf;

use cellar_core::Result;
use cellar_search::tokens::{build_tokens, TokenDefaults, TokensBuildOptions, TokensConfig};
use clap::{Args, Subcommand};

#[derive(Args)]
pub struct TokensArgs {
    #[command(subcommand)]
    pub action: TokensAction,
}

#[derive(Subcommand)]
pub enum TokensAction {
    /// Quantize the build's token vectors and write the leaves' document lists (replaces an
    /// existing token stage; no index may be open meanwhile).
    Build(TokensBuildArgs),
    /// Rebuild the token stage over every document alive, the build's and the written ones, with
    /// its leaf count, seed and defaults (as the server does once the documents written since
    /// are one for every 8 it covers); writes wait, searches go on with the old stage.
    Retrain(TokensRetrainArgs),
}

#[derive(Args)]
pub struct TokensRetrainArgs {
    #[arg(long)]
    pub index: PathBuf,
}

#[derive(Args)]
pub struct TokensBuildArgs {
    #[arg(long)]
    pub index: PathBuf,
    /// Leaves of the quantizer (default: 4·√tokens rounded down to a power of two; PLAID's rule is 16·√tokens).
    #[arg(long)]
    pub leaves: Option<usize>,
    /// Default leaves probed per query token.
    #[arg(long, default_value_t = TokenDefaults::default().nprobe)]
    pub default_nprobe: usize,
    /// Default groups of leaves scored per query token.
    #[arg(long, default_value_t = TokenDefaults::default().route)]
    pub default_route: usize,
    /// Default token-stage candidates joined to BM25's in hybrid mode (0: BM25 only).
    #[arg(long, default_value_t = TokenDefaults::default().hybrid_candidates)]
    pub default_hybrid_candidates: usize,
    /// Default documents of the stage re-ranked with MaxSim in dense mode (its candidates and rerank_k; default: 0.5% of the documents, 200 to 1,000).
    #[arg(long)]
    pub default_depth: Option<usize>,
    /// The rank, among a query token's routed leaves, of the leaf whose score is imputed to documents without a token in its probed leaves (at least nprobe; default: one leaf in 128).
    #[arg(long)]
    pub default_impute: Option<usize>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

pub fn run(args: TokensArgs) -> Result<()> {
    let args = match args.action {
        TokensAction::Build(args) => args,
        TokensAction::Retrain(args) => {
            let index = cellar_search::Index::open(&args.index, cellar_search::OpenOptions::default())?;
            print_report(&index.retrain_tokens()?);
            return Ok(());
        }
    };
    let options = TokensBuildOptions {
        leaves: args.leaves.unwrap_or(0),
        seed: args.seed,
        defaults: TokenDefaults {
            nprobe: args.default_nprobe,
            route: args.default_route,
            hybrid_candidates: args.default_hybrid_candidates,
            depth: args.default_depth,
            impute: args.default_impute,
        },
        progress: true,
        ..TokensBuildOptions::default()
    };
    print_report(&build_tokens(&args.index, &options)?);
    Ok(())
}

/// The line `cellar tokens build` prints.
pub fn print_report(c: &TokensConfig) {
    let b = &c.build;
    println!(
        "token stage: {} leaves in {} groups over {} tokens (ids below {}); {} postings, lists {:.1} MiB ({:.1} bytes/doc), centroids {:.1} MiB; trained on {} tokens in {:.1}s, assigned in {:.1}s, {:.1}s in all",
        c.leaves,
        c.groups,
        c.tokens,
        c.docs,
        b.postings,
        b.lists_bytes as f64 / (1 << 20) as f64,
        b.disk_bytes_per_doc,
        b.centroids_bytes as f64 / (1 << 20) as f64,
        b.sample_tokens,
        b.train_secs,
        b.assign_secs,
        b.total_secs
    );
}
