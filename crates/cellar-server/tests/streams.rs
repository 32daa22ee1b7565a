//! The streaming endpoints driven in-process through the real router: writes, reads, deletes,
//! feeds, exact per-group search (caller vectors and server-side encoding), every bad input's
//! 4xx, a server without an index, and the OpenAPI entries.

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use axum::Router;
use cellar_server::streams::StreamsState;
use cellar_server::{router, AppState, ServerConfig};
use cellar_stream::encoding::LazyEncoder;
use cellar_stream::{Durability, Options, Streams};
use serde_json::{json, Value};
use tower::ServiceExt;

fn app(root: &std::path::Path) -> Router {
    let options = Options { durability: Durability::None, ..Options::default() };
    let streams =
        StreamsState { streams: Streams::open(root, options).unwrap(), encoder: LazyEncoder::new(None) };
    router(AppState::with_streams(None, Some(streams), ServerConfig::new("127.0.0.1:0".parse().unwrap())))
}

async fn call(app: &Router, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let builder = Request::builder().method(method).uri(path).header("content-type", "application/json");
    let request = builder.body(body.map_or_else(Body::empty, |b| Body::from(b.to_string()))).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// A 4-dimensional document whose first token points along axis `axis`.
fn doc(text: &str, axis: usize, kind: &str) -> Value {
    let mut row = vec![0.0f32; 4];
    row[axis] = 1.0;
    json!({ "text": text, "tokens": [row, [0.5, 0.5, 0.5, 0.5]], "metadata": { "kind": kind } })
}

fn ids(response: &Value) -> Vec<&str> {
    response["hits"].as_array().unwrap().iter().map(|h| h["id"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn documents_are_written_read_searched_and_deleted_per_group() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path());
    let base = "/v1/streams/mail/groups";
    for (g, id, axis, kind) in
        [("alice", "a1", 0, "note"), ("alice", "a2", 1, "mail"), ("bob", "b1", 0, "mail")]
    {
        let (status, body) =
            call(&app, "PUT", &format!("{base}/{g}/docs/{id}"), Some(doc(&format!("{id} text"), axis, kind)))
                .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, got) = call(&app, "GET", &format!("{base}/alice/docs/a2"), None).await;
    assert_eq!(
        (status, got["text"].as_str(), got["metadata"]["kind"].as_str()),
        (StatusCode::OK, Some("a2 text"), Some("mail"))
    );
    let query = json!({ "query_tokens": [[1.0, 0.0, 0.0, 0.0]], "k": 10 });
    let (status, found) = call(&app, "POST", &format!("{base}/alice/search"), Some(query.clone())).await;
    assert_eq!(status, StatusCode::OK, "{found}");
    assert_eq!(ids(&found), ["a1", "a2"], "only alice's documents, best first");
    assert_eq!(found["stats"]["docs_scanned"], 2);
    let filtered = json!({ "query_tokens": [[1.0, 0.0, 0.0, 0.0]], "filters": { "kind": "mail" } });
    assert_eq!(ids(&call(&app, "POST", &format!("{base}/alice/search"), Some(filtered)).await.1), ["a2"]);
    let terms = json!({ "query_tokens": [[1.0, 0.0, 0.0, 0.0]], "require_terms": "A1 TEXT" });
    assert_eq!(ids(&call(&app, "POST", &format!("{base}/alice/search"), Some(terms)).await.1), ["a1"]);
    let (status, _) = call(&app, "DELETE", &format!("{base}/alice/docs/a1"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&call(&app, "POST", &format!("{base}/alice/search"), Some(query)).await.1), ["a2"]);
    let feed = json!({ "docs": [
        { "group": "carol", "id": "c1", "text": "x", "tokens": [[0.0, 0.0, 1.0, 0.0]] },
        { "group": "carol", "id": "c2", "text": "y", "tokens": [[0.0, 0.0, 0.0, 1.0]] },
    ]});
    let (status, fed) = call(&app, "POST", "/v1/streams/mail/feed", Some(feed)).await;
    assert_eq!((status, fed["written"].as_u64()), (StatusCode::OK, Some(2)));
    let (status, stats) = call(&app, "GET", "/v1/streams/mail", None).await;
    assert_eq!(
        (status, stats["dim"].as_u64(), stats["memtable_entries"].as_u64()),
        (StatusCode::OK, Some(4), Some(5))
    );
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path());
    let base = "/v1/streams/s/groups";
    call(&app, "PUT", &format!("{base}/g/docs/d"), Some(doc("t", 0, "k"))).await;
    let q = json!({ "query_tokens": [[1.0, 0.0, 0.0, 0.0]] });
    let cases: Vec<(&str, String, Option<Value>, StatusCode, &str)> = vec![
        ("GET", format!("{base}/g/docs/nope"), None, StatusCode::NOT_FOUND, "not_found"),
        ("DELETE", format!("{base}/g/docs/nope"), None, StatusCode::NOT_FOUND, "not_found"),
        ("POST", format!("{base}/nobody/search"), Some(q.clone()), StatusCode::NOT_FOUND, "not_found"),
        (
            "POST",
            "/v1/streams/other/groups/g/search".into(),
            Some(q.clone()),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        ("GET", "/v1/streams/bad%20name".into(), None, StatusCode::BAD_REQUEST, "invalid_input"),
        (
            "PUT",
            format!("{base}/g/docs/d"),
            Some(json!({ "text": "t", "tokens": [[1.0, 2.0]] })),
            StatusCode::UNPROCESSABLE_ENTITY,
            "wrong_dimension",
        ),
        (
            "POST",
            format!("{base}/g/search"),
            Some(json!({ "query_tokens": [[1.0]] })),
            StatusCode::UNPROCESSABLE_ENTITY,
            "wrong_dimension",
        ),
        (
            "PUT",
            format!("{base}/g/docs/d"),
            Some(json!({ "text": "t", "tokens": [[1.0, 0.0, 0.0, 0.0]], "group": "h" })),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "PUT",
            format!("{base}/g/docs/d"),
            Some(json!({ "text": "t", "tokenz": [] })),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "PUT",
            format!("{base}/g/docs/d"),
            Some(json!({ "text": "t", "tokens": [[1.0, 0.0, 0.0, 0.0]], "metadata": { "a": [1] } })),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "PUT",
            format!("{base}/g/docs/d"),
            Some(json!({ "text": "x".repeat(1_100_000), "tokens": [[1.0, 0.0, 0.0, 0.0]] })),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "PUT",
            format!("{base}/g/docs/d"),
            Some(json!({ "text": "x".repeat(3_000_000), "tokens": [[1.0, 0.0, 0.0, 0.0]] })),
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
        ),
        (
            "POST",
            "/v1/streams/s/feed".into(),
            Some(json!({ "docs": [{ "id": "x", "text": "t", "tokens": [[1.0, 0.0, 0.0, 0.0]] }] })),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "POST",
            "/v1/streams/s/feed".into(),
            Some(json!({ "docs": [] })),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "POST",
            format!("{base}/g/search"),
            Some(json!({ "query_tokens": [[1.0, 0.0, 0.0, 0.0]], "k": 0 })),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "POST",
            format!("{base}/g/search"),
            Some(json!({ "query_tokens": [[1.0, 0.0, 0.0, 0.0]], "mode": "fuzzy" })),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        ("POST", "/v1/search".into(), Some(json!({ "query": "x" })), StatusCode::NOT_FOUND, "not_found"),
    ];
    for (method, path, body, status, code) in cases {
        let (got, value) = call(&app, method, &path, body).await;
        assert_eq!((got, value["code"].as_str()), (status, Some(code)), "{method} {path}: {value}");
        assert!(!value["message"].as_str().unwrap().is_empty());
    }
    let (status, health) = call(&app, "GET", "/healthz", None).await;
    assert_eq!((status, health["docs"].is_null()), (StatusCode::OK, true), "{health}");
}

#[tokio::test]
async fn text_is_encoded_by_the_model_when_no_vectors_are_sent() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path());
    let docs = [
        ("n1", "My sourdough starter needs flour and water every day"),
        ("n2", "The quarterly tax return is due in April"),
        ("n3", "Volcanoes erupt lava and ash"),
    ];
    let feed: Vec<Value> =
        docs.iter().map(|(id, text)| json!({ "group": "u", "id": id, "text": text })).collect();
    let (status, body) = call(&app, "POST", "/v1/streams/notes/feed", Some(json!({ "docs": feed }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, stats) = call(&app, "GET", "/v1/streams/notes", None).await;
    assert_eq!(stats["dim"], 384, "created with the encoder's dimension");
    let (status, found) =
        call(&app, "POST", "/v1/streams/notes/groups/u/search", Some(json!({ "query": "baking bread" })))
            .await;
    assert_eq!(status, StatusCode::OK, "{found}");
    assert_eq!(ids(&found)[0], "n1");
    let pooled = json!({ "query": "paying taxes", "mode": "pooled", "k": 1 });
    assert_eq!(ids(&call(&app, "POST", "/v1/streams/notes/groups/u/search", Some(pooled)).await.1), ["n2"]);
}

#[tokio::test]
async fn openapi_lists_the_stream_routes() {
    let dir = tempfile::tempdir().unwrap();
    let (_, doc) = call(&app(dir.path()), "GET", "/openapi.json", None).await;
    let paths = &doc["paths"];
    for (path, method) in [
        ("/v1/streams/{name}", "get"),
        ("/v1/streams/{name}/feed", "post"),
        ("/v1/streams/{name}/groups/{group}/docs/{id}", "put"),
        ("/v1/streams/{name}/groups/{group}/docs/{id}", "get"),
        ("/v1/streams/{name}/groups/{group}/docs/{id}", "delete"),
        ("/v1/streams/{name}/groups/{group}/search", "post"),
    ] {
        assert!(paths[path][method].is_object(), "{method} {path} is not documented");
    }
}

#[tokio::test]
async fn a_rejected_first_write_creates_no_stream() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path());
    let doc_path = "/v1/streams/fresh/groups/g/docs/d";
    // Dimension 3 with a value f16 cannot hold: refused before anything is created.
    let bad = json!({ "text": "t", "tokens": [[1.0, 1e39, 0.0]] });
    let (status, body) = call(&app, "PUT", doc_path, Some(bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = call(&app, "GET", "/v1/streams/fresh", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(!dir.path().join("fresh").exists(), "a rejected write left a directory behind");
    // A value f16 would store as infinity (its maximum is 65504), in the second document.
    let docs = json!([
        { "group": "g", "id": "x", "text": "t", "tokens": [[1.0, 0.0]] },
        { "group": "g", "id": "y", "text": "t", "tokens": [[1e6, 0.0]] },
    ]);
    let (status, body) = call(&app, "POST", "/v1/streams/fresh/feed", Some(json!({ "docs": docs }))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("f16"), "{body}");
    assert!(!dir.path().join("fresh").exists());
    // The name is still free for any dimension.
    let (status, body) = call(&app, "PUT", doc_path, Some(doc("t", 1, "k"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, stats) = call(&app, "GET", "/v1/streams/fresh", None).await;
    assert_eq!(stats["dim"], 4, "{stats}");
}

#[tokio::test]
async fn a_stream_is_deleted_whole_and_its_name_can_be_reused() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path());
    for id in ["a", "b"] {
        let (status, _) =
            call(&app, "PUT", &format!("/v1/streams/s/groups/g/docs/{id}"), Some(doc(id, 0, "k"))).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, body) = call(&app, "DELETE", "/v1/streams/s", None).await;
    assert_eq!((status, &body), (StatusCode::OK, &json!({ "deleted": true, "stream": "s" })));
    for path in ["/v1/streams/s", "/v1/streams/s/groups/g/docs/a"] {
        let (status, body) = call(&app, "GET", path, None).await;
        assert_eq!((status, body["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")), "{path}");
    }
    let (status, _) = call(&app, "DELETE", "/v1/streams/s", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&app, "DELETE", "/v1/streams/bad%20name", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(names.is_empty(), "left behind: {names:?}");
    // Recreated with another dimension: nothing of the old stream is there.
    let two = json!({ "text": "t", "tokens": [[1.0, 0.0]] });
    let (status, _) = call(&app, "PUT", "/v1/streams/s/groups/g/docs/c", Some(two)).await;
    assert_eq!(status, StatusCode::OK);
    let (_, stats) = call(&app, "GET", "/v1/streams/s", None).await;
    assert_eq!((stats["dim"].as_u64(), stats["memtable_entries"].as_u64()), (Some(2), Some(1)), "{stats}");
}

#[tokio::test]
async fn healthz_names_no_path() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path());
    let (status, health) = call(&app, "GET", "/healthz", None).await;
    assert_eq!((status, health["streams"].as_bool()), (StatusCode::OK, Some(true)), "{health}");
    let root = dir.path().to_string_lossy().into_owned();
    assert!(!health.to_string().contains(&root), "{health}");
}

/// Issue 46: a stream takes the one model: documents as `DocIn` (with `vectors` and lists of
/// strings), searches as `SearchRequest` (`query_vectors`, modes dense and dense-exact, the
/// whole filter grammar); the first API's shapes still answer the same.
#[tokio::test]
async fn the_one_document_and_request_model_reaches_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path());
    let docs: Vec<Value> = (0..6)
        .map(|i| {
            let mut row = vec![0.0f32; 4];
            row[i % 4] = 1.0;
            let tags = if i % 2 == 0 { json!(["even", "small"]) } else { json!(["odd"]) };
            json!({ "group": "g", "id": format!("d{i}"), "text": format!("doc {i}"),
                    "metadata": { "n": i, "tags": tags }, "vectors": { "tokens": [row] } })
        })
        .collect();
    let (status, body) = call(&app, "POST", "/v1/streams/s/feed", Some(json!({ "docs": docs }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let search = |body: Value| {
        let app = app.clone();
        async move { call(&app, "POST", "/v1/streams/s/groups/g/search", Some(body)).await }
    };
    let q = json!({ "tokens": [[1.0, 0.0, 0.0, 0.0]] });
    let (status, found) = search(json!({ "query_vectors": q, "k": 3 })).await;
    assert_eq!(status, StatusCode::OK, "{found}");
    assert_eq!(ids(&found)[..2], ["d0", "d4"]);
    let grammar = json!({ "and": [{ "tags": "even" }, { "range": { "field": "n", "gt": 0 } }] });
    let (_, found) = search(json!({ "query_vectors": q, "k": 10, "filter": grammar })).await;
    let mut got = ids(&found);
    got.sort();
    assert_eq!(got, ["d2", "d4"]);
    let (_, pooled) =
        search(json!({ "query_vectors": { "pooled": [0.0, 1.0, 0.0, 0.0] }, "mode": "dense-exact", "k": 2 }))
            .await;
    assert_eq!(ids(&pooled)[0], "d1");
    // The first API's body states the same search.
    let (_, old) = search(json!({ "query_tokens": [[1.0, 0.0, 0.0, 0.0]], "k": 3, "mode": "maxsim" })).await;
    assert_eq!(ids(&old), ids(&search(json!({ "query_vectors": q, "k": 3 })).await.1));
    for (body, says) in [
        (json!({ "query_vectors": q, "nprobe": 4 }), "nprobe"),
        (json!({ "query_vectors": q, "mode": "hybrid" }), "dense-exact"),
        (json!({ "query_vectors": q, "filter": { "range": { "field": "n" } } }), "range"),
        (
            json!({ "query_tokens": [[1.0, 0.0, 0.0, 0.0]], "filters": { "n": 1 }, "filter": { "n": 1 } }),
            "not both",
        ),
    ] {
        let (status, error) = search(body.clone()).await;
        assert_eq!(status.as_u16() / 100, 4, "{body}: {error}");
        assert!(error["message"].as_str().unwrap().contains(says), "{body}: {error}");
    }
    let (status, error) = call(
        &app,
        "PUT",
        "/v1/streams/s/groups/g/docs/t",
        Some(json!({ "title": "T", "text": "x", "vectors": { "tokens": [[1.0, 0.0, 0.0, 0.0]] } })),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(error["message"].as_str().unwrap().contains("title"), "{error}");
}
