//! Streaming collections (issue 6; one engine since issue 46): documents keyed by (group, id),
//! each a grouped index of `cellar-search` (its write-ahead log, memtable, segments that keep
//! each group's records together, merge), searched exactly inside one group with no first stage.
//!
//! - `collection`: open (creating on first write, migrating the first format), put, delete,
//!   flush, compact, search and get over the grouped index; `compactor`: the process's one
//!   background compaction thread, shared by every collection
//! - `doc`: a stream document's rules (the one `cellar_search::DocIn`, with a group)
//! - `legacy`: the first stream format (`CELLAR-G` segments, entries in a log), read once to
//!   migrate it
//! - `stats`: the RAM/disk figures; `registry`: named collections under one root
//! - `input`: JSON documents and searches (HTTP, CLI, Python) in the one model, and the first
//!   API's shapes read into it; `encoding`: text → vectors

pub mod collection;
mod compactor;
pub mod doc;
pub mod encoding;
pub mod input;
pub mod legacy;
#[doc(hidden)]
pub mod parsers;
pub mod registry;
pub mod stats;
pub mod wal;

pub use cellar_search::group::{GroupDoc, GroupHit, GroupResult, ScanStats};
pub use collection::{Collection, Options};
pub use registry::Streams;
pub use stats::Stats;
pub use wal::{Durability, Recovery, Wal};
