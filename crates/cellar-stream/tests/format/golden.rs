//! Golden files of the first stream format: `testdata/stream-v1/` is a collection written by
//! version 1 of every file (`stream.json`, `MANIFEST.json`, one segment, `wal.log`), from fixed
//! documents: a first batch flushed to the segment (a tombstone among them), a second left in the
//! log. Collections are grouped indexes now (issue 46); this build reads those files once, to
//! migrate them, and must lose nothing: every live document's text, metadata and vectors, no
//! deleted one, whatever point a crash cut the migration at.

use std::collections::BTreeMap;
use std::path::Path;

use cellar_core::CellarError;
use cellar_search::MetaValue;
use cellar_stream::legacy::{segment_file, ManifestV1, SegmentV1, MANIFEST_FILE, SETTINGS_FILE, WAL_FILE};
use cellar_stream::Collection;

use crate::common::{self, DIM};

fn golden_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/stream-v1")
}

fn files() -> [String; 4] {
    [SETTINGS_FILE.into(), MANIFEST_FILE.into(), segment_file(1), WAL_FILE.into()]
}

/// A document with a pooled vector of its own and every kind of metadata value.
fn described() -> common::Doc {
    let mut doc = common::doc("b", "described", 1);
    doc.pooled = Some((0..DIM).map(|d| if d == 0 { 1.0 } else { 0.0 }).collect());
    doc.metadata.insert("score".into(), MetaValue::Float(0.25));
    doc.metadata.insert("public".into(), MetaValue::Bool(true));
    doc
}

#[test]
fn golden_collection_holds_exactly_its_files() {
    let mut names: Vec<String> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    names.sort();
    let mut expected = files().to_vec();
    expected.sort();
    assert_eq!(names, expected, "the golden directory holds exactly the collection's files");
}

/// What `get` must return for (group, id): the input document, or nothing for a deleted one.
fn expected() -> Vec<(&'static str, &'static str, Option<common::Doc>)> {
    vec![
        ("a", "1", Some(common::doc("a", "1", 2))),
        ("a", "2", None),
        ("b", "1", None),
        ("b", "described", Some(described())),
        ("c", "1", Some(common::doc("c", "1", 1))),
        ("c", "2", Some(common::doc("c", "2", 1))),
    ]
}

fn check_migrated(dir: &Path, what: &str) {
    let collection = Collection::open(dir, None, common::options(1 << 20)).unwrap();
    assert!(!dir.join(SETTINGS_FILE).exists(), "{what}: the first format's files are gone");
    assert_eq!(collection.stats().segments, 1, "{what}: the migration flushed its documents");
    for (group, id, want) in expected() {
        match (collection.get(group, id), want) {
            (Ok(got), Some(doc)) => {
                assert_eq!((&got.text, got.n_tokens), (&doc.text, doc.n_tokens), "{what}: {group}/{id}");
                assert_eq!(got.tokens, doc.tokens, "{what}: {group}/{id}: token vectors are exact in f16");
                assert_eq!(
                    got.metadata.0,
                    doc.metadata.into_iter().collect::<BTreeMap<_, _>>(),
                    "{group}/{id}"
                );
                if let Some(pooled) = doc.pooled {
                    assert_eq!(got.pooled, pooled, "{what}: {group}/{id}");
                }
            }
            (Err(CellarError::NotFound(_)), None) => {}
            (got, want) => panic!("{what}: {group}/{id}: got {got:?}, expected {want:?}"),
        }
    }
    let hits = collection.search("c", &common::search(common::query(1, 1), 10)).unwrap().hits;
    assert_eq!(hits.len(), 2, "{what}: the migrated group is searched");
}

fn copy_golden(to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for file in files() {
        std::fs::copy(golden_dir().join(&file), to.join(&file)).unwrap();
    }
}

#[test]
fn golden_collection_is_read_by_this_build() {
    let segment = SegmentV1::read(&golden_dir().join(segment_file(1))).unwrap();
    // a/2's put was replaced in the memtable by its tombstone.
    let entries: usize = segment.groups.iter().map(|(_, _, e)| e.len()).sum();
    assert_eq!((segment.dim, entries, segment.groups.len()), (DIM, 4, 2));
    assert_eq!(ManifestV1::load(&golden_dir()).unwrap().flushed_seq, 5);
}

#[test]
fn golden_collection_is_migrated_and_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("mail");
    copy_golden(&dir);
    check_migrated(&dir, "migrated on open");
    check_migrated(&dir, "reopened");
    let left: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    assert_eq!(left, ["mail"], "nothing is left beside the collection");
}

/// A crash inside a migration: before the swap (a half-built new collection beside the old one:
/// the next open starts again), and between its two renames (the old one moved aside, the new one
/// complete: the next open finishes the swap).
#[test]
fn a_migration_cut_by_a_crash_is_finished_or_started_again() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("mail");
    copy_golden(&dir);
    std::fs::create_dir_all(root.path().join(".mail.migrating/live")).unwrap();
    std::fs::write(root.path().join(".mail.migrating/live/wal.log"), b"half").unwrap();
    check_migrated(&dir, "restarted");

    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("mail");
    copy_golden(&dir);
    drop(Collection::open(&dir, None, common::options(1 << 20)).unwrap());
    std::fs::rename(&dir, root.path().join(".mail.migrating")).unwrap();
    copy_golden(&root.path().join(".mail.v1"));
    check_migrated(&dir, "finished");
    let left: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into())
        .collect();
    assert_eq!(left, ["mail"], "the old collection is removed once the swap is done");
}
