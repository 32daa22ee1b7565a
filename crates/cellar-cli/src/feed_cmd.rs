//! `cellar feed`: writes a JSONL file of documents into a streaming collection, in batches (one
//! log record and one fsync per batch: group commit). Lines: documents with their group
//! (`{group, id, text, metadata?, vectors?}`, or the first API's `{..., tokens?, pooled?}`);
//! documents without token vectors are encoded with the model. A bad line stops
//! the feed with its line number; the batches before it are written and durable.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cellar_core::{CellarError, Result};
use cellar_search::corpus::NOT_UTF8;
use cellar_search::progress;
use cellar_search::DocIn;
use cellar_stream::doc::check_doc;
use cellar_stream::encoding::{docs_with_vectors, write_dim, LazyEncoder};
use cellar_stream::input::StreamDocJson;
use cellar_stream::{Collection, Durability, Options, Streams};
use clap::Args;

#[derive(Args)]
pub struct FeedArgs {
    /// The JSONL file to write.
    pub file: PathBuf,
    /// Root directory of the streaming collections (created if missing).
    #[arg(long)]
    pub streams: PathBuf,
    /// Collection name (created on first write).
    #[arg(long)]
    pub name: String,
    /// Documents per batch: one log record and one fsync each.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Do not fsync the log (a crash can lose the last batches; the file can be fed again).
    #[arg(long)]
    pub no_fsync: bool,
    /// Compact the collection once the feed is written.
    #[arg(long)]
    pub compact: bool,
    /// A collection this feed creates takes its codec (and PCA) from this index, fitted on
    /// documents like the feed's (residual2 or int8 instead of f16); an existing one keeps its own.
    #[arg(long, value_name = "INDEX")]
    pub codec_from: Option<PathBuf>,
    #[arg(long)]
    pub model: Option<PathBuf>,
}

/// A bad line, named by file and line number; system errors pass through unchanged.
fn at_line(file: &Path, line: usize, error: CellarError, written: usize) -> CellarError {
    let detail = match &error {
        CellarError::InvalidInput(m) => m.clone(),
        other => other.to_string(),
    };
    if !error.is_user_error() {
        return error;
    }
    CellarError::InvalidInput(format!(
        "{}:{line}: {detail} ({written} documents before it were written)",
        file.display()
    ))
}

fn parse_line(line: &str) -> Result<DocIn> {
    let doc: StreamDocJson =
        serde_json::from_str(line).map_err(|e| CellarError::InvalidInput(format!("not a document: {e}")))?;
    let doc = doc.into_doc(None, None)?;
    doc.check("document")?;
    Ok(doc)
}

struct Feeder<'a> {
    streams: &'a Streams,
    name: &'a str,
    file: &'a Path,
    encoder: LazyEncoder,
    collection: Option<Arc<Collection>>,
    written: usize,
}

impl Feeder<'_> {
    /// Vectors for every document of the batch; on an error, finds the line that caused it.
    fn with_vectors(&self, batch: &[(usize, DocIn)], dim: usize) -> Result<Vec<DocIn>> {
        let docs: Vec<DocIn> = batch.iter().map(|(_, d)| d.clone()).collect();
        match docs_with_vectors(docs, dim, &self.encoder) {
            Ok(docs) => Ok(docs),
            Err(e) if e.is_user_error() => {
                for (line, doc) in batch {
                    docs_with_vectors(vec![doc.clone()], dim, &self.encoder)
                        .map_err(|e| at_line(self.file, *line, e, self.written))?;
                }
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes one batch: one log record, one fsync. The stream is created by the first batch
    /// that is valid, so a rejected feed leaves none behind.
    fn write(&mut self, batch: Vec<(usize, DocIn)>) -> Result<()> {
        let dim = match &self.collection {
            Some(c) => c.dim(),
            None => {
                let docs: Vec<DocIn> = batch.iter().map(|(_, d)| d.clone()).collect();
                write_dim(self.streams, self.name, &docs, &self.encoder)
                    .map_err(|e| at_line(self.file, batch[0].0, e, 0))?
            }
        };
        let docs = self.with_vectors(&batch, dim)?;
        if let Err(e) = Collection::check_batch(&docs, dim) {
            for ((line, _), doc) in batch.iter().zip(&docs) {
                check_doc(doc, dim, "document").map_err(|e| at_line(self.file, *line, e, self.written))?;
            }
            return Err(e);
        }
        let count = docs.len();
        let (collection, _) = self.streams.put_batch(self.name, dim, docs).inspect_err(|e| {
            // A system error (a full disk, an I/O error) keeps its type; the user learns where
            // to feed again from.
            eprintln!(
                "cellar feed: stopped at line {} ({}): the {} documents before it are written and durable; \
                 feed again from that line once the cause is fixed",
                batch[0].0,
                e.code(),
                self.written
            );
        })?;
        self.collection = Some(collection);
        self.written += count;
        Ok(())
    }
}

pub fn run(args: FeedArgs) -> Result<()> {
    if args.batch == 0 {
        return Err(CellarError::InvalidInput("--batch must be at least 1".into()));
    }
    let durability = if args.no_fsync { Durability::None } else { Durability::Fsync };
    let options = Options { durability, codec_from: args.codec_from.clone(), ..Options::default() };
    let streams = Streams::open(&args.streams, options)?;
    let file = std::fs::File::open(&args.file)
        .map_err(|e| CellarError::Io { path: args.file.clone(), source: e })?;
    let size = file.metadata().map_or(0, |m| m.len());
    let bar = progress::bar(size, "feed");
    let encoder = LazyEncoder::new(args.model.clone());
    let (name, path) = (args.name.as_str(), args.file.as_path());
    let mut feeder = Feeder { streams: &streams, name, file: path, encoder, collection: None, written: 0 };
    let start = Instant::now();
    let mut batch = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => {
                at_line(&args.file, i + 1, CellarError::invalid(NOT_UTF8), feeder.written)
            }
            _ => CellarError::Io { path: args.file.clone(), source: e },
        })?;
        bar.inc(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        batch.push((i + 1, parse_line(&line).map_err(|e| at_line(&args.file, i + 1, e, feeder.written))?));
        if batch.len() == args.batch {
            feeder.write(std::mem::take(&mut batch))?;
        }
    }
    if !batch.is_empty() {
        feeder.write(batch)?;
    }
    bar.finish_and_clear();
    let Some(collection) = feeder.collection else {
        return Err(CellarError::InvalidInput(format!("{}: no documents", args.file.display())));
    };
    collection.flush()?;
    if args.compact {
        collection.compact()?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let stats = collection.stats();
    println!(
        "fed {} documents into {} in {seconds:.1} s ({:.0} docs/s); {} segments, {} entries on disk, {} bytes",
        feeder.written,
        collection.dir().display(),
        feeder.written as f64 / seconds.max(1e-9),
        stats.segments,
        stats.segment_entries,
        stats.disk_bytes
    );
    Ok(())
}
