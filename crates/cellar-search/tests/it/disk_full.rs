//! A full disk in every write path of an index (issue 16.4), by the failpoints of
//! `cellar_core::failpoint` (`ENOSPC` for the files under one directory): a write whose log
//! append fails, a flush, a merge and a build each fail with a disk-full error, what was
//! acknowledged stays readable (found, searched, and found again after reopening), the index
//! keeps answering, and the same call succeeds once space returns. The same on a real full file
//! system, tantivy's files included, is `cellar-cli/tests/full_disk.rs`, and here (issue 43.2,
//! 43.3) a flush and a BM25 commit that fail after their batch was logged, by failpoints and on
//! a small tmpfs of their own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use cellar_core::codec::CodecKind;
use cellar_core::failpoint::{arm, arm_errno, FailPoint};
use cellar_core::CellarError;
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::live::merge::MergeBudget;
use cellar_search::{
    BuildOptions, DocIn, EmbeddedDoc, Index, Mode, OpenOptions, QueryVectorsIn, SearchRequest, WriteOp,
    WriteRequest,
};
use tempfile::TempDir;

const DIM: usize = 8;

fn row(i: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..DIM).map(|d| ((i * 31 + d * 17) as f32 * 0.618).sin()).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / norm).collect()
}

fn build(dir: &Path) -> Result<(), CellarError> {
    let docs = (0..48).map(|i| {
        Ok(EmbeddedDoc {
            id: format!("b{i}"),
            text: format!("base {i}"),
            tokens: row(i),
            ..EmbeddedDoc::default()
        })
    });
    let mut options = BuildOptions::new("", dir);
    options.codec = CodecKind::F16;
    options.ivf = Some(IvfBuildOptions { cluster_size: 16, ..IvfBuildOptions::default() });
    Index::build_from_embeddings(&options, DIM, None, docs).map(drop)
}

fn built() -> (TempDir, std::path::PathBuf) {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    build(&dir).unwrap();
    (tmp, dir)
}

fn add(id: &str, i: usize) -> WriteOp {
    let vectors = QueryVectorsIn { tokens: vec![row(i), row(i + 1)], ..Default::default() };
    WriteOp::Add(DocIn {
        id: id.into(),
        text: format!("written {id}"),
        vectors: Some(vectors),
        ..DocIn::default()
    })
}

fn write(index: &Index, ops: Vec<WriteOp>) -> Result<(), CellarError> {
    index.write(WriteRequest { ops }).map(drop)
}

fn assert_full(result: Result<impl std::fmt::Debug, CellarError>, what: &str) {
    let err = result.expect_err(what);
    assert!(err.is_disk_full(), "{what}: {err}");
    assert_eq!(err.code(), "disk_full");
}

/// The ids of a dense search probing every cluster, for `row(i)`.
fn search(index: &Index, i: usize) -> Vec<String> {
    let request = SearchRequest {
        k: Some(5),
        mode: Some(Mode::Dense),
        nprobe: Some(index.ivf_config().unwrap().clusters),
        include_text: Some(false),
        query_vectors: Some(QueryVectorsIn {
            tokens: vec![row(i)],
            pooled: Some(row(i)),
            ..Default::default()
        }),
        ..Default::default()
    };
    index.search(request).unwrap().hits.into_iter().map(|h| h.id).collect()
}

fn present(index: &Index, ids: &[&str]) -> Vec<bool> {
    ids.iter().map(|id| index.get(id).unwrap().is_some()).collect()
}

#[test]
fn a_write_whose_log_append_hits_a_full_disk_changes_nothing_and_the_next_one_lands() {
    let (_tmp, dir) = built();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    write(&index, vec![add("w0", 100)]).unwrap();
    let len = index.len();
    let guard = arm(FailPoint::WalAppend, &dir, 0);
    assert_full(write(&index, vec![add("w1", 101), WriteOp::Delete("b1".into())]), "a log append");
    assert!(guard.failed() >= 1);
    assert_eq!(index.len(), len, "nothing of the refused batch is applied");
    assert_eq!(present(&index, &["w0", "w1", "b1"]), [true, false, true]);
    assert!(!search(&index, 100).is_empty(), "searches go on");
    drop(guard);
    write(&index, vec![add("w1", 101)]).unwrap();
    drop(index);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert_eq!(present(&index, &["w0", "w1", "b1"]), [true, true, true], "after a reopen, from the log");
}

