//! `cellar-bench corpus`: a synthetic retrieval collection of any size whose relevance judgments
//! are known (issue 17.1; the model is in `model.rs`). It writes one folder that is at once a
//! BEIR collection (corpus.jsonl, queries.jsonl, qrels/test.tsv: `cellar eval --data`) and an
//! embeddings folder (`cellar index --vectors`), with the queries' own vectors beside it in
//! `query-vectors/` (`cellar eval --query-vectors`): no encoder runs anywhere.

mod model;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cellar_core::codec::CodecKind;
use cellar_core::{CellarError, IoContext, Result};
use cellar_search::embeddings::{write_shard, NpyDtype, CORPUS_FILE};
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::{BuildOptions, EmbeddedDoc, Index, Metadata};

use model::{CorpusConfig, Model};

/// The folder of the queries' vectors inside a collection (an embeddings folder of its own).
const QUERY_VECTORS_DIR: &str = "query-vectors";

#[derive(clap::Args)]
pub struct CorpusArgs {
    /// Documents.
    #[arg(long)]
    pub docs: u64,
    /// Judged queries.
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// Dimension of the token vectors.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    /// Content words of the vocabulary (besides 300 background words).
    #[arg(long, default_value_t = 50_000)]
    pub vocab: usize,
    #[arg(long, default_value_t = 200)]
    pub topics: usize,
    /// Content words in each topic's vocabulary.
    #[arg(long, default_value_t = 1000)]
    pub topic_words: usize,
    /// Mean document length in words, one token vector per word.
    #[arg(long, default_value_t = 60.0)]
    pub mean_words: f64,
    #[arg(long, default_value_t = 17)]
    pub seed: u64,
    /// Documents per embeddings shard.
    #[arg(long, default_value_t = 10_000)]
    pub shard_docs: u64,
    /// Threads generating documents (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// A new folder for the collection.
    #[arg(long)]
    pub out: PathBuf,
    /// Build this index from the documents as they are generated instead of writing their
    /// vectors to `--out` (which keeps the texts, queries, qrels and query vectors): no
    /// embeddings folder as large as the store on the disk, one pass.
    #[arg(long)]
    pub index: Option<PathBuf>,
    /// Codec of the index built by `--index`.
    #[arg(long, default_value = CodecKind::DEFAULT.name())]
    pub codec: CodecKind,
    /// Build `--index` without its IVF (`cellar ivf` adds one later).
    #[arg(long)]
    pub no_ivf: bool,
}

impl CorpusArgs {
    fn config(&self) -> CorpusConfig {
        CorpusConfig {
            docs: self.docs,
            queries: self.queries,
            dim: self.dim,
            vocab: self.vocab,
            topics: self.topics,
            topic_words: self.topic_words,
            mean_words: self.mean_words,
            seed: self.seed,
        }
    }
}

