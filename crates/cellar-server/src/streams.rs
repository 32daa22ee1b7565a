//! The streaming collections' endpoints (`/v1/streams/...`). Every handler parses and checks its
//! request on the async runtime, then runs the blocking part (text encoding, the log's fsync,
//! reading a group's extents) as one job on the CPU pool, with the server's deadline and its
//! 429 when the queue is full. A write whose deadline passes while it runs still completes (and
//! is durable); its client gets 504 and may retry, since writes are idempotent.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{delete, get, post, put};
use axum::Json;
use cellar_core::stats::ms_since;
use cellar_core::CellarError;
use cellar_stream::encoding::{request_with_vectors, write_docs};
use cellar_stream::input::{StreamDocJson, StreamSearchJson};
use cellar_stream::GroupHit;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

pub use crate::app::StreamsState;
use crate::app::{parse_body, path, run_blocking, AppState};
use crate::error::ApiError;
use crate::openapi::{schema, Api, Operation};

/// Most documents in one feed request (one log record, one fsync).
pub const MAX_FEED: usize = 1000;

/// `POST /v1/streams/{name}/feed`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedRequest {
    #[schemars(length(min = 1, max = MAX_FEED))]
    pub docs: Vec<StreamDocJson>,
}

const STREAM_ERRORS: &[(u16, &str)] = &[
    (404, "No such stream, group or document (or the server serves no streams)"),
    (409, "The stream is open in another process"),
    (507, "The disk is full: nothing of the request was written"),
];

const DOC: &str = "/v1/streams/{name}/groups/{group}/docs/{id}";

/// The streaming collections' endpoints.
pub fn api() -> Api {
    let op = |method, path, summary, ok| Operation {
        ok,
        errors: STREAM_ERRORS,
        ..Operation::new(method, path, summary)
    };
    Api::default()
        .route(
            op(
                "get",
                "/v1/streams/{name}",
                "A streaming collection's figures (segments, memtable, RAM, disk)",
                "Stats",
            ),
            get(stream_stats),
        )
        .route(
            op(
                "delete",
                "/v1/streams/{name}",
                "Delete a streaming collection and every document in it (409 while another process has it open)",
                "{deleted, stream}",
            ),
            delete(delete_stream),
        )
        .route(
            Operation {
                request: Some(schema::<FeedRequest>),
                ..op(
                    "post",
                    "/v1/streams/{name}/feed",
                    "Write up to 1000 documents as one batch (one log record, one fsync); creates the stream",
                    "{stream, written, last_seq}",
                )
            },
            post(feed),
        )
        .route(
            Operation {
                request: Some(schema::<StreamDocJson>),
                ..op(
                    "put",
                    DOC,
                    "Write or replace one document (durable when answered); creates the stream",
                    "{stream, group, id, seq}",
                )
            },
            put(put_doc),
        )
        .route(
            op(
                "get",
                DOC,
                "Read one document (text, metadata, n_tokens)",
                "{group, id, seq, text, n_tokens, metadata}",
            ),
            get(get_doc),
        )
        .route(
            op(
                "delete",
                DOC,
                "Delete one document (404 when it does not exist)",
                "{deleted, group, id, seq}",
            ),
            delete(delete_doc),
        )
        .route(
            Operation {
                request: Some(schema::<StreamSearchJson>),
                ..op(
                    "post",
                    "/v1/streams/{name}/groups/{group}/search",
                    "Exact top-k in one group: a search request (mode dense: MaxSim, or dense-exact: pooled; the filter grammar of /v1/search; require_terms); the first stream API's body (query_tokens, query_pooled, mode maxsim or pooled, filters) is still read",
                    "{hits: [{id, score, text, metadata}], stats, timings}",
                )
            },
            post(search),
        )
}

/// Runs `work` over the streams on the CPU pool (the one pool + deadline + 429 path).
async fn blocking<T: Send + 'static>(
    state: &Arc<AppState>,
    work: impl FnOnce(&StreamsState) -> cellar_core::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    state.streams()?;
    let shared = state.clone();
    run_blocking(state, move || work(shared.streams.as_ref().expect("checked above"))).await
}

