//! What the studies share: the judged queries of a collection encoded once, column means, lists
//! of numbers on the command line, and writing `PREFIX.json` + `PREFIX.md` (through the
//! harness, with its provenance record).

use std::path::{Path, PathBuf};

use cellar_core::io::{InjectedLatency, ReaderKind};
use cellar_core::{CellarError, Result};
use cellar_search::corpus::{BeirPaths, Qrels, Query};
use cellar_search::eval;
use cellar_search::progress;
use cellar_search::query::PreparedQuery;
use cellar_search::{Index, OpenOptions};
use clap::Args;
use serde::Serialize;

use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;
use crate::harness::stats;

/// An index and the judged queries of its collection.
#[derive(Args, Clone)]
pub struct QueryArgs {
    #[arg(long)]
    pub index: PathBuf,
    /// BEIR folder with queries.jsonl and qrels/<split>.tsv.
    #[arg(long)]
    pub data: PathBuf,
    #[arg(long, default_value = "test")]
    pub split: String,
    #[arg(long, default_value = "mmap")]
    pub reader: ReaderKind,
    /// Direct reader only: emulated SSD latency per read call, µs (32 reads in flight).
    #[arg(long)]
    pub inject_latency_us: Option<u64>,
    /// Use only the first N judged queries.
    #[arg(long)]
    pub max_queries: Option<usize>,
    /// Rank with the queries' own vectors from this folder instead of encoding them (`cellar
    /// eval --query-vectors`; `cellar-bench corpus` writes one as query-vectors/).
    #[arg(long)]
    pub query_vectors: Option<PathBuf>,
    /// Output path prefix: writes PREFIX.json and PREFIX.md.
    #[arg(long)]
    pub out: PathBuf,
}

/// The opened index, its judged queries (encoded once), their qrels and the collection's ids.
pub struct Workload {
    pub index: Index,
    pub queries: Vec<Query>,
    pub prepared: Vec<PreparedQuery>,
    pub qrels: Qrels,
    pub ids: Vec<String>,
}

/// How a benchmark opens an index: `reader`, and for the direct reader an emulated SSD latency
/// per read call (`--inject-latency-us`, 32 reads in flight).
pub fn open_options(reader: ReaderKind, inject_latency_us: Option<u64>) -> OpenOptions {
    let inject_latency = inject_latency_us
        .map(|us| InjectedLatency { per_read: std::time::Duration::from_micros(us), max_in_flight: 32 });
    OpenOptions { reader, inject_latency, ..Default::default() }
}

impl QueryArgs {
    pub fn load(&self) -> Result<Workload> {
        let index = Index::open(&self.index, open_options(self.reader, self.inject_latency_us))?;
        let collection = BeirPaths::locate(&self.data)?;
        let qrels = collection.qrels(&self.split)?;
        let mut queries = eval::judged_queries(&collection.queries()?, &qrels);
        queries.truncate(self.max_queries.unwrap_or(usize::MAX));
        if queries.is_empty() {
            return Err(CellarError::InvalidInput(format!("no judged query in {}", self.data.display())));
        }
        let vectors =
            self.query_vectors.as_deref().map(|dir| eval::read_query_vectors(dir, &queries)).transpose()?;
        let bar = progress::bar(queries.len() as u64, "encode");
        let prepared = eval::prepare_all_with(&index, &queries, vectors.as_deref(), &bar)?;
        let ids = eval::doc_ids(&index)?;
        Ok(Workload { index, queries, prepared, qrels, ids })
    }

    /// A one-line description of the setup for the report.
    pub fn describe(&self, workload: &Workload) -> String {
        let latency =
            self.inject_latency_us.map_or(String::new(), |us| format!(", emulated SSD {us} µs/read"));
        format!(
            "index `{}` ({} docs), {} judged queries of `{}` ({}), reader {}{latency}",
            self.index.display(),
            workload.index.len(),
            workload.queries.len(),
            self.data.display(),
            self.split,
            self.reader.name()
        )
    }
}

/// The mean of a study's column; 0 for a column its variant never fills (the prefetcher's
/// figures of the variant without prefetching).
pub fn mean(values: &[f64]) -> f64 {
    stats::mean(values).unwrap_or(0.0)
}

/// The P95 of a study's timings (NaN, `null` in JSON, for none: `QueryArgs::load` refuses a
/// study without queries).
pub fn p95(values: &[f64]) -> f64 {
    stats::percentile_of(values, 95.0).unwrap_or(f64::NAN)
}

/// A comma-separated list of numbers (`1,2,4`), each checked by `ok`.
pub fn parse_list<T: std::str::FromStr + Copy>(
    text: &str,
    what: &str,
    ok: impl Fn(T) -> bool,
) -> Result<Vec<T>> {
    let items: Option<Vec<T>> =
        text.split(',').map(|s| s.trim().parse::<T>().ok().filter(|v| ok(*v))).collect();
    match items {
        Some(list) if !list.is_empty() => Ok(list),
        _ => Err(CellarError::InvalidInput(format!(
            "--{what} {text:?}: expected a comma-separated list of valid values"
        ))),
    }
}

/// A study's `PREFIX.json`: the provenance record, the setup and the rows.
#[derive(Serialize)]
struct StudyReport<'a, T> {
    #[serde(flatten)]
    provenance: Provenance,
    setup: &'a str,
    rows: &'a T,
}

/// Writes `PREFIX.json` (provenance, setup, rows) and `PREFIX.md` (provenance, setup, table).
pub fn write_outputs<T: Serialize>(out: &Path, setup: &str, rows: &T, markdown: &str) -> Result<()> {
    let provenance = Provenance::now();
    let md = format!("{}\n{setup}\n\n{markdown}", provenance.markdown());
    write_report(out, &StudyReport { provenance, setup, rows }, &md)?;
    print!("{md}");
    Ok(())
}