pub fn run(args: CorpusArgs) -> Result<()> {
    let started = Instant::now();
    let model = Model::new(args.config()).map_err(CellarError::InvalidInput)?;
    if args.out.exists() {
        return Err(CellarError::invalid(format!("{} exists: give a new folder", args.out.display())));
    }
    if args.shard_docs == 0 {
        return Err(CellarError::invalid("--shard-docs must be at least 1"));
    }
    let threads =
        args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    std::fs::create_dir_all(&args.out).at(&args.out)?;
    write_queries(&model, &args.out)?;
    let tokens = match &args.index {
        None => write_documents(&model, &args.out, args.shard_docs, threads)?,
        Some(index) => build_index(&model, &args, index, threads)?,
    };
    let summary = serde_json::json!({
        "config": model.config(),
        "tokens": tokens,
        "index": args.index,
        "secs": started.elapsed().as_secs_f64(),
    });
    let path = args.out.join("corpus.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&summary).expect("plain values")).at(&path)?;
    println!(
        "wrote {} documents ({tokens} token vectors of {} dims) and {} judged queries to {}{} in {:.1} s",
        args.docs,
        args.dim,
        args.queries,
        args.out.display(),
        args.index.as_ref().map_or(String::new(), |i| format!(", the index to {}", i.display())),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Documents generated at once: few enough that two batches in flight stay small (1,024
/// documents of 60 tokens of 128 dims are 31 MB as f32).
const BATCH_DOCS: u64 = 1024;

/// One generated document as the index and the embeddings folder take it.
struct Generated {
    id: String,
    text: String,
    tokens: Vec<f32>,
    pooled: Vec<f32>,
}

/// Documents `docs`, generated on `threads` threads (each a contiguous run), in order.
fn generate(model: &Model, docs: std::ops::Range<u64>, threads: usize) -> Vec<Generated> {
    let n = (docs.end - docs.start) as usize;
    let per = n.div_ceil(threads).max(1);
    let one = |i: u64| {
        let doc = model.doc(i);
        Generated {
            id: doc_id(i),
            text: model::words_text(&doc.words),
            tokens: doc.tokens,
            pooled: doc.pooled,
        }
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .step_by(per)
            .map(|from| {
                let range = docs.start + from as u64..docs.start + (from + per).min(n) as u64;
                scope.spawn(move || range.map(one).collect::<Vec<_>>())
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a generator thread panicked")).collect()
    })
}

/// Every document in batches, the next generated while the caller consumes one.
fn batches<'m>(
    model: &'m Model,
    threads: usize,
    scope: &'m std::thread::Scope<'m, '_>,
) -> std::sync::mpsc::Receiver<Vec<Generated>> {
    let (send, receive) = std::sync::mpsc::sync_channel(1);
    let docs = model.config().docs;
    scope.spawn(move || {
        for first in (0..docs).step_by(BATCH_DOCS as usize) {
            if send.send(generate(model, first..(first + BATCH_DOCS).min(docs), threads)).is_err() {
                return;
            }
        }
    });
    receive
}

/// The documents as float16 shards of `shard_docs` and corpus lines; returns the token count.
fn write_documents(model: &Model, out: &Path, shard_docs: u64, threads: usize) -> Result<u64> {
    let (docs, dim) = (model.config().docs, model.config().dim);
    let corpus_path = out.join(CORPUS_FILE);
    let mut corpus = std::io::BufWriter::new(std::fs::File::create(&corpus_path).at(&corpus_path)?);
    let mut tokens = 0u64;
    let shards = docs.div_ceil(shard_docs);
    for (n, first) in (0..docs).step_by(shard_docs as usize).enumerate() {
        let (mut flat, mut pooled, mut lens) = (Vec::new(), Vec::new(), Vec::new());
        let end = (first + shard_docs).min(docs);
        for from in (first..end).step_by(BATCH_DOCS as usize) {
            for doc in generate(model, from..(from + BATCH_DOCS).min(end), threads) {
                lens.push(doc.tokens.len() / dim);
                flat.extend_from_slice(&doc.tokens);
                pooled.extend_from_slice(&doc.pooled);
                corpus_line(&mut corpus, &doc).at(&corpus_path)?;
            }
        }
        tokens += lens.iter().sum::<usize>() as u64;
        write_shard(out, n, NpyDtype::F16, dim, &flat, &pooled, &lens)?;
        eprintln!("cellar-bench corpus: shard {}/{shards} written ({tokens} tokens so far)", n + 1);
    }
    corpus.flush().at(&corpus_path)?;
    Ok(tokens)
}

fn corpus_line(out: &mut impl std::io::Write, doc: &Generated) -> std::io::Result<()> {
    writeln!(out, "{}", serde_json::json!({"_id": doc.id, "text": doc.text}))
}

/// Builds `index` from the documents as they are generated (the texts also go to `--out`'s
/// corpus.jsonl, so BM25-only peers can index the same collection); returns the token count.
fn build_index(model: &Model, args: &CorpusArgs, index: &Path, threads: usize) -> Result<u64> {
    let corpus_path = args.out.join(CORPUS_FILE);
    let mut corpus = std::io::BufWriter::new(std::fs::File::create(&corpus_path).at(&corpus_path)?);
    let mut options = BuildOptions::new(&corpus_path, index);
    options.codec = args.codec;
    options.progress = true;
    options.ivf = (!args.no_ivf).then(IvfBuildOptions::default);
    let tokens = std::cell::Cell::new(0u64);
    std::thread::scope(|scope| -> Result<()> {
        let receive = batches(model, threads, scope);
        let docs = receive.into_iter().flatten().map(|doc| {
            tokens.set(tokens.get() + (doc.tokens.len() / model.config().dim) as u64);
            // A corpus line that cannot be written stops the build (which then removes itself).
            corpus_line(&mut corpus, &doc).at(&corpus_path)?;
            Ok(EmbeddedDoc {
                id: doc.id,
                title: String::new(),
                text: doc.text,
                metadata: Metadata::default(),
                tokens: doc.tokens,
                pooled: Some(doc.pooled),
            })
        });
        Index::build_from_embeddings(&options, model.config().dim, Some(model.config().docs), docs).map(drop)
    })?;
    corpus.flush().at(&corpus_path)?;
    Ok(tokens.get())
}

fn doc_id(i: u64) -> String {
    format!("d{i}")
}

/// queries.jsonl, qrels/test.tsv and the query-vectors folder (float32: queries are few).
fn write_queries(model: &Model, out: &Path) -> Result<()> {
    let dim = model.config().dim;
    let (mut lines, mut qrels) = (String::new(), String::from("query-id\tcorpus-id\tscore\n"));
    let (mut tokens, mut pooled, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    for q in 0..model.config().queries as u64 {
        let query = model.query(q);
        let id = format!("q{q}");
        writeln!(lines, "{}", serde_json::json!({"_id": id, "text": model::words_text(&query.words)}))
            .expect("a String takes writes");
        for (doc, grade) in &query.relevant {
            writeln!(qrels, "{id}\t{}\t{grade}", doc_id(*doc)).expect("a String takes writes");
        }
        tokens.extend_from_slice(&query.tokens);
        pooled.extend_from_slice(&query.pooled);
        lens.push(query.words.len());
    }
    let write = |path: PathBuf, text: &str| std::fs::write(&path, text).at(&path);
    write(out.join("queries.jsonl"), &lines)?;
    std::fs::create_dir_all(out.join("qrels")).at(out)?;
    write(out.join("qrels").join("test.tsv"), &qrels)?;
    let vectors = out.join(QUERY_VECTORS_DIR);
    std::fs::create_dir_all(&vectors).at(&vectors)?;
    write_shard(&vectors, 0, NpyDtype::F32, dim, &tokens, &pooled, &lens)?;
    write(vectors.join(CORPUS_FILE), &lines)
}
