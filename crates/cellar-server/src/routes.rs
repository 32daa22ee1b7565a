//! The router: each API module registers its own routes (with their OpenAPI operations); this
//! module adds the system endpoints (`/healthz`, `/metrics`, `/openapi.json`), the console
//! (`/ui`, `ui.rs`; like them outside `/v1`, so without the key check) and the layers —
//! the API-key check, the body read (bounded in size and time) and admission on `/v1`, the body
//! limit, request counting.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use cellar_core::stats::ms_since;
use http_body_util::BodyExt;
use serde_json::{json, Value};

pub use crate::app::AppState;
use crate::error::ApiError;
use crate::metrics::Gauges;
use crate::openapi::{Api, Operation};

/// The whole HTTP API over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let (v1, mut operations) = crate::search_api::api()
        .merge(crate::docs_api::api())
        .merge(crate::indexes::api())
        .merge(crate::streams::api())
        .into_parts();
    let v1 = v1
        .route_layer(middleware::from_fn_with_state(state.clone(), admit))
        .route_layer(middleware::from_fn_with_state(state.clone(), read_body))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_api_key));
    let (system, system_operations) = system_api().merge(crate::ui::api()).into_parts();
    operations.extend(system_operations);
    let document = crate::openapi::document(&operations);
    Router::new()
        .merge(v1)
        .merge(system)
        .layer(Extension(Arc::new(document)))
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
        state.metrics.observe_request(ms_since(start));
    }
    response
}

/// Reads a `/v1` request's whole body before it is admitted: a Content-Length above
/// `max_body_bytes` is refused at once (413), a body that has not arrived within `read_timeout`
/// is 408. So a client trickling its body holds no admission slot, and one that announces more
/// than it sends is answered, not waited on for ever. The body's bytes count against
/// `max_in_flight_bytes` from before it is read (its Content-Length; a body without one once
/// read) until the request ends: under overload a refused body is never read into memory.
async fn read_body(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let limit = state.config.max_body_bytes;
    let too_large = |what: String| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("{what}; this server takes at most {limit} bytes (--max-body-bytes)"),
        )
        .into_response()
    };
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok());
    let declared = declared.and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = declared.filter(|n| *n > limit as u64) {
        return too_large(format!("the body is announced as {length} bytes"));
    }
    // At most `limit` (checked above), so it fits a usize.
    let announced = declared.map_or(0, |n| n as usize);
    let mut held = Held::take(&state.in_flight_bytes, announced);
    if let Some(refused) = over_byte_budget(&state, &held) {
        return refused;
    }
    let (parts, body) = request.into_parts();
    let timeout = state.config.read_timeout;
    let read = tokio::time::timeout(timeout, http_body_util::Limited::new(body, limit).collect()).await;
    let bytes = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return too_large("the body is longer".into());
        }
        Ok(Err(e)) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_body",
                format!("the body could not be read: {e}"),
            )
            .into_response()
        }
        Err(_) => {
            let message =
                format!("the body did not arrive within {} ms (--read-timeout-ms)", timeout.as_millis());
            return ApiError::new(StatusCode::REQUEST_TIMEOUT, "body_timeout", message).into_response();
        }
    };
    if bytes.len() > announced {
        held.grow(bytes.len() - announced);
        if let Some(refused) = over_byte_budget(&state, &held) {
            return refused;
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// 429 when the body `held` takes the admitted bodies past `max_in_flight_bytes` while others
/// are held: a request alone always passes, whatever its size.
fn over_byte_budget(state: &AppState, held: &Held) -> Option<Response> {
    let budget = state.config.max_in_flight_bytes.unwrap_or(usize::MAX);
    if held.before == 0 || held.before.saturating_add(held.amount) <= budget {
        return None;
    }
    let message = format!(
        "the server already holds {} bytes of requests and takes at most {budget} at once (a quarter \
         of its memory cap's headroom unless --max-in-flight-mib says otherwise); retry later",
        held.before
    );
    Some(ApiError::overloaded(message, json!({ "max_in_flight_bytes": budget })).into_response())
}

/// Refuses a request with 429 while the memory guard sheds load (`pressure`: the cap is near)
/// or when `max_in_flight` are already admitted (its body is read,
/// bounded in size and time, by [`read_body`] first).
async fn admit(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if state.memory.shedding() {
        let line = state.memory.line().unwrap_or(0);
        let message = format!(
            "the server is near its memory cap (more than {} MiB of it cannot be reclaimed); retry later",
            line >> 20
        );
        return ApiError::overloaded(message, json!({ "memory_pressure": true })).into_response();
    }
    let limit = state.config.max_in_flight;
    let admitted = Held::take(&state.in_flight, 1);
    if admitted.before >= limit {
        let message = format!("the server already holds {limit} search requests; retry later");
        return ApiError::overloaded(message, json!({ "max_in_flight": limit })).into_response();
    }
    next.run(request).await
}

/// An amount added to an admission counter, taken back when the request ends (also when its
/// connection is dropped mid-way).
struct Held<'a> {
    counter: &'a AtomicUsize,
    amount: usize,
    /// The counter before this amount was added.
    before: usize,
}

impl<'a> Held<'a> {
    fn take(counter: &'a AtomicUsize, amount: usize) -> Held<'a> {
        let before = counter.fetch_add(amount, Ordering::AcqRel);
        Held { counter, amount, before }
    }

    /// Adds `extra` to what this holds.
    fn grow(&mut self, extra: usize) {
        self.counter.fetch_add(extra, Ordering::AcqRel);
        self.amount += extra;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.amount, Ordering::AcqRel);
    }
}

/// With an API key configured, `/v1/*` needs `Authorization: Bearer KEY` or `X-Api-Key: KEY`.
async fn require_api_key(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(expected) = state.config.api_key.as_deref() else {
        return next.run(request).await;
    };
    let headers = request.headers();
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer_token);
    let plain = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    let given = bearer.or(plain);
    if given.is_some_and(|key| constant_time_eq(key.as_bytes(), expected.as_bytes())) {
        return next.run(request).await;
    }
    let message = if given.is_some() { "the API key is wrong" } else { "an API key is required" };
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response()
}

