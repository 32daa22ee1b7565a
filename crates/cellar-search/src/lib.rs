//! Cellar's retrieval pipeline over one index directory:
//!
//! - `build`: corpus → encoder → vector store + pooled vectors + text store + BM25 (`Index::build`)
//! - `index`: an open index (`Index::open`), its parts checked against each other
//! - `search`: BM25 top-N → read records → MaxSim → fusion (`fusion`) → top-k, with timings
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
pub mod metrics;
pub mod params;
pub mod pooled;
pub mod search;
pub mod texts;
pub mod topk;
pub mod tune;

pub use build::BuildOptions;
pub use config::IndexConfig;
pub use index::{Index, OpenOptions};
pub use params::{Mode, SearchOptions, SearchParams};
pub use search::{Hit, SearchResponse};
