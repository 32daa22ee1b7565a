//! Golden files of a streaming collection: `testdata/stream-v1/` is a collection written by this
//! crate's version 1 of every file (`stream.json`, `MANIFEST.json`, one segment, `wal.log`), from
//! fixed documents: a first batch flushed to the segment (a tombstone among them), a second left
//! in the log. This build must write the same bytes from the same calls, so a change of the entry,
//! segment or log layout cannot slip in without a version bump, and must read them back.
//!
//! After an intended change (with a new version constant), keep the old directory for the reading
//! test and write the new one with `CELLAR_BLESS=1 cargo test -p cellar-stream --test format golden`
//! (`cellar-core/tests/support/golden.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cellar_core::CellarError;
use cellar_search::MetaValue;
use cellar_stream::manifest::{segment_file, Manifest, MANIFEST_FILE, SETTINGS_FILE, WAL_FILE};
use cellar_stream::segment::Segment;
use cellar_stream::Collection;

use crate::common::{self, DIM};
use crate::golden_files;

fn golden_dir() -> &'static Path {
    static GOLDEN: OnceLock<PathBuf> = OnceLock::new();
    golden_files::dir(&GOLDEN, "stream-v1", write)
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

/// The fixed calls: what the segment holds, then what only the log holds.
fn write(dir: &Path) {
    let collection = common::open(dir, common::options(1 << 20));
    let first = [common::doc("a", "1", 1), common::doc("a", "2", 1), common::doc("b", "1", 1)];
    collection.put_batch(&common::doc_ins(&first)).unwrap();
    collection.put(&described().doc_in()).unwrap();
    collection.delete("a", "2").unwrap();
    collection.flush().unwrap();
    collection.put(&common::doc("a", "1", 2).doc_in()).unwrap();
    collection.put_batch(&common::doc_ins(&[common::doc("c", "1", 1), common::doc("c", "2", 1)])).unwrap();
    collection.delete("b", "1").unwrap();
}

#[test]
fn golden_collection_is_reproduced_byte_for_byte() {
    let golden = golden_dir();
    let fresh = tempfile::tempdir().unwrap();
    write(fresh.path());
    golden_files::assert_same_bytes(golden, fresh.path(), &files(), "the file's version constant");
    let mut names: Vec<String> =
        std::fs::read_dir(golden).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    names.sort();
    let mut expected = files().to_vec();
    expected.sort();
    assert_eq!(names, expected, "the golden directory holds exactly the collection's files");
}

/// What `get` must return for (group, id): the input document and its sequence number, or
/// nothing for a deleted one.
type Expected = (&'static str, &'static str, Option<(common::Doc, u64)>);

fn expected() -> Vec<Expected> {
    vec![
        ("a", "1", Some((common::doc("a", "1", 2), 6))),
        ("a", "2", None),
        ("b", "1", None),
        ("b", "described", Some((described(), 4))),
        ("c", "1", Some((common::doc("c", "1", 1), 7))),
        ("c", "2", Some((common::doc("c", "2", 1), 8))),
    ]
}

#[test]
fn golden_collection_is_read_by_this_build() {
    let segment = Segment::open(&golden_dir().join(segment_file(1))).unwrap();
    // a/2's put was replaced in the memtable by its tombstone (seq 5).
    assert_eq!((segment.dim, segment.entries, segment.n_groups()), (DIM, 4, 2));
    assert_eq!((segment.min_seq, segment.max_seq), (1, 5));
    assert_eq!(Manifest::load(golden_dir()).unwrap().flushed_seq, 5);
    // Opening may truncate a log's torn tail: read a copy.
    let copy = tempfile::tempdir().unwrap();
    for file in files() {
        std::fs::copy(golden_dir().join(&file), copy.path().join(&file)).unwrap();
    }
    let collection = Collection::open(copy.path(), None, common::options(1 << 20)).unwrap();
    let stats = collection.stats();
    assert_eq!((stats.segments, stats.recovered_records, stats.truncated_bytes), (1, 3, 0));
    for (group, id, want) in expected() {
        match (collection.get(group, id), want) {
            (Ok(got), Some((doc, seq))) => {
                assert_eq!(
                    (got.seq, &got.text, got.n_tokens),
                    (seq, &doc.text, doc.n_tokens),
                    "{group}/{id}"
                );
                assert_eq!(got.tokens, doc.tokens, "{group}/{id}: token vectors are exact in f16");
                assert_eq!(
                    got.metadata.0,
                    doc.metadata.into_iter().collect::<BTreeMap<_, _>>(),
                    "{group}/{id}"
                );
                if let Some(pooled) = doc.pooled {
                    assert_eq!(got.pooled, pooled, "{group}/{id}");
                }
            }
            (Err(CellarError::NotFound(_)), None) => {}
            (got, want) => panic!("{group}/{id}: got {got:?}, expected {want:?}"),
        }
    }
}
