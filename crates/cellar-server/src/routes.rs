//! The router: endpoints, the API-key check, request counting, and the hand-off of searches
//! to the CPU pool with a deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cellar_core::CellarError;
use cellar_search::{Index, SearchResponse};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::api::{BatchRequest, SearchRequest, ValidSearch, MAX_BATCH};
use crate::error::ApiError;
use crate::metrics::{Gauges, Metrics};
use crate::pool::{CpuPool, Job};
use crate::ServerConfig;

/// What every handler shares. A server has an index, streaming collections, or both.
pub struct AppState {
    pub index: Option<Arc<Index>>,
    pub streams: Option<crate::streams::StreamsState>,
    pub pool: CpuPool,
    pub metrics: Metrics,
    pub config: ServerConfig,
    /// Search requests admitted and not yet answered.
    in_flight: AtomicUsize,
}

impl AppState {
    pub fn new(index: Arc<Index>, config: ServerConfig) -> Arc<AppState> {
        AppState::with_streams(Some(index), None, config)
    }

    pub fn with_streams(
        index: Option<Arc<Index>>,
        streams: Option<crate::streams::StreamsState>,
        config: ServerConfig,
    ) -> Arc<AppState> {
        let pool = CpuPool::new(config.workers, config.queue_capacity);
        Arc::new(AppState {
            index,
            streams,
            pool,
            metrics: Metrics::default(),
            config,
            in_flight: AtomicUsize::new(0),
        })
    }

    /// The index, or 404 on a server started with streams only.
    pub fn index(&self) -> Result<&Arc<Index>, ApiError> {
        self.index.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "this server serves no index (started without --index)",
            )
        })
    }
}

/// The whole HTTP API over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/search", post(search))
        .route("/v1/search/batch", post(search_batch))
        .merge(crate::streams::routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), admit))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_api_key));
    Router::new()
        .merge(v1)
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), count_requests))
        .with_state(state)
}

async fn count_requests(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let start = Instant::now();
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    state.metrics.count_request(&endpoint, response.status().as_u16());
    if endpoint.starts_with("/v1/") {
        state.metrics.observe_request(start.elapsed().as_secs_f64() * 1e3);
    }
    response
}

/// Refuses a search request with 429 before its body is read when `max_in_flight` are already
/// admitted: under overload, connections must not pile up holding their bodies in memory.
async fn admit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let limit = state.config.max_in_flight;
    if state.in_flight.fetch_add(1, Ordering::AcqRel) >= limit {
        state.in_flight.fetch_sub(1, Ordering::AcqRel);
        let message = format!("the server already holds {limit} search requests; retry later");
        return ApiError::overloaded(message, json!({ "max_in_flight": limit })).into_response();
    }
    let _admitted = Admitted(&state.in_flight);
    next.run(request).await
}

/// Releases an admission when the request ends, also when its connection is dropped mid-way.
struct Admitted<'a>(&'a AtomicUsize);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// With an API key configured, `/v1/*` needs `Authorization: Bearer KEY` or `X-Api-Key: KEY`.
async fn require_api_key(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(expected) = state.config.api_key.as_deref() else {
        return next.run(request).await;
    };
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let plain = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    let given = bearer.or(plain);
    if given.is_some_and(|key| constant_time_eq(key.as_bytes(), expected.as_bytes())) {
        return next.run(request).await;
    }
    let message = if given.is_some() { "the API key is wrong" } else { "an API key is required" };
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Parses a JSON body, turning every way it can be wrong into a typed 4xx.
pub(crate) fn parse_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if let Some(kind) = content_type.filter(|kind| !kind.contains("json")) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("the body must be application/json, not {kind}"),
        ));
    }
    let body = body.map_err(|rejection| {
        let code =
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE { "body_too_large" } else { "bad_body" };
        ApiError::new(rejection.status(), code, rejection.body_text())
    })?;
    serde_json::from_slice(&body).map_err(ApiError::from_json)
}

/// What a pool worker sends back for one search.
enum Outcome {
    /// The answer, its `timings.queue_ms` set.
    Done(Box<cellar_core::Result<SearchResponse>>),
    /// The deadline had passed before a worker picked it up: not run at all.
    Expired,
}

/// Queues every search at once (or none: 429) and returns where each answer will arrive.
fn submit(
    state: &Arc<AppState>,
    searches: Vec<ValidSearch>,
    deadline: Instant,
) -> Result<Vec<oneshot::Receiver<Outcome>>, ApiError> {
    let enqueued = Instant::now();
    let (jobs, replies): (Vec<Job>, Vec<_>) = searches
        .into_iter()
        .map(|search| {
            let (tx, rx) = oneshot::channel();
            let index = state.index.clone().expect("validated against the index");
            let job: Job = Box::new(move || {
                let queue_ms = enqueued.elapsed().as_secs_f64() * 1e3;
                if Instant::now() >= deadline {
                    let _ = tx.send(Outcome::Expired);
                    return;
                }
                let result = search.run(&index).map(|mut response| {
                    response.timings.queue_ms = queue_ms;
                    response
                });
                let _ = tx.send(Outcome::Done(Box::new(result)));
            });
            (job, rx)
        })
        .unzip();
    state.pool.try_submit_all(jobs).map_err(|_| {
        let capacity = state.pool.capacity();
        let message = format!("the server's queue is full ({capacity} searches waiting); retry later");
        ApiError::overloaded(message, json!({ "queue_capacity": capacity }))
    })?;
    Ok(replies)
}

