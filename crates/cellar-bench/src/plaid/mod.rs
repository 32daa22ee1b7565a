//! `cellar-bench plaid` (issue 44.5): Cellar's `dense` mode side by side with next-plaid (the
//! PLAID engine of LightOn, an optional dependency of this crate only, behind the `next-plaid`
//! feature) on identical vectors: the Cellar index's own documents, decoded from its store, and
//! the same query vectors. Three steps, each its own process so that its peak RSS is its own
//! (`bench/plaid-compare.sh` runs them and writes the report):
//! - `exact`: the reference, brute-force MaxSim over every document of the store
//!   (`exact::scan`), and the qrels keyed by internal id, written to a JSON file;
//! - `build` (next-plaid only): decodes the store and builds next-plaid's index at its
//!   recommended configuration, timing its CPU;
//! - `search`: one system, opened alone: recall of the exact top 10 and top 100, nDCG@10,
//!   single-query latency (one search at a time) and P95 against offered QPS in an open-loop
//!   (Poisson) sweep served by a fixed number of worker threads.

mod run;
mod systems;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cellar_core::{CellarError, IoContext, Result};
use serde::{Deserialize, Serialize};

#[derive(clap::Args)]
pub struct PlaidArgs {
    #[command(subcommand)]
    pub action: Action,
}

/// The collection, its judged queries and their vectors.
#[derive(clap::Args, Clone)]
pub struct QuerySet {
    /// The Cellar index (its store holds the vectors both systems see).
    #[arg(long)]
    pub index: PathBuf,
    /// BEIR folder with queries.jsonl and qrels/<split>.tsv.
    #[arg(long)]
    pub data: PathBuf,
    #[arg(long, default_value = "test")]
    pub split: String,
    /// The queries' vectors (an embeddings folder: `cellar-bench embeddings queries`, or the
    /// query-vectors/ folder `cellar-bench corpus` writes).
    #[arg(long)]
    pub query_vectors: PathBuf,
    /// Use only the first N judged queries.
    #[arg(long, default_value_t = 50)]
    pub max_queries: usize,
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// The reference: exact MaxSim over every document of the store for the sampled queries,
    /// and their judgments keyed by internal id (`--out FILE.json`).
    Exact {
        #[command(flatten)]
        set: QuerySet,
        #[arg(long)]
        out: PathBuf,
    },
    /// next-plaid's index of the Cellar index's decoded documents (needs the `next-plaid`
    /// feature); writes the index to `--plaid` and its build figures to `--out FILE.json`.
    Build {
        #[arg(long)]
        index: PathBuf,
        /// A new folder for next-plaid's index.
        #[arg(long)]
        plaid: PathBuf,
        /// next-plaid's residual bits per dimension (its README's configuration: 4).
        #[arg(long, default_value_t = 4)]
        nbits: usize,
        #[arg(long)]
        out: PathBuf,
    },
    /// One system's quality, latency and load sweep against the reference of `exact`.
    Search(run::SearchArgs),
}

pub fn run(args: PlaidArgs) -> Result<()> {
    match args.action {
        Action::Exact { set, out } => exact(&set, &out),
        Action::Build { index, plaid, nbits, out } => systems::build_plaid(&index, &plaid, nbits, &out),
        Action::Search(args) => run::search(args),
    }
}

/// What `exact` writes and `search` reads: the sampled queries in order, the exact top
/// `exact::DEPTH` of each (internal ids), and the judgments keyed by internal id.
#[derive(Serialize, Deserialize)]
pub struct Reference {
    pub index: PathBuf,
    pub documents: usize,
    pub query_ids: Vec<String>,
    pub exact: Vec<Vec<u32>>,
    /// Per query: internal id (as a string) to grade; a judged document missing from the index
    /// keeps its grade under `missing:<id>`, so the ideal DCG is the qrels' own.
    pub judged: Vec<HashMap<String, i32>>,
    pub scan_secs: f64,
}

impl Reference {
    pub fn read(path: &Path) -> Result<Reference> {
        let bytes = std::fs::read(path).at(path)?;
        serde_json::from_slice(&bytes).map_err(|e| {
            CellarError::invalid(format!("{}: not a reference of `plaid exact`: {e}", path.display()))
        })
    }
}

fn exact(set: &QuerySet, out: &Path) -> Result<()> {
    use cellar_core::io::{ReaderKind, ReaderOptions};
    use cellar_core::store::VectorStore;
    use cellar_search::corpus::BeirPaths;
    use cellar_search::embeddings::read_in_order;
    use cellar_search::names::VECTORS_DIR;
    use cellar_search::{eval, Index, OpenOptions};

    let index = Index::open(&set.index, OpenOptions::default())?;
    if index.config().pca_dim.is_some() {
        return Err(CellarError::invalid(
            "an index with a PCA projection: its stored vectors are not the queries' space",
        ));
    }
    let collection = BeirPaths::locate(&set.data)?;
    let qrels = collection.qrels(&set.split)?;
    let mut queries = eval::judged_queries(&collection.queries()?, &qrels);
    queries.truncate(set.max_queries);
    if queries.is_empty() {
        return Err(CellarError::invalid(format!("no judged query in {}", set.data.display())));
    }
    let (_, given) = read_in_order(&set.query_vectors, queries.iter().map(|q| q.id.as_str()))?;
    let store = VectorStore::open(&set.index.join(VECTORS_DIR), &ReaderOptions::new(ReaderKind::Mmap))?;
    let started = std::time::Instant::now();
    let exact = crate::exact::scan(&store, &given)?;
    let scan_secs = started.elapsed().as_secs_f64();
    let ids = eval::doc_ids(&index)?;
    let internal: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    let judged = queries
        .iter()
        .map(|q| {
            qrels[&q.id]
                .iter()
                .map(|(doc, &grade)| {
                    let key = internal
                        .get(doc.as_str())
                        .map_or_else(|| format!("missing:{doc}"), |i| i.to_string());
                    (key, grade)
                })
                .collect()
        })
        .collect();
    let reference = Reference {
        index: set.index.clone(),
        documents: store.len(),
        query_ids: queries.iter().map(|q| q.id.clone()).collect(),
        exact,
        judged,
        scan_secs,
    };
    std::fs::write(out, serde_json::to_vec(&reference).expect("plain values")).at(out)?;
    println!(
        "exact MaxSim of {} queries over {} documents in {scan_secs:.1} s -> {}",
        reference.query_ids.len(),
        reference.documents,
        out.display()
    );
    Ok(())
}

/// CPU seconds (user, system) this process has used so far.
pub fn cpu_secs() -> (f64, f64) {
    // SAFETY: getrusage writes one plain struct that we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// This process's peak resident set (VmHWM), bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    crate::harness::child::vm_hwm_bytes(std::process::id())
}

/// Bytes of the files under `dir`, recursively.
pub fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let meta = entry.metadata().at(&entry.path())?;
        total += if meta.is_dir() { dir_bytes(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}