#[test]
fn a_flush_on_a_full_disk_fails_and_keeps_every_logged_document() {
    let (_tmp, dir) = built();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    let ids: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    write(&index, ids.iter().enumerate().map(|(i, id)| add(id, 200 + i)).collect()).unwrap();
    let guard = arm(FailPoint::FileWrite, &dir, 0);
    assert_full(index.flush(), "a flush");
    drop(guard);
    let all: Vec<&str> = ids.iter().map(String::as_str).collect();
    assert!(present(&index, &all).iter().all(|p| *p), "logged documents are still served");
    assert!(search(&index, 203).contains(&"w3".to_string()));
    write(&index, vec![add("after", 300)]).unwrap();
    index.flush().unwrap();
    drop(index);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert!(present(&index, &all).iter().all(|p| *p));
    assert_eq!(present(&index, &["after"]), [true]);
    assert!(search(&index, 203).contains(&"w3".to_string()));
}

#[test]
fn a_merge_on_a_full_disk_fails_and_keeps_every_segment() {
    let (_tmp, dir) = built();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    for round in 0..3 {
        write(&index, (0..4).map(|i| add(&format!("r{round}-{i}"), 400 + round * 4 + i)).collect()).unwrap();
        index.flush().unwrap();
    }
    write(&index, vec![WriteOp::Delete("r1-2".into())]).unwrap();
    let budget = MergeBudget { bytes_per_sec: 0, chunk_docs: 3 };
    let guard = arm(FailPoint::FileWrite, &dir, 1);
    assert_full(index.merge(&budget), "a merge");
    drop(guard);
    let kept = ["r0-0", "r1-1", "r2-3", "r1-2"];
    assert_eq!(present(&index, &kept), [true, true, true, false]);
    assert!(index.merge(&budget).unwrap().is_some(), "the merge runs once space returns");
    drop(index);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert_eq!(present(&index, &kept), [true, true, true, false]);
    assert!(search(&index, 409).contains(&"r2-1".to_string()));
}

#[test]
fn a_build_on_a_full_disk_fails_clearly_and_leaves_no_index_behind() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    for pass in [0, 3, 20] {
        let guard = arm(FailPoint::FileWrite, &dir, pass);
        assert_full(build(&dir), &format!("a build failing after {pass} writes"));
        drop(guard);
        let err = Index::open(&dir, OpenOptions::default()).map(drop).unwrap_err();
        assert!(!err.is_disk_full(), "an interrupted build is not an index: {err}");
    }
    build(&dir).unwrap();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert_eq!(index.len(), 48);
    assert!(search(&index, 7).contains(&"b7".to_string()));
}

/// A document of about `kb` KiB of text (few distinct words: little for BM25, much for the log
/// and a segment).
fn add_big(id: &str, i: usize, kb: usize) -> WriteOp {
    let vectors = QueryVectorsIn { tokens: vec![row(i), row(i + 1)], ..Default::default() };
    let text = format!("written {id} {}", "lorem ipsum dolor sit amet ".repeat(kb * 1024 / 27));
    WriteOp::Add(DocIn { id: id.into(), text, vectors: Some(vectors), ..DocIn::default() })
}

/// The ids of a BM25 search for `query`.
fn bm25(index: &Index, query: &str) -> Vec<String> {
    let request = SearchRequest {
        query: query.into(),
        k: Some(5),
        mode: Some(Mode::Bm25),
        include_text: Some(false),
        ..Default::default()
    };
    index.search(request).unwrap().hits.into_iter().map(|h| h.id).collect()
}

/// Segments a failed flush left half written in `live/`.
fn leftovers(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir.join("live")).unwrap().map(|e| e.unwrap().file_name());
    names.map(|n| n.to_string_lossy().into_owned()).filter(|n| n.ends_with(".writing")).collect()
}