/// One query's entry in a batch answer.
#[derive(Serialize)]
#[serde(untagged)]
enum BatchItem {
    Answer(SearchResponse),
    Error { error: Value },
}

#[derive(Serialize)]
struct BatchResponse {
    results: Vec<BatchItem>,
}

impl From<ApiError> for BatchItem {
    fn from(error: ApiError) -> Self {
        BatchItem::Error { error: error.body() }
    }
}

/// Waits for one answer until the deadline and records its metrics.
async fn answer(
    state: &AppState,
    reply: oneshot::Receiver<Outcome>,
    deadline: Instant,
) -> Result<SearchResponse, ApiError> {
    let expired = || ApiError::deadline(state.config.deadline.as_millis() as u64);
    let outcome = match tokio::time::timeout_at(deadline.into(), reply).await {
        Err(_) => return Err(expired()),
        Ok(Err(_)) => {
            return Err(CellarError::Unsupported("the search worker stopped without answering".into()).into())
        }
        Ok(Ok(outcome)) => outcome,
    };
    let response = match outcome {
        Outcome::Expired => return Err(expired()),
        Outcome::Done(result) => (*result)?,
    };
    state.metrics.observe_search(&response.timings, &response.io);
    Ok(response)
}

async fn search(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<SearchResponse>, ApiError> {
    let request: SearchRequest = parse_body(&headers, body)?;
    let valid = request.validate(state.index()?)?;
    let deadline = Instant::now() + state.config.deadline;
    let reply = submit(&state, vec![valid], deadline)?.pop().expect("one reply per search");
    Ok(Json(answer(&state, reply, deadline).await?))
}

/// Each query of a batch succeeds or fails on its own; the batch is queued whole or refused.
async fn search_batch(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<BatchResponse>, ApiError> {
    let request: BatchRequest = parse_body(&headers, body)?;
    let index = state.index()?;
    let n = request.queries.len();
    if n == 0 || n > MAX_BATCH {
        return Err(ApiError::invalid(format!("a batch holds 1 to {MAX_BATCH} queries, got {n}")));
    }
    let checked: Vec<Result<ValidSearch, ApiError>> =
        request.queries.into_iter().map(|q| q.validate(index)).collect();
    let deadline = Instant::now() + state.config.deadline;
    let (ok, slots) = split_valid(checked);
    let mut replies = submit(&state, ok, deadline)?.into_iter();
    let mut results = Vec::with_capacity(slots.len());
    for slot in slots {
        let item = match slot {
            Some(error) => error,
            None => {
                let reply = replies.next().expect("one reply per valid query");
                answer(&state, reply, deadline).await.map_or_else(BatchItem::from, BatchItem::Answer)
            }
        };
        results.push(item);
    }
    Ok(Json(BatchResponse { results }))
}

/// Valid searches to run, and per query either its error already (Some) or a slot to fill (None).
fn split_valid(checked: Vec<Result<ValidSearch, ApiError>>) -> (Vec<ValidSearch>, Vec<Option<BatchItem>>) {
    let mut ok = Vec::new();
    let slots = checked
        .into_iter()
        .map(|c| match c {
            Ok(search) => {
                ok.push(search);
                None
            }
            Err(e) => Some(BatchItem::from(e)),
        })
        .collect();
    (ok, slots)
}

async fn healthz(State(state): State<Arc<AppState>>) -> Json<Value> {
    let index = state.index.as_ref();
    let config = index.map(|i| i.config());
    Json(json!({
        "status": "ok",
        "docs": index.map(|i| i.len()),
        "reader": index.map(|i| i.reader_kind().name()),
        "codec": config.map(|c| &c.codec),
        "model": config.map(|c| &c.encoder.model),
        "model_dim": config.map(|c| c.encoder.model_dim),
        "streams": state.streams.as_ref().map(|s| s.streams.root()),
        "workers": state.pool.threads(),
        "queue_depth": state.pool.queue_depth(),
        "queue_capacity": state.pool.capacity(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let gauges = Gauges {
        queue_depth: state.pool.queue_depth(),
        queue_capacity: state.pool.capacity(),
        busy_workers: state.pool.busy(),
        workers: state.pool.threads(),
        docs: state.index.as_ref().map_or(0, |i| i.len()),
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render(&gauges))
}

async fn openapi() -> Json<Value> {
    Json(crate::openapi::document())
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no endpoint at {}", request.uri().path()))
}

async fn method_not_allowed(request: Request) -> ApiError {
    let message = format!("{} is not allowed on {}", request.method(), request.uri().path());
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", message)
}