/// The credentials of `Authorization: Bearer KEY`: the scheme in any case (RFC 9110 11.1),
/// then one or more spaces.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, key) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim_start())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn healthz(State(state): State<Arc<AppState>>) -> Json<Value> {
    let index = state.index.as_ref();
    let config = index.map(|i| i.config());
    Json(json!({
        "status": "ok",
        "docs": index.map(|i| i.len()),
        "live": index.map(|i| i.live_stats()),
        "reader": index.map(|i| i.reader_kind().name()),
        "codec": config.map(|c| &c.codec),
        "model": config.map(|c| &c.encoder.model),
        "model_dim": config.map(|c| c.encoder.model_dim),
        "data_dir_indexes": state.indexes.as_ref().map(|i| i.opened().len()),
        "streams": state.streams.is_some(),
        "open_streams": state.streams.as_ref().map(|s| s.streams.open_count()),
        "workers": state.pool.workers(),
        "io_waiters": state.pool.threads() - state.pool.workers(),
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
        waiting_io: state.pool.waiting_io(),
        workers: state.pool.workers(),
        docs: state.index.as_ref().map_or(0, |i| i.len()),
        request_bytes: state.in_flight_bytes(),
        request_byte_budget: state.config.max_in_flight_bytes.unwrap_or(usize::MAX),
        hot: state.index.as_ref().and_then(|i| i.hot_stats()),
        memory_shed: {
            let (episodes, refused) = state.memory.counts();
            (episodes, refused, state.memory.line().unwrap_or(0))
        },
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render(&gauges))
}

async fn openapi(Extension(document): Extension<Arc<Value>>) -> Json<Value> {
    Json(document.as_ref().clone())
}

/// `/healthz`, `/metrics` and `/openapi.json`.
fn system_api() -> Api {
    Api::default()
        .route(
            Operation { ok: "ok", ..Operation::new("get", "/healthz", "Liveness and index facts") },
            get(healthz),
        )
        .route(
            Operation {
                ok: "text/plain; version=0.0.4",
                ..Operation::new("get", "/metrics", "Prometheus text metrics")
            },
            get(metrics),
        )
        .route(
            Operation { ok: "OpenAPI 3.1", ..Operation::new("get", "/openapi.json", "This document") },
            get(openapi),
        )
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no endpoint at {}", request.uri().path()))
}

async fn method_not_allowed(request: Request) -> ApiError {
    let message = format!("{} is not allowed on {}", request.method(), request.uri().path());
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", message)
}
