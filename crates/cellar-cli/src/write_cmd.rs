//! `cellar add` and `cellar delete`: writes to an existing index through `Index::write`, the one
//! write path of every front end. `add` reads a JSONL file of documents (`{id, title?, text?,
//! vectors?}`, the `DocIn` of the HTTP API), adding them (or with `--update`, replacing
//! existing ones) in batches, each one log record, all or nothing and durable when the next
//! starts. A bad line stops before its batch is written, naming the line; the batches before it
//! are written.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use cellar_core::{CellarError, IoContext, Result};
use cellar_search::{progress, DocIn, Index, OpenOptions, WriteOp, WriteRequest};
use clap::Args;

#[derive(Args)]
pub struct AddArgs {
    /// The JSONL file of documents: one `{"id", "title", "text", "vectors"}` object per line.
    pub file: PathBuf,
    /// The index to write to (its model encodes documents without vectors).
    #[arg(long)]
    pub index: PathBuf,
    /// Replace existing documents (each id must exist) instead of adding new ones.
    #[arg(long)]
    pub update: bool,
    /// Documents per write batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Model directory, for an index whose recorded model moved.
    #[arg(long)]
    pub model: Option<PathBuf>,
}

#[derive(Args)]
pub struct DeleteArgs {
    /// Ids of the documents to delete (all or none: each must exist).
    #[arg(required_unless_present = "filter")]
    pub ids: Vec<String>,
    /// Also delete every document this filter matches (JSON, as a search's `filter`).
    #[arg(long, value_name = "JSON")]
    pub filter: Option<String>,
    #[arg(long)]
    pub index: PathBuf,
}

fn open(index: &std::path::Path, model: Option<PathBuf>) -> Result<Index> {
    Index::open(index, OpenOptions { model_dir: model, ..Default::default() })
}

pub fn add(args: AddArgs) -> Result<()> {
    if args.batch == 0 || args.batch > cellar_search::live::write::MAX_WRITE_OPS {
        return Err(CellarError::invalid(format!(
            "--batch must be 1 to {}",
            cellar_search::live::write::MAX_WRITE_OPS
        )));
    }
    let index = open(&args.index, args.model.clone())?;
    let file = std::fs::File::open(&args.file).at(&args.file)?;
    let bar =
        progress::bar(file.metadata().map_or(0, |m| m.len()), if args.update { "update" } else { "add" });
    let mut batch: Vec<(usize, DocIn)> = Vec::new();
    let mut written = 0usize;
    let flush_batch = |batch: &mut Vec<(usize, DocIn)>, written: &mut usize| -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let (first, last) = (batch[0].0, batch[batch.len() - 1].0);
        let ops = batch
            .drain(..)
            .map(|(_, doc)| if args.update { WriteOp::Update(doc) } else { WriteOp::Add(doc) })
            .collect::<Vec<_>>();
        let n = ops.len();
        index.write(WriteRequest { ops }).map_err(|e| match e.is_user_error() {
            true => CellarError::invalid(format!(
                "{}: lines {first}-{last}: {e} (nothing of these lines was written; {written} documents before them were)",
                args.file.display()
            )),
            false => e,
        })?;
        *written += n;
        Ok(())
    };
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.at(&args.file)?;
        bar.inc(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        let doc: DocIn = serde_json::from_str(&line).map_err(|e| {
            CellarError::invalid(format!(
                "{}:{}: not a document: {e} ({written} documents before it were written)",
                args.file.display(),
                i + 1
            ))
        })?;
        batch.push((i + 1, doc));
        if batch.len() == args.batch {
            flush_batch(&mut batch, &mut written)?;
        }
    }
    flush_batch(&mut batch, &mut written)?;
    bar.finish_and_clear();
    if written == 0 {
        return Err(CellarError::invalid(format!("{}: no documents", args.file.display())));
    }
    println!(
        "{} {written} documents; the index holds {}",
        if args.update { "updated" } else { "added" },
        index.len()
    );
    merge_if_needed(&index)
}

pub fn delete(args: DeleteArgs) -> Result<()> {
    let index = open(&args.index, None)?;
    let mut ops: Vec<WriteOp> = args.ids.into_iter().map(WriteOp::Delete).collect();
    if let Some(text) = &args.filter {
        let filter = serde_json::from_str(text)
            .map_err(|e| CellarError::invalid(format!("--filter: not a filter: {e}")))?;
        ops.push(WriteOp::DeleteWhere(filter));
    }
    let report = index.write(WriteRequest { ops })?;
    println!("deleted {} documents; the index holds {}", report.deleted, report.docs);
    merge_if_needed(&index)
}

/// Merges the written segments when they need it (unthrottled: nothing else is served),
/// retrains the IVF when the written documents drifted from it (`Index::needs_retrain`), and
/// the token stage when enough were written since it was built (`Index::needs_tokens_retrain`).
fn merge_if_needed(index: &Index) -> Result<()> {
    if index.needs_merge() {
        let budget = cellar_search::live::merge::MergeBudget { bytes_per_sec: 0, ..Default::default() };
        if let Some(report) = index.merge(&budget)? {
            println!("merged {} segments ({} records dropped)", report.segments, report.dropped);
        }
    }
    if index.needs_retrain() {
        let config = index.retrain_ivf()?;
        println!("the written documents drifted from the IVF: retrained it on {} documents", config.docs);
    }
    if index.needs_tokens_retrain() {
        let config = index.retrain_tokens()?;
        println!("retrained the token stage over the written documents: {} postings", config.build.postings);
    }
    Ok(())
}
