//! Indexes from the caller's embeddings: `Index::build_from_embeddings` and the folder layout of
//! `cellar index --vectors` (`cellar_search::embeddings`).

use std::path::Path;

use cellar_core::codec::CodecKind;
use cellar_core::io::ReaderKind;
use cellar_search::embeddings::{export, read_npy_header, write_npy, EmbeddingsDir, NpyDtype};
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::request::VectorDtype;
use cellar_search::{BuildOptions, EmbeddedDoc, Index, Mode, OpenOptions, QueryVectorsIn, SearchRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tempfile::TempDir;

const DIM: usize = 16;

/// `n` documents of 1 to 6 random unit token vectors; document `i` holds `axis(i % DIM)`
/// scaled in as its first token, so a query of that axis finds it.
fn synthetic(n: usize, seed: u64) -> Vec<EmbeddedDoc> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let tokens_n = rng.gen_range(1..=6);
            let mut tokens: Vec<f32> = (0..tokens_n * DIM).map(|_| rng.gen_range(-0.1..0.1)).collect();
            tokens[i % DIM] = 1.0;
            for row in tokens.chunks_mut(DIM) {
                let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
                row.iter_mut().for_each(|v| *v /= norm);
            }
            EmbeddedDoc {
                id: format!("d{i}"),
                title: String::new(),
                text: format!("document number {i} about topic{}", i % DIM),
                metadata: Default::default(),
                tokens,
                pooled: None,
            }
        })
        .collect()
}

fn options(out: &Path, codec: CodecKind) -> BuildOptions {
    let mut options = BuildOptions::new("", out);
    options.codec = codec;
    options.sample_tokens = 64;
    options.ivf = Some(IvfBuildOptions { cluster_size: 8, ..IvfBuildOptions::default() });
    options
}

fn axis(i: usize) -> Vec<f32> {
    let mut v = vec![0.0; DIM];
    v[i] = 1.0;
    v
}

