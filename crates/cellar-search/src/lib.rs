//! Cellar's retrieval pipeline over one index directory:
//!
//! - `build`: corpus → encoder → vector store + pooled vectors + text store + BM25 (`Index::build`),
//!   or the caller's vectors → the same files (`Index::build_from_embeddings`; `embeddings`: the
//!   folder layout `cellar index --vectors` reads)
//! - `index`: an open index (`Index::open`), its parts checked against each other; `lock`: the
//!   directory's lock (builds exclusive, open indexes shared)
//! - `request`: `SearchRequest`, one search as every front end states it; `plan`: every check
//!   (`Index::plan` → `Plan`), then `Index::execute`; `params`: the settings resolved
//! - `search`: answers with ids and text; `rank`: the first stages (BM25,
//!   the IVF of `ivf`, or both) → read records (`reads`: chunks on an I/O thread, each scored as
//!   it arrives; `prefetch` overlaps the reads with the probe) → MaxSim → fusion (`fusion`)
//!   → top-k, with timings
//! - `shard`: a collection split over shards: the phases of a search a router runs over them,
//!   and its merge and fusion (`Gather`), so a sharded search ranks as one index would
//! - `eval`, `metrics`, `tune`: quality against qrels, and the alpha / rerank_k sweep
//! - `live`: writes after the build (`Index::write`, replay, flush, merge); `written`: what they
//!   leave, as the search path reads it (segments, memtable, tombstones)
//! - `recode`: a new index from an f16 one with another codec / PCA, without the model
//! - `verify`: every byte of an index against its checksums (`Index::verify`)
//! - `meta`: documents' metadata; `filter`: conditions on it, their meaning and their tantivy
//!   query, evaluated once per search into the ids every first stage takes
//! - `corpus`: BEIR-layout readers; `config`: `index.json`; `progress`: the front ends' progress bar

pub mod bm25;
pub mod build;
pub mod config;
pub mod corpus;
pub mod create;
pub mod disk;
pub mod doc;
pub mod embeddings;
pub mod eval;
pub mod filter;
pub mod fusion;
pub mod group;
pub mod index;
pub mod ivf;
pub mod live;
pub mod lock;
pub mod meta;
pub mod metrics;
pub mod mode;
pub mod names;
pub mod params;
#[doc(hidden)]
pub mod parsers;
pub mod plan;
pub mod pooled;
pub mod prefetch;
pub mod progress;
pub mod query;
pub mod rank;
pub mod reads;
pub mod recode;
pub mod request;
pub mod scored;
pub mod search;
pub mod shard;
pub mod splade;
pub mod stages;
pub mod texts;
pub mod tokens;
pub mod topk;
pub mod tune;
pub mod vectors;
pub mod verify;
pub mod written;

pub use build::{BuildOptions, EmbeddedDoc};
pub use cellar_encode::{Overflow, WeightPrecision};
pub use config::IndexConfig;
pub use doc::DocIn;
pub use filter::Filter;
pub use index::{Index, OpenOptions};
pub use live::write::{WriteOp, WriteReport, WriteRequest};
pub use meta::{MetaValue, Metadata};
pub use mode::Mode;
pub use params::{IvfParams, SearchParams, TokenParams};
pub use plan::Plan;
pub use request::{BatchRequest, QueryVectorsIn, SearchRequest};
pub use search::{Hit, SearchResponse};
