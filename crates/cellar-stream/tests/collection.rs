//! A streaming collection: writes, reads, recovery, flush, compaction, exact search, bad input.

mod common;

use std::collections::HashMap;

use cellar_core::kernels::{maxsim_f16, Isa};
use cellar_core::CellarError;
use cellar_search::group::terms;
use cellar_search::{Filter, MetaValue, Metadata, Mode, SearchRequest};
use cellar_stream::{Collection, Options};
use common::{doc, doc_ins, open, options, query, search, vectors_of, Doc, DIM};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn f16_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect()
}

#[test]
fn put_get_update_delete_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), options(1 << 20));
    c.put(&doc("alice", "n1", 1).doc_in()).unwrap();
    c.put_batch(doc_ins(&[doc("alice", "n2", 1), doc("bob", "n1", 1)])).unwrap();
    c.put(&doc("alice", "n1", 2).doc_in()).unwrap();
    let got = c.get("alice", "n1").unwrap();
    assert_eq!(got.text, doc("alice", "n1", 2).text);
    assert_eq!(got.tokens, doc("alice", "n1", 2).tokens, "vectors exact in f16 come back exactly");
    assert_eq!(got.metadata["group"], MetaValue::Str("alice".into()));
    c.delete("alice", "n2").unwrap();
    assert!(matches!(c.get("alice", "n2"), Err(CellarError::NotFound(_))));
    assert!(matches!(c.delete("alice", "n2"), Err(CellarError::NotFound(_))), "deleting twice");
    assert!(matches!(c.get("carol", "n1"), Err(CellarError::NotFound(_))));
    drop(c);
    // Everything so far lives only in the log: reopening replays it.
    let c = open(dir.path(), options(1 << 20));
    assert_eq!(
        c.stats().memtable_entries,
        4,
        "every write's record: alice/n1 twice, alice/n2 (deleted), bob/n1"
    );
    assert_eq!(c.get("alice", "n1").unwrap().text, doc("alice", "n1", 2).text);
    assert!(matches!(c.get("alice", "n2"), Err(CellarError::NotFound(_))));
    assert_eq!(c.get("bob", "n1").unwrap().text, doc("bob", "n1", 1).text);
}

#[test]
fn flush_and_compaction_keep_the_newest_version_and_drop_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), options(1 << 20));
    for version in 1..=3 {
        let docs: Vec<Doc> =
            (0..20).map(|i| doc(&format!("g{}", i % 3), &format!("d{i}"), version)).collect();
        c.put_batch(doc_ins(&docs)).unwrap();
        c.delete("g0", &format!("d{}", 3 * version)).unwrap();
        c.flush().unwrap();
    }
    let before = c.stats();
    assert_eq!((before.segments, before.memtable_entries, before.wal_bytes), (3, 0, 16));
    assert_eq!(before.segment_entries, 3 * 20, "each flush wrote its 20 records (the deleted one too)");
    assert!(c.compact().unwrap());
    let after = c.stats();
    assert_eq!(after.segments, 1);
    assert_eq!(after.segment_entries, 19, "20 ids, one deleted after its last write (d9); tombstones gone");
    assert_eq!(after.segment_groups, 3);
    for i in 0..20 {
        let (g, id) = (format!("g{}", i % 3), format!("d{i}"));
        match c.get(&g, &id) {
            Ok(d) => assert_eq!(d.text, doc(&g, &id, 3).text),
            Err(CellarError::NotFound(_)) => assert_eq!(i, 9),
            Err(e) => panic!("{e}"),
        }
    }
    // d3 and d6 were deleted, then written again by a later version: alive.
    assert!(c.get("g0", "d3").is_ok() && c.get("g0", "d6").is_ok());
    let files: Vec<String> = std::fs::read_dir(dir.path().join("live"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files.iter().filter(|f| f.starts_with("seg-")).count(), 1, "old segments removed: {files:?}");
    drop(c);
    let c = open(dir.path(), options(1 << 20));
    assert_eq!(c.stats().segment_entries, 19);
}

