//! Integration tests of cellar-core: one binary, one module per concern.

mod arbitrary_bytes;
mod corruption;
mod fixture;
mod format_docs;
mod golden;
#[path = "../support/golden.rs"]
mod golden_files;
mod hot;
#[path = "../support/markdown.rs"]
mod markdown;
mod store;
