//! Grouped indexes (issue 46.2): documents written with a group, each group's records kept
//! together in every segment, a search exact inside one group. Every search is held to a
//! brute-force reference over the documents the test wrote (MaxSim over their f16 vectors, the
//! filter's own meaning, the text match), in the memtable, after flushes, after a merge and
//! after reopening.

use std::collections::BTreeMap;
use std::path::Path;

use cellar_core::codec::CodecKind;
use cellar_core::CellarError;
use cellar_search::group::terms;
use cellar_search::live::merge::MergeBudget;
use cellar_search::live::write::GroupKey;
use cellar_search::{
    BuildOptions, DocIn, Filter, Index, Metadata, Mode, OpenOptions, QueryVectorsIn, SearchRequest, WriteOp,
    WriteRequest,
};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tempfile::TempDir;

use crate::filter::{random_filter, random_meta};

const DIM: usize = 16;
const WORDS: [&str; 5] = ["apple", "pear", "plum", "fig", "kiwi"];

fn create(out: &Path) -> Index {
    let mut build = BuildOptions::new("", out);
    build.codec = CodecKind::F16;
    build.grouped = true;
    let config = Index::create_empty(&build, Some(DIM)).unwrap();
    assert!(config.grouped);
    Index::open(out, OpenOptions::default()).unwrap()
}

/// What the test wrote: (group, id) → (token rows, text, metadata).
type Model = BTreeMap<(String, String), (Vec<Vec<f32>>, String, Metadata)>;

fn random_doc(rng: &mut StdRng, group: &str, id: &str) -> DocIn {
    let n = rng.gen_range(1..6);
    let tokens: Vec<Vec<f32>> =
        (0..n).map(|_| (0..DIM).map(|_| rng.gen_range(-1.0..1.0)).collect()).collect();
    let text = (0..3).map(|_| WORDS[rng.gen_range(0..WORDS.len())]).collect::<Vec<_>>().join(" ");
    DocIn {
        id: id.into(),
        group: Some(group.into()),
        text,
        metadata: random_meta(rng),
        vectors: Some(QueryVectorsIn { tokens, ..Default::default() }),
        ..Default::default()
    }
}

fn remember(model: &mut Model, doc: &DocIn) {
    let tokens = doc.vectors.as_ref().unwrap().tokens.clone();
    let key = (doc.group.clone().unwrap(), doc.id.clone());
    model.insert(key, (tokens, doc.text.clone(), doc.metadata.clone()));
}