/// A background flush started by a write is committed by the compaction thread once its
/// segment is written, not left for the next write (a stream fed once and then only searched,
/// as under `cellar serve`, had its segment uncommitted and the frozen log kept until closed).
#[test]
fn a_background_flush_is_committed_without_another_write() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), Options { background_flush: true, ..options(2_000) });
    let docs: Vec<Doc> = (0..40).map(|i| doc(&format!("g{}", i % 4), &format!("d{i}"), 1)).collect();
    c.put_batch(doc_ins(&docs)).unwrap();
    c.wait_idle();
    let stats = c.stats();
    assert_eq!((stats.flushes, stats.segments, stats.memtable_entries), (1, 1, 0), "{stats:?}");
    let frozen = dir.path().join("live").join(cellar_search::live::FROZEN_WAL_FILE);
    assert!(!frozen.exists(), "the frozen log is removed at the commit");
    for d in &docs {
        assert_eq!(c.get(&d.group, &d.id).unwrap().text, d.text);
    }
}

/// The live documents of a model, scored by the scalar reference kernel.
fn reference(model: &HashMap<(String, String), Doc>, group: &str, q: &SearchRequest) -> Vec<(String, f32)> {
    let terms_needed = q.require_terms.as_deref().map(terms).unwrap_or_default();
    let tokens: Vec<f32> = q.query_vectors.as_ref().unwrap().tokens.concat();
    let mut scored: Vec<(String, f32)> = model
        .values()
        .filter(|d| d.group == group)
        .filter(|d| q.filter.as_ref().is_none_or(|f| f.matches(&Metadata(d.metadata.clone()))))
        .filter(|d| terms_needed.iter().all(|t| terms(&d.text).contains(t)))
        .map(|d| {
            let score = match q.mode.unwrap_or(Mode::Dense) {
                Mode::Dense => maxsim_f16(Isa::Scalar, &tokens, DIM, &f16_bytes(&d.tokens)),
                other => unreachable!("{other}"),
            };
            (d.id.clone(), score)
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    scored
}

/// Random writes, deletes, flushes and compactions against a model; every search must return
/// the exact top-k of the group's live documents.
#[test]
fn search_is_exact_against_a_model_through_flushes_and_compactions() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), options(6 << 10));
    let mut rng = StdRng::seed_from_u64(7);
    let mut model: HashMap<(String, String), Doc> = HashMap::new();
    for step in 0..400u64 {
        let g = format!("u{}", rng.gen_range(0..4));
        let id = format!("d{}", rng.gen_range(0..40));
        if rng.gen_bool(0.15) {
            if model.remove(&(g.clone(), id.clone())).is_some() {
                c.delete(&g, &id).unwrap();
            } else {
                assert!(matches!(c.delete(&g, &id), Err(CellarError::NotFound(_))));
            }
        } else {
            let d = doc(&g, &id, step);
            c.put(&d.doc_in()).unwrap();
            model.insert((g, id), d);
        }
        if step % 97 == 0 {
            c.compact().unwrap();
        }
        if step % 25 == 0 {
            check_searches(&c, &model, step);
        }
    }
    assert!(c.stats().flushes > 3, "the small memtable flushed: {:?}", c.stats());
    c.compact().unwrap();
    check_searches(&c, &model, 1000);
    drop(c);
    check_searches(&open(dir.path(), options(6 << 10)), &model, 2000);
}

