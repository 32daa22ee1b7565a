//! The streaming collection's on-disk format: golden files, the version policy of its files, and
//! `docs/format/stream.md` held to the code.

#[path = "../common/mod.rs"]
mod common;
mod docs;
mod golden;
#[path = "../../../cellar-core/tests/support/golden.rs"]
mod golden_files;
#[path = "../../../cellar-core/tests/support/markdown.rs"]
mod markdown;
mod versions;
