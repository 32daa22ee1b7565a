//! A living index: documents added, updated and deleted after the build are searched by every
//! mode, honoured by every stage, durable across reopening (log replay) and flushing (segments),
//! and a refused batch changes nothing.

use cellar_core::io::ReaderKind;
use cellar_core::CellarError;
use cellar_search::{DocIn, Index, Mode, OpenOptions, QueryVectorsIn, SearchRequest, WriteOp, WriteRequest};

use crate::fixture::copy_index;

const HARPSICHORD: &str = "A harpsichord is a keyboard instrument whose strings are plucked by quills.";
const HARPSICHORD_QUERY: &str = "keyboard instrument with plucked strings and quills";

fn open(dir: &std::path::Path, reader: ReaderKind) -> Index {
    Index::open(dir, OpenOptions { reader, ..Default::default() }).unwrap()
}

fn doc(id: &str, text: &str) -> DocIn {
    DocIn { id: id.into(), text: text.into(), ..DocIn::default() }
}

fn write(index: &Index, ops: Vec<WriteOp>) -> cellar_search::WriteReport {
    index.write(WriteRequest { ops }).unwrap()
}

/// Every mode, the IVF probing all of its clusters.
fn every_mode(query: &str, k: usize) -> Vec<(Mode, SearchRequest)> {
    Mode::ALL
        .into_iter()
        .map(|mode| {
            let request = SearchRequest {
                query: query.into(),
                mode: Some(mode),
                k: Some(k),
                nprobe: (mode == Mode::Ivf || mode == Mode::Dense).then_some(4),
                ..Default::default()
            };
            (mode, request)
        })
        .collect()
}

fn ids(index: &Index, request: &SearchRequest) -> Vec<String> {
    index.search(request.clone()).unwrap().hits.into_iter().map(|h| h.id).collect()
}

#[test]
fn an_added_document_is_found_by_every_mode_from_the_log_and_from_a_segment() {
    let (_tmp, dir) = copy_index();
    let index = open(&dir, ReaderKind::Mmap);
    let before = index.len();
    let report = write(&index, vec![WriteOp::Add(doc("harpsichord-0", HARPSICHORD))]);
    assert_eq!((report.seq, report.added, report.docs), (1, 1, before as u64 + 1));
    assert_eq!(index.len(), before + 1);
    let check = |index: &Index, when: &str| {
        for (mode, request) in every_mode(HARPSICHORD_QUERY, 3) {
            let hits = index.search(request).unwrap().hits;
            assert_eq!(
                hits[0].id,
                "harpsichord-0",
                "{when}, {mode}: {:?}",
                hits.iter().map(|h| &h.id).collect::<Vec<_>>()
            );
            assert_eq!(hits[0].text, HARPSICHORD, "{when}, {mode}");
        }
    };
    check(&index, "in the memtable");
    drop(index);
    let index = open(&dir, ReaderKind::Direct);
    check(&index, "replayed from the log");
    index.flush().unwrap();
    check(&index, "flushed");
    drop(index);
    let index = open(&dir, ReaderKind::Ram);
    check(&index, "from its segment");
    assert_eq!(index.len(), before + 1);
}

