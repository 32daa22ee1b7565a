//! Streaming collections (issue 6): documents keyed by (group, id), written through a
//! write-ahead log, searched exactly per group with no index.
//!
//! - `doc`: a document's checks (the one `cellar_search::DocIn`, with a group) and the binary
//!   entry shared by log, memtable and segments
//! - `wal`: the append-only, checksummed write-ahead log (group commit, torn tails truncated)
//! - `memtable`: the unflushed newest entries, sorted by (group, id)
//! - `segment`: immutable files, one page-aligned checksummed extent per group; `merge`: compaction
//! - `manifest`: `stream.json` and the commit point `MANIFEST.json`
//! - `collection`: open/recover, put, delete, flush, compact; `compactor`: the process's one
//!   background compaction thread, shared by every collection
//! - `search`: a `cellar_search::SearchRequest` scoped to one group: exact MaxSim (`dense`) or
//!   pooled (`dense-exact`) scoring, the index's filter grammar, text match, chunked reads
//! - `stats`: `get` and the RAM/disk figures; `registry`: named collections under one root
//! - `input`: JSON documents and searches (HTTP, CLI, Python) in the one model, and the first
//!   API's shapes read into it; `encoding`: text → vectors

pub mod collection;
mod compactor;
pub mod doc;
pub mod encoding;
pub mod input;
pub mod manifest;
pub mod memtable;
mod merge;
#[doc(hidden)]
pub mod parsers;
pub mod registry;
pub mod search;
pub mod segment;
pub mod stats;
pub mod wal;

pub use collection::{Collection, Options};
pub use registry::Streams;
pub use search::{Hit, ScanStats, SearchResult};
pub use stats::{Stats, StoredDoc};
pub use wal::{Durability, Recovery, Wal};
