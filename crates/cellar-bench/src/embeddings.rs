//! `cellar-bench embeddings`: folders of embeddings in the layout of `cellar index --vectors`
//! (docs/embeddings.md) for the build-from-embeddings benchmark (`bench/embeddings.sh`): a
//! synthetic one of any size, an existing index's own vectors exported, or a collection encoded
//! by the default model exactly as `cellar index` encodes it (float32, before any codec), or a
//! collection's judged queries encoded by an index's own encoder exactly as a text search encodes
//! them (the folder `cellar eval --query-vectors` reads).

use std::path::PathBuf;
use std::time::Instant;

use cellar_core::synth::{SynthConfig, SynthCorpus};
use cellar_core::IoContext;
use cellar_core::Result;
use cellar_search::embeddings::{export, write_shard, NpyDtype, CORPUS_FILE};

#[derive(clap::Args)]
pub struct EmbeddingsArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// Clustered synthetic token vectors (float16), a pooled vector and a short text per document.
    Synth {
        #[arg(long)]
        docs: u64,
        /// Mean tokens per document (log-normal spread).
        #[arg(long, default_value_t = 100)]
        tokens: usize,
        #[arg(long, default_value_t = 128)]
        dim: usize,
        /// Documents per shard.
        #[arg(long, default_value_t = 10_000)]
        shard_docs: u64,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// A BEIR collection encoded by the default model as `cellar index` encodes it (the same
    /// batches of 32 documents in corpus order, all cores), written as float32.
    Encode {
        /// BEIR folder (its corpus.jsonl).
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 1_000)]
        shard_docs: usize,
    },
    /// The judged queries of a split encoded by the index's own encoder exactly as a text search
    /// encodes them (`Index::prepare`: before any PCA or codec), written as float32 with their
    /// ids and texts: the folder `cellar eval --query-vectors` and `cellar-bench exact` read.
    Queries {
        #[arg(long)]
        index: PathBuf,
        /// BEIR folder (queries.jsonl, qrels/<split>.tsv).
        #[arg(long)]
        data: PathBuf,
        #[arg(long, default_value = "test")]
        split: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// An index's token and pooled vectors, ids and texts (float16, as its f16 store holds them).
    Export {
        #[arg(long)]
        index: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 2_000)]
        shard_docs: usize,
    },
}