#[test]
fn scores_are_the_same_in_the_memtable_in_a_segment_and_from_vectors() {
    let (_tmp, dir) = copy_index();
    let index = open(&dir, ReaderKind::Mmap);
    let encoded = index.encoder().unwrap().encode_docs(&[HARPSICHORD]).unwrap().remove(0);
    let vectors = QueryVectorsIn {
        tokens: encoded.tokens.chunks(encoded.tokens.len() / encoded.n_tokens).map(<[f32]>::to_vec).collect(),
        pooled: Some(encoded.pooled.clone()),
        ..Default::default()
    };
    let given = DocIn { vectors: Some(vectors), ..doc("from-vectors", HARPSICHORD) };
    write(&index, vec![WriteOp::Add(doc("from-text", HARPSICHORD)), WriteOp::Add(given)]);
    let scores = |index: &Index| {
        let mut out = Vec::new();
        for (mode, request) in every_mode(HARPSICHORD_QUERY, 2) {
            let hits = index.search(request).unwrap().hits;
            let mut pair: Vec<(String, f32)> = hits.into_iter().map(|h| (h.id, h.score)).collect();
            pair.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(pair[0].0, "from-text", "{mode}");
            assert_eq!(pair[1].0, "from-vectors", "{mode}");
            if mode != Mode::Bm25 {
                assert_eq!(pair[0].1, pair[1].1, "{mode}: the same vectors, the same score");
            }
            out.push(pair);
        }
        out
    };
    let memtable = scores(&index);
    index.flush().unwrap();
    assert_eq!(scores(&index), memtable, "a flush changes no score");
}

#[test]
fn deleted_documents_leave_every_stage_and_stay_deleted() {
    let (_tmp, dir) = copy_index();
    let index = open(&dir, ReaderKind::Direct);
    let before = index.len();
    let ops = (0..5).map(|n| WriteOp::Delete(format!("violin-{n}"))).collect();
    let report = write(&index, ops);
    assert_eq!((report.deleted, report.docs), (5, before as u64 - 5));
    let check = |index: &Index, when: &str| {
        for (mode, request) in every_mode("note: which instrument is played with a bow", 30) {
            let found = ids(index, &request);
            assert!(!found.is_empty(), "{when}, {mode}");
            assert!(found.iter().all(|id| !id.starts_with("violin-")), "{when}, {mode}: {found:?}");
        }
    };
    check(&index, "just deleted");
    let again = index.write(WriteRequest { ops: vec![WriteOp::Delete("violin-0".into())] }).unwrap_err();
    assert!(matches!(again, CellarError::NotFound(_)), "{again:?}");
    drop(index);
    let index = open(&dir, ReaderKind::Mmap);
    check(&index, "replayed");
    assert_eq!(index.len(), before - 5);
    index.flush().unwrap();
    drop(index);
    let index = open(&dir, ReaderKind::Mmap);
    check(&index, "after a flush");
    // A deleted id can be added again: a new document.
    write(&index, vec![WriteOp::Add(doc("violin-0", HARPSICHORD))]);
    let found = ids(&index, &every_mode(HARPSICHORD_QUERY, 1)[0].1);
    assert_eq!(found, ["violin-0"]);
}

#[test]
fn an_update_replaces_the_old_version_everywhere() {
    let (_tmp, dir) = copy_index();
    let index = open(&dir, ReaderKind::Mmap);
    let before = index.len();
    let report = write(&index, vec![WriteOp::Update(doc("coffee-0", HARPSICHORD))]);
    assert_eq!((report.updated, report.docs), (1, before as u64));
    for flushed in [false, true] {
        for (mode, request) in every_mode(HARPSICHORD_QUERY, 30) {
            let hits = index.search(request).unwrap().hits;
            assert_eq!(hits[0].id, "coffee-0", "{mode}, flushed {flushed}");
            assert_eq!(hits[0].text, HARPSICHORD);
            assert_eq!(hits.iter().filter(|h| h.id == "coffee-0").count(), 1, "{mode}: one version");
        }
        for (mode, request) in every_mode("roasted coffee beans brewed into espresso", 30) {
            let hits = index.search(request).unwrap().hits;
            let old = hits.iter().find(|h| h.id == "coffee-0");
            assert!(old.is_none_or(|h| h.text == HARPSICHORD), "{mode}: the old text is gone");
        }
        index.flush().unwrap();
    }
    let missing = index.write(WriteRequest { ops: vec![WriteOp::Update(doc("no-such-doc", "text"))] });
    assert!(matches!(missing, Err(CellarError::NotFound(_))), "{missing:?}");
}