fn vector_query(k: usize, mode: Mode, token: usize) -> SearchRequest {
    SearchRequest {
        k: Some(k),
        mode: Some(mode),
        query_vectors: Some(QueryVectorsIn {
            tokens: vec![axis(token)],
            pooled: Some(axis(token)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn build_error(docs: Vec<EmbeddedDoc>) -> (String, bool) {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("index");
    let error =
        Index::build_from_embeddings(&options(&out, CodecKind::F16), DIM, None, docs.into_iter().map(Ok))
            .unwrap_err();
    (error.to_string(), out.exists())
}

#[test]
fn an_index_of_given_vectors_answers_vector_and_bm25_queries_without_a_model() {
    let tmp = TempDir::new().unwrap();
    for codec in [CodecKind::F16, CodecKind::Residual2] {
        let out = tmp.path().join(codec.name());
        let docs = synthetic(40, 1);
        let config =
            Index::build_from_embeddings(&options(&out, codec), DIM, Some(40), docs.into_iter().map(Ok))
                .unwrap();
        assert!(config.encoder.external && config.encoder.model.is_empty());
        assert_eq!((config.build.docs, config.encoder.model_dim), (40, DIM));
        let index =
            Index::open(&out, OpenOptions { reader: ReaderKind::Direct, ..Default::default() }).unwrap();
        for mode in [Mode::DenseExact, Mode::Dense, Mode::Ivf] {
            let hits = index.search(vector_query(3, mode, 5)).unwrap().hits;
            // Documents 5, 21 and 37 hold axis 5 as a token.
            assert!(
                ["d5", "d21", "d37"].contains(&hits[0].id.as_str()),
                "{codec:?} {mode}: {:?}",
                hits[0].id
            );
        }
        let bm25 = index.search(SearchRequest::new("topic7", Mode::Bm25).with_k(3)).unwrap();
        assert_eq!(bm25.hits.len(), 3);
        assert!(bm25.hits.iter().all(|h| h.text.contains("topic7")), "{:?}", bm25.hits);
        let mut rerank = vector_query(3, Mode::Rerank, 7);
        rerank.query = "topic7".into();
        assert!(index.search(rerank).unwrap().hits[0].text.contains("topic7"));
        // Text that must be encoded: no model, and a message saying what to do instead.
        let error = index.search(SearchRequest::new("topic7", Mode::Dense)).unwrap_err().to_string();
        assert!(error.contains("query_vectors") && error.contains("no model"), "{error}");
    }
}

#[test]
fn bad_embeddings_are_refused_naming_the_document_and_leave_nothing_behind() {
    let mut ragged = synthetic(3, 2);
    ragged[1].tokens.pop();
    let mut nan = synthetic(300, 3);
    nan[250].tokens[3] = f32::NAN;
    let mut duplicate = synthetic(5, 4);
    duplicate[4].id = "d1".into();
    let mut empty = synthetic(3, 5);
    empty[2].tokens.clear();
    let mut pooled = synthetic(3, 6);
    pooled[0].pooled = Some(vec![1.0; DIM - 1]);
    let mut zero = synthetic(3, 7);
    zero[1].tokens = vec![0.0; DIM];
    let mut no_id = synthetic(3, 8);
    no_id[0].id.clear();
    let cases = [
        (ragged, "document 1 (\"d1\")"),
        (nan, "document 250 (\"d250\") token"),
        (duplicate, "duplicate id \"d1\""),
        (empty, "document 2 (\"d2\")"),
        (pooled, "document 0 (\"d0\") pooled vector"),
        (zero, "average to zero"),
        (no_id, "document 0: its id is empty"),
    ];
    for (docs, expected) in cases {
        let (error, left) = build_error(docs);
        assert!(error.contains(expected), "expected {expected:?} in: {error}");
        assert!(!left, "a refused build left its directory behind ({error})");
    }
}

#[test]
fn a_folder_of_npy_shards_builds_the_index_its_vectors_build() {
    let tmp = TempDir::new().unwrap();
    let docs = synthetic(25, 9);
    let dir = tmp.path().join("vectors");
    std::fs::create_dir_all(&dir).unwrap();
    let mut corpus = String::new();
    for (shard, part) in docs.chunks(10).enumerate() {
        let tokens: Vec<f32> = part.iter().flat_map(|d| d.tokens.clone()).collect();
        let dtype = if shard == 1 { NpyDtype::F16 } else { NpyDtype::F32 };
        write_npy(&dir.join(format!("embeddings.{shard}.npy")), dtype, &tokens, DIM).unwrap();
        let lens: Vec<usize> = part.iter().map(|d| d.tokens.len() / DIM).collect();
        std::fs::write(dir.join(format!("doclens.{shard}.json")), serde_json::to_string(&lens).unwrap())
            .unwrap();
        for d in part {
            corpus.push_str(&serde_json::json!({"_id": d.id, "text": d.text}).to_string());
            corpus.push('\n');
        }
    }
    std::fs::write(dir.join("corpus.jsonl"), &corpus).unwrap();
    let folder = EmbeddingsDir::open(&dir).unwrap();
    assert_eq!((folder.len(), folder.dim()), (25, DIM));
    let read: Vec<EmbeddedDoc> = folder.docs().unwrap().map(Result::unwrap).collect();
    for (i, (read, given)) in read.iter().zip(&docs).enumerate() {
        assert_eq!((&read.id, &read.text), (&given.id, &given.text));
        let exact = given.tokens.clone();
        let f16: Vec<f32> = exact.iter().map(|v| half::f16::from_f32(*v).to_f32()).collect();
        assert_eq!(read.tokens, if (10..20).contains(&i) { f16 } else { exact }, "document {i}");
    }
    let out = tmp.path().join("index");
    Index::build_from_embeddings(&options(&out, CodecKind::F16), DIM, Some(25), folder.docs().unwrap())
        .unwrap();
    // Exported again, the vectors are the ones read (f16 stores, so f16 values), ids and texts too.
    let again = tmp.path().join("exported");
    assert_eq!(export(&out, &again, NpyDtype::F32, 7).unwrap(), 25);
    let exported = EmbeddingsDir::open(&again).unwrap();
    let back: Vec<EmbeddedDoc> = exported.docs().unwrap().map(Result::unwrap).collect();
    for (back, read) in back.iter().zip(&read) {
        let f16: Vec<f32> = read.tokens.iter().map(|v| half::f16::from_f32(*v).to_f32()).collect();
        assert_eq!((&back.id, &back.text, &back.tokens), (&read.id, &read.text, &f16));
        assert!(back.pooled.is_some());
    }
    assert_eq!(
        read_npy_header(&again.join("embeddings.3.npy")).unwrap().rows,
        back[21..].iter().map(|d| d.tokens.len() / DIM).sum::<usize>()
    );
}

#[test]
fn a_broken_folder_is_refused_before_anything_is_built() {
    let tmp = TempDir::new().unwrap();
    let docs = synthetic(4, 10);
    let make = |name: &str, lens: &str, corpus_lines: usize, descr: &str| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let tokens: Vec<f32> = docs.iter().flat_map(|d| d.tokens.clone()).collect();
        write_npy(&dir.join("embeddings.0.npy"), NpyDtype::F32, &tokens, DIM).unwrap();
        if descr != "<f4" {
            let path = dir.join("embeddings.0.npy");
            let mut bytes = std::fs::read(&path).unwrap();
            let at = bytes.windows(3).position(|w| w == b"<f4").unwrap();
            bytes[at..at + 3].copy_from_slice(descr.as_bytes());
            std::fs::write(&path, bytes).unwrap();
        }
        std::fs::write(dir.join("doclens.0.json"), lens).unwrap();
        let lines: Vec<String> = (0..corpus_lines).map(|i| format!("{{\"_id\": \"x{i}\"}}")).collect();
        std::fs::write(dir.join("corpus.jsonl"), lines.join("\n")).unwrap();
        EmbeddingsDir::open(&dir).unwrap_err().to_string()
    };
    let lens: Vec<usize> = docs.iter().map(|d| d.tokens.len() / DIM).collect();
    let good = serde_json::to_string(&lens).unwrap();
    let mut short = lens.clone();
    short[0] += 1;
    let cases = [
        (make("sum", &serde_json::to_string(&short).unwrap(), 4, "<f4"), "doclens.0.json counts"),
        (make("lines", &good, 3, "<f4"), "corpus.jsonl has 3 documents but the doclens count 4"),
        (make("dtype", &good, 4, "<f8"), "float32 ('<f4') or float16"),
        (make("zero", "[0, 1]", 2, "<f4"), "document 0 has 0 tokens"),
        (make("json", "[1,", 4, "<f4"), "not a JSON list"),
    ];
    for (error, expected) in cases {
        assert!(error.contains(expected), "expected {expected:?} in: {error}");
    }
    let missing = EmbeddingsDir::open(&tmp.path().join("none")).unwrap_err().to_string();
    assert!(missing.contains("no such folder"), "{missing}");
}

/// Standard base64 of `bytes` (the encoding clients use; written here so the test does not
/// share the decoder's code).
fn b64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let word = chunk.iter().enumerate().fold(0u32, |w, (i, b)| w | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(word >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn base64_query_vectors_rank_as_json_lists_and_bad_ones_are_refused() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("index");
    Index::build_from_embeddings(
        &options(&out, CodecKind::F16),
        DIM,
        None,
        synthetic(40, 11).into_iter().map(Ok),
    )
    .unwrap();
    let index = Index::open(&out, OpenOptions::default()).unwrap();
    let mut rng = StdRng::seed_from_u64(12);
    let tokens: Vec<Vec<f32>> =
        (0..3).map(|_| (0..DIM).map(|_| rng.gen_range(-1.0..1.0)).collect()).collect();
    let pooled: Vec<f32> = (0..DIM).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let flat: Vec<f32> = tokens.concat();
    let ask = |vectors: QueryVectorsIn, mode: Mode| {
        let request = SearchRequest {
            k: Some(8),
            mode: Some(mode),
            query_vectors: Some(vectors),
            ..Default::default()
        };
        index.search(request)
    };
    let ranking =
        |r: cellar_search::SearchResponse| r.hits.into_iter().map(|h| (h.id, h.score)).collect::<Vec<_>>();
    for mode in [Mode::Dense, Mode::DenseExact] {
        let lists =
            QueryVectorsIn { tokens: tokens.clone(), pooled: Some(pooled.clone()), ..Default::default() };
        let expected = ranking(ask(lists, mode).unwrap());
        for dtype in [VectorDtype::F32, VectorDtype::F16] {
            let compact = QueryVectorsIn {
                tokens_b64: Some(b64(&dtype.bytes_of(&flat))),
                pooled_b64: Some(b64(&dtype.bytes_of(&pooled))),
                dtype: Some(dtype),
                ..Default::default()
            };
            let got = ranking(ask(compact, mode).unwrap());
            if dtype == VectorDtype::F32 {
                assert_eq!(got, expected, "{mode}: f32 base64 must be the same query");
            } else {
                let ids = |r: &[(String, f32)]| r.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
                assert_eq!(ids(&got)[..3], ids(&expected)[..3], "{mode}: f16 base64 ranks the top alike");
            }
        }
    }
    let bad = |vectors: QueryVectorsIn| ask(vectors, Mode::Dense).unwrap_err().to_string();
    let f32s = |values: &[f32]| b64(&VectorDtype::F32.bytes_of(values));
    let cases = [
        (
            QueryVectorsIn {
                tokens_b64: Some(f32s(&flat[..DIM + 1])),
                pooled: Some(pooled.clone()),
                ..Default::default()
            },
            // The same answer as a JSON row of the wrong width: `WrongDimension` (422).
            "wrong vector dimension: expected 16, received 17",
        ),
        (
            QueryVectorsIn {
                tokens_b64: Some("AAA".into()),
                pooled: Some(pooled.clone()),
                ..Default::default()
            },
            "groups of 4",
        ),
        (
            QueryVectorsIn {
                tokens_b64: Some("AA*A".into()),
                pooled: Some(pooled.clone()),
                ..Default::default()
            },
            "not base64",
        ),
        (
            QueryVectorsIn {
                tokens_b64: Some(b64(&[0, 0, 0])),
                pooled: Some(pooled.clone()),
                ..Default::default()
            },
            "not whole 4-byte values",
        ),
        (
            QueryVectorsIn {
                tokens: tokens.clone(),
                tokens_b64: Some(f32s(&flat)),
                pooled: Some(pooled.clone()),
                ..Default::default()
            },
            "not both",
        ),
        (
            QueryVectorsIn {
                tokens_b64: Some(f32s(&flat)),
                pooled_b64: Some(f32s(&pooled[1..])),
                ..Default::default()
            },
            "expected 16",
        ),
        (
            QueryVectorsIn {
                tokens_b64: Some(f32s(&[f32::NAN; DIM])),
                pooled: Some(pooled.clone()),
                ..Default::default()
            },
            "finite",
        ),
    ];
    for (vectors, expected) in cases {
        let error = bad(vectors);
        assert!(error.contains(expected), "expected {expected:?} in: {error}");
    }
    // A serialised request carries the compact fields through JSON, as the HTTP API takes it.
    let json = serde_json::json!({"query": "", "k": 8, "mode": "dense", "query_vectors": {"tokens_b64": f32s(&flat), "pooled_b64": f32s(&pooled), "dtype": "f32"}});
    let request = SearchRequest::from_value(json).unwrap();
    assert_eq!(
        ranking(index.search(request).unwrap()),
        ranking(
            ask(QueryVectorsIn { tokens, pooled: Some(pooled), ..Default::default() }, Mode::Dense).unwrap()
        )
    );
}

/// `doc`'s token vectors as a write gives them (rows of `DIM`).
fn as_write(doc: &EmbeddedDoc) -> cellar_search::DocIn {
    cellar_search::DocIn {
        id: doc.id.clone(),
        text: doc.text.clone(),
        vectors: Some(QueryVectorsIn {
            tokens: doc.tokens.chunks(DIM).map(<[f32]>::to_vec).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn an_index_created_empty_takes_writes_and_answers_them_durably() {
    use cellar_search::{WriteOp, WriteRequest};
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("empty");
    let mut build = options(&out, CodecKind::F16);
    build.ivf = None;
    let config = Index::create_empty(&build, Some(DIM)).unwrap();
    assert_eq!((config.build.docs, config.encoder.model_dim, config.codec.as_str()), (0, DIM, "f16"));
    let open = |reader| Index::open(&out, OpenOptions { reader, ..Default::default() }).unwrap();
    let index = open(ReaderKind::Direct);
    assert_eq!(index.len(), 0);
    for mode in [Mode::DenseExact, Mode::Rerank, Mode::Hybrid, Mode::Bm25] {
        let mut request = vector_query(3, mode, 5);
        request.query = "topic5".into();
        assert!(index.search(request).unwrap().hits.is_empty(), "{mode}: an empty index has no hits");
    }
    let docs = synthetic(40, 9);
    let ops = docs.iter().map(|d| WriteOp::Add(as_write(d))).collect();
    index.write(WriteRequest { ops }).unwrap();
    let check = |index: &Index, when: &str| {
        assert_eq!(index.len(), 40, "{when}");
        for mode in [Mode::DenseExact, Mode::Rerank, Mode::Hybrid] {
            let mut request = vector_query(3, mode, 5);
            request.query = "topic5".into();
            let hits = index.search(request).unwrap().hits;
            // Documents 5, 21 and 37 hold axis 5 as a token (and "topic5" in their text).
            assert!(["d5", "d21", "d37"].contains(&hits[0].id.as_str()), "{when}, {mode}: {:?}", hits[0].id);
        }
        let bm25 = index.search(SearchRequest::new("topic7", Mode::Bm25).with_k(3)).unwrap();
        assert!(!bm25.hits.is_empty() && bm25.hits.iter().all(|h| h.text.contains("topic7")), "{when}");
    };
    check(&index, "in the memtable");
    drop(index);
    check(&open(ReaderKind::Mmap), "replayed from the log");
    let index = open(ReaderKind::Ram);
    index.flush().unwrap();
    drop(index);
    let index = open(ReaderKind::Direct);
    check(&index, "from its segment");
    // Its first IVF, trained on the written documents: the modes over it answer.
    let ivf = index.retrain_ivf().unwrap();
    assert_eq!(ivf.docs, 40);
    for mode in [Mode::Dense, Mode::Ivf] {
        let hits = index.search(vector_query(3, mode, 5)).unwrap().hits;
        assert!(["d5", "d21", "d37"].contains(&hits[0].id.as_str()), "{mode}: {:?}", hits[0].id);
    }
    index.write(WriteRequest { ops: vec![WriteOp::Delete("d5".into())] }).unwrap();
    let hits = index.search(vector_query(40, Mode::DenseExact, 5)).unwrap().hits;
    assert_eq!(hits.len(), 39);
    assert!(hits.iter().all(|h| h.id != "d5"), "a deleted document is gone");
}

#[test]
fn an_empty_index_refuses_what_is_fitted_on_documents_and_leaves_nothing_behind() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("empty");
    let f16 = || {
        let mut build = options(&out, CodecKind::F16);
        build.ivf = None;
        build
    };
    let cases: [(BuildOptions, Option<usize>, &str); 5] = [
        (options(&out, CodecKind::Residual2), Some(DIM), "codec residual2"),
        (BuildOptions { codec: CodecKind::Int8, ..f16() }, Some(DIM), "codec int8"),
        (BuildOptions { pca_dim: Some(8), ..f16() }, Some(DIM), "pca_dim"),
        (options(&out, CodecKind::F16), Some(DIM), "ivf"),
        (f16(), Some(0), "dim 0"),
    ];
    for (build, dim, expected) in cases {
        let error = Index::create_empty(&build, dim).unwrap_err();
        assert!(matches!(error, cellar_core::CellarError::InvalidInput(_)), "{expected}: {error}");
        assert!(error.to_string().contains(expected), "expected {expected:?} in: {error}");
        assert!(!out.exists(), "{expected}: nothing is left behind");
    }
}

/// Vectors are stored in half precision (pooled vectors always, f16 token vectors too): a value
/// it cannot hold is refused by a build and by a write, naming the document, never stored as
/// infinity.
#[test]
fn a_value_beyond_half_precision_is_refused_by_a_build_and_by_a_write() {
    use cellar_search::{WriteOp, WriteRequest};
    let mut token = synthetic(3, 11);
    token[1].tokens[DIM + 5] = 1e6;
    let mut pooled = synthetic(3, 12);
    pooled[2].pooled = Some(vec![70_000.0; DIM]);
    for (docs, expected) in
        [(token, "document 1 (\"d1\") token 1"), (pooled, "document 2 (\"d2\") pooled vector")]
    {
        let (error, left) = build_error(docs);
        assert!(error.contains(expected) && error.contains("half precision"), "{error}");
        assert!(!left, "a refused build left its directory behind ({error})");
    }
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("index");
    let mut build = options(&out, CodecKind::F16);
    build.ivf = None;
    Index::create_empty(&build, Some(DIM)).unwrap();
    let index = Index::open(&out, OpenOptions::default()).unwrap();
    let mut docs = synthetic(4, 13);
    docs[3].tokens[2] = -65_520.0;
    let ops = docs.iter().map(|d| WriteOp::Add(as_write(d))).collect();
    let error = index.write(WriteRequest { ops }).unwrap_err();
    assert!(matches!(error, cellar_core::CellarError::InvalidInput(_)), "{error:?}");
    assert!(error.to_string().contains("\"d3\"") && error.to_string().contains("half precision"), "{error}");
    assert_eq!(index.len(), 0, "nothing of the refused batch was written");
    // The largest value half precision holds is taken.
    docs[3].tokens[2] = -65_504.0;
    index.write(WriteRequest { ops: docs.iter().map(|d| WriteOp::Add(as_write(d))).collect() }).unwrap();
    assert_eq!(index.len(), 4);
}

/// An index of given vectors has no model to encode a query's text: `tune` ranks the queries'
/// own vectors, and without them says what is missing.
#[test]
fn an_index_without_a_model_tunes_on_the_queries_own_vectors() {
    use cellar_search::corpus::{Qrels, Query};
    use cellar_search::tune::{self, TuneOptions};
    use indicatif::ProgressBar;

    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("index");
    let docs = synthetic(64, 11);
    Index::build_from_embeddings(&options(&out, CodecKind::F16), DIM, None, docs.into_iter().map(Ok))
        .unwrap();
    let index = Index::open(&out, OpenOptions::default()).unwrap();
    // Query t asks for axis t; the documents holding it (i % DIM == t) are the relevant ones.
    let queries: Vec<Query> =
        (0..DIM).map(|t| Query { id: format!("q{t}"), text: format!("topic{t}") }).collect();
    let qrels: Qrels = (0..DIM)
        .map(|t| (format!("q{t}"), (0..64).filter(|i| i % DIM == t).map(|i| (format!("d{i}"), 1)).collect()))
        .collect();
    let vectors: Vec<QueryVectorsIn> = (0..DIM)
        .map(|t| QueryVectorsIn { tokens: vec![axis(t)], pooled: Some(axis(t)), ..Default::default() })
        .collect();
    let options = |query_vectors| TuneOptions { epsilon: 0.0, cv: None, p95_limit_ms: None, query_vectors };
    let bar = ProgressBar::hidden();

    let report = tune::tune(&index, &queries, &qrels, "qrels", options(Some(&vectors)), &bar).unwrap();
    assert!(!report.points.is_empty());
    // Each query's four documents hold its axis as a token: MaxSim puts them first.
    assert!(report.top.metrics.ndcg_at_10 > 0.99, "{:?}", report.top);
    assert_eq!(report.defaults.tuned.as_ref().unwrap().queries, DIM);

    let error = tune::tune(&index, &queries, &qrels, "qrels", options(None), &bar).unwrap_err().to_string();
    assert!(error.contains("model"), "{error}");
    let error = tune::tune(&index, &queries, &qrels, "qrels", options(Some(&vectors[1..])), &bar)
        .unwrap_err()
        .to_string();
    assert!(error.contains("15 query vectors for 16 queries"), "{error}");
}
