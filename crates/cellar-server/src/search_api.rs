//! `/v1/search` and `/v1/search/batch` (and `/v1/indexes/{name}/search[/batch]`, the same on a
//! named index of the data directory): the body is a [`SearchRequest`] (or a batch of them),
//! planned against the index on the async runtime — every user error is a 4xx before anything
//! is queued — then executed on the CPU pool.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Json;
use cellar_search::request::MAX_BATCH;
use cellar_search::{BatchRequest, Index, Plan, SearchRequest, SearchResponse};
use schemars::JsonSchema;
use serde::Serialize;

use crate::app::{parse_body, submit, AppState, Pending};
use crate::error::{ApiError, ErrorBody};
use crate::indexes::Target;
use crate::openapi::{schema, Api, Operation};

const SEARCH_ERRORS: &[(u16, &str)] = &[
    (404, "The server serves no index (started with --streams only)"),
    (422, "A query vector has the wrong dimension"),
    (503, "The query encoder's model is unavailable"),
];

/// The search endpoints, on the `--index` and on a named index of the data directory.
pub fn api() -> Api {
    Api::default()
        .route_twins(
            Operation {
                request: Some(schema::<SearchRequest>),
                response: Some(schema::<SearchResponse>),
                ok: "Ranked hits",
                errors: SEARCH_ERRORS,
                ..Operation::new("post", "/v1/search", "Search one query")
            },
            "/v1/indexes/{name}/search",
            post(search),
        )
        .route_twins(
            Operation {
                request: Some(schema::<BatchRequest>),
                response: Some(schema::<BatchResponse>),
                ok: "One result per query, in order: a SearchResponse or {\"error\": ErrorBody}",
                errors: SEARCH_ERRORS,
                ..Operation::new("post", "/v1/search/batch", "Search up to 64 queries")
            },
            "/v1/indexes/{name}/search/batch",
            post(search_batch),
        )
}

/// Queues the plans' searches at once (or none: 429).
fn queue(
    state: &Arc<AppState>,
    index: &Arc<Index>,
    plans: Vec<Plan>,
    deadline: Instant,
) -> Result<Vec<Pending<SearchResponse>>, ApiError> {
    let works: Vec<_> = plans
        .into_iter()
        .map(|plan| {
            let index = index.clone();
            move || index.execute(plan)
        })
        .collect();
    submit(state, works, deadline)
}

/// Waits for one answer until the deadline and records its metrics.
async fn answer(
    state: &AppState,
    pending: Pending<SearchResponse>,
    deadline: Instant,
) -> Result<SearchResponse, ApiError> {
    let (mut response, queue_ms) = pending.wait(state, deadline).await?;
    response.timings.queue_ms = queue_ms;
    state.metrics.observe_search(&response.timings, &response.io);
    Ok(response)
}

async fn search(
    State(state): State<Arc<AppState>>,
    target: Target,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<SearchResponse>, ApiError> {
    let request: SearchRequest = parse_body(&headers, body)?;
    let index = target.index(&state).await?;
    let plan = index.plan(request)?;
    let deadline = Instant::now() + state.config.deadline;
    let pending = queue(&state, &index, vec![plan], deadline)?.pop().expect("one search queued");
    Ok(Json(answer(&state, pending, deadline).await?))
}

/// One query's entry in a batch answer.
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
enum BatchItem {
    Answer(Box<SearchResponse>),
    Error { error: ErrorBody },
}

/// `POST /v1/search/batch`'s answer.
#[derive(Serialize, JsonSchema)]
struct BatchResponse {
    results: Vec<BatchItem>,
}

impl From<ApiError> for BatchItem {
    fn from(error: ApiError) -> Self {
        BatchItem::Error { error: error.into_body() }
    }
}

/// Each query of a batch succeeds or fails on its own; the batch is queued whole or refused.
async fn search_batch(
    State(state): State<Arc<AppState>>,
    target: Target,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<BatchResponse>, ApiError> {
    let request: BatchRequest = parse_body(&headers, body)?;
    let index = target.index(&state).await?;
    let n = request.queries.len();
    if n == 0 || n > MAX_BATCH {
        return Err(ApiError::invalid(format!("a batch holds 1 to {MAX_BATCH} queries, got {n}")));
    }
    // Per query either its error already (Some) or a slot its answer fills (None).
    let mut plans = Vec::new();
    let slots: Vec<Option<BatchItem>> = request
        .queries
        .into_iter()
        .map(|q| match index.plan(q) {
            Ok(plan) => {
                plans.push(plan);
                None
            }
            Err(e) => Some(BatchItem::from(ApiError::from(e))),
        })
        .collect();
    let deadline = Instant::now() + state.config.deadline;
    let mut pending = queue(&state, &index, plans, deadline)?.into_iter();
    let mut results = Vec::with_capacity(slots.len());
    for slot in slots {
        let item = match slot {
            Some(error) => error,
            None => {
                let one = pending.next().expect("one answer per planned query");
                match answer(&state, one, deadline).await {
                    Ok(response) => BatchItem::Answer(Box::new(response)),
                    Err(e) => BatchItem::from(e),
                }
            }
        };
        results.push(item);
    }
    Ok(Json(BatchResponse { results }))
}