async fn put_doc(
    State(state): State<Arc<AppState>>,
    keys: Result<Path<(String, String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let (name, group, id) = path(keys)?;
    let doc: StreamDocJson = parse_body(&headers, body)?;
    let doc = doc.into_doc(Some(&group), Some(&id))?;
    let (n, g, i) = (name.clone(), group.clone(), id.clone());
    let (_, seq) = blocking(&state, move |s| write_docs(&s.streams, &n, vec![doc], &s.encoder)).await?;
    Ok(Json(json!({ "stream": name, "group": g, "id": i, "seq": seq })))
}

async fn feed(
    State(state): State<Arc<AppState>>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = path(name)?;
    let request: FeedRequest = parse_body(&headers, body)?;
    let n = request.docs.len();
    if n == 0 || n > MAX_FEED {
        return Err(ApiError::invalid(format!("a feed holds 1 to {MAX_FEED} documents, got {n}")));
    }
    let docs = request
        .docs
        .into_iter()
        .enumerate()
        .map(|(i, d)| d.into_doc(None, None).map_err(|e| ApiError::from(e).with_details(json!({ "doc": i }))))
        .collect::<Result<Vec<_>, _>>()?;
    let stream = name.clone();
    let (_, seq) = blocking(&state, move |s| write_docs(&s.streams, &stream, docs, &s.encoder)).await?;
    Ok(Json(json!({ "stream": name, "written": n, "last_seq": seq })))
}

async fn get_doc(
    State(state): State<Arc<AppState>>,
    keys: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let (name, group, id) = path(keys)?;
    let doc = blocking(&state, move |s| s.streams.get(&name, None)?.get(&group, &id)).await?;
    Ok(Json(json!({
        "group": doc.group, "id": doc.id, "seq": doc.seq, "text": doc.text,
        "n_tokens": doc.n_tokens, "metadata": doc.metadata,
    })))
}

async fn delete_doc(
    State(state): State<Arc<AppState>>,
    keys: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let (name, group, id) = path(keys)?;
    let (g, i) = (group.clone(), id.clone());
    let seq = blocking(&state, move |s| s.streams.get(&name, None)?.delete(&g, &i)).await?;
    Ok(Json(json!({ "deleted": true, "group": group, "id": id, "seq": seq })))
}

async fn stream_stats(
    State(state): State<Arc<AppState>>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = path(name)?;
    let stats = blocking(&state, move |s| Ok(s.streams.get(&name, None)?.stats())).await?;
    Ok(Json(serde_json::to_value(stats).map_err(|e| CellarError::InvalidInput(e.to_string()))?))
}

async fn delete_stream(
    State(state): State<Arc<AppState>>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = path(name)?;
    let stream = name.clone();
    blocking(&state, move |s| s.streams.delete(&stream)).await?;
    Ok(Json(json!({ "deleted": true, "stream": name })))
}

fn hit_json(hit: GroupHit) -> Value {
    let mut value = json!({ "id": hit.id, "score": hit.score, "metadata": hit.metadata });
    if let Some(text) = hit.text {
        value["text"] = Value::String(text);
    }
    value
}

async fn search(
    State(state): State<Arc<AppState>>,
    keys: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let (name, group) = path(keys)?;
    let request: StreamSearchJson = parse_body(&headers, body)?;
    let request = request.into_request()?;
    let start = Instant::now();
    let (result, encode_ms) = blocking(&state, move |s| {
        let collection = s.streams.get(&name, None)?;
        let encode = Instant::now();
        let request = request_with_vectors(request, collection.dim(), &s.encoder)?;
        let encode_ms = ms_since(encode);
        Ok((collection.search(&group, &request)?, encode_ms))
    })
    .await?;
    let st = result.stats;
    Ok(Json(json!({
        "hits": result.hits.into_iter().map(hit_json).collect::<Vec<_>>(),
        "stats": {
            "docs_scanned": st.docs_scanned, "docs_scored": st.docs_scored, "bytes_read": st.bytes_read,
            "read_calls": st.read_calls, "segments_read": st.segments_read, "memtable_entries": st.memtable_entries,
        },
        "timings": { "encode_ms": encode_ms, "total_ms": ms_since(start) },
    })))
}
