//! A full disk under a streaming collection (issue 16.4), by the failpoints of
//! `cellar_core::failpoint`: a batch whose log append fails is refused whole and the next one
//! lands; a flush and a compaction that cannot write their segment fail with a disk-full error
//! and keep every acknowledged document readable, before and after a reopen. (The server on a
//! real full tmpfs is `cellar-cli/tests/full_disk.rs`.)

mod common;

use cellar_core::failpoint::{arm, FailPoint};
use cellar_core::CellarError;
use common::{doc, doc_ins, open, options};

fn assert_full<T: std::fmt::Debug>(result: Result<T, CellarError>, what: &str) {
    let err = result.expect_err(what);
    assert!(err.is_disk_full(), "{what}: {err}");
}

#[test]
fn feeds_flushes_and_compactions_on_a_full_disk_fail_and_lose_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), options(1 << 20));
    let first: Vec<_> = (0..8).map(|i| doc(["alice", "bob"][i % 2], &format!("m{i}"), 1)).collect();
    c.put_batch(doc_ins(&first)).unwrap();

    let guard = arm(FailPoint::WalAppend, dir.path(), 0);
    assert_full(c.put_batch(doc_ins(&[doc("alice", "lost", 1), doc("bob", "lost", 1)])), "a feed batch");
    drop(guard);
    assert!(
        matches!(c.get("alice", "lost"), Err(CellarError::NotFound(_))),
        "the refused batch is not half there"
    );
    c.put(&doc("carol", "m0", 1).doc_in()).unwrap();

    let guard = arm(FailPoint::FileWrite, dir.path(), 0);
    assert_full(c.flush(), "a flush");
    drop(guard);
    for d in first.iter().chain([&doc("carol", "m0", 1)]) {
        assert_eq!(c.get(&d.group, &d.id).unwrap().text, d.text, "logged documents stay readable");
    }
    c.flush().unwrap();
    c.put_batch(doc_ins(&[doc("alice", "m0", 2)])).unwrap();
    c.flush().unwrap();

    let guard = arm(FailPoint::FileWrite, dir.path(), 1);
    assert_full(c.compact(), "a compaction");
    drop(guard);
    assert_eq!(c.get("alice", "m0").unwrap().text, doc("alice", "m0", 2).text);
    assert!(c.compact().unwrap(), "the compaction runs once space returns");
    drop(c);

    let c = open(dir.path(), options(1 << 20));
    assert_eq!(c.get("alice", "m0").unwrap().text, doc("alice", "m0", 2).text);
    for d in first.iter().skip(1).chain([&doc("carol", "m0", 1)]) {
        assert_eq!(c.get(&d.group, &d.id).unwrap().text, d.text);
    }
    assert!(matches!(c.get("bob", "lost"), Err(CellarError::NotFound(_))));
}