#[test]
fn a_refused_batch_changes_nothing() {
    let (_tmp, dir) = copy_index();
    let index = open(&dir, ReaderKind::Mmap);
    let before = index.len();
    let bad_batches: Vec<(Vec<WriteOp>, &str)> = vec![
        (vec![], "ops must hold"),
        (vec![WriteOp::Add(doc("new-0", HARPSICHORD)), WriteOp::Add(doc("coffee-1", "x"))], "exists"),
        (vec![WriteOp::Add(doc("new-0", HARPSICHORD)), WriteOp::Add(doc("new-0", "again"))], "exists"),
        (vec![WriteOp::Add(doc("new-0", HARPSICHORD)), WriteOp::Delete("nope".into())], "no document"),
        (vec![WriteOp::Add(doc("", HARPSICHORD))], "id must be"),
        (vec![WriteOp::Add(doc("blank", "   "))], "no text"),
        (
            vec![WriteOp::Add(DocIn {
                vectors: Some(QueryVectorsIn { tokens: vec![vec![0.5; 7]], ..Default::default() }),
                ..doc("short", "")
            })],
            "dimension",
        ),
        (
            vec![WriteOp::Add(DocIn {
                vectors: Some(QueryVectorsIn { tokens: vec![vec![f32::NAN; 384]], ..Default::default() }),
                ..doc("nan", "")
            })],
            "finite",
        ),
    ];
    for (ops, expected) in bad_batches {
        let err = index.write(WriteRequest { ops: ops.clone() }).unwrap_err();
        assert!(err.is_user_error(), "{ops:?}: {err:?}");
        assert!(err.to_string().contains(expected), "{ops:?}: {err}");
        assert_eq!(index.len(), before);
    }
    assert!(ids(&index, &every_mode(HARPSICHORD_QUERY, 30)[0].1).iter().all(|id| id != "new-0"));
    drop(index);
    let index = open(&dir, ReaderKind::Mmap);
    assert_eq!(index.len(), before, "nothing refused was logged");
}

#[test]
fn a_second_opener_reads_what_was_written_and_cannot_write() {
    let (_tmp, dir) = copy_index();
    let writer = open(&dir, ReaderKind::Mmap);
    write(&writer, vec![WriteOp::Add(doc("harpsichord-0", HARPSICHORD)), WriteOp::Delete("bread-0".into())]);
    let reader = open(&dir, ReaderKind::Mmap);
    assert_eq!(reader.len(), writer.len());
    let found = ids(&reader, &every_mode(HARPSICHORD_QUERY, 1)[0].1);
    assert_eq!(found, ["harpsichord-0"]);
    let refused = reader.write(WriteRequest { ops: vec![WriteOp::Delete("coffee-0".into())] }).unwrap_err();
    assert!(matches!(refused, CellarError::Locked { .. }), "{refused:?}");
}

/// Issue 43.1: a reader beside a writer follows its commits. Opened before anything was
/// written, it is told it is behind (two `stat` calls) and loads what the writer committed: a
/// batch with a delete, then another and a flush (a new manifest, the log emptied), BM25
/// included. The writer itself is never behind.
#[test]
fn a_reader_beside_a_writer_follows_its_commits() {
    let (_tmp, dir) = copy_index();
    let reader = open(&dir, ReaderKind::Mmap);
    let writer = open(&dir, ReaderKind::Mmap);
    let before = reader.len();
    assert!(!reader.behind());
    write(&writer, vec![WriteOp::Add(doc("harpsichord-0", HARPSICHORD)), WriteOp::Delete("bread-0".into())]);
    assert!(reader.behind() && !writer.behind());
    assert_eq!(reader.len(), before, "nothing loaded yet");
    assert!(reader.follow().unwrap());
    assert!(!reader.behind() && !reader.follow().unwrap(), "nothing more to load");
    assert_eq!(reader.len(), writer.len());
    assert_eq!(ids(&reader, &every_mode(HARPSICHORD_QUERY, 1)[0].1), ["harpsichord-0"]);
    assert!(reader.get("bread-0").unwrap().is_none(), "deleted");
    write(&writer, vec![WriteOp::Add(doc("harpsichord-1", HARPSICHORD))]);
    writer.flush().unwrap();
    assert!(reader.follow().unwrap());
    assert_eq!(reader.len(), writer.len());
    assert_eq!(reader.get("harpsichord-1").unwrap().unwrap().text, HARPSICHORD);
    assert_eq!(reader.live_stats().segments, 1, "the flushed segment");
}

