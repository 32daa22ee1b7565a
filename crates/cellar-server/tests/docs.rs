//! `/v1/docs` through the real router: writes are answered once searchable, every bad write is
//! a typed 4xx that changes nothing, and the server keeps serving.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use axum::Router;
use cellar_search::{Index, OpenOptions};
use cellar_server::{router, AppState, ServerConfig};
use serde_json::{json, Value};
use tower::ServiceExt;

mod common;

async fn call(app: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn post(path: &str, body: &str) -> Request<Body> {
    Request::post(path).header("content-type", "application/json").body(Body::from(body.to_string())).unwrap()
}

async fn top_ids(app: &Router, query: &str, mode: &str) -> Vec<String> {
    let body = json!({"query": query, "mode": mode, "k": 6}).to_string();
    let (status, value) = call(app, post("/v1/search", &body)).await;
    assert_eq!(status, StatusCode::OK, "{value}");
    value["hits"].as_array().unwrap().iter().map(|h| h["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn writes_are_searchable_when_answered_and_bad_writes_change_nothing() {
    let (_tmp, dir) = common::build_index();
    let index = Arc::new(Index::open(&dir, OpenOptions::default()).unwrap());
    let app = router(AppState::new(index.clone(), ServerConfig::new("127.0.0.1:0".parse().unwrap())));
    let harp = "The harp is a tall triangular frame whose strings a harpist plucks with the fingers.";
    let add = json!({"ops": [{"add": {"id": "harp", "text": harp}}]}).to_string();
    let (status, report) = call(&app, post("/v1/docs", &add)).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(
        (report["seq"].as_u64(), report["added"].as_u64(), report["docs"].as_u64()),
        (Some(1), Some(1), Some(7))
    );
    for mode in ["bm25", "rerank", "hybrid", "dense-exact", "dense"] {
        assert_eq!(
            top_ids(&app, "tall triangular harp plucked by a harpist", mode).await[0],
            "harp",
            "{mode}"
        );
    }

    let bad: [(&str, StatusCode, &str); 7] = [
        ("{\"ops\": []}", StatusCode::BAD_REQUEST, "ops must hold"),
        (
            "{\"ops\": [{\"add\": {\"id\": \"harp\", \"text\": \"again\"}}]}",
            StatusCode::BAD_REQUEST,
            "exists",
        ),
        (
            "{\"ops\": [{\"update\": {\"id\": \"nope\", \"text\": \"x\"}}]}",
            StatusCode::NOT_FOUND,
            "no document",
        ),
        (
            "{\"ops\": [{\"add\": {\"id\": \"x\", \"text\": \"y\", \"colour\": 1}}]}",
            StatusCode::BAD_REQUEST,
            "colour",
        ),
        (
            "{\"ops\": [{\"add\": {\"id\": \"x\", \"vectors\": {\"tokens\": [[0.5, 0.5]]}}}]}",
            StatusCode::UNPROCESSABLE_ENTITY,
            "dimension",
        ),
        ("{\"ops\": [{\"remove\": \"harp\"}]}", StatusCode::BAD_REQUEST, "remove"),
        ("{\"ops\": [", StatusCode::BAD_REQUEST, ""),
    ];
    for (body, expected, says) in bad {
        let (status, error) = call(&app, post("/v1/docs", body)).await;
        assert_eq!(status, expected, "{body}: {error}");
        assert!(error["message"].as_str().unwrap_or_default().contains(says), "{body}: {error}");
        assert!(error["code"].is_string(), "{body}: {error}");
    }
    assert_eq!(index.len(), 7, "no refused write changed anything");

    let update = json!({"ops": [{"update": {"id": "violin", "text": harp}}]}).to_string();
    let (status, report) = call(&app, post("/v1/docs", &update)).await;
    assert_eq!((status, report["updated"].as_u64()), (StatusCode::OK, Some(1)), "{report}");
    let delete = || Request::delete("/v1/docs/violin").body(Body::empty()).unwrap();
    let (status, report) = call(&app, delete()).await;
    assert_eq!(
        (status, report["deleted"].as_u64(), report["docs"].as_u64()),
        (StatusCode::OK, Some(1), Some(6))
    );
    let (status, error) = call(&app, delete()).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")), "{error}");
    for mode in ["bm25", "rerank", "dense-exact", "dense"] {
        let ids = top_ids(&app, "violin string instrument played with a bow", mode).await;
        assert!(!ids.contains(&"violin".to_string()), "{mode}: {ids:?}");
    }

    let read = |id: &str| Request::get(format!("/v1/docs/{id}")).body(Body::empty()).unwrap();
    let (status, stored) = call(&app, read("harp")).await;
    assert_eq!((status, stored["text"].as_str()), (StatusCode::OK, Some(harp)), "{stored}");
    assert!(stored["internal_id"].as_u64().unwrap() >= 6, "a written document's id follows the build's");
    let (status, error) = call(&app, read("violin")).await;
    assert_eq!(
        (status, error["code"].as_str(), error["details"]["id"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"), Some("violin")),
        "deleted (details.id tells a missing document from a missing index): {error}"
    );
    let (status, health) = call(&app, Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (health["docs"].as_u64(), health["live"]["written"].as_u64(), health["live"]["deleted"].as_u64()),
        (Some(6), Some(2), Some(2)),
        "{health}"
    );

    let (status, doc) = call(&app, Request::get("/openapi.json").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        doc["paths"]["/v1/docs"]["post"].is_object() && doc["paths"]["/v1/docs/{id}"]["delete"].is_object()
    );
    // Issue 43.2/43.3: a full disk is a 507 of the write routes, nothing of the batch written.
    let full = &doc["paths"]["/v1/docs"]["post"]["responses"]["507"]["description"];
    assert!(full.as_str().is_some_and(|d| d.contains("nothing of the batch was written")), "{full}");
}

#[tokio::test]
async fn searches_and_deletes_filter_on_metadata_written_over_http() {
    let (_tmp, dir) = common::build_index();
    let index = Arc::new(Index::open(&dir, OpenOptions::default()).unwrap());
    let app = router(AppState::new(index.clone(), ServerConfig::new("127.0.0.1:0".parse().unwrap())));
    let docs: Vec<Value> = (0..6)
        .map(|i| {
            let lang = if i % 2 == 0 { "en" } else { "fr" };
            json!({"add": {"id": format!("m{i}"), "text": format!("string instrument number {i}"),
                           "metadata": {"lang": lang, "year": 2000 + i, "tags": ["music"]}}})
        })
        .collect();
    let (status, report) = call(&app, post("/v1/docs", &json!({ "ops": docs }).to_string())).await;
    assert_eq!((status, report["added"].as_u64()), (StatusCode::OK, Some(6)), "{report}");

    let filter =
        json!({"and": [{"eq": {"field": "lang", "value": "en"}}, {"range": {"field": "year", "gte": 2002}}]});
    for mode in ["bm25", "rerank", "hybrid", "dense", "dense-exact"] {
        for exact_max in [0, 1024] {
            let body = json!({"query": "string instrument", "mode": mode, "k": 10, "filter": filter,
                              "filter_exact_max": exact_max});
            let (status, answer) = call(&app, post("/v1/search", &body.to_string())).await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            let mut ids: Vec<&str> =
                answer["hits"].as_array().unwrap().iter().map(|h| h["id"].as_str().unwrap()).collect();
            ids.sort();
            assert_eq!(ids, ["m2", "m4"], "{mode} exact_max {exact_max}: {answer}");
            assert_eq!(answer["filter"]["matched"].as_u64(), Some(2), "{answer}");
            assert_eq!(answer["hits"][0]["metadata"]["tags"], json!(["music"]), "{answer}");
        }
    }
    let bad = json!({"query": "string", "filter": {"range": {"field": "year", "gt": "x"}}});
    let (status, error) = call(&app, post("/v1/search", &bad.to_string())).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_input")), "{error}");
    assert!(error["message"].as_str().unwrap().contains("range bounds are numbers"), "{error}");
    let bad = json!({"query": "string", "filter": {"like": {"field": "year"}}});
    let (status, error) = call(&app, post("/v1/search", &bad.to_string())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(error["message"].as_str().unwrap().contains("filter"), "{error}");

    let delete = json!({"ops": [{"delete_where": {"eq": {"field": "lang", "value": "fr"}}}]});
    let (status, report) = call(&app, post("/v1/docs", &delete.to_string())).await;
    assert_eq!((status, report["deleted"].as_u64()), (StatusCode::OK, Some(3)), "{report}");
    let (status, stored) = call(&app, Request::get("/v1/docs/m4").body(Body::empty()).unwrap()).await;
    assert_eq!((status, stored["metadata"]["year"].as_i64()), (StatusCode::OK, Some(2004)), "{stored}");
    let (status, _) = call(&app, Request::get("/v1/docs/m1").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "deleted by its filter");
    assert_eq!(index.len(), 6 + 3);
}

/// A write adding `n` documents of short text, ids `{prefix}{i}`.
fn text_write(prefix: &str, n: usize) -> String {
    let ops: Vec<Value> = (0..n)
        .map(|i| {
            let (_, text) = common::DOCS[i % common::DOCS.len()];
            json!({"add": {"id": format!("{prefix}{i}"), "text": format!("{text} Note {i}.")}})
        })
        .collect();
    json!({ "ops": ops }).to_string()
}

/// Polls (at most 10 s) until the write lane runs `busy` writes and holds none queued.
async fn wait_for_write_lane(state: &AppState, busy: usize) {
    for _ in 0..2000 {
        if state.writes.busy() == busy && state.writes.queue_depth() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the write lane runs {} writes, not {busy}", state.writes.busy());
}

/// Issue 43.6: a 4,096-document text write held a search worker for 110 s, and every search
/// answered 504 meanwhile. A write that encodes text runs on the write lane: with one search
/// worker, searches are answered while a large text write runs (it is still unfinished when they
/// are), and the write is answered in full after them.
#[tokio::test]
async fn searches_are_answered_while_a_large_text_write_runs() {
    let (_tmp, dir) = common::build_index();
    let index = Arc::new(Index::open(&dir, OpenOptions::default()).unwrap());
    let mut config = ServerConfig::with_workers("127.0.0.1:0".parse().unwrap(), 1);
    config.deadline = Duration::from_secs(300);
    let state = AppState::new(index.clone(), config);
    let app = router(state.clone());
    let n = 4 * cellar_search::live::write::ENCODE_CHUNK_DOCS;
    let write = {
        let (app, body) = (app.clone(), text_write("w", n));
        tokio::spawn(async move { call(&app, post("/v1/docs", &body)).await })
    };
    wait_for_write_lane(&state, 1).await;
    for (query, want) in [("espresso coffee beans", "espresso"), ("volcano magma", "lava")] {
        assert_eq!(top_ids(&app, query, "bm25").await[0], want);
    }
    assert!(!write.is_finished(), "the searches were answered while the write ran");
    let (status, report) = write.await.unwrap();
    assert_eq!((status, report["added"].as_u64()), (StatusCode::OK, Some(n as u64)), "{report}");
    assert_eq!(index.len(), 6 + n);
}

/// Issue 43.6: the 4,096-document write was answered 504 at its deadline but ran on for 100 s
/// more. A text write that cannot be encoded by its deadline stops before anything is logged:
/// as soon as its first chunk shows it (413 naming the deadline and what would fit) or at the
/// deadline (504). Its lane is free again soon after, and none of its documents is stored.
#[tokio::test]
async fn a_text_write_that_cannot_finish_by_its_deadline_is_stopped_before_it_is_logged() {
    let (_tmp, dir) = common::build_index();
    let index = Arc::new(Index::open(&dir, OpenOptions::default()).unwrap());
    index.encoder().unwrap(); // loaded now, not within the write's deadline
    let mut config = ServerConfig::with_workers("127.0.0.1:0".parse().unwrap(), 1);
    config.deadline = Duration::from_millis(1000);
    let state = AppState::new(index.clone(), config);
    let app = router(state.clone());
    let n = 64 * cellar_search::live::write::ENCODE_CHUNK_DOCS;
    let (status, error) = call(&app, post("/v1/docs", &text_write("slow", n))).await;
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            assert_eq!(error["code"], "write_too_large", "{error}");
            let message = error["message"].as_str().unwrap();
            assert!(message.contains("1000 ms") && message.contains("nothing was written"), "{message}");
            assert_eq!(error["details"]["docs"].as_u64(), Some(n as u64), "{error}");
        }
        // A machine so slow that its first chunk took the whole deadline.
        StatusCode::GATEWAY_TIMEOUT => assert_eq!(error["code"], "deadline_exceeded", "{error}"),
        other => panic!("{other}: {error}"),
    }
    wait_for_write_lane(&state, 0).await;
    assert_eq!(index.len(), 6, "nothing of the stopped write is stored");
    let (status, _) = call(&app, Request::get("/v1/docs/slow0").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(index.live_stats().written, 0, "nothing was logged");
}
