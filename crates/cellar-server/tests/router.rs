//! The real router, driven in-process: every bad input is a typed 4xx and the server keeps
//! serving; overload is 429, a passed deadline 504; keys, metrics and OpenAPI behave. What only
//! a real socket shows (bodies refused unread, slow clients, the connection limit) is in
//! `sockets.rs`; the bounds on what a request may cost are in `bounds.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cellar_core::io::ReaderKind;
use cellar_search::{Index, Mode, OpenOptions};
use cellar_server::pool::Job;
use cellar_server::{router, AppState};
use serde_json::{json, Value};

mod common;

use common::http::{app_with, block_worker, call, post, search, wait_for_queue_depth};
use common::{config, index};

fn hit_ids(response: &Value) -> Vec<String> {
    response["hits"].as_array().unwrap().iter().map(|h| h["id"].as_str().unwrap().to_string()).collect()
}

/// Query vectors as the encoder gives them, in the request's JSON shape.
fn encoded(text: &str) -> Value {
    let encoded = index().encoder().unwrap().encode_query(text).unwrap();
    let dim = encoded.tokens.len() / encoded.n_tokens;
    let rows: Vec<&[f32]> = encoded.tokens.chunks(dim).collect();
    json!({ "tokens": rows, "pooled": encoded.pooled })
}