/// Issue 43.10(c): a process that does not write finds a document by its id in maps it builds
/// once (its first lookup builds them, and `id_map_bytes` counts them), not by scanning every
/// document, and finds the current version: written, updated, of the build, or none.
#[test]
fn a_reader_looks_documents_up_by_id_in_a_map_it_builds_once() {
    let (_tmp, dir) = copy_index();
    let writer = open(&dir, ReaderKind::Mmap);
    write(
        &writer,
        vec![
            WriteOp::Add(doc("harpsichord-0", HARPSICHORD)),
            WriteOp::Update(doc("coffee-0", "Coffee, written again.")),
            WriteOp::Delete("bread-0".into()),
        ],
    );
    let reader = open(&dir, ReaderKind::Mmap);
    assert_eq!(reader.live_stats().id_map_bytes, 0, "nothing looked up yet");
    assert_eq!(reader.get("harpsichord-0").unwrap().unwrap().text, HARPSICHORD);
    assert_eq!(reader.get("coffee-0").unwrap().unwrap().text, "Coffee, written again.");
    assert!(reader.get("bread-0").unwrap().is_none(), "deleted");
    assert!(reader.get("no-such-document").unwrap().is_none());
    for id in ["harpsichord-0", "coffee-0", "coffee-1", "bread-1", "bread-0"] {
        assert_eq!(reader.lookup(id).unwrap(), writer.lookup(id).unwrap(), "{id}");
    }
    assert_eq!(reader.get("coffee-1").unwrap().unwrap().id, "coffee-1", "a document of the build");
    assert!(reader.live_stats().id_map_bytes > 0, "the reader's id maps are built and counted");
}

#[test]
fn commands_that_read_the_build_alone_refuse_a_written_index() {
    let (tmp, dir) = copy_index();
    let index = open(&dir, ReaderKind::Mmap);
    write(&index, vec![WriteOp::Delete("bread-1".into())]);
    drop(index);
    let out = tmp.path().join("out");
    let exported =
        cellar_search::embeddings::export(&dir, &out, cellar_search::embeddings::NpyDtype::F32, 10);
    let recoded = cellar_search::recode::recode(&cellar_search::recode::RecodeOptions {
        from: dir.clone(),
        out: out.clone(),
        codec: cellar_core::codec::CodecKind::Int8,
        pca_dim: None,
        sample_tokens: 1000,
        fit: Default::default(),
    });
    for err in [exported.unwrap_err(), recoded.unwrap_err()] {
        assert!(
            matches!(err, CellarError::InvalidInput(_))
                && err.to_string().contains("after this index was built"),
            "{err}"
        );
    }
    assert!(!out.exists());
}

/// Every mode's hits (id, score) for a few queries.
fn answers(index: &Index) -> Vec<Vec<(String, f32)>> {
    let mut out = Vec::new();
    for query in [HARPSICHORD_QUERY, "lava and magma", "note: bread dough", "written note 7"] {
        for (_, request) in every_mode(query, 8) {
            out.push(index.search(request).unwrap().hits.into_iter().map(|h| (h.id, h.score)).collect());
        }
    }
    out
}

