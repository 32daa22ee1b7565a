//! Every file of a first-format collection is read version first, by the migration too: a newer
//! `stream.json`, `MANIFEST.json`, `wal.log` or segment whose other fields or bytes changed shape
//! is `Incompatible` naming both versions, read directly and through `Collection::open` (which
//! then migrates nothing and leaves the collection as it was); a JSON file of a readable version
//! that does not parse is `Corrupted`. (The grouped index a collection is now: cellar-search's
//! `versions` tests.)

use std::path::Path;

use cellar_core::format::VersionRange;
use cellar_core::CellarError;
use cellar_stream::legacy::{
    ManifestV1, SegmentV1, Settings, MANIFEST_FILE, MANIFEST_VERSION, PAGE, READABLE_VERSIONS,
    SEGMENT_READABLE_VERSIONS, SETTINGS_FILE, WAL_FILE,
};
use cellar_stream::wal::WAL_READABLE_VERSIONS;
use cellar_stream::{Collection, Durability, Wal};

use crate::common::{self, DIM};

/// A first-format collection: a copy of the golden one (`testdata/stream-v1`).
fn collection() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/stream-v1");
    for entry in std::fs::read_dir(golden).unwrap().flatten() {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    assert!(dir.path().join(SETTINGS_FILE).is_file() && dir.path().join(MANIFEST_FILE).is_file());
    dir
}

/// Opens (so migrates) the collection; a refusal must leave it as it was.
fn reopen(dir: &Path) -> cellar_core::Result<()> {
    let before = listing(dir);
    let opened = Collection::open(dir, Some(DIM), common::options(1 << 20)).map(|_| ());
    if opened.is_err() {
        assert_eq!(listing(dir), before, "a migration that failed changed nothing");
    }
    opened
}

fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    files.sort();
    files
}

fn newer() -> String {
    format!(
        r#"{{"version": {}, "dim": {{"tokens": 4}}, "segments": {{"l0": []}}, "flushed_seq": "7"}}"#,
        READABLE_VERSIONS.newest + 1
    )
}

fn garbled() -> String {
    format!(r#"{{"version": {MANIFEST_VERSION}, "dim": "four", "segments": 3, "flushed_seq": []}}"#)
}

/// `Incompatible` for `file`, naming the version one past `readable` and the range this build reads.
fn assert_incompatible(
    result: cellar_core::Result<impl std::fmt::Debug>,
    file: &str,
    readable: VersionRange,
) {
    let error = result.unwrap_err();
    let message = error.to_string();
    let newer = readable.newest + 1;
    match error {
        CellarError::Incompatible { path, found, oldest, newest } => {
            assert!(path.ends_with(file), "{path:?}");
            assert_eq!((found, oldest, newest), (newer, readable.oldest, readable.newest));
        }
        other => panic!("{file}: expected Incompatible, got {other:?}"),
    }
    let range = format!("{}..={}", readable.oldest, readable.newest);
    assert!(message.contains(&format!("version {newer}")) && message.contains(&range), "{message}");
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
    assert_incompatible(load(dir.path()), file, READABLE_VERSIONS);
    assert_incompatible(reopen(dir.path()), file, READABLE_VERSIONS);
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
    check(MANIFEST_FILE, |dir| ManifestV1::load(dir).map(|m| Box::new(m) as Box<dyn std::fmt::Debug>));
}

/// The file at `path` with `version` in bytes 8..12 (where every version keeps it, after the
/// magic) and every byte from 12 to `reshaped_to` changed, as a newer layout would.
fn claim_newer(path: &Path, version: u32, reshaped_to: usize) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    let end = reshaped_to.min(bytes.len());
    bytes[12..end].iter_mut().for_each(|b| *b = !*b);
    std::fs::write(path, &bytes).unwrap();
    bytes
}

#[test]
fn a_newer_wal_is_incompatible_and_left_as_it_was() {
    let dir = collection();
    let path = dir.path().join(WAL_FILE);
    // The header's reserved word and the first records no longer frame as this build's records.
    let newer = claim_newer(&path, WAL_READABLE_VERSIONS.newest + 1, 64);
    let opened = Wal::open(&path, Durability::None, |_| panic!("nothing may be replayed"));
    assert_incompatible(opened.map(|(_, recovery)| recovery), WAL_FILE, WAL_READABLE_VERSIONS);
    assert_incompatible(reopen(dir.path()), WAL_FILE, WAL_READABLE_VERSIONS);
    assert_eq!(std::fs::read(&path).unwrap(), newer, "a log this build cannot read is not truncated");
}

#[test]
fn a_newer_segment_is_incompatible_whatever_its_header_holds() {
    let dir = collection();
    let file = ManifestV1::load(dir.path()).unwrap().segments[0].file.clone();
    let path = dir.path().join(&file);
    let version = SEGMENT_READABLE_VERSIONS.newest + 1;
    // Every header field after the version changes, its checksum included.
    claim_newer(&path, version, PAGE as usize);
    assert_incompatible(SegmentV1::read(&path).map(|s| s.dim), &file, SEGMENT_READABLE_VERSIONS);
    assert_incompatible(reopen(dir.path()), &file, SEGMENT_READABLE_VERSIONS);
}
