//! A full disk in every write path of an index (issue 16.4), by the failpoints of
//! `cellar_core::failpoint` (`ENOSPC` for the files under one directory): a write whose log
//! append fails, a flush, a merge and a build each fail with a disk-full error, what was
//! acknowledged stays readable (found, searched, and found again after reopening), the index
//! keeps answering, and the same call succeeds once space returns. The same on a real full file
//! system, tantivy's files included, is `cellar-cli/tests/full_disk.rs`.

use std::path::Path;

use cellar_core::codec::CodecKind;
use cellar_core::failpoint::{arm, FailPoint};
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
