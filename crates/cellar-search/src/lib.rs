//! Cellar's retrieval pipeline over one index directory:
//!
//! - `build`: corpus → encoder → vector store + pooled vectors + text store + BM25 (`Index::build`)
//! - `index`: an open index (`Index::open`), its parts checked against each other
//! - `search`: query preparation, answers with ids and text; `rank`: the first stages (BM25,
//!   the IVF of `ivf`, or both) → read records (`prefetch` overlaps the reads with the probe)
//!   → MaxSim → fusion (`fusion`) → top-k, with timings
//! - `eval`, `metrics`, `tune`: quality against qrels, and the alpha / rerank_k sweep
//! - `corpus`: BEIR-layout readers; `config`: `index.json`

pub mod bm25;
pub mod build;
pub mod config;
pub mod corpus;
pub mod disk;
pub mod eval;
pub mod fusion;
pub mod index;
pub mod ivf;
pub mod metrics;
pub mod params;
pub mod pooled;
pub mod prefetch;
pub mod rank;
pub mod search;
pub mod texts;
pub mod topk;
pub mod tune;

pub use build::BuildOptions;
pub use config::IndexConfig;
pub use index::{Index, OpenOptions};
pub use params::{IvfParams, Mode, SearchOptions, SearchParams};
pub use search::{Hit, SearchResponse};