fn check_searches(c: &Collection, model: &HashMap<(String, String), Doc>, seed: u64) {
    for g in 0..4 {
        let group = format!("u{g}");
        let mut queries = vec![search(query(seed + g, 3), 5)];
        let mut filtered = search(query(seed + g, 2), 40);
        filtered.filter = Some(serde_json::from_str::<Filter>(r#"{"parity": 1}"#).unwrap());
        queries.push(filtered);
        let mut negated = search(query(seed + g, 2), 40);
        negated.filter = Some(
            serde_json::from_str::<Filter>(r#"{"not": {"range": {"field": "parity", "gte": 1}}}"#).unwrap(),
        );
        queries.push(negated);
        let mut text = search(query(seed, 1), 40);
        text.require_terms = Some("WORD3, doc".into());
        queries.push(text);
        for q in &queries {
            let expected = reference(model, &group, q);
            let got = match c.search(&group, q) {
                Err(CellarError::NotFound(_)) if !model.keys().any(|(g, _)| *g == group) => continue,
                other => other.unwrap(),
            };
            let k = q.k.unwrap();
            assert_eq!(got.hits.len(), expected.len().min(k), "{group} {q:?}");
            let kth = expected.get(k - 1).map_or(f32::MIN, |e| e.1);
            let by_id: HashMap<&str, f32> = expected.iter().map(|(id, s)| (id.as_str(), *s)).collect();
            for hit in &got.hits {
                let want =
                    by_id.get(hit.id.as_str()).unwrap_or_else(|| panic!("{} is not live in {group}", hit.id));
                assert!((hit.score - want).abs() < 1e-3, "{}: {} vs {want}", hit.id, hit.score);
                assert!(hit.score >= kth - 1e-3, "{} scored below the k-th", hit.id);
                let live = &model[&(group.clone(), hit.id.clone())];
                assert_eq!(hit.text.as_deref(), Some(live.text.as_str()), "newest version");
            }
            assert!(got.hits.windows(2).all(|w| w[0].score >= w[1].score));
        }
    }
}

/// Issue 46: a stream's search takes the index's whole filter grammar (and lists of strings),
/// matched as `Filter::matches` means it, in the memtable and in segments alike.
#[test]
fn every_filter_of_the_grammar_runs_in_a_group() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), options(1 << 20));
    for i in 0..12u64 {
        let mut d = doc("g", &format!("d{i:02}"), i);
        d.metadata.insert("year".into(), MetaValue::Int(2000 + i as i64));
        let tags =
            if i % 3 == 0 { vec!["red".to_string(), "blue".to_string()] } else { vec!["green".to_string()] };
        d.metadata.insert("tags".into(), MetaValue::List(tags));
        c.put(&d.doc_in()).unwrap();
        if i == 5 {
            c.flush().unwrap();
        }
    }
    let ids = |filter: &str| -> Vec<String> {
        let mut q = search(query(1, 2), 100);
        q.filter = Some(serde_json::from_str(filter).unwrap());
        let mut ids: Vec<String> = c.search("g", &q).unwrap().hits.into_iter().map(|h| h.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(r#"{"tags": "red"}"#), ["d00", "d03", "d06", "d09"]);
    assert_eq!(ids(r#"{"range": {"field": "year", "gte": 2004, "lt": 2007}}"#), ["d04", "d05", "d06"]);
    assert_eq!(ids(r#"{"in": {"field": "year", "values": [2001, 2010.0]}}"#), ["d01", "d10"]);
    assert_eq!(
        ids(
            r#"{"and": [{"not": {"tags": "green"}}, {"or": [{"year": 2000}, {"range": {"field": "year", "gt": 2008}}]}]}"#
        ),
        ["d00", "d09"]
    );
    let mut bad = search(query(1, 2), 5);
    bad.filter = Some(serde_json::from_str(r#"{"range": {"field": "year"}}"#).unwrap());
    assert!(matches!(c.search("g", &bad), Err(CellarError::InvalidInput(_))));
    let mut tuned = search(query(1, 2), 5);
    tuned.nprobe = Some(4);
    let err = c.search("g", &tuned).unwrap_err();
    assert!(matches!(&err, CellarError::InvalidInput(m) if m.contains("nprobe")), "{err}");
    tuned.nprobe = None;
    tuned.mode = Some(Mode::Hybrid);
    assert!(matches!(c.search("g", &tuned), Err(CellarError::InvalidInput(m)) if m.contains("dense-exact")));
}

#[test]
fn pooled_mode_ranks_by_the_pooled_dot_product() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), options(1 << 20));
    for i in 0..30 {
        let mut d = doc("g", &format!("d{i}"), i);
        let mut pooled = vec![0f32; DIM];
        pooled[0] = i as f32 / 32.0;
        d.pooled = Some(pooled);
        c.put(&d.doc_in()).unwrap();
    }
    c.flush().unwrap();
    let mut q = search(Vec::new(), 3);
    q.mode = Some(Mode::DenseExact);
    q.query_vectors.as_mut().unwrap().pooled = Some([vec![1.0], vec![0.0; DIM - 1]].concat());
    let ids: Vec<String> = c.search("g", &q).unwrap().hits.into_iter().map(|h| h.id).collect();
    assert_eq!(ids, ["d29", "d28", "d27"]);
}

/// A group's records are one run of its segment: a large group is read through the read
/// pipeline whole, a small one reads its own records, not its neighbours'.
#[test]
fn a_group_larger_than_one_read_is_read_as_its_own_run() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), options(64 << 20));
    let docs: Vec<Doc> = (0..2000).map(|i| doc("big", &format!("d{i:05}"), i)).collect();
    c.put_batch(doc_ins(&docs)).unwrap();
    c.put(&doc("small", "x", 1).doc_in()).unwrap();
    c.flush().unwrap();
    let q = search(query(3, 2), 10);
    let big = c.search("big", &q).unwrap();
    assert_eq!(big.stats.docs_scanned, 2000);
    assert!(big.stats.read_calls >= 1, "{:?}", big.stats);
    let small = c.search("small", &q).unwrap();
    assert_eq!(small.stats.docs_scanned, 1);
    assert!(small.stats.bytes_read <= 4096, "a small group reads only its own records: {:?}", small.stats);
    drop(c);
    let again = open(dir.path(), options(64 << 20)).search("big", &q).unwrap();
    assert_eq!(again.hits, big.hits);
}

#[test]
fn bad_input_gets_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), options(1 << 20));
    c.put(&doc("g", "d", 1).doc_in()).unwrap();
    let mut d = doc("g", "d", 1);
    d.tokens.pop();
    assert!(matches!(c.put(&d.doc_in()), Err(CellarError::WrongDimension { expected: DIM, .. })));
    let mut d = doc("g", "d", 1);
    d.pooled = Some(vec![0.0; DIM + 1]);
    assert!(matches!(c.put(&d.doc_in()), Err(CellarError::WrongDimension { expected: DIM, received: 9 })));
    let mut d = doc("", "d", 1);
    assert!(matches!(c.put(&d.doc_in()), Err(CellarError::InvalidInput(m)) if m.contains("group")));
    d = doc("g", "", 1);
    assert!(matches!(c.put(&d.doc_in()), Err(CellarError::InvalidInput(m)) if m.contains("id")));
    d = doc("g", "d", 1);
    d.tokens[3] = f32::NAN;
    assert!(matches!(c.put(&d.doc_in()), Err(CellarError::InvalidInput(m)) if m.contains("finite")));
    d = doc("g", "d", 1);
    d.text = "x".repeat((1 << 20) + 1);
    assert!(matches!(c.put(&d.doc_in()), Err(CellarError::InvalidInput(m)) if m.contains("text of")));
    // Within every limit of a document (the index's: 1 MiB of text, at most 64 keys of 64 strings
    // of 256 bytes), but over the entry's 4 MiB.
    d = doc("g", "d", 1);
    d.text = "x".repeat(1 << 20);
    for i in 0..62 {
        d.metadata.insert(format!("k{i}"), MetaValue::List(vec!["x".repeat(256); 64]));
    }
    (d.tokens, d.n_tokens) = (vec![0.5; 140_000 * DIM], 140_000);
    assert!(
        matches!(c.put(&d.doc_in()), Err(CellarError::InvalidInput(m)) if m.contains("bytes encoded, over the limit"))
    );
    let max = cellar_core::store::MAX_TOKENS_PER_DOC;
    (d.tokens, d.n_tokens) = (vec![0.5; (max + 1) * DIM], max + 1);
    assert!(matches!(c.put(&d.doc_in()), Err(CellarError::InvalidInput(m)) if m.contains("token vectors")));
    assert!(matches!(c.put_batch(&[]), Err(CellarError::InvalidInput(_))));
    // A bad document anywhere in a batch writes nothing.
    let mut bad = doc("g", "e", 1);
    bad.n_tokens = 0;
    assert!(
        matches!(c.put_batch(doc_ins(&[doc("g", "f", 1), bad])), Err(CellarError::InvalidInput(m)) if m.contains("document 1"))
    );
    assert!(matches!(c.get("g", "f"), Err(CellarError::NotFound(_))));
    let q = search(query(1, 1), 5);
    assert!(matches!(c.search("nobody", &q), Err(CellarError::NotFound(_))));
    assert!(matches!(c.search("g", &search(vec![0.1; DIM + 1], 5)), Err(CellarError::WrongDimension { .. })));
    assert!(matches!(c.search("g", &search(query(1, 1), 0)), Err(CellarError::InvalidInput(_))));
    let wrong_dim = Collection::open(dir.path(), Some(DIM * 2), options(1 << 20));
    assert!(matches!(wrong_dim, Err(CellarError::WrongDimension { .. })));
    let missing = Collection::open(&dir.path().join("nope"), None, options(1 << 20));
    assert!(matches!(missing, Err(CellarError::NotFound(_))));
    assert_eq!(vectors_of("x"), vectors_of("x"));
}

