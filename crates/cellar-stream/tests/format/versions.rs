//! `stream.json` and `MANIFEST.json` read their `version` first: a newer file whose other fields
//! changed shape is `Incompatible` naming both versions, a readable version that does not parse
//! is `Corrupted` — read directly and through `Collection::open`.

use std::path::Path;

use cellar_core::CellarError;
use cellar_stream::manifest::{Manifest, Settings, MANIFEST_FILE, MANIFEST_VERSION, SETTINGS_FILE};
use cellar_stream::Collection;

use crate::common::{self, DIM};

/// A collection directory with both files written by this build.
fn collection() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let collection = common::open(dir.path(), common::options(1 << 20));
    collection.put(&common::doc("g", "d", 1)).unwrap();
    collection.flush().unwrap();
    drop(collection);
    assert!(dir.path().join(SETTINGS_FILE).is_file() && dir.path().join(MANIFEST_FILE).is_file());
    dir
}

fn reopen(dir: &Path) -> cellar_core::Result<()> {
    Collection::open(dir, Some(DIM), common::options(1 << 20)).map(|_| ())
}

fn newer() -> String {
    format!(
        r#"{{"version": {}, "dim": {{"tokens": 4}}, "segments": {{"l0": []}}, "flushed_seq": "7"}}"#,
        MANIFEST_VERSION + 1
    )
}

fn garbled() -> String {
    format!(r#"{{"version": {MANIFEST_VERSION}, "dim": "four", "segments": 3, "flushed_seq": []}}"#)
}

fn assert_incompatible(result: cellar_core::Result<impl std::fmt::Debug>, file: &str) {
    let error = result.unwrap_err();
    let message = error.to_string();
    match error {
        CellarError::Incompatible { path, found, oldest, newest } => {
            assert!(path.ends_with(file), "{path:?}");
            assert_eq!((found, oldest, newest), (MANIFEST_VERSION + 1, MANIFEST_VERSION, MANIFEST_VERSION));
        }
        other => panic!("{file}: expected Incompatible, got {other:?}"),
    }
    let range = format!("{MANIFEST_VERSION}..={MANIFEST_VERSION}");
    assert!(
        message.contains(&format!("version {}", MANIFEST_VERSION + 1)) && message.contains(&range),
        "{message}"
    );
}

fn assert_corrupted(result: cellar_core::Result<impl std::fmt::Debug>, file: &str) {
    match result.unwrap_err() {
        CellarError::Corrupted { path, .. } => assert!(path.ends_with(file), "{path:?}"),
        other => panic!("{file}: expected Corrupted, got {other:?}"),
    }
}

fn check(file: &str, load: impl Fn(&Path) -> cellar_core::Result<Box<dyn std::fmt::Debug>>) {
    let dir = collection();
    let path = dir.path().join(file);
    std::fs::write(&path, newer()).unwrap();
    assert_incompatible(load(dir.path()), file);
    assert_incompatible(reopen(dir.path()), file);
    std::fs::write(&path, garbled()).unwrap();
    assert_corrupted(load(dir.path()), file);
    assert_corrupted(reopen(dir.path()), file);
    std::fs::write(&path, format!("{{\"version\": {MANIFEST_VERSION}, ")).unwrap();
    assert_corrupted(load(dir.path()), file);
}

#[test]
fn a_newer_stream_json_is_incompatible_and_a_garbled_one_corrupted() {
    check(SETTINGS_FILE, |dir| Settings::load(dir).map(|s| Box::new(s) as Box<dyn std::fmt::Debug>));
}

#[test]
fn a_newer_manifest_json_is_incompatible_and_a_garbled_one_corrupted() {
    check(MANIFEST_FILE, |dir| Manifest::load(dir).map(|m| Box::new(m) as Box<dyn std::fmt::Debug>));
}
