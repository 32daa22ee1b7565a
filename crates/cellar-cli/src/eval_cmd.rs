//! `cellar eval`: runs every row of the evaluation table over a split's judged queries.

use std::path::{Path, PathBuf};

use cellar_core::io::ReaderKind;
use cellar_core::{CellarError, Result};
use cellar_search::corpus::{BeirPaths, Qrels, Query};
use cellar_search::eval::{self, RowResult};
use cellar_search::progress;
use cellar_search::{Index, OpenOptions, QueryVectorsIn, WeightPrecision};
use clap::Args;

#[derive(Args)]
pub struct EvalArgs {
    #[arg(long)]
    pub index: PathBuf,
    /// BEIR folder with queries.jsonl and qrels/<split>.tsv.
    #[arg(long)]
    pub data: PathBuf,
    #[arg(long, default_value = "test")]
    pub split: String,
    #[arg(long, default_value = "mmap")]
    pub reader: ReaderKind,
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// How the query encoder holds its layer weights: f32 or f16 (as `cellar serve`).
    #[arg(long, default_value_t)]
    pub model_weights: WeightPrecision,
    /// Write one TREC run file per row into this directory.
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Write the rows as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub judged: JudgedQueries,
}

/// Which judged queries `cellar eval` and `cellar tune` rank, and how they are given.
#[derive(Args)]
pub struct JudgedQueries {
    /// Rank with the queries' own vectors instead of encoding them: an embeddings folder
    /// (docs/embeddings.md) whose corpus.jsonl lines are the queries (`cellar-bench corpus`
    /// writes one as query-vectors/).
    #[arg(long)]
    pub query_vectors: Option<PathBuf>,
    /// Only the first N judged queries.
    #[arg(long)]
    pub max_queries: Option<usize>,
}

impl JudgedQueries {
    /// The split's judgments and its judged queries (the first `max_queries`), refused when
    /// there are none, with their vectors when `query_vectors` gives them.
    pub fn load(&self, data: &Path, split: &str) -> Result<(Qrels, Vec<Query>, Option<Vec<QueryVectorsIn>>)> {
        let collection = BeirPaths::locate(data)?;
        let qrels = collection.qrels(split)?;
        let mut queries = eval::judged_queries(&collection.queries()?, &qrels);
        queries.truncate(self.max_queries.unwrap_or(usize::MAX));
        if queries.is_empty() {
            return Err(CellarError::InvalidInput(format!(
                "no query of {} is judged in qrels/{split}.tsv",
                data.display()
            )));
        }
        let vectors =
            self.query_vectors.as_deref().map(|dir| eval::read_query_vectors(dir, &queries)).transpose()?;
        Ok((qrels, queries, vectors))
    }
}

pub fn run(args: EvalArgs) -> Result<()> {
    let index = Index::open(
        &args.index,
        OpenOptions {
            reader: args.reader,
            model_dir: args.model,
            model_weights: args.model_weights,
            ..Default::default()
        },
    )?;
    let (qrels, queries, vectors) = args.judged.load(&args.data, &args.split)?;
    let bar = progress::bar(queries.len() as u64, "queries");
    let prepared = eval::prepare_all_with(&index, &queries, vectors.as_deref(), &bar)?;
    let ids = eval::doc_ids(&index)?;
    let mut rows: Vec<RowResult> = Vec::new();
    for spec in eval::default_rows(
        index.config(),
        index.ivf_config().as_ref(),
        index.tokens_config().as_ref(),
        index.splade_config().is_some(),
    ) {
        let row = eval::evaluate_row(&index, &queries, &prepared, &qrels, &ids, &spec)?;
        if let Some(dir) = &args.run_dir {
            std::fs::create_dir_all(dir).map_err(|e| CellarError::Io { path: dir.clone(), source: e })?;
            eval::write_run(&dir.join(format!("{}.run", rows.len())), &row, &format!("row{}", rows.len()))?;
        }
        rows.push(row);
    }
    println!(
        "{} / {}: {} judged queries, {} documents, reader {}, mean query encoding {:.1} ms\n",
        args.data.display(),
        args.split,
        queries.len(),
        index.len(),
        index.reader_kind().name(),
        rows.iter().map(|r| r.mean_encode_ms).fold(0.0, f64::max)
    );
    print!("{}", eval::table(&rows));
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&rows).map_err(|e| CellarError::InvalidInput(e.to_string()))?;
        std::fs::write(path, json).map_err(|e| CellarError::Io { path: path.clone(), source: e })?;
    }
    Ok(())
}
