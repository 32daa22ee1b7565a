//! The write-ahead log of a streaming collection: the one log format of `cellar-core`
//! (`cellar_core::format::wal`), which the main index's writes use too.

pub use cellar_core::format::wal::*;
