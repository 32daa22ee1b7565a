//! `cellar-bench stream`: the streaming mode's benchmark on a synthetic corpus with the Vespa
//! post's distribution of documents per user (scaled down, see `data.rs`): feed throughput
//! (batched group commit, and one fsync per document), compaction, per-group query latency
//! against group size with a cold page cache, group scan rate against the disk's sequential
//! bandwidth measured on the same file, RAM per document, and the same per-user search done as
//! a filtered scan of one global collection. It also exports pooled vectors and exact answers
//! for `bench/stream_global.py` (faiss IVF filtered by user).

mod data;
mod measure;
mod report;

use std::path::{Path, PathBuf};
use std::time::Instant;

use cellar_core::codec::CodecKind;
use cellar_core::{CellarError, Result};
use cellar_search::{BuildOptions, EmbeddedDoc, Index};
use cellar_stream::{Collection, Durability, Options};
use clap::Args;

use crate::harness::provenance::Provenance;
use data::Corpus;

#[derive(Args)]
pub struct StreamArgs {
    /// Working directory (collections, exported vectors); replaced.
    #[arg(long, default_value = "bench/work/stream")]
    pub work: PathBuf,
    /// Where stream-bench.{json,md} go.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// Users; split 35/28/22/10/5% into the Vespa post's classes.
    #[arg(long, default_value_t = 200)]
    pub users: usize,
    /// Documents per user relative to the post (0.2: 20, 200, 2,000, 10,000, 20,000).
    #[arg(long, default_value_t = 0.2)]
    pub scale: f64,
    /// Token vectors per document.
    #[arg(long, default_value_t = 16)]
    pub tokens: usize,
    #[arg(long, default_value_t = 64)]
    pub dim: usize,
    /// Documents per write batch (one log record, one fsync).
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Cold queries per size class.
    #[arg(long, default_value_t = 5)]
    pub queries: usize,
    /// Token vectors per query.
    #[arg(long, default_value_t = 8)]
    pub query_tokens: usize,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Skip the global-collection comparison (halves the run).
    #[arg(long)]
    pub no_global: bool,
    /// Codec of the streams: f16 (the default), or a fitted codec (residual2, int8) taken from
    /// an index the benchmark builds first from `CODEC_SOURCE_DOCS` of the corpus's documents
    /// (`Options::codec_from`).
    #[arg(long, default_value = "f16")]
    pub codec: CodecKind,
}

/// Documents the codec source is fitted on: the first of the feed order (a seeded shuffle of
/// every user's documents, so a sample of them all).
const CODEC_SOURCE_DOCS: usize = 4000;

/// An index of `codec` fitted on a sample of the corpus's documents, the streams' `codec_from`.
fn codec_source(corpus: &Corpus, out: &Path, codec: CodecKind) -> Result<PathBuf> {
    let mut build = BuildOptions::new("", out);
    build.codec = codec;
    let docs = corpus.feed_order().into_iter().take(CODEC_SOURCE_DOCS).map(|(u, i)| {
        let doc = corpus.doc(u as usize, i as usize);
        let vectors = doc.vectors.expect("the corpus's documents have vectors");
        let tokens = vectors.tokens.concat();
        Ok(EmbeddedDoc { id: format!("{}/{}", u, doc.id), tokens, ..Default::default() })
    });
    Index::build_from_embeddings(&build, corpus.dim, None, docs)?;
    Ok(out.to_path_buf())
}

pub fn run(args: StreamArgs) -> Result<()> {
    if args.users == 0 || args.batch == 0 || args.queries == 0 || !args.scale.is_finite() || args.scale <= 0.0
    {
        return Err(CellarError::InvalidInput(
            "--users, --batch, --queries and --scale must be positive".into(),
        ));
    }
    let corpus = Corpus::new(args.users, args.scale, args.tokens, args.dim, args.seed);
    let _ = std::fs::remove_dir_all(&args.work);
    std::fs::create_dir_all(&args.work)
        .map_err(|e| CellarError::Io { path: args.work.clone(), source: e })?;
    eprintln!(
        "cellar-bench stream: {} users, {} documents of {}x{} f16 token vectors",
        corpus.users.len(),
        corpus.total_docs(),
        args.tokens,
        args.dim
    );
    let started = Instant::now();
    let codec_from = match args.codec {
        CodecKind::F16 => None,
        codec => Some(codec_source(&corpus, &args.work.join("codec-source"), codec)?),
    };
    let feeding = feed_options(codec_from);
    let per_user = args.work.join("per-user");
    let feed = measure::feed(&corpus, &per_user, args.batch, &feeding, |d| d)?;
    eprintln!("  fed at {:.0} docs/s; compacted in {:.1} s", feed.docs_per_s, feed.compact_s);
    let single = vec![
        measure::single_puts(&corpus, &args.work.join("single-1"), 2000, 1, &feeding)?,
        measure::single_puts(&corpus, &args.work.join("single-8"), 2000, 8, &feeding)?,
    ];
    // First, on its own: a collection is opened by one handle at a time (its directory lock).
    let ram = measure::ram(&per_user, corpus.total_docs())?;
    let collection = Collection::open(&per_user, None, bench_options())?;
    let disk = measure::sequential_read(&collection)?;
    let queries = measure::per_group(&corpus, &collection, &args, false)?;
    eprintln!("  per-group queries done");
    let global = if args.no_global {
        None
    } else {
        let dir = args.work.join("global");
        let global_feed = measure::feed(&corpus, &dir, args.batch, &feeding, measure::into_global)?;
        let global = Collection::open(&dir, None, bench_options())?;
        Some((global_feed, measure::per_group(&corpus, &global, &args, true)?))
    };
    measure::export(&corpus, &collection, &args.work.join("export"), &args)?;
    let report = report::Report {
        provenance: Provenance::now(),
        users: corpus.users.len(),
        docs: corpus.total_docs(),
        tokens: args.tokens,
        dim: args.dim,
        codec: args.codec.name().to_string(),
        batch: args.batch,
        feed,
        single,
        ram,
        disk,
        queries,
        global,
        seconds: started.elapsed().as_secs_f64(),
    };
    report::write(&report, &args.out)
}

/// How the benchmark opens a collection to query it: no background work while timing.
pub fn bench_options() -> Options {
    Options { background_compaction: false, ..Options::default() }
}

/// How it feeds: the defaults (fsync, 64 MiB memtable, background compaction), with the codec
/// of `codec_from` when given.
pub fn feed_options(codec_from: Option<PathBuf>) -> Options {
    Options { durability: Durability::Fsync, codec_from, ..Options::default() }
}
