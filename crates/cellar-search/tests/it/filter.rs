//! Filters on metadata (`cellar_search::filter`), held to their reference meaning
//! (`Filter::matches`) over random metadata and random filters: the set the BM25 index matches
//! is exactly the reference set, no search in any mode returns a document the filter does not
//! match (first stage or exact path), the exact path ranks exactly, and all of it still holds
//! after writes (memtable), a flush (segments), a delete by filter and a reopen.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use cellar_core::codec::CodecKind;
use cellar_core::{CellarError, DocId};
use cellar_search::filter::Scalar;
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::{
    BuildOptions, DocIn, EmbeddedDoc, Filter, Index, Metadata, Mode, OpenOptions, QueryVectorsIn,
    SearchRequest, WriteOp, WriteRequest,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tempfile::TempDir;

const DIM: usize = 16;
const LANGS: [&str; 4] = ["en", "fr", "de", "es"];
const TAGS: [&str; 4] = ["a", "b", "c", "d"];

pub(crate) fn random_meta(rng: &mut StdRng) -> Metadata {
    let mut m = serde_json::Map::new();
    if rng.gen_bool(0.8) {
        m.insert("lang".into(), LANGS[rng.gen_range(0..4)].into());
    }
    if rng.gen_bool(0.8) {
        m.insert("year".into(), rng.gen_range(1990..2010).into());
    }
    if rng.gen_bool(0.7) {
        // Floats, some of them whole, and some integers in the same field.
        let v: serde_json::Value = match rng.gen_range(0..3) {
            0 => (rng.gen_range(0..8) as f64 / 2.0).into(),
            1 => rng.gen_range(0..4).into(),
            _ => (rng.gen_range(0..100) as f64 / 25.0).into(),
        };
        m.insert("score".into(), v);
    }
    if rng.gen_bool(0.6) {
        m.insert("ok".into(), rng.gen_bool(0.5).into());
    }
    if rng.gen_bool(0.6) {
        let tags: Vec<&str> = TAGS.iter().copied().filter(|_| rng.gen_bool(0.4)).collect();
        m.insert("tags".into(), tags.into());
    }
    Metadata::from_json(m).unwrap()
}

fn random_scalar(rng: &mut StdRng, field: &str) -> Scalar {
    match field {
        "lang" => Scalar::Str(LANGS[rng.gen_range(0..4)].into()),
        "tags" => Scalar::Str(TAGS[rng.gen_range(0..4)].into()),
        "ok" => Scalar::Bool(rng.gen_bool(0.5)),
        "year" => Scalar::Int(rng.gen_range(1988..2012)),
        _ if rng.gen_bool(0.5) => Scalar::Int(rng.gen_range(0..4)),
        _ => Scalar::Float(rng.gen_range(0..16) as f64 / 4.0),
    }
}

pub(crate) fn random_filter(rng: &mut StdRng, depth: usize) -> Filter {
    let fields = ["lang", "year", "score", "ok", "tags", "absent"];
    let field = fields[rng.gen_range(0..fields.len())].to_string();
    let leaf = depth == 0 || rng.gen_bool(0.5);
    if leaf {
        return match rng.gen_range(0..3) {
            0 => Filter::Eq(cellar_search::filter::Equals { value: random_scalar(rng, &field), field }),
            1 => {
                let values = (0..rng.gen_range(1..4)).map(|_| random_scalar(rng, &field)).collect();
                Filter::In(cellar_search::filter::AnyOf { field, values })
            }
            _ => {
                let field = if rng.gen_bool(0.5) { "year" } else { "score" }.to_string();
                let bound = |rng: &mut StdRng| Some(random_scalar(rng, &field));
                let mut r = cellar_search::filter::Range {
                    field: field.clone(),
                    gt: None,
                    gte: None,
                    lt: None,
                    lte: None,
                };
                match rng.gen_range(0..3) {
                    0 => r.gt = bound(rng),
                    1 => r.gte = bound(rng),
                    _ => {}
                }
                if rng.gen_bool(0.5) || (r.gt.is_none() && r.gte.is_none()) {
                    if rng.gen_bool(0.5) {
                        r.lt = bound(rng)
                    } else {
                        r.lte = bound(rng)
                    }
                }
                Filter::Range(r)
            }
        };
    }
    match rng.gen_range(0..3) {
        0 => Filter::And((0..rng.gen_range(1..4)).map(|_| random_filter(rng, depth - 1)).collect()),
        1 => Filter::Or((0..rng.gen_range(1..4)).map(|_| random_filter(rng, depth - 1)).collect()),
        _ => Filter::Not(Box::new(random_filter(rng, depth - 1))),
    }
}

/// A unit vector near axis `i % DIM` plus noise, as one token row.
fn token(rng: &mut StdRng, i: usize) -> Vec<f32> {
    let mut row: Vec<f32> = (0..DIM).map(|_| rng.gen_range(-0.3..0.3)).collect();
    row[i % DIM] += 1.0;
    let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
    row.iter().map(|v| v / norm).collect()
}

struct Doc {
    tokens: Vec<Vec<f32>>,
    meta: Metadata,
}

fn axis(i: usize) -> Vec<f32> {
    let mut v = vec![0.0; DIM];
    v[i] = 1.0;
    v
}

fn request(mode: Mode, t: usize, filter: &Filter, exact_max: usize) -> SearchRequest {
    SearchRequest {
        query: format!("topic{t}"),
        k: Some(10),
        mode: Some(mode),
        query_vectors: Some(QueryVectorsIn {
            tokens: vec![axis(t)],
            pooled: Some(axis(t)),
            ..Default::default()
        }),
        filter: Some(filter.clone()),
        filter_exact_max: Some(exact_max),
        nprobe: Some(2),
        include_text: Some(false),
        ..Default::default()
    }
}

/// MaxSim of the one-hot query `t` against a document stored as f16: its largest f16 value at t.
fn exact_score(doc: &Doc, t: usize) -> f32 {
    doc.tokens.iter().map(|row| half::f16::from_f32(row[t]).to_f32()).fold(f32::MIN, f32::max)
}

/// Every check of the module's doc comment against the documents alive in `docs`.
fn check_all(index: &Index, docs: &HashMap<String, Doc>, rng: &mut StdRng, rounds: usize, stage: &str) {
    let internal: HashMap<DocId, String> = docs.keys().map(|id| (index_id(index, id), id.clone())).collect();
    for round in 0..rounds {
        let filter = random_filter(rng, 3);
        let want: BTreeSet<&String> =
            docs.iter().filter(|(_, d)| filter.matches(&d.meta)).map(|(id, _)| id).collect();
        let got: BTreeSet<&String> = index
            .matching(&filter)
            .unwrap()
            .iter()
            .map(|id| {
                internal.get(id).unwrap_or_else(|| panic!("{stage}: matched {id:?}, not a live document"))
            })
            .collect();
        assert_eq!(got, want, "{stage} round {round}: {}", serde_json::to_string(&filter).unwrap());
        let t = rng.gen_range(0..DIM);
        for mode in [Mode::Bm25, Mode::Ivf, Mode::Dense, Mode::DenseExact, Mode::Rerank, Mode::Hybrid] {
            for exact_max in [0, 1024] {
                let response = index.search(request(mode, t, &filter, exact_max)).unwrap();
                for hit in &response.hits {
                    assert!(
                        want.contains(&hit.id),
                        "{stage} round {round}: {mode} (exact_max {exact_max}) returned {} outside {}",
                        hit.id,
                        serde_json::to_string(&filter).unwrap()
                    );
                }
                let report = response.filter.expect("a filtered search reports its filter");
                assert!(report.matched >= want.len(), "{stage}: {report:?}");
                let exact = report.matched <= exact_max && !matches!(mode, Mode::Bm25 | Mode::DenseExact);
                assert_eq!(report.exact, exact, "{stage} {mode}");
                if exact && mode == Mode::Dense {
                    let mut best: Vec<f32> = want.iter().map(|id| exact_score(&docs[*id], t)).collect();
                    best.sort_by(|a, b| b.total_cmp(a));
                    best.truncate(10);
                    let got: Vec<f32> = response.hits.iter().map(|h| h.maxsim.unwrap()).collect();
                    assert_eq!(got, best, "{stage} round {round}: the exact path's top 10");
                }
            }
        }
    }
}

fn index_id(index: &Index, id: &str) -> DocId {
    let doc = index.get(id).unwrap().unwrap_or_else(|| panic!("{id} is not in the index"));
    // The internal id: the only search hit of its own id filter is the document itself.
    let hits = index
        .search(SearchRequest {
            query: doc.title.clone() + " " + &doc.text,
            mode: Some(Mode::Bm25),
            k: Some(10_000),
            include_text: Some(false),
            ..Default::default()
        })
        .unwrap()
        .hits;
    DocId(
        hits.iter().find(|h| h.id == id).unwrap_or_else(|| panic!("{id} not found by its text")).internal_id,
    )
}

fn build(dir: &Path, docs: &[(String, Doc)]) -> Index {
    let mut options = BuildOptions::new("", dir);
    options.codec = CodecKind::F16;
    options.sample_tokens = 64;
    options.ivf = Some(IvfBuildOptions { cluster_size: 16, ..IvfBuildOptions::default() });
    let embedded = docs.iter().map(|(id, d)| {
        Ok(EmbeddedDoc {
            id: id.clone(),
            title: String::new(),
            text: format!("document {id}"),
            metadata: d.meta.clone(),
            tokens: d.tokens.concat(),
            pooled: None,
        })
    });
    Index::build_from_embeddings(&options, DIM, None, embedded).unwrap();
    Index::open(dir, OpenOptions::default()).unwrap()
}

fn new_doc(rng: &mut StdRng, i: usize) -> Doc {
    Doc { tokens: (0..rng.gen_range(1..5)).map(|_| token(rng, i)).collect(), meta: random_meta(rng) }
}

fn doc_in(id: &str, doc: &Doc) -> DocIn {
    DocIn {
        id: id.into(),
        text: format!("document {id}"),
        metadata: doc.meta.clone(),
        vectors: Some(QueryVectorsIn { tokens: doc.tokens.clone(), ..Default::default() }),
        ..DocIn::default()
    }
}

#[test]
fn filters_match_their_meaning_in_every_stage_before_and_after_writes() {
    let mut rng = StdRng::seed_from_u64(7);
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    let base: Vec<(String, Doc)> = (0..240).map(|i| (format!("d{i}"), new_doc(&mut rng, i))).collect();
    let index = build(&dir, &base);
    let mut docs: HashMap<String, Doc> = base.into_iter().collect();
    check_all(&index, &docs, &mut rng, 40, "built");

    // Writes: adds, updates that change metadata, deletes by id and by filter.
    let mut ops = Vec::new();
    for i in 0..30 {
        let (id, doc) = (format!("w{i}"), new_doc(&mut rng, i));
        ops.push(WriteOp::Add(doc_in(&id, &doc)));
        docs.insert(id, doc);
    }
    for i in (0..60).step_by(6) {
        let (id, doc) = (format!("d{i}"), new_doc(&mut rng, i));
        ops.push(WriteOp::Update(doc_in(&id, &doc)));
        docs.insert(id, doc);
    }
    for i in (1..60).step_by(7) {
        ops.push(WriteOp::Delete(format!("d{i}")));
        docs.remove(&format!("d{i}"));
    }
    index.write(WriteRequest { ops }).unwrap();
    check_all(&index, &docs, &mut rng, 30, "written");

    let gone: Filter = serde_json::from_str(
        r#"{"and":[{"eq":{"field":"lang","value":"de"}},{"range":{"field":"year","lt":1995}}]}"#,
    )
    .unwrap();
    let doomed: Vec<String> =
        docs.iter().filter(|(_, d)| gone.matches(&d.meta)).map(|(id, _)| id.clone()).collect();
    assert!(!doomed.is_empty(), "the fixture has documents to delete by filter");
    let report = index.write(WriteRequest { ops: vec![WriteOp::DeleteWhere(gone.clone())] }).unwrap();
    assert_eq!(report.deleted, doomed.len());
    doomed.iter().for_each(|id| assert!(docs.remove(id).is_some()));
    assert!(index.matching(&gone).unwrap().is_empty());
    let again = index.write(WriteRequest { ops: vec![WriteOp::DeleteWhere(gone)] }).unwrap();
    assert_eq!(again.deleted, 0, "a filter matching nothing deletes nothing, without an error");
    check_all(&index, &docs, &mut rng, 20, "deleted by filter");

    index.flush().unwrap();
    check_all(&index, &docs, &mut rng, 20, "flushed");
    drop(index);
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    check_all(&index, &docs, &mut rng, 20, "reopened");
    let doc = index.get("w3").unwrap().unwrap();
    assert_eq!(doc.metadata, docs["w3"].meta, "metadata reads back with the document");
}

#[test]
fn bad_filters_and_metadata_are_refused_before_anything_runs() {
    let mut rng = StdRng::seed_from_u64(3);
    let tmp = TempDir::new().unwrap();
    let base: Vec<(String, Doc)> = (0..40).map(|i| (format!("d{i}"), new_doc(&mut rng, i))).collect();
    let index = build(&tmp.path().join("index"), &base);
    let bad: Filter = serde_json::from_str(r#"{"or":[{"range":{"field":"year"}}]}"#).unwrap();
    let err = index.search(request(Mode::Dense, 0, &bad, 10)).unwrap_err();
    assert!(matches!(err, CellarError::InvalidInput(_)), "{err:?}");
    assert!(err.to_string().contains("filter.or[0]: range needs a bound"), "{err}");
    let err = index.write(WriteRequest { ops: vec![WriteOp::DeleteWhere(bad)] }).unwrap_err();
    assert!(err.to_string().contains("ops[0].delete_where.or[0]"), "{err}");
    let err = serde_json::from_str::<WriteRequest>(
        r#"{"ops":[{"add":{"id":"x","text":"t","metadata":{"when":{"nested":1}}}}]}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("metadata \"when\""), "{err}");
}

/// Numbers around 2^53, 2^62, 2^63 and 2^64 in one field, integers and floats side by side (so
/// tantivy's fast column of the field is f64, and would round the integers).
fn edge_numbers() -> Vec<serde_json::Value> {
    let mut out: Vec<serde_json::Value> = Vec::new();
    for i in
        [1i64 << 62, (1 << 62) + 1, (1 << 62) - 1, 1 << 53, (1 << 53) + 1, i64::MAX, i64::MIN, -(1 << 53) - 1]
    {
        out.push(i.into());
    }
    for f in [2.5, 2f64.powi(62), 2f64.powi(63), 9.3e18, 2f64.powi(64), 1.9e19, -1e19, 2f64.powi(53), -0.5] {
        out.push(f.into());
    }
    out
}

fn number_scalar(v: &serde_json::Value) -> Scalar {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn ranges_on_integers_beyond_2_pow_53_beside_floats_are_exact_in_the_index_and_in_matches() {
    let mut rng = StdRng::seed_from_u64(62);
    let tmp = TempDir::new().unwrap();
    let values = edge_numbers();
    let doc = |rng: &mut StdRng, i: usize, v: &serde_json::Value| {
        let meta = Metadata::from_json([("n".to_string(), v.clone())].into_iter().collect()).unwrap();
        Doc { tokens: vec![token(rng, i)], meta }
    };
    let (built, written) = values.split_at(12);
    let base: Vec<(String, Doc)> =
        built.iter().enumerate().map(|(i, v)| (format!("b{i}"), doc(&mut rng, i, v))).collect();
    let index = build(&tmp.path().join("index"), &base);
    let mut docs: HashMap<String, Doc> = base.into_iter().collect();
    let mut ops = Vec::new();
    for (i, v) in written.iter().enumerate() {
        let (id, d) = (format!("w{i}"), doc(&mut rng, i, v));
        ops.push(WriteOp::Add(doc_in(&id, &d)));
        docs.insert(id, d);
    }
    index.write(WriteRequest { ops }).unwrap();
    let internal: HashMap<DocId, String> = docs.keys().map(|id| (index_id(&index, id), id.clone())).collect();

    // Every bound near the values: each value, as an integer and as a float, and one either side.
    let mut bounds: Vec<Scalar> = Vec::new();
    for v in &values {
        bounds.push(number_scalar(v));
        if let Some(i) = v.as_i64() {
            bounds.extend([i.checked_sub(1), i.checked_add(1)].into_iter().flatten().map(Scalar::Int));
            bounds.push(Scalar::Float(i as f64));
        }
    }
    for b in &bounds {
        for op in ["gt", "gte", "lt", "lte"] {
            let filter: Filter = serde_json::from_value(
                serde_json::json!({"range": {"field": "n", op: serde_json::to_value(b).unwrap()}}),
            )
            .unwrap();
            let want: BTreeSet<&String> =
                docs.iter().filter(|(_, d)| filter.matches(&d.meta)).map(|(id, _)| id).collect();
            let got: BTreeSet<&String> =
                index.matching(&filter).unwrap().iter().map(|id| &internal[id]).collect();
            assert_eq!(got, want, "{}", serde_json::to_string(&filter).unwrap());
        }
        let eq = Filter::Eq(cellar_search::filter::Equals { field: "n".into(), value: b.clone() });
        let want: BTreeSet<&String> =
            docs.iter().filter(|(_, d)| eq.matches(&d.meta)).map(|(id, _)| id).collect();
        let got: BTreeSet<&String> = index.matching(&eq).unwrap().iter().map(|id| &internal[id]).collect();
        assert_eq!(got, want, "{}", serde_json::to_string(&eq).unwrap());
    }

    // The issue's case, through a search: `gt 2^62` finds 2^62 + 1 (b1), `gte 2^62 + 1` leaves
    // 2^62 (b0) out; both in every first stage and in the exact path.
    for (text, must, never) in [
        (r#"{"range":{"field":"n","gt":4611686018427387904}}"#, "b1", "b0"),
        (r#"{"range":{"field":"n","gte":4611686018427387905}}"#, "b1", "b0"),
    ] {
        let filter: Filter = serde_json::from_str(text).unwrap();
        for mode in [Mode::Bm25, Mode::Dense, Mode::Hybrid] {
            for exact_max in [0, 1024] {
                let mut request = request(mode, 1, &filter, exact_max);
                request.query = "document".into();
                request.k = Some(100);
                request.nprobe = Some(1);
                let hits: Vec<String> =
                    index.search(request).unwrap().hits.into_iter().map(|h| h.id).collect();
                assert!(
                    hits.contains(&must.to_string()) && !hits.contains(&never.to_string()),
                    "{text} {mode}: {hits:?}"
                );
            }
        }
    }
}

/// Issue 46: `require_terms`, the one request type's text match, in an index: only documents
/// holding every term (as BM25 analyses the text), with or without a filter, in every mode,
/// for built and written documents alike; a text of stop words alone is refused.
#[test]
fn require_terms_keeps_the_documents_holding_every_term_in_every_mode() {
    let mut rng = StdRng::seed_from_u64(11);
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("index");
    let text = |i: usize| {
        let fruit = if i.is_multiple_of(2) { "apples" } else { "pears" };
        format!("note {i} about {fruit}{}", if i.is_multiple_of(3) { " ripening fast" } else { "" })
    };
    let base: Vec<(String, Doc)> = (0..60).map(|i| (format!("d{i}"), new_doc(&mut rng, i))).collect();
    let mut options = BuildOptions::new("", &dir);
    options.codec = CodecKind::F16;
    options.sample_tokens = 64;
    options.ivf = Some(IvfBuildOptions { cluster_size: 16, ..IvfBuildOptions::default() });
    let embedded = base.iter().enumerate().map(|(i, (id, d))| {
        Ok(EmbeddedDoc {
            id: id.clone(),
            title: String::new(),
            text: text(i),
            metadata: d.meta.clone(),
            tokens: d.tokens.concat(),
            pooled: None,
        })
    });
    Index::build_from_embeddings(&options, DIM, None, embedded).unwrap();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    // Written documents: 60..72, the same texts' rule.
    let ops = (60..72)
        .map(|i| {
            let doc = new_doc(&mut rng, i);
            WriteOp::Add(DocIn { text: text(i), ..doc_in(&format!("d{i}"), &doc) })
        })
        .collect();
    index.write(WriteRequest { ops }).unwrap();
    let ripe_apples: BTreeSet<String> = (0..72).filter(|i| i % 6 == 0).map(|i| format!("d{i}")).collect();
    for mode in [Mode::Bm25, Mode::Ivf, Mode::Dense, Mode::DenseExact, Mode::Rerank, Mode::Hybrid] {
        let request = SearchRequest {
            require_terms: Some("Ripening APPLE".into()),
            k: Some(100),
            ..request(mode, 3, &serde_json::from_str(r#"{"not": {"lang": "xx"}}"#).unwrap(), 1024)
        };
        let got: BTreeSet<String> =
            index.search(request.clone()).unwrap().hits.into_iter().map(|h| h.id).collect();
        if matches!(mode, Mode::Bm25 | Mode::Rerank | Mode::Hybrid) {
            // BM25 finds only documents holding the query's words: the one-hot query's text.
            assert!(got.is_subset(&ripe_apples), "{mode}: {got:?}");
        } else {
            assert_eq!(got, ripe_apples, "{mode}: every match, and nothing else");
        }
        let filtered =
            SearchRequest { filter: Some(serde_json::from_str(r#"{"lang": "en"}"#).unwrap()), ..request };
        let want: BTreeSet<String> = ripe_apples
            .iter()
            .filter(|id| {
                index.get(id).unwrap().unwrap().metadata.get("lang")
                    == Some(&cellar_search::MetaValue::Str("en".into()))
            })
            .cloned()
            .collect();
        let got: BTreeSet<String> = index.search(filtered).unwrap().hits.into_iter().map(|h| h.id).collect();
        assert!(got.is_subset(&want), "{mode}: the filter and the terms both hold: {got:?}");
    }
    let stop_words = SearchRequest {
        require_terms: Some("the and of".into()),
        ..request(Mode::Dense, 1, &Filter::And(vec![]), 0)
    };
    let err = index.search(SearchRequest { filter: None, ..stop_words }).unwrap_err();
    assert!(matches!(&err, CellarError::InvalidInput(m) if m.contains("no term")), "{err}");
}
