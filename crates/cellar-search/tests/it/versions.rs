//! The version policy of the search index's files: `index.json` and `ivf/ivf.json` read their
//! version first, so a newer file whose other fields changed shape is `Incompatible` naming both
//! versions, and a readable version that does not parse is `Corrupted`; the IVF's binary files
//! check their header's version before anything else in it. No model needed.

use std::path::Path;

use cellar_core::format::header::HEADER_FIELDS;
use cellar_core::format::{FileKind, HEADER_BYTES, READABLE_VERSIONS};
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::CellarError;
use cellar_search::config::{IndexConfig, CONFIG_FILE, INDEX_FORMAT_VERSION};
use cellar_search::ivf::{Ivf, IvfConfig, IVF_CONFIG_FILE, IVF_DIR, IVF_FORMAT_VERSION};

use crate::synthetic_ivf::{self, DIM, DOCS};

/// A newer file: the version is one past this build's, and the other fields have new shapes.
fn newer(version: u32) -> String {
    format!(
        r#"{{"created_by": {{"name": "cellar", "version": [9, 0]}}, "format_version": {},
            "encoder": "one string now", "dim": [1, 2], "search": null}}"#,
        version + 1
    )
}

/// A file of the current version whose fields do not have the shapes this build writes.
fn garbled(version: u32) -> String {
    format!(r#"{{"format_version": {version}, "created_by": 3, "dim": "wide"}}"#)
}

fn assert_incompatible(error: CellarError, file: &str, current: u32) {
    let message = error.to_string();
    match error {
        CellarError::Incompatible { path, found, oldest, newest } => {
            assert!(path.ends_with(file), "{path:?}");
            assert_eq!((found, oldest, newest), (current + 1, current, current));
        }
        other => panic!("{file}: expected Incompatible, got {other:?}"),
    }
    let (found, range) = (format!("version {}", current + 1), format!("{current}..={current}"));
    assert!(message.contains(&found) && message.contains(&range), "{message}");
}

fn assert_corrupted(error: CellarError, file: &str) {
    match error {
        CellarError::Corrupted { path, .. } => assert!(path.ends_with(file), "{path:?}"),
        other => panic!("{file}: expected Corrupted, got {other:?}"),
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_newer_index_json_is_incompatible_and_a_garbled_one_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(CONFIG_FILE);
    write(&path, &newer(INDEX_FORMAT_VERSION));
    assert_incompatible(IndexConfig::load(dir.path()).unwrap_err(), CONFIG_FILE, INDEX_FORMAT_VERSION);
    write(&path, &garbled(INDEX_FORMAT_VERSION));
    assert_corrupted(IndexConfig::load(dir.path()).unwrap_err(), CONFIG_FILE);
    write(&path, &format!(r#"{{"format_version": {INDEX_FORMAT_VERSION}, "#));
    assert_corrupted(IndexConfig::load(dir.path()).unwrap_err(), CONFIG_FILE);
}

#[test]
fn a_newer_ivf_json_is_incompatible_and_a_garbled_one_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(IVF_DIR).join(IVF_CONFIG_FILE);
    write(&path, &newer(IVF_FORMAT_VERSION));
    assert_incompatible(IvfConfig::load(dir.path()).unwrap_err(), IVF_CONFIG_FILE, IVF_FORMAT_VERSION);
    write(&path, &garbled(IVF_FORMAT_VERSION));
    assert_corrupted(IvfConfig::load(dir.path()).unwrap_err(), IVF_CONFIG_FILE);
    write(&path, "not json");
    assert_corrupted(IvfConfig::load(dir.path()).unwrap_err(), IVF_CONFIG_FILE);
}

#[test]
fn a_newer_ivf_binary_file_is_incompatible_whatever_its_header_holds() {
    let version_at = HEADER_FIELDS.iter().find(|f| f.0 == "format_version").unwrap().1;
    let newer = READABLE_VERSIONS.newest + 1;
    for kind in [FileKind::IvfCentroids, FileKind::IvfPostings, FileKind::IvfVectors] {
        let dir = tempfile::tempdir().unwrap();
        synthetic_ivf::write(dir.path());
        let open = || Ivf::open(dir.path(), DOCS as u64, DIM, &ReaderOptions::new(ReaderKind::Mmap));
        assert!(open().unwrap().is_some());
        let path = dir.path().join(IVF_DIR).join(kind.file_name());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[version_at..version_at + 4].copy_from_slice(&newer.to_le_bytes());
        // Every header field after the version changes, its checksum included.
        bytes[version_at + 4..HEADER_BYTES].iter_mut().for_each(|b| *b = !*b);
        std::fs::write(&path, bytes).unwrap();
        match open().err().unwrap() {
            CellarError::Incompatible { path: p, found, oldest, newest } => {
                assert!(p.ends_with(kind.file_name()), "{p:?}");
                assert_eq!(
                    (found, oldest, newest),
                    (newer, READABLE_VERSIONS.oldest, READABLE_VERSIONS.newest)
                );
            }
            other => panic!("{kind:?}: expected Incompatible, got {other:?}"),
        }
    }
}
