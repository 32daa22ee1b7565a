//! The streaming collection's on-disk format: golden files, and the version policy of its files.

#[path = "../common/mod.rs"]
mod common;
mod golden;
#[path = "../../../cellar-core/tests/support/golden.rs"]
mod golden_files;
mod versions;