#[test]
fn a_torn_log_tail_is_cut_and_a_damaged_segment_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), options(1 << 20));
    c.put(&doc("g", "flushed", 1).doc_in()).unwrap();
    c.flush().unwrap();
    c.put(&doc("g", "a", 1).doc_in()).unwrap();
    c.put(&doc("g", "b", 1).doc_in()).unwrap();
    drop(c);
    let wal = dir.path().join("live/wal.log");
    let len = std::fs::metadata(&wal).unwrap().len();
    // Half of the last record reached the disk: `b` was never acknowledged.
    let file = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
    file.set_len(len - 20).unwrap();
    drop(file);
    let c = open(dir.path(), options(1 << 20));
    let stats = c.stats();
    assert!(stats.truncated_bytes > 0 && stats.recovered_records == 1, "{stats:?}");
    assert!(c.get("g", "a").is_ok() && c.get("g", "flushed").is_ok());
    assert!(matches!(c.get("g", "b"), Err(CellarError::NotFound(_))));
    c.put(&doc("g", "c", 1).doc_in()).unwrap();
    drop(c);
    assert!(open(dir.path(), options(1 << 20)).get("g", "c").is_ok(), "the log stays appendable");
    // One flipped bit inside the group's record in its segment.
    let seg = std::fs::read_dir(dir.path().join("live"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("seg-"))
        .unwrap()
        .join("vectors/vectors.bin");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[4096 + 8] ^= 0x10;
    std::fs::write(&seg, bytes).unwrap();
    let c = open(dir.path(), options(1 << 20));
    let err = c.search("g", &search(query(1, 1), 5)).unwrap_err();
    assert!(matches!(err, CellarError::Corrupted { .. }), "{err}");
}

