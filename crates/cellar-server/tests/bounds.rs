//! Every request's cost is bounded before it runs: each integer a request states has its limit
//! in the OpenAPI document and in the router (issues 16.1, 21.1), a batch asks for a bounded
//! number of hits in all and a filter compares a bounded number of values (issue 43.5), and what
//! a search will allocate is charged against the in-flight byte budget. The in-process router,
//! as in `router.rs`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};

mod common;

use common::config;
use common::http::{app_with, block_worker, call, post, search, wait_for_queue_depth};

/// Issue 21.1: `candidates` sized tantivy's top-N heap, so one request aborted the process
/// ("memory allocation of 72000000000 bytes failed"); 2^62 answered a misleading 501.
#[tokio::test]
async fn a_huge_candidates_value_is_a_400_and_the_server_keeps_serving() {
    let (_, app) = app_with(config());
    for candidates in [3_000_000_000u64, 5_000_000_000, 1_000_000_000_000_000, 1 << 62] {
        for mode in ["bm25", "hybrid", "dense"] {
            let (status, body) =
                search(&app, json!({ "query": "wing", "mode": mode, "candidates": candidates })).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{mode} {candidates}: {body}");
            assert_eq!(body["code"], "invalid_input", "{body}");
            assert!(body["message"].as_str().unwrap().contains("candidates"), "{body}");
        }
        let batch =
            json!({ "queries": [{ "query": "coffee" }, { "query": "wing", "candidates": candidates }] });
        // A batch answers each query on its own: the good one its hits, the huge one its 400.
        let (status, body, _) = call(&app, post("/v1/search/batch", batch.to_string())).await;
        assert_eq!(status, StatusCode::OK, "batch {candidates}: {body}");
        assert!(body["results"][0]["hits"].as_array().is_some_and(|h| !h.is_empty()), "{body}");
        assert_eq!(body["results"][1]["error"]["code"], "invalid_input", "{body}");
    }
    let (status, body) = search(&app, json!({ "query": "coffee", "k": 2 })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// "Also found" in issue 21: a batch of 33-64 queries (64 is the documented maximum) was always
/// 429 on an idle 2-worker server, whose default queue held 32.
#[tokio::test]
async fn the_largest_batch_is_answered_by_an_idle_server_with_default_settings() {
    let mut two = config();
    two.workers = 2;
    two.queue_capacity = cellar_server::default_queue(2);
    let (_, app) = app_with(two);
    let queries: Vec<Value> = (0..cellar_search::request::MAX_BATCH)
        .map(|_| json!({ "query": "coffee", "mode": "bm25", "k": 1 }))
        .collect();
    let (status, body, _) =
        call(&app, post("/v1/search/batch", json!({ "queries": queries }).to_string())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["results"].as_array().unwrap().len(), cellar_search::request::MAX_BATCH);
}

/// Schemas of values a document or a filter holds (data, not a count or a size).
const DATA_VALUES: [&str; 2] = ["Scalar", "MetaValue"];

/// Every integer a request body may hold that states a count or a size, and every list's
/// length (its `maxItems` as the `maximum`), `(schema path, its schema)`, following `$ref`s into the components, through objects, arrays, `anyOf`/`oneOf`
/// and enum variants (values of metadata and filters, data, left out).
fn integer_fields(doc: &Value, schema: &Value, at: &str, out: &mut Vec<(String, Value)>, depth: usize) {
    if depth > 12 || schema["$ref"].as_str().is_some_and(|r| DATA_VALUES.iter().any(|d| r.ends_with(d))) {
        return;
    }
    let schema = match schema["$ref"].as_str() {
        Some(r) => &doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")],
        None => schema,
    };
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if types.contains(&"integer") {
        out.push((at.to_string(), schema.clone()));
    }
    // A list's length is a count too: documented as `maxItems`.
    if types.contains(&"array") {
        out.push((format!("{at} (items)"), json!({ "maximum": schema["maxItems"] })));
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            integer_fields(doc, property, &format!("{at}.{name}"), out, depth + 1);
        }
    }
    if !schema["items"].is_null() {
        integer_fields(doc, &schema["items"], &format!("{at}[]"), out, depth + 1);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for variant in schema[key].as_array().into_iter().flatten() {
            integer_fields(doc, variant, at, out, depth + 1);
        }
    }
}

/// Issue 16.1: every count or size a request may state has its limit in the OpenAPI document
/// (so no allocation is sized by a request beyond it), and the router refuses a value past it,
/// or an absurd one, with a 400 naming the field, then goes on serving.
#[tokio::test]
async fn every_integer_of_every_request_is_bounded_in_the_openapi_document_and_by_the_router() {
    let (_, app) = app_with(config());
    let (_, doc, _) = call(&app, Request::get("/openapi.json").body(Body::empty()).unwrap()).await;
    let mut unbounded = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if let Some(schema) = operation["requestBody"]["content"]["application/json"].get("schema") {
                let mut fields = Vec::new();
                integer_fields(&doc, schema, "", &mut fields, 0);
                for (field, schema) in fields {
                    if schema["maximum"].as_f64().is_none() {
                        unbounded.push(format!("{method} {path}: {field}"));
                    }
                }
            }
        }
    }
    assert!(unbounded.is_empty(), "integers without a documented maximum: {unbounded:#?}");

    let (_, search_doc, _) = call(&app, Request::get("/openapi.json").body(Body::empty()).unwrap()).await;
    let schema = &search_doc["components"]["schemas"]["SearchRequest"]["properties"];
    for (field, property) in schema.as_object().unwrap() {
        let types = property["type"].to_string();
        let Some(max) = property["maximum"].as_f64().filter(|_| types.contains("integer")) else { continue };
        for value in [json!(max as u64 + 1), json!(u64::MAX), json!(1u64 << 62)] {
            let (status, body) = search(&app, json!({ "query": "wing", field: value })).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{field} = {value}: {body}");
            assert!(body["message"].as_str().unwrap().contains(field.as_str()), "{field} = {value}: {body}");
        }
    }
    let (status, body) = search(&app, json!({ "query": "coffee", "k": 2 })).await;
    assert_eq!(status, StatusCode::OK, "still serving: {body}");
}