/// Issue 43.2: a flush failing after its batch was logged and published fails no write (the
/// batch is acknowledged, served, and found once after a reopen); while flushes fail the
/// memtable keeps growing only to its bound, past which a new write is refused (disk_full,
/// nothing of it logged); the first write once space returns flushes.
#[test]
fn a_flush_failing_after_its_batch_was_logged_fails_no_write_and_the_memtable_stops_at_its_bound() {
    let (_tmp, dir) = built();
    let options = || OpenOptions { flush_bytes: 256, ..OpenOptions::default() };
    let index = Index::open(&dir, options()).unwrap();
    write(&index, vec![add("w0", 500)]).unwrap();
    let guard = arm(FailPoint::FileWrite, &dir, 0);
    let mut acknowledged = vec!["w0".to_string()];
    let (refused, err) = loop {
        let id = format!("w{}", acknowledged.len());
        match write(&index, vec![add(&id, 500 + acknowledged.len())]) {
            Ok(()) => acknowledged.push(id),
            Err(e) => break (id, e),
        }
        assert!(acknowledged.len() < 100, "the memtable grows without bound while its flushes fail");
    };
    assert!(err.is_disk_full(), "{err}");
    assert!(err.to_string().contains("this batch was not written"), "{err}");
    let stats = index.live_stats();
    assert!(
        acknowledged.len() >= 4 && stats.flush_failures >= 3,
        "{} written, {stats:?}",
        acknowledged.len()
    );
    assert_eq!((stats.segments, stats.memtable_docs), (0, acknowledged.len()), "{stats:?}");
    assert!(leftovers(&dir).is_empty(), "a failed flush left {:?}", leftovers(&dir));
    let all: Vec<&str> = acknowledged.iter().map(String::as_str).collect();
    assert!(present(&index, &all).iter().all(|p| *p), "acknowledged documents are served");
    assert_eq!(present(&index, &[&refused]), [false], "the refused batch was not logged");
    assert!(search(&index, 502).contains(&"w2".to_string()));
    drop(guard);
    write(&index, vec![add(&refused, 900)]).unwrap();
    let stats = index.live_stats();
    // It flushed the memtable before it logged its batch.
    assert_eq!((stats.segments, stats.memtable_docs), (1, 1), "flushed once space returned: {stats:?}");
    drop(index);
    let index = Index::open(&dir, options()).unwrap();
    assert!(present(&index, &all).iter().all(|p| *p), "after a reopen");
    assert_eq!(present(&index, &[&refused]), [true]);
    assert_eq!(index.live_stats().written, acknowledged.len() as u64 + 1, "each document once");
    assert_eq!(index.len(), 48 + acknowledged.len() + 1);
}