/// Concurrent writers share log writes (group commit): every acknowledged document is there after
/// a reopen, and no batch is counted twice or lost between leaders and followers.
#[test]
fn concurrent_writers_group_commit_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut fsync = options(1 << 20);
    fsync.durability = cellar_stream::Durability::Fsync;
    let c = std::sync::Arc::new(Collection::open(dir.path(), Some(DIM), fsync.clone()).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..60 {
                    c.put(&doc(&format!("g{}", t % 3), &format!("t{t}-{i}"), i).doc_in()).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let stats = c.stats();
    assert_eq!(stats.log_batches, 480);
    assert!(stats.log_syncs >= 1 && stats.log_syncs <= 480, "{stats:?}");
    assert_eq!(stats.last_seq, 480, "one sequence number per document, none skipped");
    let check = |c: &Collection| {
        for t in 0..8 {
            for i in 0..60 {
                let (g, id) = (format!("g{}", t % 3), format!("t{t}-{i}"));
                assert_eq!(c.get(&g, &id).unwrap().text, doc(&g, &id, i).text);
            }
        }
    };
    check(&c);
    drop(c);
    check(&Collection::open(dir.path(), None, fsync).unwrap());
}

/// Issue 21.2: two openers of one collection replayed and appended to one log; the second
/// truncated the first's acknowledged writes as a torn tail. One opener at a time now.
#[test]
fn a_second_opener_is_refused_until_the_first_closes() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path(), options(1 << 20));
    first.put(&doc("alice", "n1", 1).doc_in()).unwrap();
    match Collection::open(dir.path(), Some(DIM), options(1 << 20)) {
        Err(CellarError::Locked { path, detail }) => {
            assert_eq!(path, dir.path());
            assert!(
                detail.contains("open elsewhere") && detail.contains(&format!("pid {}", std::process::id())),
                "{detail}"
            );
        }
        other => panic!("expected Locked, got {:?}", other.map(|_| "a second handle")),
    }
    first.put(&doc("alice", "n2", 1).doc_in()).unwrap();
    drop(first);
    let again = open(dir.path(), options(1 << 20));
    assert_eq!(again.stats().memtable_entries, 2, "both acknowledged writes survive");
}

#[test]
fn a_stream_open_elsewhere_is_not_deleted_and_a_rejected_first_batch_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let streams = cellar_stream::Streams::open(dir.path(), options(1 << 20)).unwrap();
    let elsewhere = open(&dir.path().join("held"), options(1 << 20));
    elsewhere.put(&doc("g", "a", 1).doc_in()).unwrap();
    assert!(matches!(streams.delete("held"), Err(CellarError::Locked { .. })));
    drop(elsewhere);
    streams.delete("held").unwrap();
    assert!(matches!(streams.delete("held"), Err(CellarError::NotFound(_))));
    assert!(streams.names().is_empty());

    let mut bad = doc("g", "b", 1);
    bad.tokens[0] = f32::NAN;
    let err = streams.put_batch("new", DIM, doc_ins(&[doc("g", "a", 1), bad])).unwrap_err();
    assert!(err.to_string().contains("document 1 of the batch"), "{err}");
    assert!(!dir.path().join("new").exists());
    assert!(matches!(
        streams.put_batch("new", 0, doc_ins(&[doc("g", "a", 1)])),
        Err(CellarError::InvalidInput(_))
    ));
    assert!(!dir.path().join("new").exists());
}