#[test]
fn a_merge_folds_segments_drops_deleted_records_and_changes_no_answer() {
    let (_tmp, dir) = copy_index();
    let options = OpenOptions { flush_bytes: 1, ..Default::default() };
    let index = Index::open(&dir, options.clone()).unwrap();
    for batch in 0..4 {
        let ops = (0..3)
            .map(|i| {
                WriteOp::Add(doc(
                    &format!("w{batch}-{i}"),
                    &format!("written note {} {HARPSICHORD}", batch * 3 + i),
                ))
            })
            .collect();
        write(&index, ops);
    }
    write(
        &index,
        vec![
            WriteOp::Delete("w0-1".into()),
            WriteOp::Delete("w2-0".into()),
            WriteOp::Delete("w3-2".into()),
            WriteOp::Delete("coffee-3".into()),
        ],
    );
    write(&index, vec![WriteOp::Update(doc("w1-2", "an updated written note 7"))]);
    let segments = |dir: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.join("live"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("seg-"))
            .collect();
        names.sort();
        names
    };
    assert_eq!(segments(&dir).len(), 5, "every batch with a put flushes: {:?}", segments(&dir));
    assert!(index.needs_merge(), "4 of 13 records are deleted");
    let before = answers(&index);
    let len = index.len();
    let report = index.merge(&cellar_search::live::merge::MergeBudget::default()).unwrap().expect("a merge");
    assert_eq!((report.segments, report.kept, report.dropped), (5, 9, 4), "{report:?}");
    assert_eq!(segments(&dir).len(), 1, "{:?}", segments(&dir));
    assert_eq!(answers(&index), before, "a merge changes no answer");
    assert_eq!(index.len(), len);
    assert!(index.merge(&Default::default()).unwrap().is_none(), "nothing left to merge");
    drop(index);
    let index = Index::open(&dir, options).unwrap();
    assert_eq!(answers(&index), before, "nor does reopening");
    assert_eq!(index.get("w1-2").unwrap().unwrap().text, "an updated written note 7");
    assert!(index.get("w0-1").unwrap().is_none() && index.get("coffee-3").unwrap().is_none());
    write(&index, vec![WriteOp::Add(doc("after", "written after the merge"))]);
    assert_eq!(segments(&dir).len(), 2);
    index.verify(|_| {}).unwrap();
}

#[test]
fn searches_during_writes_and_merges_see_whole_batches_and_no_acknowledged_delete() {
    searches_see_whole_batches(false);
}

/// The same while each write's flush writes its segment in the background, and a later write
/// commits it (the memtable's oldest documents dropped as the segment takes their place).
#[test]
fn searches_during_background_flushes_see_whole_batches_and_no_acknowledged_delete() {
    searches_see_whole_batches(true);
}