#[tokio::test]
async fn every_bad_input_is_a_typed_4xx_and_the_server_keeps_serving() {
    let mut small = config();
    small.max_body_bytes = 64 * 1024;
    let (_, app) = app_with(small);
    let dim = index().config().encoder.model_dim;
    let short_row = json!({ "tokens": [vec![0.1f32; dim - 1]] });
    // The same mistake in the compact form: a row of dim - 1 f32 values, base64.
    let short_b64 = cellar_search::QueryVectorsIn::compact(&vec![0.1f32; dim - 1], None, Default::default());
    let huge = format!("{{\"query\": \"{}\"}}", "a".repeat(100 * 1024));
    let cases: Vec<(&str, String, StatusCode, &str)> = vec![
        ("malformed JSON", "{\"query\": \"coffee\"".into(), StatusCode::BAD_REQUEST, "malformed_json"),
        ("NaN literal", "{\"query\": NaN}".into(), StatusCode::BAD_REQUEST, "malformed_json"),
        ("not an object", "[1, 2]".into(), StatusCode::BAD_REQUEST, "invalid_request"),
        (
            "unknown field",
            json!({"query": "coffee", "top_k": 3}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "negative k",
            json!({"query": "coffee", "k": -1}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        ("empty query", json!({"query": "   "}).to_string(), StatusCode::BAD_REQUEST, "invalid_input"),
        ("no query", json!({"k": 3}).to_string(), StatusCode::BAD_REQUEST, "invalid_input"),
        ("k = 0", json!({"query": "coffee", "k": 0}).to_string(), StatusCode::BAD_REQUEST, "invalid_input"),
        (
            "huge k",
            json!({"query": "coffee", "k": 1_000_000}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "unknown mode",
            json!({"query": "coffee", "mode": "magic"}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "alpha > 1",
            json!({"query": "coffee", "alpha": 1.5}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "query too long",
            json!({"query": "word ".repeat(2000)}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "wrong dimension",
            json!({"query": "coffee", "query_vectors": short_row}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "wrong_dimension",
        ),
        (
            "wrong dimension in tokens_b64",
            json!({"query": "coffee", "query_vectors": short_b64}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "wrong_dimension",
        ),
        (
            "no vectors",
            json!({"query": "coffee", "query_vectors": {"tokens": []}}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "infinite value",
            format!(
                "{{\"query\": \"coffee\", \"query_vectors\": {{\"tokens\": [[{}1e39]]}}}}",
                "0.1,".repeat(dim - 1)
            ),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "dense with a pooled vector but no token vectors",
            json!({"query": "coffee", "mode": "dense", "query_vectors": {"pooled": vec![0.1f32; dim]}})
                .to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "nprobe 0",
            json!({"query": "coffee", "mode": "dense", "nprobe": 0}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "nprobe above the cluster count",
            json!({"query": "coffee", "mode": "ivf", "nprobe": 2}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "prefetch step 0",
            json!({"query": "coffee", "mode": "dense", "prefetch_step": 0.0}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        (
            "prefetch step above 1",
            json!({"query": "coffee", "mode": "hybrid", "prefetch_step": 1.5}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_input",
        ),
        ("oversized body", huge, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
    ];
    for (name, body, status, code) in cases {
        let (got, value, _) = call(&app, post("/v1/search", body)).await;
        assert_eq!(got, status, "{name}: {value}");
        assert_eq!(value["code"], code, "{name}: {value}");
        assert!(value["message"].as_str().is_some_and(|m| !m.is_empty()), "{name}: {value}");
        assert!(value["details"].is_object(), "{name}: {value}");
        let (ok, answer) = search(&app, json!({"query": "espresso coffee", "k": 2})).await;
        assert_eq!(ok, StatusCode::OK, "after {name}: {answer}");
        assert_eq!(hit_ids(&answer)[0], "espresso");
    }
    let form =
        Request::post("/v1/search").header("content-type", "text/plain").body(Body::from("coffee")).unwrap();
    let (status, value, _) = call(&app, form).await;
    assert_eq!(
        (status, value["code"].as_str()),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, Some("unsupported_media_type"))
    );
    let (status, value, _) = call(&app, Request::get("/v1/nothing").body(Body::empty()).unwrap()).await;
    assert_eq!((status, value["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
    let (status, value, _) = call(&app, Request::get("/v1/search").body(Body::empty()).unwrap()).await;
    assert_eq!(
        (status, value["code"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed"))
    );
}

/// Every score of an answer is a number: `score` and `first_stage_score` always, `maxsim` for
/// re-ranked hits.
fn assert_scores_are_numbers(answer: &Value, context: &str) {
    for hit in answer["hits"].as_array().unwrap_or_else(|| panic!("{context}: {answer}")) {
        assert!(hit["score"].is_number() && hit["first_stage_score"].is_number(), "{context}: {hit}");
        if hit["stage"] == "reranked" {
            assert!(hit["maxsim"].is_number(), "{context}: {hit}");
        }
    }
}

#[tokio::test]
async fn extreme_finite_query_vectors_are_refused_naming_the_field_and_no_score_is_ever_null() {
    let (_, app) = app_with(config());
    let dim = index().config().encoder.model_dim;
    let row = |v: f32| vec![v; dim];
    let modes = [
        ("hybrid", "z"),
        ("hybrid", "z_peak"),
        ("hybrid", "rrf"),
        ("dense", "z"),
        ("rerank", "z"),
        ("ivf", "z"),
    ];
    for (mode, fusion) in modes {
        let base = |tokens: Vec<Vec<f32>>, pooled: Vec<f32>| {
            let mut body = json!({"query": "coffee", "k": 6, "mode": mode, "nprobe": 1,
                                  "query_vectors": {"tokens": tokens, "pooled": pooled}});
            if mode == "hybrid" {
                body["fusion"] = json!(fusion);
            }
            body
        };
        // Finite values whose squared norm overflows f32: refused like NaN, naming the vector.
        for (tokens, pooled, field) in [
            (vec![row(0.01), row(1e38)], row(0.01), "query_vectors.tokens[1]"),
            (vec![row(0.01)], row(-1e38), "query_vectors.pooled"),
        ] {
            let (status, value) = search(&app, base(tokens, pooled)).await;
            assert_eq!(
                (status, value["code"].as_str()),
                (StatusCode::BAD_REQUEST, Some("invalid_input")),
                "{mode}: {value}"
            );
            assert!(value["message"].as_str().unwrap().contains(field), "{mode} {fusion}: {value}");
        }
        // Large vectors whose squared norm is finite: every score is a number.
        for scale in [1.0f32, 1e15, 1e17] {
            let tokens = vec![row(scale), row(-scale), row(0.0)];
            let (status, answer) = search(&app, base(tokens, row(scale))).await;
            assert_eq!(status, StatusCode::OK, "{mode} {fusion} x{scale}: {answer}");
            assert_scores_are_numbers(&answer, &format!("{mode} {fusion} x{scale}"));
        }
    }
}

#[tokio::test]
async fn every_mode_answers_and_supplied_vectors_rank_like_the_text() {
    let (_, app) = app_with(config());
    for mode in Mode::ALL.map(Mode::name) {
        let query = "which instrument is played with a bow";
        let (status, by_text) = search(&app, json!({"query": query, "k": 3, "mode": mode})).await;
        assert_eq!(status, StatusCode::OK, "{mode}: {by_text}");
        assert_eq!(hit_ids(&by_text)[0], "violin", "{mode}");
        assert!(by_text["hits"][0]["text"].as_str().unwrap().contains("violin"));
        let body = json!({"query": query, "k": 3, "mode": mode, "query_vectors": encoded(query), "include_text": false});
        let (status, by_vectors) = search(&app, body).await;
        assert_eq!(status, StatusCode::OK, "{mode}: {by_vectors}");
        assert_eq!(hit_ids(&by_vectors), hit_ids(&by_text), "{mode}");
        assert_eq!(by_vectors["hits"][0]["text"], "", "include_text false leaves the text out");
        assert_eq!(by_vectors["timings"]["encode_ms"], 0.0, "supplied vectors are not encoded");
    }
    let body = json!({"query": "", "mode": "dense", "k": 1, "query_vectors": encoded("ice carving valleys")});
    let (status, dense) = search(&app, body).await;
    assert_eq!((status, hit_ids(&dense)), (StatusCode::OK, vec!["glacier".to_string()]));
    let body = json!({"query": "ice carving valleys", "mode": "dense", "k": 2, "nprobe": 1, "prefetch": true, "prefetch_step": 0.5, "rerank_k": 3});
    let (status, prefetched) = search(&app, body).await;
    assert_eq!(status, StatusCode::OK, "{prefetched}");
    assert_eq!(prefetched["ivf"]["clusters"], 1);
    assert_eq!(prefetched["prefetch"]["needed"], 3, "{prefetched}");
    assert_eq!(prefetched["params"]["ivf"]["prefetch_step"], 0.5);
}

#[tokio::test]
async fn a_batch_answers_each_query_on_its_own() {
    let (_, app) = app_with(config());
    let body = json!({"queries": [
        {"query": "lava and magma", "k": 1},
        {"query": "", "k": 1},
        {"query": "baking bread with yeast", "k": 1, "mode": "bm25"},
    ]});
    let (status, value, _) = call(&app, post("/v1/search/batch", body.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{value}");
    let results = value["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(hit_ids(&results[0]), vec!["lava"]);
    assert_eq!(results[1]["error"]["code"], "invalid_input");
    assert_eq!(hit_ids(&results[2]), vec!["bread"]);
    let too_many = json!({"queries": vec![json!({"query": "x"}); 65]});
    for body in [json!({"queries": []}), too_many] {
        let (status, value, _) = call(&app, post("/v1/search/batch", body.to_string())).await;
        assert_eq!((status, value["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_request")));
    }
}

#[tokio::test]
async fn concurrent_requests_get_the_same_answers_as_sequential_ones() {
    let mut roomy = config();
    roomy.queue_capacity = 64;
    roomy.max_in_flight = 64;
    let (_, app) = app_with(roomy);
    let queries = [
        "espresso beans",
        "volcano eruption",
        "string instrument",
        "melting ice",
        "yeast dough",
        "late goal",
    ];
    let mut expected = Vec::new();
    for q in queries {
        expected.push(hit_ids(&search(&app, json!({"query": q, "k": 3})).await.1));
    }
    let tasks: Vec<_> = (0..48)
        .map(|i| {
            let app = app.clone();
            let q = queries[i % queries.len()];
            tokio::spawn(async move { (i, search(&app, json!({"query": q, "k": 3})).await) })
        })
        .collect();
    for task in tasks {
        let (i, (status, value)) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(hit_ids(&value), expected[i % queries.len()]);
    }
}

#[tokio::test]
async fn a_full_queue_answers_429_with_retry_after_then_recovers() {
    let mut tight = config();
    tight.workers = 1;
    tight.queue_capacity = 1;
    let (state, app) = app_with(tight);
    let release = block_worker(&state);
    state.pool.try_submit_all(vec![Box::new(|| {})]).unwrap(); // the queue's one slot
    let (status, value, retry) = call(&app, post("/v1/search", json!({"query": "coffee"}).to_string())).await;
    assert_eq!((status, value["code"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("overloaded")));
    assert_eq!(retry.as_deref(), Some("1"));
    release.send(()).unwrap();
    wait_for_queue_depth(&state, 0).await;
    let (status, _) = search(&app, json!({"query": "coffee"})).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn past_max_in_flight_bytes_a_request_is_refused_unless_it_would_be_alone() {
    let mut tight = config();
    tight.workers = 1;
    // Fewer bytes than any search body: only a request admitted alone gets through.
    tight.max_in_flight_bytes = Some(8);
    let (state, app) = app_with(tight);
    let release = block_worker(&state);
    let first = {
        let app = app.clone();
        tokio::spawn(async move { search(&app, json!({"query": "coffee"})).await })
    };
    wait_for_queue_depth(&state, 1).await;
    let body = json!({"query": "bread"}).to_string();
    assert!(
        state.in_flight_bytes() > json!({"query": "coffee"}).to_string().len(),
        "the queued body is counted, and what its answer will take"
    );
    let (status, value, retry) = call(&app, post("/v1/search", body)).await;
    assert_eq!((status, value["code"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("overloaded")));
    assert_eq!((value["details"]["max_in_flight_bytes"].as_u64(), retry.as_deref()), (Some(8), Some("1")));
    release.send(()).unwrap();
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    assert_eq!(state.in_flight_bytes(), 0, "the bytes were released");
    let (status, _) = search(&app, json!({"query": "bread"})).await;
    assert_eq!(status, StatusCode::OK, "a request admitted alone passes whatever its size");
}

#[tokio::test]
async fn past_max_in_flight_a_request_is_refused_with_429_and_the_slot_is_released() {
    let mut narrow = config();
    narrow.workers = 1;
    narrow.max_in_flight = 1;
    let (state, app) = app_with(narrow);
    let release = block_worker(&state);
    let first = {
        let app = app.clone();
        tokio::spawn(async move { search(&app, json!({"query": "coffee"})).await })
    };
    wait_for_queue_depth(&state, 1).await;
    assert_eq!(state.pool.queue_depth(), 1, "the first request waits in the queue");
    let (status, value, retry) = call(&app, post("/v1/search", json!({"query": "bread"}).to_string())).await;
    assert_eq!((status, value["code"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("overloaded")));
    assert_eq!((value["details"]["max_in_flight"].as_u64(), retry.as_deref()), (Some(1), Some("1")));
    release.send(()).unwrap();
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    let (status, _) = search(&app, json!({"query": "bread"})).await;
    assert_eq!(status, StatusCode::OK, "the admission was released");
}

#[tokio::test]
async fn a_request_past_its_deadline_answers_504_and_the_server_goes_on() {
    let mut short = config();
    short.workers = 1;
    short.deadline = Duration::from_millis(50);
    let (state, app) = app_with(short);
    let release = block_worker(&state);
    let (status, value) = search(&app, json!({"query": "coffee"})).await;
    assert_eq!((status, value["code"].as_str()), (StatusCode::GATEWAY_TIMEOUT, Some("deadline_exceeded")));
    release.send(()).unwrap();
    let (status, health, _) = call(&app, Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!((status, health["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (_, metrics, _) = call(&app, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    let metrics = metrics.as_str().unwrap().to_string();
    assert!(metrics.contains("cellar_requests_total{endpoint=\"/v1/search\",status=\"504\"} 1"), "{metrics}");
    assert!(metrics.contains("cellar_searches_total 0\n"), "a 504 is not counted as answered: {metrics}");
}

#[tokio::test]
async fn an_api_key_guards_the_search_endpoints_only() {
    let mut keyed = config();
    keyed.api_key = Some("s3cret".into());
    let (_, app) = app_with(keyed);
    let body = json!({"query": "coffee"}).to_string();
    let (status, value, _) = call(&app, post("/v1/search", body.clone())).await;
    assert_eq!((status, value["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
    let mut wrong = post("/v1/search", body.clone());
    wrong.headers_mut().insert("authorization", "Bearer nope".parse().unwrap());
    assert_eq!(call(&app, wrong).await.0, StatusCode::UNAUTHORIZED);
    // The scheme is case-insensitive (RFC 9110 11.1), and more than one space may follow it.
    for given in ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret"] {
        let mut bearer = post("/v1/search", body.clone());
        bearer.headers_mut().insert("authorization", given.parse().unwrap());
        assert_eq!(call(&app, bearer).await.0, StatusCode::OK, "{given}");
    }
    let mut other = post("/v1/search", body.clone());
    other.headers_mut().insert("authorization", "Basic s3cret".parse().unwrap());
    assert_eq!(call(&app, other).await.0, StatusCode::UNAUTHORIZED, "another scheme");
    let mut header = post("/v1/search/batch", json!({"queries": [{"query": "coffee"}]}).to_string());
    header.headers_mut().insert("x-api-key", "s3cret".parse().unwrap());
    assert_eq!(call(&app, header).await.0, StatusCode::OK);
    let (status, health, _) = call(&app, Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!((status, health["status"].as_str()), (StatusCode::OK, Some("ok")));
}

#[tokio::test]
async fn metrics_count_requests_stages_and_bytes_and_openapi_lists_every_route() {
    let (_, app) = app_with(config());
    search(&app, json!({"query": "coffee", "mode": "rerank"})).await;
    search(&app, json!({"query": ""})).await;
    let (status, metrics, _) = call(&app, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = metrics.as_str().unwrap().to_string();
    for line in [
        "cellar_requests_total{endpoint=\"/v1/search\",status=\"200\"} 1",
        "cellar_requests_total{endpoint=\"/v1/search\",status=\"400\"} 1",
        "cellar_stage_seconds_count{stage=\"maxsim\"} 1",
        "cellar_stage_seconds_bucket{stage=\"total\",le=\"+Inf\"} 1",
        "cellar_index_docs 6",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
    let bytes: u64 =
        metrics.lines().find_map(|l| l.strip_prefix("cellar_read_bytes_total ")).unwrap().parse().unwrap();
    assert!(bytes >= 4096, "a rerank reads at least one page");
    let rss: u64 =
        metrics.lines().find_map(|l| l.strip_prefix("cellar_process_rss_bytes ")).unwrap().parse().unwrap();
    assert!(rss > 0);
    let (_, doc, _) = call(&app, Request::get("/openapi.json").body(Body::empty()).unwrap()).await;
    assert_eq!(doc["openapi"], "3.1.0");
    for path in ["/v1/search", "/v1/search/batch", "/healthz", "/metrics", "/openapi.json"] {
        assert!(doc["paths"][path].is_object(), "{path} is not documented");
    }
    let mode = &doc["components"]["schemas"]["Mode"];
    let modes: Vec<&Value> = match mode["enum"].as_array() {
        Some(names) => names.iter().collect(),
        None => mode["oneOf"].as_array().expect("Mode is an enum").iter().map(|v| &v["const"]).collect(),
    };
    assert_eq!(json!(modes), json!(["bm25", "dense-exact", "ivf", "dense", "rerank", "hybrid"]), "{mode}");
    for field in ["nprobe", "oversample", "rescore", "prefetch", "prefetch_step", "hybrid_candidates"] {
        assert!(doc["components"]["schemas"]["SearchRequest"]["properties"][field].is_object(), "{field}");
    }
}

#[tokio::test]
async fn a_hot_record_cache_answers_repeated_searches_alike_without_reading_and_is_counted() {
    let (_tmp, out) = common::build_index();
    let options =
        |hot_cache_bytes| OpenOptions { reader: ReaderKind::Direct, hot_cache_bytes, ..Default::default() };
    let plain = router(AppState::new(Arc::new(Index::open(&out, options(0)).unwrap()), config()));
    let cached = router(AppState::new(Arc::new(Index::open(&out, options(4 << 20)).unwrap()), config()));
    let body = json!({"query": "coffee brewing", "mode": "rerank", "k": 3});
    let (_, want) = search(&plain, body.clone()).await;
    let (_, first) = search(&cached, body.clone()).await;
    let (_, again) = search(&cached, body.clone()).await;
    assert_eq!(hit_ids(&first), hit_ids(&want));
    assert_eq!(hit_ids(&again), hit_ids(&want));
    for (a, b) in again["hits"].as_array().unwrap().iter().zip(want["hits"].as_array().unwrap()) {
        assert_eq!(a["score"], b["score"], "a cached record scores as a read one");
    }
    assert_eq!(first["io"]["records_cached"], 0, "{first}");
    assert!(first["io"]["bytes_read"].as_u64().unwrap() > 0);
    let reranked = again["reranked"].as_u64().unwrap();
    assert!(reranked > 0);
    assert_eq!(again["io"]["records_cached"].as_u64().unwrap(), reranked, "{again}");
    assert_eq!(again["io"]["bytes_read"], 0, "{again}");
    assert_eq!(want["io"]["records_cached"], 0);
    let (_, metrics, _) = call(&cached, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    let metrics = metrics.as_str().unwrap().to_string();
    let value = |name: &str| -> u64 {
        let prefix = format!("{name} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("cellar_hot_cache_hits_total"), reranked);
    assert_eq!(value("cellar_hot_cache_misses_total"), reranked);
    assert_eq!(value("cellar_hot_cache_capacity_bytes"), 4 << 20);
    assert!(value("cellar_hot_cache_bytes") > 0 && value("cellar_hot_cache_records") == reranked);
    let (_, plain_metrics, _) = call(&plain, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    assert!(!plain_metrics.as_str().unwrap().contains("cellar_hot_cache"), "no cache, no cache metrics");
}

/// The names serde lists in "unknown field `x`, expected one of `a`, `b`" (or "expected `a`").
fn accepted_fields(message: &str) -> std::collections::BTreeSet<String> {
    let (_, expected) =
        message.split_once("expected").unwrap_or_else(|| panic!("no field list in {message:?}"));
    expected.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The property names of a schema, following a `$ref` into the components. A body read in
/// several forms (a stream's: the one model, or the first stream API's shape) is an `anyOf`
/// whose first form is the current one, whose fields the router names.
fn documented_fields(doc: &Value, schema: &Value) -> std::collections::BTreeSet<String> {
    let schema = match schema["$ref"].as_str() {
        Some(r) => &doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")],
        None => schema,
    };
    let schema = schema["anyOf"].get(0).unwrap_or(schema);
    let schema = match schema["$ref"].as_str() {
        Some(r) => &doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")],
        None => schema,
    };
    schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("no properties in {schema}"))
        .keys()
        .cloned()
        .collect()
}

#[tokio::test]
async fn every_documented_request_field_is_accepted_by_the_router_and_no_other() {
    let (_, app) = app_with(config());
    let (_, doc, _) = call(&app, Request::get("/openapi.json").body(Body::empty()).unwrap()).await;
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Some(schema) = operation["requestBody"]["content"]["application/json"].get("schema") else {
                continue;
            };
            // Every path parameter documented, and filled in to reach the handler.
            let params: Vec<&str> = path.split('/').filter(|s| s.starts_with('{')).collect();
            let declared = operation["parameters"].as_array().map_or(0, Vec::len);
            assert_eq!(declared, params.len(), "{method} {path}: path parameters");
            let uri = params.iter().fold(path.clone(), |uri, p| uri.replace(p, "x"));
            let request = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(uri)
                .header("content-type", "application/json")
                .body(Body::from(json!({ "zz_not_a_field": 1 }).to_string()))
                .unwrap();
            let (status, body, _) = call(&app, request).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {body}");
            let message = body["message"].as_str().unwrap();
            assert_eq!(
                accepted_fields(message),
                documented_fields(&doc, schema),
                "{method} {path}: {message}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} operations take a body");
    // A nested request type: the caller's query vectors.
    let (status, body) =
        search(&app, json!({ "query": "x", "query_vectors": { "zz_not_a_field": 1 } })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"]["field"], "query_vectors.zz_not_a_field");
    let nested = json!({ "$ref": "#/components/schemas/QueryVectorsIn" });
    assert_eq!(accepted_fields(body["message"].as_str().unwrap()), documented_fields(&doc, &nested));
    // The limits the checks enforce are the ones documented.
    let request = &doc["components"]["schemas"]["SearchRequest"]["properties"];
    assert_eq!(request["k"]["maximum"], json!(cellar_search::request::MAX_K));
    assert_eq!(request["candidates"]["maximum"], json!(cellar_search::request::MAX_CANDIDATES));
    assert_eq!(request["query"]["maxLength"], json!(cellar_search::request::MAX_QUERY_BYTES));
    let (status, _) = search(&app, json!({ "query": "x", "k": cellar_search::request::MAX_K + 1 })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// Token vectors alone are enough for every mode that needs a pooled vector: it defaults to the
/// normalised mean of the tokens, and answers as that vector sent explicitly does.
#[tokio::test]
async fn a_pooled_vector_left_out_is_the_normalised_mean_of_the_tokens() {
    let (_, app) = app_with(config());
    let full = encoded("coffee");
    let tokens: Vec<Vec<f32>> = serde_json::from_value(full["tokens"].clone()).unwrap();
    let mut mean = vec![0f64; tokens[0].len()];
    for row in &tokens {
        mean.iter_mut().zip(row).for_each(|(m, v)| *m += f64::from(*v));
    }
    let norm = mean.iter().map(|m| m * m).sum::<f64>().sqrt();
    let mean: Vec<f32> = mean.iter().map(|m| (m / norm) as f32).collect();
    for mode in ["ivf", "dense-exact", "hybrid"] {
        let query = if mode == "hybrid" { "coffee" } else { "" };
        let (status, alone) =
            search(&app, json!({ "query": query, "mode": mode, "query_vectors": { "tokens": tokens } }))
                .await;
        assert_eq!(status, StatusCode::OK, "{mode}: {alone}");
        let given = json!({ "tokens": tokens, "pooled": mean });
        let (status, explicit) =
            search(&app, json!({ "query": query, "mode": mode, "query_vectors": given })).await;
        assert_eq!(status, StatusCode::OK, "{mode}: {explicit}");
        assert!(!alone["hits"].as_array().unwrap().is_empty(), "{mode}: {alone}");
        assert_eq!(alone["hits"], explicit["hits"], "{mode}");
    }
    // With neither, the modes that need one still say so.
    let (status, body) = search(&app, json!({ "query": "", "mode": "ivf", "query_vectors": {} })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("pooled vector"), "{body}");
}

#[tokio::test]
async fn a_user_error_is_refused_before_the_search_is_queued() {
    // Every worker blocked and the queue full: a valid search gets 429, an invalid one 400.
    let mut tiny = config();
    tiny.workers = 1;
    tiny.queue_capacity = 1;
    let (state, app) = app_with(tiny);
    let release = block_worker(&state);
    let filler: Job = Box::new(|| {});
    state.pool.try_submit_all(vec![filler]).unwrap();
    wait_for_queue_depth(&state, 1).await;
    let (status, _) = search(&app, json!({ "query": "coffee", "mode": "bm25" })).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // Hybrid scores MaxSim: a pooled vector without token vectors is refused by the plan, not by
    // a worker.
    let mut vectors = encoded("coffee");
    vectors["tokens"] = json!([]);
    let (status, body) =
        search(&app, json!({ "query": "coffee", "mode": "hybrid", "query_vectors": vectors })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("scores MaxSim"), "{body}");
    let (status, _) = search(&app, json!({ "query": "", "mode": "bm25" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    release.send(()).unwrap();
}

/// A job that panics on a worker answers 500 `internal` (not 501) and the worker lives on.
#[tokio::test]
async fn a_panicking_job_is_a_500_and_the_pool_keeps_working() {
    let mut one = config();
    one.workers = 1;
    let (state, app) = app_with(one);
    let error = cellar_server::app::run_blocking(&state, || -> cellar_core::Result<()> {
        panic!("an invariant broke")
    })
    .await
    .unwrap_err();
    assert_eq!(error.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(error.code, "internal");
    let (status, body) = search(&app, json!({ "query": "coffee", "k": 2 })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Error answers never carry where the server keeps its files: the 400 of a text query (and of
/// a text write) on an index of the caller's embeddings, which names the index's directory, and
/// the 500 of a corrupted record, whose error names the file.
#[tokio::test]
async fn no_error_answer_carries_a_server_path() {
    const DIM: usize = 8;
    let tmp = tempfile::TempDir::new().unwrap();
    let dir = tmp.path().join("embedded");
    let options = cellar_search::BuildOptions::new("", &dir);
    let docs = (0..4).map(|i| {
        let mut row = vec![0.0f32; DIM];
        row[i] = 1.0;
        Ok(cellar_search::EmbeddedDoc {
            id: format!("e{i}"),
            title: String::new(),
            text: format!("embedded document number {i}"),
            metadata: Default::default(),
            tokens: row.clone(),
            pooled: None,
        })
    });
    Index::build_from_embeddings(&options, DIM, None, docs).unwrap();
    let index = Arc::new(Index::open(&dir, OpenOptions::default()).unwrap());
    let app = router(AppState::new(index, config()));
    let root = tmp.path().to_str().unwrap().to_string();
    let mut bodies = Vec::new();

    let (status, value) = search(&app, json!({"query": "embedded document"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{value}");
    assert!(value["message"].as_str().unwrap().contains("caller's embeddings"), "{value}");
    bodies.push(value);
    let write = json!({"ops": [{"add": {"id": "t1", "text": "a text to encode"}}]}).to_string();
    let (status, value, _) = call(&app, post("/v1/docs", write)).await;
    assert!(status.is_client_error(), "{status}: {value}");
    bodies.push(value);

    // A flipped byte in texts.bin, read when a hit shows its text: a 500 naming the file.
    let texts = dir.join("texts.bin");
    let mut bytes = std::fs::read(&texts).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x55;
    std::fs::write(&texts, bytes).unwrap();
    let query = json!({"query": "embedded", "mode": "dense-exact", "k": 4, "include_text": true,
                       "query_vectors": {"tokens": [[1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]],
                                         "pooled": [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]}});
    let (status, value) = search(&app, query).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{value}");
    assert!(value["message"].as_str().unwrap().contains("texts.bin"), "{value}");
    bodies.push(value);

    for body in bodies {
        let text = body.to_string();
        assert!(!text.contains(&root), "an answer names the server's directory {root}: {text}");
        assert!(!text.contains(&dir.to_string_lossy().to_string()), "{text}");
    }
}

/// Dense over HTTP takes the token stage (`cellar tokens build`) with the caller's token vectors
/// alone, reports it, and refuses a dense stage the index lacks or an nprobe past its leaves
/// with a 400 and its reason.
#[tokio::test]
async fn dense_over_http_takes_the_token_stage_and_refuses_what_it_cannot_run() {
    const DIM: usize = 8;
    let tmp = tempfile::TempDir::new().unwrap();
    let dir = tmp.path().join("embedded");
    let options = cellar_search::BuildOptions::new("", &dir);
    let docs = (0..8).map(|i| {
        let mut tokens = vec![0.0f32; 2 * DIM];
        tokens[i] = 1.0;
        tokens[DIM + (i + 3) % DIM] = 1.0;
        Ok(cellar_search::EmbeddedDoc {
            id: format!("e{i}"),
            title: String::new(),
            text: format!("embedded document number {i}"),
            metadata: Default::default(),
            tokens,
            pooled: None,
        })
    });
    Index::build_from_embeddings(&options, DIM, None, docs).unwrap();
    let stage = cellar_search::tokens::TokensBuildOptions { leaves: 4, ..Default::default() };
    cellar_search::tokens::build_tokens(&dir, &stage).unwrap();
    let index = Arc::new(Index::open(&dir, OpenOptions::default()).unwrap());
    let app = router(AppState::new(index, config()));
    // Document e5's two tokens, no pooled vector.
    let mut first = vec![0.0f32; DIM];
    first[5] = 1.0;
    let mut second = vec![0.0f32; DIM];
    second[0] = 1.0;
    let query = json!({"mode": "dense", "k": 3, "query_vectors": {"tokens": [first, second]}});
    let (status, value) = search(&app, query.clone()).await;
    assert_eq!(status, StatusCode::OK, "{value}");
    assert_eq!(value["hits"][0]["id"], "e5", "{value}");
    assert!(value["tokens"]["lists"].as_u64().unwrap() > 0, "the stage's report: {value}");
    assert!(value["params"]["tokens"]["nprobe"].is_u64(), "{value}");
    let mut pooled = query.clone();
    pooled["dense_stage"] = json!("pooled");
    let (status, value) = search(&app, pooled).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{value}");
    assert!(value["message"].as_str().unwrap().contains("cellar ivf build"), "{value}");
    let mut wide = query;
    wide["nprobe"] = json!(99);
    let (status, value) = search(&app, wide).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{value}");
    assert!(value["message"].as_str().unwrap().contains("leaves"), "{value}");
}