pub fn run(args: EmbeddingsArgs) -> Result<()> {
    let started = Instant::now();
    match args.action {
        Action::Synth { docs, tokens, dim, shard_docs, out, seed } => {
            let corpus =
                SynthCorpus::new(SynthConfig { docs, mean_tokens: tokens, dim, clusters: 1024, seed })?;
            std::fs::create_dir_all(&out).at(&out)?;
            let mut lines = String::new();
            let (mut all_tokens, mut bytes) = (0u64, 0u64);
            for (shard, first) in (0..docs).step_by(shard_docs as usize).enumerate() {
                let (mut shard_tokens, mut shard_pooled, mut lens) = (Vec::new(), Vec::new(), Vec::new());
                let (mut t, mut p) = (Vec::new(), Vec::new());
                for i in first..(first + shard_docs).min(docs) {
                    corpus.doc(i, &mut t, &mut p);
                    lens.push(t.len() / dim);
                    shard_tokens.extend_from_slice(&t);
                    shard_pooled.extend_from_slice(&p);
                    let line = serde_json::json!({"_id": format!("s{i}"), "text": format!("synthetic document {i} of topic {}", i % 1024)});
                    lines.push_str(&line.to_string());
                    lines.push('\n');
                }
                all_tokens += (shard_tokens.len() / dim) as u64;
                bytes += (shard_tokens.len() * 2) as u64;
                write_shard(&out, shard, NpyDtype::F16, dim, &shard_tokens, &shard_pooled, &lens)?;
            }
            let path = out.join(CORPUS_FILE);
            std::fs::write(&path, lines).at(&path)?;
            println!(
                "wrote {docs} docs, {all_tokens} tokens of {dim} dims ({:.1} MiB of float16 token vectors) to {} in {:.1} s",
                bytes as f64 / (1 << 20) as f64,
                out.display(),
                started.elapsed().as_secs_f64()
            );
        }
        Action::Encode { data, out, shard_docs } => encode(&data, &out, shard_docs.max(1), started)?,
        Action::Queries { index, data, split, out } => encode_queries(&index, &data, &split, &out, started)?,
        Action::Export { index, out, shard_docs } => {
            let n = export(&index, &out, NpyDtype::F16, shard_docs)?;
            println!(
                "exported {n} docs of {} to {} in {:.1} s",
                index.display(),
                out.display(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

/// `Action::Encode`: the build's encoder settings (`BuildOptions::new`) and batching.
fn encode(data: &std::path::Path, out: &std::path::Path, shard_docs: usize, started: Instant) -> Result<()> {
    use cellar_encode::Encoder;
    use cellar_search::corpus::{BeirPaths, CorpusReader};

    let defaults = cellar_search::BuildOptions::new(data, out);
    let encoder = Encoder::load(defaults.encoder_config()?)?;
    let dim = encoder.dim();
    std::fs::create_dir_all(out).at(out)?;
    let docs: Vec<_> = CorpusReader::open(&BeirPaths::locate(data)?.corpus)?.collect::<Result<_>>()?;
    let mut lines = String::new();
    for (shard, part) in docs.chunks(shard_docs).enumerate() {
        let (mut tokens, mut pooled, mut lens) = (Vec::new(), Vec::new(), Vec::new());
        for batch in part.chunks(defaults.batch_docs) {
            let contents: Vec<String> = batch.iter().map(|d| d.content()).collect();
            let refs: Vec<&str> = contents.iter().map(String::as_str).collect();
            for (doc, enc) in batch.iter().zip(encoder.encode_docs(&refs)?) {
                tokens.extend_from_slice(&enc.tokens);
                pooled.extend_from_slice(&enc.pooled);
                lens.push(enc.n_tokens);
                let line = serde_json::json!({"_id": doc.id, "title": doc.title, "text": doc.text});
                lines.push_str(&line.to_string());
                lines.push('\n');
            }
        }
        write_shard(out, shard, NpyDtype::F32, dim, &tokens, &pooled, &lens)?;
    }
    let path = out.join(CORPUS_FILE);
    std::fs::write(&path, lines).at(&path)?;
    println!(
        "encoded {} docs of {} to {} in {:.1} s",
        docs.len(),
        data.display(),
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `Action::Queries`: each judged query through `Encoder::encode_query`, the call
/// `Index::prepare` makes for a text search (same text, same encoder settings from index.json),
/// one float32 shard in judged order.
fn encode_queries(
    index: &std::path::Path,
    data: &std::path::Path,
    split: &str,
    out: &std::path::Path,
    started: Instant,
) -> Result<()> {
    use cellar_core::CellarError;
    use cellar_search::corpus::BeirPaths;
    use cellar_search::{eval, Index, OpenOptions};

    let opened = Index::open(index, OpenOptions::default())?;
    let collection = BeirPaths::locate(data)?;
    let queries = eval::judged_queries(&collection.queries()?, &collection.qrels(split)?);
    if queries.is_empty() {
        return Err(CellarError::invalid(format!(
            "no judged query of split {split:?} in {}",
            data.display()
        )));
    }
    let encoder = opened.encoder()?;
    let dim = encoder.dim();
    let (mut tokens, mut pooled, mut lens, mut lines) = (Vec::new(), Vec::new(), Vec::new(), String::new());
    for q in &queries {
        let encoded = encoder.encode_query(&q.text).map_err(|e| eval::with_query(e, &q.id))?;
        tokens.extend_from_slice(&encoded.tokens);
        pooled.extend_from_slice(&encoded.pooled);
        lens.push(encoded.n_tokens);
        lines.push_str(&serde_json::json!({"_id": q.id, "text": q.text}).to_string());
        lines.push('\n');
    }
    std::fs::create_dir_all(out).at(out)?;
    write_shard(out, 0, NpyDtype::F32, dim, &tokens, &pooled, &lens)?;
    let path = out.join(CORPUS_FILE);
    std::fs::write(&path, lines).at(&path)?;
    println!(
        "encoded {} judged queries ({} tokens of {dim} dims) of {} with the encoder of {} to {} in {:.1} s",
        queries.len(),
        lens.iter().sum::<usize>(),
        data.display(),
        index.display(),
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