/// The same with `background_flush`: the segment job that meets the full disk leaves its
/// documents frozen (its files removed) while writes go on into the fresh log; each later write
/// tries it again; once space returns a write commits it and freezes the rest, and after a
/// reopen every acknowledged document is there once.
#[test]
fn a_failing_background_flush_fails_no_write_and_commits_once_space_returns() {
    let (_tmp, dir) = built();
    let options = || OpenOptions { flush_bytes: 32, background_flush: true, ..OpenOptions::default() };
    let index = Index::open(&dir, options()).unwrap();
    write(&index, vec![add("w0", 499)]).unwrap();
    index.finish_flush().unwrap();
    let guard = arm(FailPoint::FileWrite, &dir, 0);
    let ids: Vec<String> = (0..3).map(|i| format!("bg{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        write(&index, vec![add(id, 500 + i)]).unwrap();
    }
    let stats = index.live_stats();
    assert!(stats.flush_failures >= 1 && stats.segments == 1, "only w0's segment: {stats:?}");
    assert!(leftovers(&dir).is_empty(), "a failed flush left {:?}", leftovers(&dir));
    drop(guard);
    write(&index, vec![add("bg3", 503)]).unwrap();
    index.finish_flush().unwrap();
    let stats = index.live_stats();
    assert_eq!((stats.segments, stats.memtable_docs), (3, 0), "the frozen flush, then the rest: {stats:?}");
    drop(index);
    let index = Index::open(&dir, options()).unwrap();
    assert_eq!(present(&index, &["w0", "bg0", "bg1", "bg2", "bg3"]), [true; 5]);
    assert_eq!(index.live_stats().written, 5, "each document once");
}

/// Issue 43.2: a flush that failed after its batches were logged is tried again without
/// waiting for a write (`Index::retry_flush`, which the server's background thread calls once a
/// second), and never by a handle that does not write the index.
#[test]
fn a_failed_flush_is_tried_again_without_a_write_and_only_by_the_writer() {
    let (_tmp, dir) = built();
    // Every written document (1 KiB of text) is past the flush size: each write flushes.
    let options = || OpenOptions { flush_bytes: 256, ..OpenOptions::default() };
    let index = Index::open(&dir, options()).unwrap();
    write(&index, vec![add_big("w0", 500, 1)]).unwrap();
    assert_eq!((index.live_stats().segments, index.live_stats().memtable_docs), (1, 0));
    let guard = arm(FailPoint::FileWrite, &dir, 0);
    write(&index, vec![add_big("w1", 501, 1)]).unwrap();
    index.retry_flush();
    let stats = index.live_stats();
    assert!(stats.flush_failures >= 2, "the write's flush and the retry failed: {stats:?}");
    assert_eq!((stats.segments, stats.memtable_docs), (1, 1), "{stats:?}");
    drop(guard);
    let reader = Index::open(&dir, options()).unwrap();
    reader.retry_flush();
    assert_eq!(index.live_stats().segments, 1, "a handle that does not write never flushes");
    index.retry_flush();
    let stats = index.live_stats();
    assert_eq!((stats.segments, stats.memtable_docs), (2, 0), "flushed with no write: {stats:?}");
    assert_eq!(present(&index, &["w0", "w1"]), [true, true]);
}

/// Issue 43.3: a BM25 commit that fails (a full disk, too many open files) is a typed error
/// (disk_full, io: never corrupted nor internal), its batch is taken back out of the log (not
/// applied now, nor after a reopen), and the next write lands without a reopen, in BM25 too.
#[test]
fn a_failed_bm25_commit_is_typed_takes_its_batch_back_and_the_next_write_lands() {
    for (errno, code) in [(libc::ENOSPC, "disk_full"), (libc::EMFILE, "io")] {
        let (_tmp, dir) = built();
        let index = Index::open(&dir, OpenOptions::default()).unwrap();
        write(&index, vec![add("w0", 100)]).unwrap();
        let guard = arm_errno(FailPoint::Bm25Commit, &dir, 0, errno);
        let err = write(&index, vec![add("w1", 101), WriteOp::Delete("b1".into())]).unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(guard.failed() >= 1);
        assert_eq!(present(&index, &["w0", "w1", "b1"]), [true, false, true], "nothing of it is applied");
        assert_eq!(index.live_stats().batches_taken_back, 1);
        assert!(bm25(&index, "base 1").contains(&"b1".to_string()), "BM25 has none of it either");
        let again = write(&index, vec![add("w2", 102)]).unwrap_err();
        assert_eq!(again.code(), code, "while the cause stays: {again}");
        drop(guard);
        write(&index, vec![add("w1", 101), WriteOp::Delete("b1".into())]).unwrap();
        assert_eq!(present(&index, &["w0", "w1", "b1", "w2"]), [true, true, false, false]);
        assert!(bm25(&index, "written w1").contains(&"w1".to_string()), "BM25 is written again");
        drop(index);
        let index = Index::open(&dir, OpenOptions::default()).unwrap();
        assert_eq!(present(&index, &["w0", "w1", "b1", "w2"]), [true, true, false, false], "after a reopen");
        assert_eq!(index.live_stats().written, 2, "no batch answered with an error came back");
        assert!(bm25(&index, "written w1").contains(&"w1".to_string()));
        assert!(!bm25(&index, "base 1").contains(&"b1".to_string()));
    }
}

/// Issue 43.3 under group commit: writers racing a BM25 commit that fails each learn whether
/// their batch was kept (committed before the failure) or taken back (theirs, or logged after
/// it), and the index, before and after a reopen, holds exactly the batches answered `Ok`.
#[test]
fn concurrent_writers_meeting_a_failed_bm25_commit_hold_exactly_what_was_acknowledged() {
    let (_tmp, dir) = built();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    write(&index, vec![add("w0", 100)]).unwrap();
    let guard = arm_errno(FailPoint::Bm25Commit, &dir, 3, libc::EMFILE);
    let outcomes: Vec<(String, bool)> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let index = &index;
                scope.spawn(move || {
                    (0..6)
                        .map(|i| {
                            let id = format!("t{t}-{i}");
                            let done = write(index, vec![add(&id, 1000 + t * 10 + i)]);
                            if let Err(e) = &done {
                                assert_eq!(e.code(), "io", "{e}");
                            }
                            (id, done.is_ok())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        writers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    drop(guard);
    let kept: Vec<&str> = outcomes.iter().filter(|o| o.1).map(|o| o.0.as_str()).collect();
    let refused: Vec<&str> = outcomes.iter().filter(|o| !o.1).map(|o| o.0.as_str()).collect();
    assert!(!refused.is_empty(), "{outcomes:?}");
    assert!(present(&index, &kept).iter().all(|p| *p), "acknowledged: {kept:?}");
    assert!(present(&index, &refused).iter().all(|p| !*p), "refused: {refused:?}");
    let taken_back = index.live_stats().batches_taken_back;
    assert_eq!(taken_back, refused.len() as u64, "each refused batch was taken back");
    write(&index, vec![add("after", 300)]).unwrap();
    drop(index);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert!(present(&index, &kept).iter().all(|p| *p), "after a reopen: {kept:?}");
    assert!(present(&index, &refused).iter().all(|p| !*p), "after a reopen: {refused:?}");
    assert_eq!(index.live_stats().written, kept.len() as u64 + 2);
}

/// The directory of a private tmpfs of `mb` MiB when this is the run of test `name` inside
/// it; `None` in the outer run, after it ran test `name` of this binary again in a mount
/// namespace of its own holding that tmpfs (root needed, as `cellar-cli/tests/full_disk.rs`
/// does: a test that cannot mount one fails, saying so) and that run passed.
fn on_small_tmpfs(name: &str, mb: u64) -> Option<PathBuf> {
    const INSIDE: &str = "CELLAR_TEST_TMPFS";
    if let Some(dir) = std::env::var_os(INSIDE) {
        return Some(PathBuf::from(dir));
    }
    let mount = TempDir::new().unwrap();
    let script = format!("mount -t tmpfs -o size={mb}m cellar-test \"$0\" && exec \"$@\"");
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .arg(mount.path())
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(INSIDE, mount.path())
        .output()
        .expect("unshare (util-linux) runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("running 1 test"),
        "this test needs a private tmpfs (root: unshare -m, mount -t tmpfs): {stderr}"
    );
    assert!(out.status.success() && stdout.contains("1 passed"), "inside the tmpfs:\n{stdout}\n{stderr}");
    None
}

/// Takes every free byte of the file system of `dir` with file `name`, a page at a time.
fn fill(dir: &Path, name: &str) {
    let mut file = std::fs::File::create(dir.join(name)).unwrap();
    let page = [1u8; 4096];
    loop {
        match file.write_all(&page) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
}

/// Issue 43.2 and 43.3 on a real full file system (tantivy's files included): a write whose
/// segment flush finds the disk full is acknowledged and the next write once space returns
/// flushes; a write whose BM25 commit finds it full is disk_full and taken back; after a
/// reopen every acknowledged document is there once, and no refused one.
#[test]
fn on_a_full_tmpfs_a_failed_flush_fails_no_write_and_a_failed_bm25_commit_is_taken_back() {
    let name =
        "disk_full::on_a_full_tmpfs_a_failed_flush_fails_no_write_and_a_failed_bm25_commit_is_taken_back";
    let Some(disk) = on_small_tmpfs(name, 6) else { return };
    let dir = disk.join("index");
    build(&dir).unwrap();
    let options = || OpenOptions { flush_bytes: 256 << 10, ..OpenOptions::default() };
    let index = Index::open(&dir, options()).unwrap();
    write(&index, vec![add("w0", 100)]).unwrap();

    // Room for the batch's log record and its BM25 commit, not for the segment after them.
    std::fs::write(disk.join("reserve"), vec![1u8; 512 << 10]).unwrap();
    fill(&disk, "filler");
    std::fs::remove_file(disk.join("reserve")).unwrap();
    write(&index, (1..6).map(|i| add_big(&format!("big{i}"), 600 + i, 64)).collect()).unwrap();
    let stats = index.live_stats();
    assert!(stats.flush_failures >= 1 && stats.segments == 0, "the flush met the full disk: {stats:?}");
    assert!(leftovers(&dir).is_empty(), "a failed flush left {:?}", leftovers(&dir));
    assert!(present(&index, &["big1", "big5"]).iter().all(|p| *p));

    // No room at all: the next batch's record fits in the log's last page, tantivy's new files
    // do not.
    fill(&disk, "filler2");
    let err = write(&index, vec![add("w1", 101)]).unwrap_err();
    assert_eq!(err.code(), "disk_full", "{err}");
    assert_eq!(present(&index, &["w1"]), [false]);
    assert_eq!(index.live_stats().batches_taken_back, 1);

    std::fs::remove_file(disk.join("filler2")).unwrap();
    std::fs::remove_file(disk.join("filler")).unwrap();
    write(&index, vec![add("w1", 101)]).unwrap();
    let stats = index.live_stats();
    assert_eq!((stats.segments, stats.memtable_docs), (1, 0), "flushed once space returned: {stats:?}");
    assert!(bm25(&index, "written w1").contains(&"w1".to_string()));
    drop(index);
    let index = Index::open(&dir, options()).unwrap();
    assert_eq!(present(&index, &["w0", "big1", "big5", "w1"]), [true; 4]);
    assert_eq!(index.live_stats().written, 7, "each acknowledged document once, no refused one");
}
