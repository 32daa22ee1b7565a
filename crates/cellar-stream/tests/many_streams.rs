//! Issue 21.5: many streams under one root cost one compaction thread and a bounded number of
//! open files, and a stream closed to make room loses nothing. Alone in its test binary, so
//! the thread and file counts are this test's own.

mod common;

use cellar_stream::{Options, Streams};
use common::{doc, doc_ins, DIM};

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn compaction_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "cellar-compact")
        })
        .count()
}

#[test]
fn many_streams_cost_one_thread_and_bounded_files_and_closing_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { compact_after: 2, background_compaction: true, ..common::options(512) };
    let max_open = 4;
    let streams = Streams::open(dir.path(), options).unwrap().with_max_open(max_open);
    let files_before = open_files();
    let (n_streams, n_docs) = (40, 30);
    for s in 0..n_streams {
        let name = format!("s{s}");
        for d in 0..n_docs {
            // Small memtable: several flushes per stream, so compactions get queued too.
            let (_, _) = streams.put_batch(&name, DIM, doc_ins(&[doc("g", &format!("d{d}"), s)])).unwrap();
        }
        assert!(streams.open_count() <= max_open, "{} open after stream {s}", streams.open_count());
    }
    assert_eq!(compaction_threads(), 1, "one compaction thread for the process");
    let held = open_files() - files_before;
    // Each open collection (a grouped index) holds its two locks, its log, its empty base's
    // texts, and its segments' stores, texts and ids: about 9 files here, a few more while a
    // compaction's output and inputs are both open.
    assert!(held <= max_open * 16, "{held} files held by {max_open} open collections");
    // The stream written last is still open; its flushes queued it for compaction.
    let last = streams.get(&format!("s{}", n_streams - 1), None).unwrap();
    last.wait_idle();
    assert!(last.stats().compactions > 0, "{:?}", last.stats());
    drop(last);
    // Every stream, closed or not, still has every document (closed ones replay their logs).
    for s in 0..n_streams {
        let collection = streams.get(&format!("s{s}"), None).unwrap();
        for d in 0..n_docs {
            let got = collection.get("g", &format!("d{d}")).unwrap();
            assert_eq!(got.text, doc("g", &format!("d{d}"), s).text);
        }
    }
    assert_eq!(streams.names().len(), n_streams as usize);
}