#[test]
fn a_failed_flush_fails_no_logged_write() {
    use cellar_core::failpoint::{arm, FailPoint};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let c = open(&path, options(256));
    // Every file write under the collection fails (a full disk) but the log's appends: the
    // flushes fail, the writes do not.
    let blocked = arm(FailPoint::FileWrite, &path, 0);
    for i in 0..5 {
        c.put(&doc("g", &format!("d{i}"), 1).doc_in()).unwrap();
    }
    let stats = c.stats();
    assert!(stats.flush_failures >= 1 && stats.segments == 0, "{stats:?}");
    assert_eq!(c.get("g", "d4").unwrap().text, doc("g", "d4", 1).text);
    drop(blocked);
    c.put(&doc("g", "d5", 1).doc_in()).unwrap();
    assert!(c.stats().segments >= 1, "the next write flushed: {:?}", c.stats());
    drop(c);
    let c = open(&path, options(256));
    for i in 0..6 {
        assert_eq!(c.get("g", &format!("d{i}")).unwrap().text, doc("g", &format!("d{i}"), 1).text);
    }
}

#[test]
fn a_search_text_over_the_index_limit_is_refused_before_any_model_is_loaded() {
    use cellar_stream::encoding::{request_with_vectors, LazyEncoder};
    let missing_model = LazyEncoder::new(Some(std::path::PathBuf::from("/nonexistent/cellar-model")));
    let long = SearchRequest::new("word ".repeat(1000), Mode::Dense);
    let e = request_with_vectors(long, DIM, &missing_model).unwrap_err();
    assert!(matches!(&e, CellarError::InvalidInput(m) if m.contains("the limit is 4096")), "{e:?}");
    // A text within the limit goes on to the encoder (absent here, and said so).
    let short = SearchRequest::new("word", Mode::Dense);
    let e = request_with_vectors(short, DIM, &missing_model).unwrap_err();
    assert!(!matches!(e, CellarError::InvalidInput(_)), "{e:?}");
}

/// A residual2 index of `dim`-dimension vectors like the streams' (`vectors_of`), the source of
/// a stream's codec.
fn residual2_source(out: &std::path::Path, dim: usize) {
    source_index(out, dim, None)
}

/// `dim`-dimension vectors made of `vectors_of(text)`'s rows repeated.
fn widened(text: &str, dim: usize) -> Vec<f32> {
    let (tokens, _) = vectors_of(text);
    tokens.chunks_exact(DIM).flat_map(|r| r.iter().copied().cycle().take(dim)).collect()
}

/// A residual2 index (with a PCA to `pca_dim` when given) of 200 such documents.
fn source_index(out: &std::path::Path, dim: usize, pca_dim: Option<usize>) {
    let mut build = cellar_search::BuildOptions::new("", out);
    build.codec = cellar_core::codec::CodecKind::Residual2;
    build.pca_dim = pca_dim;
    build.sample_tokens = 400;
    let docs = (0..200).map(|i| {
        let tokens = widened(&format!("source {i}"), dim);
        Ok(cellar_search::EmbeddedDoc { id: format!("s{i}"), tokens, ..Default::default() })
    });
    cellar_search::Index::build_from_embeddings(&build, dim, Some(200), docs).unwrap();
}

