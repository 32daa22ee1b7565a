//! The first stream format (read to migrate it): golden files, the version policy of its files,
//! and `docs/format/stream.md` held to the code.

#[path = "../common/mod.rs"]
mod common;
mod docs;
mod golden;
#[path = "../../../cellar-core/tests/support/markdown.rs"]
mod markdown;
mod versions;