fn searches_see_whole_batches(background_flush: bool) {
    use std::sync::atomic::{AtomicI64, Ordering};
    const ROUNDS: i64 = 24;
    let (_tmp, dir) = copy_index();
    let index =
        Index::open(&dir, OpenOptions { flush_bytes: 1, background_flush, ..Default::default() }).unwrap();
    let pooled = |r: i64| -> Vec<f32> {
        let mut v = vec![0.01f32; 384];
        v[(r as usize * 7) % 384] = 1.0;
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    };
    let pair_doc = |name: String, r: i64| DocIn {
        vectors: Some(QueryVectorsIn {
            tokens: vec![pooled(r)],
            pooled: Some(pooled(r)),
            ..Default::default()
        }),
        ..doc(&name, &format!("marker{r} pair document"))
    };
    let added = AtomicI64::new(-1);
    let deleted = AtomicI64::new(-1);
    let checks = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let (index, added, deleted, checks) = (&index, &added, &deleted, &checks);
        for reader in 0..2i64 {
            scope.spawn(move || {
                let mut r = reader;
                while deleted.load(Ordering::SeqCst) < ROUNDS - 1 {
                    let upto = added.load(Ordering::SeqCst);
                    if upto < 0 {
                        std::thread::yield_now();
                        continue;
                    }
                    r = (r + 1) % (upto + 1);
                    let gone = deleted.load(Ordering::SeqCst);
                    let bm25 = SearchRequest {
                        query: format!("marker{r}"),
                        mode: Some(Mode::Bm25),
                        k: Some(10),
                        ..Default::default()
                    };
                    let ids: Vec<String> =
                        index.search(bm25).unwrap().hits.into_iter().map(|h| h.id).collect();
                    let pair = [format!("a{r}"), format!("b{r}")];
                    assert!(
                        ids.is_empty() || ids == pair || ids == [pair[1].clone(), pair[0].clone()],
                        "round {r}: {ids:?}"
                    );
                    if r <= gone {
                        assert!(ids.is_empty(), "round {r} was deleted before this search: {ids:?}");
                    }
                    let dense = SearchRequest {
                        mode: Some(Mode::DenseExact),
                        k: Some(4),
                        query_vectors: Some(QueryVectorsIn { pooled: Some(pooled(r)), ..Default::default() }),
                        ..Default::default()
                    };
                    for hit in index.search(dense).unwrap().hits {
                        if let Some(j) = hit.id.get(1..).and_then(|n| n.parse::<i64>().ok()) {
                            assert!(j > gone, "{} was deleted before this search", hit.id);
                        }
                    }
                    checks.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        for r in 0..ROUNDS {
            write(
                index,
                vec![WriteOp::Add(pair_doc(format!("a{r}"), r)), WriteOp::Add(pair_doc(format!("b{r}"), r))],
            );
            added.store(r, Ordering::SeqCst);
            if r > 0 {
                write(
                    index,
                    vec![WriteOp::Delete(format!("a{}", r - 1)), WriteOp::Delete(format!("b{}", r - 1))],
                );
                deleted.store(r - 1, Ordering::SeqCst);
            }
            if r % 5 == 4 {
                index
                    .merge(&cellar_search::live::merge::MergeBudget { bytes_per_sec: 0, chunk_docs: 2 })
                    .unwrap();
            }
        }
        write(
            index,
            vec![WriteOp::Delete(format!("a{}", ROUNDS - 1)), WriteOp::Delete(format!("b{}", ROUNDS - 1))],
        );
        deleted.store(ROUNDS - 1, Ordering::SeqCst);
    });
    assert!(
        checks.load(std::sync::atomic::Ordering::SeqCst) > ROUNDS as usize,
        "the readers searched while the writer wrote"
    );
}

#[test]
fn concurrent_writers_lose_nothing_and_share_bm25_commits() {
    let (_tmp, dir) = copy_index();
    let index = open(&dir, ReaderKind::Mmap);
    let before = index.len();
    let vectors = |t: usize| QueryVectorsIn {
        tokens: vec![{
            let mut v = vec![0.02f32; 384];
            v[t] = 1.0;
            v
        }],
        ..Default::default()
    };
    std::thread::scope(|scope| {
        for t in 0..4 {
            let index = &index;
            scope.spawn(move || {
                for n in 0..8 {
                    let doc = DocIn {
                        vectors: Some(vectors(t * 8 + n)),
                        ..doc(&format!("t{t}-{n}"), &format!("concurrent{t}x{n}"))
                    };
                    let report = index.write(WriteRequest { ops: vec![WriteOp::Add(doc)] }).unwrap();
                    assert!(report.docs > before as u64);
                    let found = ids(
                        index,
                        &SearchRequest {
                            query: format!("concurrent{t}x{n}"),
                            mode: Some(Mode::Bm25),
                            ..Default::default()
                        },
                    );
                    assert_eq!(found, [format!("t{t}-{n}")], "visible once acknowledged");
                }
            });
        }
    });
    assert_eq!(index.len(), before + 32);
    let stats = index.live_stats();
    assert_eq!(stats.batches_committed, 32, "{stats:?}");
    assert!(stats.bm25_commits >= 1 && stats.bm25_commits <= 32, "{stats:?}");
    drop(index);
    let index = open(&dir, ReaderKind::Mmap);
    for t in 0..4 {
        for n in 0..8 {
            assert_eq!(index.get(&format!("t{t}-{n}")).unwrap().unwrap().text, format!("concurrent{t}x{n}"));
        }
    }
}

#[test]
fn the_ivf_drift_is_1_for_the_builds_own_documents_and_grows_for_others() {
    let (_tmp, dir) = copy_index();
    let index = open(&dir, ReaderKind::Mmap);
    assert_eq!(index.live_stats().ivf_drift, None, "nothing written");
    // The build's own documents again, under new ids: the same pooled vectors.
    let alike: Vec<WriteOp> = crate::fixture::corpus_lines()
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let again = DocIn {
                id: format!("{}-again", v["_id"].as_str().unwrap()),
                title: v["title"].as_str().unwrap().into(),
                text: v["text"].as_str().unwrap().into(),
                ..DocIn::default()
            };
            WriteOp::Add(again)
        })
        .collect();
    write(&index, alike);
    let stats = index.live_stats();
    let near = stats.ivf_drift.expect("an IVF and written documents");
    assert!((near - 1.0).abs() < 0.01 && !stats.ivf_retrain_advised, "{stats:?}");
    // Documents whose pooled vectors point where no document of the build does.
    let far: Vec<WriteOp> = (0..30)
        .map(|i| {
            let mut v = vec![0.0f32; 384];
            v[(i * 13) % 384] = 1.0;
            v[(i * 13 + 7) % 384] = -1.0;
            let v: Vec<f32> = v.iter().map(|x| x / 2f32.sqrt()).collect();
            let vectors = QueryVectorsIn { tokens: vec![v.clone()], pooled: Some(v), ..Default::default() };
            WriteOp::Add(DocIn { vectors: Some(vectors), ..doc(&format!("far-{i}"), "elsewhere") })
        })
        .collect();
    write(&index, far);
    let stats = index.live_stats();
    assert!(stats.ivf_drift.unwrap() > near && stats.ivf_retrain_advised, "{near} then {stats:?}");
}