#[test]
fn a_stream_created_with_codec_from_stores_that_codec_and_searches_exactly_under_it() {
    let tmp = tempfile::TempDir::new().unwrap();
    let source = tmp.path().join("source");
    residual2_source(&source, DIM);
    let dir = tmp.path().join("stream");
    let with_codec = Options { codec_from: Some(source.clone()), ..options(1 << 12) };
    let c = open(&dir, with_codec);
    let config = cellar_search::IndexConfig::load(&dir).unwrap();
    assert_eq!(config.codec, "residual2");
    let docs: Vec<Doc> =
        (0..40).map(|i| doc(if i % 2 == 0 { "a" } else { "b" }, &format!("d{i}"), 1)).collect();
    c.put_batch(doc_ins(&docs)).unwrap();
    c.flush().unwrap(); // some in a segment, the rest written after it stay in the memtable
    c.put_batch(doc_ins(&[doc("a", "late", 1)])).unwrap();
    // Exact MaxSim over the vectors as the codec stores them (what `get` returns).
    let q = query(7, 3);
    let got = c.search("a", &search(q.clone(), 5)).unwrap();
    let members: Vec<String> =
        docs.iter().filter(|d| d.group == "a").map(|d| d.id.clone()).chain(["late".into()]).collect();
    let mut reference: Vec<(String, f32)> = members
        .iter()
        .map(|id| {
            let stored = c.get("a", id).unwrap();
            let score = q
                .chunks_exact(DIM)
                .map(|qt| {
                    stored
                        .tokens
                        .chunks_exact(DIM)
                        .map(|t| qt.iter().zip(t).map(|(x, y)| x * y).sum::<f32>())
                        .fold(f32::MIN, f32::max)
                })
                .sum::<f32>();
            (id.clone(), score)
        })
        .collect();
    reference.sort_by(|x, y| y.1.total_cmp(&x.1));
    assert_eq!(got.hits.len(), 5);
    for (hit, (id, score)) in got.hits.iter().zip(&reference) {
        assert!((hit.score - score).abs() < 1e-3, "{} {} against {id} {score}", hit.id, hit.score);
    }
    // The stored vectors are the codec's, not the f16 ones written.
    let stored = c.get("a", "d0").unwrap();
    assert_eq!(stored.n_tokens, docs[0].n_tokens);
    assert!(
        stored.tokens.iter().zip(&docs[0].tokens).any(|(s, w)| (s - w).abs() > 1e-3),
        "residual2 is lossy"
    );
    drop(c);
    // Reopened without the option, it keeps its codec; a new stream without it is f16.
    let c = open(&dir, options(1 << 12));
    assert_eq!(c.search("a", &search(q, 5)).unwrap().hits[0].id, got.hits[0].id);
    assert_eq!(cellar_search::IndexConfig::load(&dir).unwrap().codec, "residual2");
    open(&tmp.path().join("plain"), options(1 << 12));
    assert_eq!(cellar_search::IndexConfig::load(&tmp.path().join("plain")).unwrap().codec, "f16");
    // A source of another dimension is refused, naming it, and creates nothing.
    let wide = tmp.path().join("wide");
    residual2_source(&wide, 2 * DIM);
    let refused = Collection::open(
        &tmp.path().join("x"),
        Some(DIM),
        Options { codec_from: Some(wide), ..options(1 << 12) },
    );
    assert!(matches!(&refused, Err(CellarError::InvalidInput(m)) if m.contains("codec_from")), "{refused:?}");
}

#[test]
fn a_stream_whose_codec_source_has_a_pca_projects_its_queries_as_its_documents() {
    let tmp = tempfile::TempDir::new().unwrap();
    let (dim, source) = (2 * DIM, tmp.path().join("source"));
    source_index(&source, dim, Some(DIM));
    let options = Options { codec_from: Some(source), ..options(1 << 12) };
    let c = Collection::open(&tmp.path().join("stream"), Some(dim), options).unwrap();
    let config = cellar_search::IndexConfig::load(c.dir()).unwrap();
    assert_eq!((config.codec.as_str(), config.pca_dim), ("residual2", Some(DIM)));
    let docs: Vec<cellar_search::DocIn> = (0..30)
        .map(|i| {
            let text = format!("pca doc {i}");
            cellar_search::DocIn {
                group: Some("g".into()),
                id: format!("d{i}"),
                text: text.clone(),
                vectors: Some(cellar_search::QueryVectorsIn::from_flat(&widened(&text, dim), dim, None)),
                ..Default::default()
            }
        })
        .collect();
    c.put_batch(docs).unwrap();
    // A document's own vectors find it first (its tokens and the query projected alike).
    for i in [0, 7, 29] {
        let own = widened(&format!("pca doc {i}"), dim);
        let req = SearchRequest {
            k: Some(3),
            query_vectors: Some(cellar_search::QueryVectorsIn::from_flat(&own, dim, None)),
            ..SearchRequest::default()
        };
        assert_eq!(c.search("g", &req).unwrap().hits[0].id, format!("d{i}"));
    }
}