fn maxsim(query: &[Vec<f32>], doc: &[Vec<f32>]) -> f32 {
    let rounded = |v: f32| f16::from_f32(v).to_f32();
    query
        .iter()
        .map(|q| {
            doc.iter()
                .map(|d| q.iter().zip(d).map(|(a, b)| a * rounded(*b)).sum::<f32>())
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .sum()
}

/// The reference top-k of `group`: (id, score), best first, ties by id.
fn reference(
    model: &Model,
    group: &str,
    query: &[Vec<f32>],
    k: usize,
    filter: Option<&Filter>,
    term: Option<&str>,
) -> Vec<(String, f32)> {
    let mut scored: Vec<(String, f32)> = model
        .iter()
        .filter(|((g, _), _)| g == group)
        .filter(|(_, (_, _, meta))| filter.is_none_or(|f| f.matches(meta)))
        .filter(|(_, (_, text, _))| term.is_none_or(|t| terms(text).contains(&t.to_string())))
        .map(|((_, id), (tokens, _, _))| (id.clone(), maxsim(query, tokens)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    scored.truncate(k);
    scored
}

fn request(query: &[Vec<f32>], k: usize) -> SearchRequest {
    SearchRequest {
        k: Some(k),
        query_vectors: Some(QueryVectorsIn { tokens: query.to_vec(), ..Default::default() }),
        ..SearchRequest::new("", Mode::Dense)
    }
}

/// Every group's search against the reference, with and without a filter and a text match.
fn check_all(index: &Index, model: &Model, rng: &mut StdRng, when: &str) {
    let groups: std::collections::BTreeSet<&String> = model.keys().map(|(g, _)| g).collect();
    for group in groups {
        for round in 0..4 {
            let query: Vec<Vec<f32>> =
                (0..3).map(|_| (0..DIM).map(|_| rng.gen_range(-1.0..1.0)).collect()).collect();
            let mut req = request(&query, 5);
            let filter = (round == 1).then(|| random_filter(rng, 2));
            let term = (round == 2).then(|| WORDS[rng.gen_range(0..WORDS.len())]);
            req.filter = filter.clone();
            req.require_terms = term.map(str::to_string);
            let got = index.search_group(group, &req).unwrap();
            let want = reference(model, group, &query, 5, filter.as_ref(), term);
            let ids: Vec<&str> = got.hits.iter().map(|h| h.id.as_str()).collect();
            let want_ids: Vec<&str> = want.iter().map(|w| w.0.as_str()).collect();
            assert_eq!(ids, want_ids, "{when}, group {group}, round {round}");
            for (hit, (_, score)) in got.hits.iter().zip(&want) {
                assert!((hit.score - score).abs() < 1e-3, "{when}: {} against {score}", hit.score);
                let (_, text, meta) = &model[&(group.clone(), hit.id.clone())];
                assert_eq!((hit.text.as_ref(), &hit.metadata), (Some(text), meta), "{when}");
            }
        }
    }
}

#[test]
fn a_group_search_is_exact_in_the_memtable_after_flushes_a_merge_and_a_reopen() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("grouped");
    let index = create(&out);
    let mut rng = StdRng::seed_from_u64(46);
    let mut model = Model::new();
    let groups = ["alice", "bob", "carol", "dave", "eve"];
    for batch in 0..6 {
        let mut ops = Vec::new();
        for _ in 0..12 {
            let group = groups[rng.gen_range(0..groups.len())];
            let id = format!("d{}", rng.gen_range(0..10));
            let key = (group.to_string(), id.clone());
            if model.contains_key(&key)
                && rng.gen_bool(0.3)
                && !ops.iter().any(|op: &WriteOp| touches(op, &key))
            {
                model.remove(&key);
                ops.push(WriteOp::DeleteInGroup(GroupKey { group: group.into(), id }));
                continue;
            }
            if ops.iter().any(|op: &WriteOp| touches(op, &key)) {
                continue;
            }
            let doc = random_doc(&mut rng, group, &id);
            remember(&mut model, &doc);
            ops.push(WriteOp::Put(doc));
        }
        index.write(WriteRequest { ops }).unwrap();
        check_all(&index, &model, &mut rng, &format!("batch {batch}, memtable"));
        if batch % 2 == 1 {
            index.flush().unwrap();
            check_all(&index, &model, &mut rng, &format!("batch {batch}, flushed"));
        }
    }
    let report = index.merge(&MergeBudget { bytes_per_sec: 0, chunk_docs: 3 }).unwrap().unwrap();
    assert_eq!(report.kept, model.len());
    check_all(&index, &model, &mut rng, "merged");
    drop(index);
    let index = Index::open(&out, OpenOptions::default()).unwrap();
    check_all(&index, &model, &mut rng, "reopened");
}

#[test]
fn a_group_search_holds_its_query_to_the_index_rules() {
    // The index's own rules (`plan::check_query_values`, `check_query`, `check_terms`): finite
    // values, each vector's squared norm finite in f32 (no score is infinite or NaN), and the
    // text limits.
    let tmp = TempDir::new().unwrap();
    let index = create(&tmp.path().join("grouped"));
    let mut rng = StdRng::seed_from_u64(3);
    index.write(WriteRequest { ops: vec![WriteOp::Add(random_doc(&mut rng, "g", "a"))] }).unwrap();
    let refused = |query: Vec<Vec<f32>>, mode: Mode, words: &str| {
        let mut req = request(&query, 3);
        req.mode = Some(mode);
        let e = index.search_group("g", &req).unwrap_err();
        assert!(matches!(e, CellarError::InvalidInput(_)), "{e:?}");
        assert!(e.to_string().contains(words), "{words:?} in {e}");
    };
    let mut huge = vec![vec![0.1; DIM]; 2];
    huge[1][3] = 1e20;
    refused(huge.clone(), Mode::Dense, "query_vectors.tokens[1] is too large");
    refused(huge, Mode::DenseExact, "too large");
    let mut nan = vec![vec![0.1; DIM]; 2];
    nan[0][5] = f32::NAN;
    refused(nan, Mode::Dense, "query_vectors.tokens[0][5] is not a finite number");
    // A pooled vector given beside the tokens is held to the same rule.
    let mut req = request(&[vec![0.1; DIM]], 3);
    let given = req.query_vectors.as_mut().unwrap();
    given.pooled = Some(vec![1e20; DIM]);
    req.mode = Some(Mode::DenseExact);
    let e = index.search_group("g", &req).unwrap_err();
    assert!(e.to_string().contains("query_vectors.pooled is too large"), "{e}");
    // The text limits are the index's too: a query or require_terms over MAX_QUERY_BYTES.
    let long = "word ".repeat(cellar_search::request::MAX_QUERY_BYTES / 5 + 1);
    let mut text = request(&[], 3);
    text.query_vectors = None;
    text.query = long.clone();
    let e = index.search_group("g", &text).unwrap_err();
    assert!(matches!(e, CellarError::InvalidInput(_)) && e.to_string().contains("the limit is 4096"), "{e}");
    let mut terms = request(&[vec![0.1; DIM]], 3);
    terms.require_terms = Some(long);
    let e = index.search_group("g", &terms).unwrap_err();
    assert!(e.to_string().contains("require_terms must hold 1 to 4096 bytes"), "{e}");
    // What scores well stays searchable.
    let ok = index.search_group("g", &request(&[vec![0.1; DIM]], 3)).unwrap();
    assert!(ok.hits.iter().all(|h| h.score.is_finite()));
}

fn touches(op: &WriteOp, key: &(String, String)) -> bool {
    match op {
        WriteOp::Put(d) => d.group.as_ref() == Some(&key.0) && d.id == key.1,
        WriteOp::DeleteInGroup(k) => k.group == key.0 && k.id == key.1,
        _ => false,
    }
}

/// A grouped index at `out` holding `docs` random documents spread over `groups` groups,
/// written interleaved (the log and memtable hold the groups mixed; the segment sorts them) and
/// flushed into one segment.
fn flushed(out: &Path, seed: u64, docs: usize, groups: usize) -> Index {
    let index = create(out);
    let mut rng = StdRng::seed_from_u64(seed);
    let ops = (0..docs)
        .map(|i| WriteOp::Put(random_doc(&mut rng, &format!("g{}", i % groups), &format!("d{i}"))))
        .collect();
    index.write(WriteRequest { ops }).unwrap();
    index.flush().unwrap();
    index
}

/// The segment directories of the index at `dir`.
fn segment_dirs(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir.join("live"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("seg-"))
        .map(|e| e.path())
        .collect()
}

/// A group's records are one run in each segment: a search of one group of many reads about its
/// own records' bytes, not the segment's.
#[test]
fn a_group_is_read_as_one_run_of_its_segment() {
    let tmp = TempDir::new().unwrap();
    let index = flushed(&tmp.path().join("grouped"), 7, 400, 40);
    let query = vec![vec![0.5; DIM]];
    let got = index.search_group("g7", &request(&query, 3)).unwrap();
    assert_eq!((got.stats.segments_read, got.stats.docs_scanned, got.stats.memtable_entries), (1, 10, 0));
    assert!(got.stats.read_calls <= 2, "one run, read at once: {:?}", got.stats);
    let store_bytes: u64 = segment_dirs(&tmp.path().join("grouped"))
        .iter()
        .map(|d| std::fs::metadata(d.join("vectors/vectors.bin")).unwrap().len())
        .sum();
    assert!(got.stats.bytes_read * 10 < store_bytes, "{} of {store_bytes} bytes read", got.stats.bytes_read);
}

/// `Index::release_mapped`, what the stream benchmark's cold searches stand on: an eviction
/// from the page cache keeps the pages a search mapped (records, pooled vectors) until they are
/// released; released and evicted, nothing of the segment stays cached, and the same searches
/// answer the same.
#[test]
fn released_mappings_let_an_eviction_make_the_next_group_search_cold() {
    use cellar_core::io::cache::{evict_file, resident_pages};
    let tmp = TempDir::new().unwrap();
    // A file system that keeps evicted pages (tmpfs) leaves nothing to check.
    let probe = tmp.path().join("probe");
    std::fs::write(&probe, vec![1u8; 1 << 16]).unwrap();
    std::fs::File::open(&probe).unwrap().sync_all().unwrap();
    evict_file(&probe).unwrap();
    if resident_pages(&probe).unwrap().0 != 0 {
        return;
    }
    let index = flushed(&tmp.path().join("grouped"), 11, 600, 3);
    let segment = segment_dirs(&tmp.path().join("grouped")).remove(0);
    let files = [segment.join("vectors/vectors.bin"), segment.join("pooled.bin")];
    let evict = || files.iter().for_each(|f| evict_file(f).unwrap());
    let cached = || files.iter().map(|f| resident_pages(f).unwrap().0).collect::<Vec<_>>();
    let query = vec![vec![0.5; DIM]];
    let mut pooled = request(&query, 5);
    pooled.mode = Some(Mode::DenseExact);
    let search = || [index.search_group("g1", &request(&query, 5)), index.search_group("g1", &pooled)];
    let hits = |r: &[cellar_core::Result<cellar_search::group::GroupResult>; 2]| {
        r.iter().map(|g| g.as_ref().unwrap().hits.clone()).collect::<Vec<_>>()
    };
    let before = hits(&search());
    files.iter().for_each(|f| std::fs::File::open(f).unwrap().sync_all().unwrap());
    evict();
    let kept = cached();
    assert!(kept.iter().all(|&n| n > 0), "both files' mapped pages survive an eviction: {kept:?}");
    index.release_mapped().unwrap();
    evict();
    assert_eq!(cached(), vec![0, 0], "released, then evicted");
    assert_eq!(hits(&search()), before, "the same answers, read from the disk again");
}

#[test]
fn writes_survive_a_crash_with_their_groups() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("grouped");
    let index = create(&out);
    let mut rng = StdRng::seed_from_u64(9);
    let mut model = Model::new();
    let docs: Vec<DocIn> =
        (0..20).map(|i| random_doc(&mut rng, ["x", "y"][i % 2], &format!("d{i}"))).collect();
    docs.iter().for_each(|d| remember(&mut model, d));
    index.write(WriteRequest { ops: docs.into_iter().map(WriteOp::Put).collect() }).unwrap();
    // Not flushed: the log alone holds them when the process dies.
    std::mem::forget(index);
    let index = Index::open(&out, OpenOptions::default());
    // The forgotten handle still holds the writer's lock in this process: the reopen reads the
    // log read-only, as a second process would.
    let index = index.unwrap();
    check_all(&index, &model, &mut rng, "replayed");
}

#[test]
fn bad_uses_of_groups_are_refused_with_what_to_do() {
    let tmp = TempDir::new().unwrap();
    let index = create(&tmp.path().join("grouped"));
    let mut rng = StdRng::seed_from_u64(1);
    let query = vec![vec![0.1; DIM]];
    let invalid = |e: CellarError, words: &str| {
        assert!(matches!(e, CellarError::InvalidInput(_)), "{e:?}");
        assert!(e.to_string().contains(words), "{words:?} in {e}");
    };
    let mut no_group = random_doc(&mut rng, "g", "a");
    no_group.group = None;
    invalid(
        index.write(WriteRequest { ops: vec![WriteOp::Add(no_group)] }).unwrap_err(),
        "every document names its group",
    );
    let mut bad_group = random_doc(&mut rng, "g", "a");
    bad_group.group = Some("a\nb".into());
    invalid(
        index.write(WriteRequest { ops: vec![WriteOp::Put(bad_group)] }).unwrap_err(),
        "control character",
    );
    invalid(
        index.write(WriteRequest { ops: vec![WriteOp::Delete("a".into())] }).unwrap_err(),
        "delete_in_group",
    );
    index.write(WriteRequest { ops: vec![WriteOp::Add(random_doc(&mut rng, "g", "a"))] }).unwrap();
    // The same id in another group is another document; in the same group it exists.
    index.write(WriteRequest { ops: vec![WriteOp::Add(random_doc(&mut rng, "h", "a"))] }).unwrap();
    invalid(
        index.write(WriteRequest { ops: vec![WriteOp::Add(random_doc(&mut rng, "g", "a"))] }).unwrap_err(),
        "exists",
    );
    let missing = WriteOp::DeleteInGroup(GroupKey { group: "g".into(), id: "zz".into() });
    assert!(matches!(
        index.write(WriteRequest { ops: vec![missing] }).unwrap_err(),
        CellarError::NotFound(_)
    ));
    assert!(matches!(
        index.search_group("nobody", &request(&query, 3)).unwrap_err(),
        CellarError::NotFound(_)
    ));
    invalid(index.search(request(&query, 3)).unwrap_err(), "grouped");
    let mut knob = request(&query, 3);
    knob.rerank_k = Some(10);
    invalid(index.search_group("g", &knob).unwrap_err(), "rerank_k");
    let mut bm25 = request(&query, 3);
    bm25.mode = Some(Mode::Bm25);
    invalid(index.search_group("g", &bm25).unwrap_err(), "mode bm25");
    invalid(index.retrain_ivf().unwrap_err(), "grouped");
    // dense-exact scores the pooled vectors: the best of a one-document group is that document.
    let mut pooled = request(&query, 3);
    pooled.mode = Some(Mode::DenseExact);
    assert_eq!(index.search_group("h", &pooled).unwrap().hits.len(), 1);

    // And a plain index refuses groups.
    let flat = tmp.path().join("flat");
    let mut build = BuildOptions::new("", &flat);
    build.codec = CodecKind::F16;
    Index::create_empty(&build, Some(DIM)).unwrap();
    let flat = Index::open(&flat, OpenOptions::default()).unwrap();
    invalid(
        flat.write(WriteRequest { ops: vec![WriteOp::Add(random_doc(&mut rng, "g", "a"))] }).unwrap_err(),
        "no groups",
    );
    invalid(flat.search_group("g", &request(&query, 3)).unwrap_err(), "no groups");
    let delete = WriteOp::DeleteInGroup(GroupKey { group: "g".into(), id: "a".into() });
    invalid(flat.write(WriteRequest { ops: vec![delete] }).unwrap_err(), "no groups");
    // A grouped index starts empty.
    let mut grouped_build = BuildOptions::new("", tmp.path().join("full"));
    grouped_build.grouped = true;
    let docs = vec![Ok(cellar_search::EmbeddedDoc {
        id: "a".into(),
        title: String::new(),
        text: "t".into(),
        metadata: Metadata::default(),
        tokens: vec![0.1; DIM],
        pooled: None,
    })];
    invalid(Index::build_from_embeddings(&grouped_build, DIM, None, docs).unwrap_err(), "starts empty");
}

/// The files of a grouped index's segment this test holds to the golden copy (the vectors and
/// pooled vectors are the base's layouts, held by their own golden files).
const GOLDEN_FILES: [&str; 4] = ["groups.bin", "ids.bin", "texts.bin", "text_offsets.bin"];

/// A grouped index whose one segment holds three groups written interleaved, with a deleted
/// and an updated document; returns the segment's directory.
fn golden_index(out: &Path) -> (Index, std::path::PathBuf) {
    let index = create(out);
    let doc = |group: &str, id: &str, axis: usize| DocIn {
        id: id.into(),
        group: Some(group.into()),
        text: format!("{id} of {group}"),
        metadata: if axis.is_multiple_of(2) {
            serde_json::from_str(r#"{"lang":"fr"}"#).unwrap()
        } else {
            Metadata::default()
        },
        vectors: Some(QueryVectorsIn {
            tokens: vec![(0..DIM).map(|d| if d == axis { 1.0 } else { 0.0 }).collect()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let ops = vec![
        WriteOp::Put(doc("zed", "z1", 0)),
        WriteOp::Put(doc("amy", "a1", 1)),
        WriteOp::Put(doc("max", "m1", 2)),
        WriteOp::Put(doc("amy", "a2", 3)),
        WriteOp::Put(doc("zed", "z2", 4)),
    ];
    index.write(WriteRequest { ops }).unwrap();
    let ops = vec![
        WriteOp::Put(doc("amy", "a1", 5)),
        WriteOp::DeleteInGroup(GroupKey { group: "zed".into(), id: "z2".into() }),
    ];
    index.write(WriteRequest { ops }).unwrap();
    index.flush().unwrap();
    let live = out.join("live");
    let segment = std::fs::read_dir(&live)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("seg-"))
        .unwrap()
        .path();
    (index, segment)
}

fn write_golden(dir: &Path) {
    let tmp = TempDir::new().unwrap();
    let (_index, segment) = golden_index(&tmp.path().join("grouped"));
    for file in GOLDEN_FILES {
        std::fs::copy(segment.join(file), dir.join(file)).unwrap();
    }
}

fn golden() -> &'static Path {
    static GOLDEN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    crate::golden_files::dir(&GOLDEN, "grouped-v1", write_golden)
}

#[test]
fn golden_grouped_segment_is_reproduced_byte_for_byte() {
    let fresh = TempDir::new().unwrap();
    write_golden(fresh.path());
    crate::golden_files::assert_same_bytes(
        golden(),
        fresh.path(),
        &GOLDEN_FILES,
        "the live format's version",
    );
}

/// The golden segment's files, put in place of a fresh one's, are read by this build: each
/// group's run holds its documents, the replaced version of `a1` and the deleted `z2` included
/// as records (the manifest's deletions hide them).
#[test]
fn golden_grouped_segment_is_read_by_this_build() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("grouped");
    let (index, segment) = golden_index(&out);
    drop(index);
    for file in GOLDEN_FILES {
        std::fs::copy(golden().join(file), segment.join(file)).unwrap();
    }
    let index = Index::open(&out, OpenOptions::default()).unwrap();
    let axis = |a: usize| vec![(0..DIM).map(|d| if d == a { 1.0 } else { 0.0 }).collect::<Vec<f32>>()];
    let found = |group: &str, a: usize| {
        let hits = index.search_group(group, &request(&axis(a), 10)).unwrap().hits;
        hits.iter().map(|h| format!("{}:{}", h.id, h.score)).collect::<Vec<_>>()
    };
    assert_eq!(found("amy", 5), ["a1:1", "a2:0"]);
    assert_eq!(found("amy", 3), ["a2:1", "a1:0"]);
    assert_eq!(found("max", 2), ["m1:1"]);
    assert_eq!(found("zed", 0), ["z1:1"]);
    let mut fr = request(&axis(0), 10);
    fr.filter = Some(serde_json::from_str(r#"{"eq": {"field": "lang", "value": "fr"}}"#).unwrap());
    let hits = index.search_group("zed", &fr).unwrap().hits;
    assert_eq!(hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["z1"]);
}
