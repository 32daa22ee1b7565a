//! Streaming collections (issue 6, in progress): documents keyed by (group, id), written through a
//! write-ahead log, searched exactly per group. So far only the log exists:
//!
//! - `wal`: the append-only, checksummed write-ahead log, fsync before acknowledging, torn tails
//!   truncated on open.

pub mod wal;

pub use wal::{Durability, Recovery, Wal};
