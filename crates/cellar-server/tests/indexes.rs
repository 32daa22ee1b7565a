//! `--data-dir`: several indexes per server, by name, through the real router: created and
//! dropped over the API and on disk, each searched and written on its own, every bad name or
//! request a typed 4xx.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use axum::Router;
use cellar_core::format::fsio::LOCK_FILE;
use cellar_search::{BuildOptions, DocIn, Index, OpenOptions, QueryVectorsIn, WriteOp, WriteRequest};
use cellar_server::registry::Indexes;
use cellar_server::{router, AppState, ServerConfig};
use serde_json::{json, Value};
use tower::ServiceExt;

mod common;
#[path = "../../cellar-core/tests/support/names.rs"]
mod names;

use names::generated_names;

const DIM: usize = 8;

async fn call(app: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn with_body(method: &str, path: &str, body: &Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn bare(method: &str, path: &str) -> Request<Body> {
    Request::builder().method(method).uri(path).body(Body::empty()).unwrap()
}

fn axis(i: usize) -> Vec<f32> {
    let mut v = vec![0.05; DIM];
    v[i % DIM] = 1.0;
    v
}

/// Document `i`: one token near axis `i`, metadata `{"even": i % 2 == 0}`.
fn doc(i: usize) -> Value {
    json!({"id": format!("n{i}"), "text": format!("note number {i}"), "metadata": {"even": i.is_multiple_of(2)},
           "vectors": {"tokens": [axis(i)]}})
}

fn search(i: usize, filter: Option<Value>) -> Value {
    let mut body = json!({"query": "note", "mode": "dense-exact", "k": 3,
                          "query_vectors": {"tokens": [axis(i)], "pooled": axis(i)}});
    if let Some(filter) = filter {
        body["filter"] = filter;
    }
    body
}

fn ids(answer: &Value) -> Vec<String> {
    answer["hits"].as_array().unwrap().iter().map(|h| h["id"].as_str().unwrap().to_string()).collect()
}

/// An index created with no documents: its dimension given, f16 by default, then filled by writes.
#[tokio::test]
async fn an_index_created_empty_is_filled_by_writes() {
    let tmp = tempfile::TempDir::new().unwrap();
    let indexes = Indexes::open(&tmp.path().join("data"), OpenOptions::default()).unwrap();
    let config = ServerConfig::new("127.0.0.1:0".parse().unwrap());
    let app = router(AppState::serving(None, Some(Arc::new(indexes)), None, config));

    let (status, created) = call(&app, with_body("PUT", "/v1/indexes/notes", &json!({"dim": DIM}))).await;
    assert_eq!(
        (status, created["docs"].as_u64(), created["codec"].as_str()),
        (StatusCode::OK, Some(0), Some("f16"))
    );
    let (status, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search", &search(3, None))).await;
    assert_eq!((status, ids(&answer).len()), (StatusCode::OK, 0), "{answer}");
    let add = json!({"ops": (0..12).map(|i| json!({"add": doc(i)})).collect::<Vec<_>>()});
    let (status, report) = call(&app, with_body("POST", "/v1/indexes/notes/docs", &add)).await;
    assert_eq!((status, report["docs"].as_u64()), (StatusCode::OK, Some(12)), "{report}");
    let (status, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search", &search(3, None))).await;
    assert_eq!((status, ids(&answer)[0].as_str()), (StatusCode::OK, "n3"), "{answer}");

    // What an empty index cannot have is refused, naming it; nothing is left behind.
    let refused = [
        (json!({"dim": DIM, "codec": "residual2"}), "codec residual2"),
        (json!({"dim": DIM, "ivf": true}), "ivf"),
        (json!({"dim": 0}), "dim 0"),
        (json!({"dim": DIM, "docs": [doc(1)]}), "dim is for an empty index"),
    ];
    for (body, says) in refused {
        let (status, error) = call(&app, with_body("PUT", "/v1/indexes/other", &body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert!(error["message"].as_str().unwrap_or_default().contains(says), "{body}: {error}");
    }
    let (_, list) = call(&app, bare("GET", "/v1/indexes")).await;
    assert_eq!(list, json!({"indexes": ["notes"]}));
}

#[tokio::test]
async fn indexes_of_a_data_directory_are_created_searched_written_and_dropped_by_name() {
    let tmp = tempfile::TempDir::new().unwrap();
    let data = tmp.path().join("data");
    let indexes = Indexes::open(&data, OpenOptions::default()).unwrap();
    let config = ServerConfig::new("127.0.0.1:0".parse().unwrap());
    let app = router(AppState::serving(None, Some(Arc::new(indexes)), None, config));

    let (status, list) = call(&app, bare("GET", "/v1/indexes")).await;
    assert_eq!((status, list), (StatusCode::OK, json!({"indexes": []})));
    let create = json!({"docs": (0..12).map(doc).collect::<Vec<_>>(), "codec": "f16"});
    let (status, created) = call(&app, with_body("PUT", "/v1/indexes/notes", &create)).await;
    assert_eq!((status, created["docs"].as_u64()), (StatusCode::OK, Some(12)), "{created}");
    let (status, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search", &search(3, None))).await;
    assert_eq!((status, ids(&answer)[0].as_str()), (StatusCode::OK, "n3"), "{answer}");
    let even = json!({"eq": {"field": "even", "value": true}});
    let (_, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search", &search(3, Some(even)))).await;
    assert!(!ids(&answer).contains(&"n3".to_string()) && ids(&answer).len() == 3, "{answer}");
    let batch = json!({"queries": [search(1, None), search(2, None)]});
    let (status, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search/batch", &batch)).await;
    assert_eq!((status, answer["results"].as_array().map(Vec::len)), (StatusCode::OK, Some(2)), "{answer}");

    // Writes to the named index, and its documents read and deleted by id.
    let add = json!({"ops": [{"add": doc(40)}]});
    let (status, report) = call(&app, with_body("POST", "/v1/indexes/notes/docs", &add)).await;
    assert_eq!((status, report["docs"].as_u64()), (StatusCode::OK, Some(13)), "{report}");
    let (status, stored) = call(&app, bare("GET", "/v1/indexes/notes/docs/n40")).await;
    assert_eq!((status, stored["metadata"]["even"].as_bool()), (StatusCode::OK, Some(true)), "{stored}");
    let (status, report) = call(&app, bare("DELETE", "/v1/indexes/notes/docs/n40")).await;
    assert_eq!((status, report["deleted"].as_u64()), (StatusCode::OK, Some(1)), "{report}");
    let (status, _) = call(&app, bare("GET", "/v1/indexes/notes/docs/n40")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // An index put under the directory on disk is served at its first request.
    let mut options = BuildOptions::new("", data.join("disk"));
    options.codec = cellar_core::codec::CodecKind::F16;
    let on_disk = (0..4)
        .map(|i| DocIn {
            id: format!("d{i}"),
            text: format!("disk document {i}"),
            vectors: Some(QueryVectorsIn { tokens: vec![axis(i + 4)], ..Default::default() }),
            ..DocIn::default()
        })
        .collect();
    Index::create(&options, on_disk).unwrap();
    let (_, list) = call(&app, bare("GET", "/v1/indexes")).await;
    assert_eq!(list, json!({"indexes": ["disk", "notes"]}));
    let (status, answer) = call(&app, with_body("POST", "/v1/indexes/disk/search", &search(5, None))).await;
    assert_eq!((status, ids(&answer)[0].as_str()), (StatusCode::OK, "d1"), "{answer}");
    let (status, facts) = call(&app, bare("GET", "/v1/indexes/disk")).await;
    assert_eq!(
        (status, facts["docs"].as_u64(), facts["codec"].as_str()),
        (StatusCode::OK, Some(4), Some("f16"))
    );
    // ... and one removed on disk is gone.
    std::fs::remove_dir_all(data.join("disk")).unwrap();
    let (status, error) = call(&app, with_body("POST", "/v1/indexes/disk/search", &search(5, None))).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")), "{error}");

    // Refusals: a taken name, a bad name, a bad body, mixed documents, an unknown index.
    let refused: [(&str, &str, Value, StatusCode, &str); 6] = [
        ("PUT", "/v1/indexes/notes", create.clone(), StatusCode::BAD_REQUEST, "exists"),
        ("PUT", "/v1/indexes/bad.name", create.clone(), StatusCode::BAD_REQUEST, "index name"),
        ("PUT", "/v1/indexes/empty", json!({"docs": []}), StatusCode::BAD_REQUEST, "1 to 4096"),
        (
            "PUT",
            "/v1/indexes/mixed",
            json!({"docs": [doc(1), {"id": "t", "text": "words"}]}),
            StatusCode::BAD_REQUEST,
            "all of them or none",
        ),
        ("POST", "/v1/indexes/nope/search", search(1, None), StatusCode::NOT_FOUND, "no index \"nope\""),
        // Found by schemathesis: an empty first vector set the dimension to 0 (a division by zero).
        (
            "PUT",
            "/v1/indexes/zero",
            json!({"docs": [{"id": "a", "vectors": {"pooled": [], "tokens_b64": "AAAAAA=="}}]}),
            StatusCode::BAD_REQUEST,
            "the dimension is 1 to",
        ),
    ];
    for (method, path, body, expected, says) in refused {
        let (status, error) = call(&app, with_body(method, path, &body)).await;
        assert_eq!(status, expected, "{method} {path}: {error}");
        assert!(error["message"].as_str().unwrap_or_default().contains(says), "{method} {path}: {error}");
    }
    assert!(!data.join("mixed").exists() && !data.join("empty").exists(), "refused creations leave nothing");
    let (status, error) = call(&app, with_body("POST", "/v1/search", &search(1, None))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no --index: {error}");

    let (status, dropped) = call(&app, bare("DELETE", "/v1/indexes/notes")).await;
    assert_eq!((status, dropped), (StatusCode::OK, json!({"dropped": true, "index": "notes"})));
    let (status, _) = call(&app, with_body("POST", "/v1/indexes/notes/search", &search(3, None))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&app, bare("DELETE", "/v1/indexes/notes")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let leftovers: Vec<_> = std::fs::read_dir(&data).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(leftovers, [LOCK_FILE], "a dropped index leaves no file (the directory's lock stays)");
    // The name is free again, and an index of text is encoded by the model.
    let texts = json!({"docs": [{"id": "a", "text": "espresso is brewed from coffee beans"},
                                {"id": "b", "text": "glaciers carve valleys of ice"}]});
    let (status, created) = call(&app, with_body("PUT", "/v1/indexes/notes", &texts)).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let query = json!({"query": "coffee", "mode": "rerank", "k": 1});
    let (status, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search", &query)).await;
    assert_eq!((status, ids(&answer)), (StatusCode::OK, vec!["a".to_string()]), "{answer}");
}

#[tokio::test]
async fn a_server_without_a_data_directory_says_so() {
    let (_tmp, dir) = common::build_index();
    let index = Arc::new(Index::open(&dir, OpenOptions::default()).unwrap());
    let app = router(AppState::new(index, ServerConfig::new("127.0.0.1:0".parse().unwrap())));
    for (method, path) in
        [("GET", "/v1/indexes"), ("POST", "/v1/indexes/a/search"), ("DELETE", "/v1/indexes/a")]
    {
        let (status, error) = call(&app, with_body(method, path, &json!({"query": "x"}))).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}");
        assert!(error["message"].as_str().unwrap().contains("--data-dir"), "{error}");
    }
}

/// Issue 16.5: index names are never paths. Names made of traversal, separators, NUL, dots,
/// percent-escapes, unicode look-alikes and very long runs are refused with `InvalidInput`
/// before any file is touched, or are one plain directory right under the data directory.
#[test]
fn index_names_never_reach_outside_the_data_directory() {
    let tmp = tempfile::TempDir::new().unwrap();
    let data = tmp.path().join("data");
    let indexes = Indexes::open(&data, OpenOptions::default()).unwrap();
    let (mut refused, mut created) = (0, 0);
    let mut live = std::collections::HashSet::new();
    for name in generated_names(400, 16) {
        let valid = cellar_core::ids::check_name("index name", &name).is_ok();
        let exists = live.contains(&name);
        for outcome in [indexes.get(&name).map(|_| ()), indexes.drop_index(&name)] {
            match outcome {
                Ok(()) => assert!(exists, "{name:?} was never created"),
                Err(cellar_core::CellarError::InvalidInput(m)) => {
                    assert!(!valid && m.contains("index name"), "{name:?}: {m}")
                }
                Err(cellar_core::CellarError::NotFound(_)) => assert!(valid && !exists, "{name:?}"),
                other => panic!("{name:?}: {other:?}"),
            }
        }
        live.remove(&name);
        if valid && created < 8 {
            let doc = DocIn {
                id: "d".into(),
                vectors: Some(QueryVectorsIn { tokens: vec![axis(0)], ..Default::default() }),
                ..DocIn::default()
            };
            let request = cellar_server::registry::CreateIndex {
                docs: Some(vec![doc]),
                dim: None,
                codec: Some("f16".into()),
                ivf: false,
            };
            indexes.create(&name, request).unwrap();
            live.insert(name.clone());
            created += 1;
        } else if !valid {
            refused += 1;
        }
    }
    assert!(refused > 200 && created == 8, "{refused} refused, {created} created");
    let outside: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("data")], "nothing beside the data directory");
    for entry in std::fs::read_dir(&data).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        if name == LOCK_FILE {
            continue;
        }
        assert!(
            cellar_core::ids::check_name("index name", &name).is_ok()
                && entry.path().join("index.json").is_file(),
            "{name:?}"
        );
    }
}

/// A router over the data directory `data`, and the registry behind it.
fn data_dir_app(indexes: Indexes) -> (Router, Arc<Indexes>) {
    let indexes = Arc::new(indexes);
    let config = ServerConfig::new("127.0.0.1:0".parse().unwrap());
    (router(AppState::serving(None, Some(indexes.clone()), None, config)), indexes)
}

fn vector_doc(id: &str, i: usize, text: &str) -> DocIn {
    DocIn {
        id: id.into(),
        text: text.into(),
        vectors: Some(QueryVectorsIn { tokens: vec![axis(i)], ..Default::default() }),
        ..DocIn::default()
    }
}

/// Issue 43.1: a second owner of the data directory is refused, naming the first; a drop while
/// another opener (here through a descriptor of its own, as `cellar search` would) holds the
/// index is 409 `locked`, and the index and its acknowledged writes stay.
#[tokio::test]
async fn the_data_directory_has_one_owner_and_a_held_index_is_not_dropped() {
    let tmp = tempfile::TempDir::new().unwrap();
    let data = tmp.path().join("data");
    let (app, _indexes) = data_dir_app(Indexes::open(&data, OpenOptions::default()).unwrap());
    let second = Indexes::open(&data, OpenOptions::default()).map(|_| ()).unwrap_err();
    assert!(matches!(second, cellar_core::CellarError::Locked { .. }), "{second}");
    assert!(second.to_string().contains(&format!("held by pid {}", std::process::id())), "{second}");

    let create = json!({"docs": (0..6).map(doc).collect::<Vec<_>>(), "codec": "f16"});
    assert_eq!(call(&app, with_body("PUT", "/v1/indexes/notes", &create)).await.0, StatusCode::OK);
    let add = json!({"ops": [{"add": doc(40)}]});
    let (status, report) = call(&app, with_body("POST", "/v1/indexes/notes/docs", &add)).await;
    assert_eq!(status, StatusCode::OK, "{report}");

    let other = Index::open(&data.join("notes"), OpenOptions::default()).unwrap();
    let (status, error) = call(&app, bare("DELETE", "/v1/indexes/notes")).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::CONFLICT, Some("locked")), "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("another process holds the index"), "{message}");
    assert!(!message.contains(tmp.path().to_str().unwrap()), "no server path: {message}");
    let (status, stored) = call(&app, bare("GET", "/v1/indexes/notes/docs/n40")).await;
    assert_eq!(status, StatusCode::OK, "the acknowledged write stays: {stored}");
    let (status, facts) = call(&app, bare("GET", "/v1/indexes/notes")).await;
    assert_eq!((status, facts["docs"].as_u64()), (StatusCode::OK, Some(7)), "{facts}");

    drop(other);
    let (status, dropped) = call(&app, bare("DELETE", "/v1/indexes/notes")).await;
    assert_eq!(status, StatusCode::OK, "{dropped}");
    let (status, error) = call(&app, bare("GET", "/v1/indexes/notes")).await;
    assert_eq!(
        (status, error["message"].as_str()),
        (StatusCode::NOT_FOUND, Some("not found: no index \"notes\""))
    );
}

/// Issue 43.1: a server that has not written an index sees what another writer (here an
/// `Index` of this process, as `cellar add` would be) commits to it, at its next request:
/// added documents in search and by id, deleted ones gone, BM25 included.
#[tokio::test]
async fn a_server_that_has_not_written_follows_another_writer() {
    let tmp = tempfile::TempDir::new().unwrap();
    let data = tmp.path().join("data");
    let (app, _indexes) = data_dir_app(Indexes::open(&data, OpenOptions::default()).unwrap());
    let create = json!({"docs": (0..6).map(doc).collect::<Vec<_>>(), "codec": "f16"});
    assert_eq!(call(&app, with_body("PUT", "/v1/indexes/notes", &create)).await.0, StatusCode::OK);
    let (status, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search", &search(5, None))).await;
    assert_eq!((status, ids(&answer)[0].as_str()), (StatusCode::OK, "n5"), "{answer}");

    let writer = Index::open(&data.join("notes"), OpenOptions::default()).unwrap();
    let ops = vec![WriteOp::Add(vector_doc("w1", 6, "a zeppelin over the harbour"))];
    writer.write(WriteRequest { ops }).unwrap();
    let (status, stored) = call(&app, bare("GET", "/v1/indexes/notes/docs/w1")).await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    let bm25 = json!({"query": "zeppelin", "mode": "bm25", "k": 2});
    let (status, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search", &bm25)).await;
    assert_eq!((status, ids(&answer)), (StatusCode::OK, vec!["w1".to_string()]), "{answer}");
    let (_, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search", &search(6, None))).await;
    assert_eq!(ids(&answer)[0], "w1", "{answer}");

    // A second batch and a delete: the log grew since the last load.
    let ops = vec![WriteOp::Delete("n3".into()), WriteOp::Add(vector_doc("w2", 2, "a second zeppelin"))];
    writer.write(WriteRequest { ops }).unwrap();
    // ... and a flush: a new manifest, the log emptied.
    writer.flush().unwrap();
    let (status, _) = call(&app, bare("GET", "/v1/indexes/notes/docs/n3")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, facts) = call(&app, bare("GET", "/v1/indexes/notes")).await;
    assert_eq!((status, facts["docs"].as_u64()), (StatusCode::OK, Some(7)), "{facts}");
    let (_, answer) = call(&app, with_body("POST", "/v1/indexes/notes/search", &bm25)).await;
    let mut found = ids(&answer);
    found.sort();
    assert_eq!(found, ["w1", "w2"], "{answer}");
}

/// Issue 43.4: past `max_open` the least recently used indexes are closed (their descriptors
/// with them) and opened again on use with every acknowledged write; past `max_indexes` a PUT is
/// 409 `too_many_indexes`.
#[tokio::test]
async fn open_indexes_and_their_descriptors_stay_bounded() {
    const MANY: usize = 48;
    let tmp = tempfile::TempDir::new().unwrap();
    let data = tmp.path().join("data");
    let indexes =
        Indexes::open(&data, OpenOptions::default()).unwrap().with_max_open(4).with_max_indexes(MANY);
    let (app, indexes) = data_dir_app(indexes);
    let descriptors = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = descriptors();
    let create = json!({"docs": (0..2).map(doc).collect::<Vec<_>>(), "codec": "f16"});
    for i in 0..MANY {
        let (status, created) = call(&app, with_body("PUT", &format!("/v1/indexes/i{i}"), &create)).await;
        assert_eq!(status, StatusCode::OK, "PUT i{i}: {created}");
        let path = format!("/v1/indexes/i{i}/search");
        assert_eq!(call(&app, with_body("POST", &path, &search(1, None))).await.0, StatusCode::OK);
        if i == 0 {
            let add = json!({"ops": [{"add": doc(40)}]});
            assert_eq!(call(&app, with_body("POST", "/v1/indexes/i0/docs", &add)).await.0, StatusCode::OK);
        }
        assert!(indexes.open_count() <= 4, "{} open after {i}", indexes.open_count());
    }
    let grown = descriptors().saturating_sub(before);
    assert!(grown < MANY, "{grown} descriptors more after {MANY} indexes, 4 of them open");
    let (status, stored) = call(&app, bare("GET", "/v1/indexes/i0/docs/n40")).await;
    assert_eq!(status, StatusCode::OK, "closed and opened again, with its write: {stored}");

    let (status, error) = call(&app, with_body("PUT", "/v1/indexes/one-more", &create)).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::CONFLICT, Some("too_many_indexes")), "{error}");
    assert!(!data.join("one-more").exists());
    assert_eq!(call(&app, bare("DELETE", "/v1/indexes/i5")).await.0, StatusCode::OK);
    assert_eq!(call(&app, with_body("PUT", "/v1/indexes/one-more", &create)).await.0, StatusCode::OK);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Issue 43.4: text indexes of one model share one encoder (one copy of the model).
#[test]
fn text_indexes_of_one_model_share_one_encoder() {
    let (tmp, built) = common::build_index();
    let data = tmp.path().join("data");
    copy_dir(&built, &data.join("a"));
    copy_dir(&built, &data.join("b"));
    let indexes = Indexes::open(&data, OpenOptions::default()).unwrap();
    let (a, b) = (indexes.get("a").unwrap(), indexes.get("b").unwrap());
    assert!(!Arc::ptr_eq(&a, &b));
    assert!(Arc::ptr_eq(&a.encoder().unwrap(), &b.encoder().unwrap()), "one encoder for both");
}

/// Issue 43.6: creating an index of texts encodes them as a large write does: on the write lane,
/// so with one search worker the other indexes' searches are answered while it runs (it is still
/// unfinished when they are), and it is answered after them.
#[tokio::test]
async fn searches_are_answered_while_an_index_of_texts_is_created() {
    let tmp = tempfile::TempDir::new().unwrap();
    let indexes = Indexes::open(&tmp.path().join("data"), OpenOptions::default()).unwrap();
    let mut config = ServerConfig::with_workers("127.0.0.1:0".parse().unwrap(), 1);
    config.deadline = std::time::Duration::from_secs(300);
    let state = AppState::serving(None, Some(Arc::new(indexes)), None, config);
    let app = router(state.clone());
    let vectors = json!({"docs": (0..4).map(doc).collect::<Vec<_>>()});
    let (status, created) = call(&app, with_body("PUT", "/v1/indexes/vectors", &vectors)).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let n = 4 * cellar_search::live::write::ENCODE_CHUNK_DOCS;
    let texts: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("t{i}"), "text": format!("{} Note {i}.", common::DOCS[i % 6].1)}))
        .collect();
    let put = {
        let (app, body) = (app.clone(), json!({ "docs": texts }));
        tokio::spawn(async move { call(&app, with_body("PUT", "/v1/indexes/texts", &body)).await })
    };
    for _ in 0..2000 {
        if state.writes.busy() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(state.writes.busy(), 1, "the creation runs on the write lane");
    let (status, answer) =
        call(&app, with_body("POST", "/v1/indexes/vectors/search", &search(1, None))).await;
    assert_eq!((status, ids(&answer)[0].as_str()), (StatusCode::OK, "n1"), "{answer}");
    assert!(!put.is_finished(), "the search was answered while the index was created");
    let (status, created) = put.await.unwrap();
    assert_eq!((status, created["docs"].as_u64()), (StatusCode::OK, Some(n as u64)), "{created}");
}