#[test]
fn the_writer_removes_what_a_crash_left_and_keeps_what_the_manifest_names() {
    let (_tmp, dir) = copy_index();
    let index = open(&dir, ReaderKind::Mmap);
    write(&index, vec![WriteOp::Add(doc("harpsichord-0", HARPSICHORD))]);
    index.flush().unwrap();
    drop(index);
    let live = dir.join(cellar_search::live::LIVE_DIR);
    let listed: Vec<String> =
        std::fs::read_dir(&live).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    std::fs::write(live.join("MANIFEST.json.cellar-tmp"), b"{\"version\": 1, \"next_").unwrap();
    std::fs::create_dir_all(live.join("seg-00000000000000ff.writing/vectors")).unwrap();
    std::fs::create_dir_all(live.join("seg-00000000000000fe-merged")).unwrap();
    let index = open(&dir, ReaderKind::Mmap);
    let mut left: Vec<String> =
        std::fs::read_dir(&live).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    let mut listed = listed;
    listed.sort();
    assert_eq!(left, listed, "only what the manifest names stays");
    assert_eq!(index.get("harpsichord-0").unwrap().unwrap().text, HARPSICHORD);
}

/// A background flush: the write that fills the memtable freezes it (the log rotated to
/// `wal.frozen.log`) and returns while a thread writes the segment; the next write commits it.
/// A reader beside the writer follows across the rotation, and a crash while the segment is
/// being written (a copy of the directory then) loses nothing: the next writer sweeps the
/// unnamed segment, replays the frozen log and flushes those documents again.
#[test]
fn a_background_flush_returns_at_once_and_a_crash_during_it_loses_nothing() {
    let (tmp, dir) = copy_index();
    let options = OpenOptions { flush_bytes: 1, background_flush: true, ..Default::default() };
    let writer = Index::open(&dir, options.clone()).unwrap();
    let reader = open(&dir, ReaderKind::Mmap);
    let base = writer.len();
    let live = dir.join(cellar_search::live::LIVE_DIR);
    let frozen = live.join(cellar_search::live::FROZEN_WAL_FILE);
    write(&writer, vec![WriteOp::Add(doc("harpsichord-0", HARPSICHORD))]);
    let stats = writer.live_stats();
    assert!(frozen.exists(), "the write froze the memtable: its log was rotated");
    assert_eq!(
        (stats.segments, stats.memtable_docs, stats.flushed_seq),
        (0, 1, 0),
        "not committed yet: {stats:?}"
    );
    let crashed = tmp.path().join("crashed");
    copy_under_way(&dir, &crashed);
    // The next write waits for that segment (the memtable filled again), commits it, and
    // freezes its own document.
    write(&writer, vec![WriteOp::Add(doc("harpsichord-1", HARPSICHORD))]);
    let stats = writer.live_stats();
    assert_eq!((stats.segments, stats.memtable_docs, stats.flushed_seq), (1, 1, 1), "{stats:?}");
    assert!(frozen.exists(), "the second document's flush is under way");
    assert!(reader.follow().unwrap());
    assert_eq!(reader.len(), base + 2);
    for id in ["harpsichord-0", "harpsichord-1"] {
        assert_eq!(reader.get(id).unwrap().unwrap().text, HARPSICHORD, "the reader finds {id}");
    }
    writer.flush().unwrap();
    let stats = writer.live_stats();
    assert_eq!((stats.segments, stats.memtable_docs, stats.flushed_seq), (2, 0, 2), "{stats:?}");
    assert!(!frozen.exists(), "the frozen log goes once its segment is named");
    drop(writer);
    let index = Index::open(&dir, options.clone()).unwrap();
    assert_eq!((index.len(), index.live_stats().segments), (base + 2, 2));
    drop(index);

    // The crash: the manifest names no segment; the frozen log holds the document.
    let index = Index::open(&crashed, options).unwrap();
    index.take_writer().unwrap();
    assert_eq!(index.len(), base + 1);
    assert_eq!(index.get("harpsichord-0").unwrap().unwrap().text, HARPSICHORD);
    let found = ids(&index, &every_mode(HARPSICHORD_QUERY, 1)[0].1);
    assert_eq!(found, ["harpsichord-0"]);
    let names = |dir: &std::path::Path| -> Vec<String> {
        let live = dir.join(cellar_search::live::LIVE_DIR);
        let mut names: Vec<String> =
            std::fs::read_dir(live).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    };
    assert!(
        !names(&crashed).iter().any(|n| n.starts_with("seg-")),
        "the unnamed segment was swept: {:?}",
        names(&crashed)
    );
    index.flush().unwrap();
    assert_eq!(index.live_stats().segments, 1);
    assert!(!names(&crashed).iter().any(|n| n == cellar_search::live::FROZEN_WAL_FILE));
    drop(index);
    let index = open(&crashed, ReaderKind::Ram);
    assert_eq!(index.get("harpsichord-0").unwrap().unwrap().text, HARPSICHORD);
    assert_eq!(index.len(), base + 1);
}

/// Copies `from` while a flush's thread may be writing in it, as a crash would find it: a file or
/// directory gone (renamed, removed) between the listing and its copy is left out.
fn copy_under_way(from: &std::path::Path, to: &std::path::Path) {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    std::fs::create_dir_all(to).unwrap();
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if gone(&e) => return,
        Err(e) => panic!("{}: {e}", from.display()),
    };
    for entry in entries {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => copy_under_way(&entry.path(), &target),
            Ok(_) => match std::fs::copy(entry.path(), &target) {
                Err(e) if !gone(&e) => panic!("{}: {e}", entry.path().display()),
                _ => {}
            },
            Err(e) if gone(&e) => {}
            Err(e) => panic!("{}: {e}", entry.path().display()),
        }
    }
}
