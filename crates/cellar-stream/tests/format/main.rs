//! The streaming collection's on-disk format: the version policy of its files.

#[path = "../common/mod.rs"]
mod common;
mod versions;