/// Issue 43.5: a 3 KiB batch of 64 queries of `k` 10,000 built a 553 MB answer (+1.06 GB of
/// peak RSS). A batch asks for at most `MAX_BATCH_HITS` hits in all: past it the batch is
/// refused whole, before anything runs, with a 400 naming the field and the limit, which the
/// OpenAPI document states; a batch at the limit is answered.
#[tokio::test]
async fn a_batch_asking_for_too_many_hits_in_all_is_refused_whole() {
    use cellar_search::request::{MAX_BATCH, MAX_BATCH_HITS, MAX_K};
    let (_, app) = app_with(config());
    let query = |k: usize| json!({ "query": "coffee", "mode": "bm25", "k": k });
    let big = json!({ "queries": vec![query(MAX_K); MAX_BATCH] });
    let (status, value, _) = call(&app, post("/v1/search/batch", big.to_string())).await;
    assert_eq!(
        (status, value["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_request")),
        "{value}"
    );
    let message = value["message"].as_str().unwrap();
    for says in ["queries[].k", &MAX_BATCH_HITS.to_string(), &(MAX_BATCH * MAX_K).to_string()] {
        assert!(message.contains(says), "{says:?} not in {message}");
    }
    assert_eq!(value["details"]["max_batch_hits"].as_u64(), Some(MAX_BATCH_HITS as u64));
    let at_limit = json!({ "queries": vec![query(MAX_BATCH_HITS / 2); 2] });
    let (status, value, _) = call(&app, post("/v1/search/batch", at_limit.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{value}");
    let (_, doc, _) = call(&app, Request::get("/openapi.json").body(Body::empty()).unwrap()).await;
    assert!(
        doc.to_string().contains(&format!("\"x-max-total-k\":{MAX_BATCH_HITS}")),
        "the limit is documented"
    );
}

/// Issue 43.5: a 2 MB filter of 255 `in`s of 1,024 values cost 350 MiB to evaluate (813 MiB for
/// 8 at once): `in` values count against the filter's limit, refused with a 400 naming it.
#[tokio::test]
async fn a_filter_comparing_too_many_values_is_refused_naming_the_limit() {
    use cellar_search::filter::{MAX_FILTER_VALUES, MAX_IN_VALUES};
    let mut roomy = config();
    roomy.max_body_bytes = 4 << 20;
    let (_, app) = app_with(roomy);
    let values: Vec<String> = (0..MAX_IN_VALUES).map(|i| format!("v{i}")).collect();
    let any_of = json!({ "in": { "field": "tag", "values": values } });
    let filter = json!({ "or": vec![any_of; 255] });
    let (status, value) = search(&app, json!({ "query": "coffee", "mode": "bm25", "filter": filter })).await;
    assert_eq!((status, value["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_input")), "{value}");
    let message = value["message"].as_str().unwrap();
    assert!(message.contains(&format!("at most {MAX_FILTER_VALUES} values")), "{message}");
    assert!(message.contains(&(255 * MAX_IN_VALUES).to_string()), "{message}");
}

/// Issue 43.5: what a search will allocate (its answer's hits, with their text, and its filter)
/// is charged against `max_in_flight_bytes` before it runs, not only its body: a batch whose
/// answer does not fit beside a request already held is refused with 429, and answered once it
/// would be alone; every charge is given back.
#[tokio::test]
async fn a_search_is_charged_for_its_answer_against_the_byte_budget() {
    let mut tight = config();
    tight.workers = 1;
    // Room for small searches, not for 64 queries of 6 hits with their text.
    tight.max_in_flight_bytes = Some(64 << 10);
    let (state, app) = app_with(tight);
    let batch =
        json!({ "queries": vec![json!({ "query": "coffee", "mode": "bm25", "k": 6 }); 64] }).to_string();
    let release = block_worker(&state);
    let first = {
        let app = app.clone();
        tokio::spawn(async move { search(&app, json!({"query": "coffee", "mode": "bm25", "k": 1})).await })
    };
    wait_for_queue_depth(&state, 1).await;
    let (status, value, retry) = call(&app, post("/v1/search/batch", batch.clone())).await;
    assert_eq!(
        (status, value["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("overloaded")),
        "{value}"
    );
    assert!(value["details"]["charged_bytes"].as_u64().unwrap() > 64 << 10, "{value}");
    assert_eq!(retry.as_deref(), Some("1"));
    release.send(()).unwrap();
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    assert_eq!(state.in_flight_bytes(), 0, "the charges were given back");
    let (status, value, _) = call(&app, post("/v1/search/batch", batch)).await;
    assert_eq!(status, StatusCode::OK, "alone, the batch is answered: {value}");
    assert_eq!(state.in_flight_bytes(), 0);
}
