//! `/v1/search` and `/v1/search/batch` (and `/v1/indexes/{name}/search[/batch]`, the same on a
//! named index of the data directory): the body is a [`SearchRequest`] (or a batch of them),
//! planned against the index on the async runtime — every user error is a 4xx before anything
//! is queued — then charged what its answer and filter will allocate against the in-flight byte
//! budget (429 when that does not fit), executed on the CPU pool, and serialized off the
//! runtime. A batch asks for at most `MAX_BATCH_HITS` hits in all.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use cellar_search::filter::MAX_FILTER_VALUES;
use cellar_search::request::{DEFAULT_K, MAX_BATCH, MAX_BATCH_HITS, MAX_K};
use cellar_search::{BatchRequest, Index, Plan, SearchRequest, SearchResponse};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

use crate::app::{json_off_runtime, parse_body, submit, AppState, Pending};
use crate::error::{ApiError, ErrorBody};
use crate::indexes::Target;
use crate::openapi::{schema, Api, Operation};

const SEARCH_ERRORS: &[(u16, &str)] = &[
    (404, "The server serves no index (started with --streams only)"),
    (422, "A query vector has the wrong dimension"),
    (429, "The server is full: its queue, its admitted requests, or the bytes they hold and allocate"),
    (503, "The query encoder's model is unavailable"),
];

/// Bytes a hit is charged without its title and text: the hit as the search builds it and again
/// as JSON.
const HIT_BYTES: usize = 512;
/// Bytes a hit's title and text are charged when the answer carries them: 640,000 hits of
/// SciFact's documents (a 553 MB answer) took 1.06 GB of peak RSS, 1.7 KB a hit. A collection
/// of longer documents may take more; the estimate only has to keep many large answers from
/// being built at once.
const HIT_TEXT_BYTES: usize = 2048;
/// Bytes evaluating one value of a filter is charged (its term query and scorer): 255 `in`s of
/// 1,024 values took 350 MiB, 1.4 KB a value.
const FILTER_VALUE_BYTES: usize = 1536;

/// What a search is charged against the in-flight byte budget before it runs: its answer (`k`
/// hits, at most the index's documents, with or without their text) and its filter's
/// evaluation (per value, and a bit per document for the set it matches).
fn cost(request: &SearchRequest, docs: usize) -> usize {
    let hits = request.k.unwrap_or(DEFAULT_K).min(MAX_K).min(docs.max(1));
    let per_hit = HIT_BYTES + if request.include_text.unwrap_or(true) { HIT_TEXT_BYTES } else { 0 };
    let filter = request
        .filter
        .as_ref()
        .map_or(0, |f| f.values().min(MAX_FILTER_VALUES) * FILTER_VALUE_BYTES + docs.div_ceil(8));
    hits * per_hit + filter
}

/// The bytes of a body already read, which the request holds against the budget.
fn body_len(body: &Result<Bytes, BytesRejection>) -> usize {
    body.as_ref().map_or(0, |b| b.len())
}

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
                ..Operation::new(
                    "post",
                    "/v1/search/batch",
                    "Search up to 64 queries asking for at most 10,000 hits in all",
                )
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
) -> Result<Response, ApiError> {
    let own = body_len(&body);
    let request: SearchRequest = parse_body(&headers, body)?;
    let index = target.index(&state).await?;
    let bytes = cost(&request, index.len());
    let plan = index.plan(request)?;
    let _charged = state.charge(bytes, own)?;
    let deadline = Instant::now() + state.config.deadline;
    let pending = queue(&state, &index, vec![plan], deadline)?.pop().expect("one search queued");
    json_off_runtime(answer(&state, pending, deadline).await?).await
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
) -> Result<Response, ApiError> {
    let own = body_len(&body);
    let request: BatchRequest = parse_body(&headers, body)?;
    let index = target.index(&state).await?;
    request.check().map_err(|message| {
        ApiError::invalid(message)
            .with_details(json!({ "max_batch": MAX_BATCH, "max_batch_hits": MAX_BATCH_HITS }))
    })?;
    // Per query either its error already (Some) or a slot its answer fills (None).
    let (mut plans, mut bytes) = (Vec::new(), 0);
    let docs = index.len();
    let slots: Vec<Option<BatchItem>> = request
        .queries
        .into_iter()
        .map(|q| {
            let cost = cost(&q, docs);
            match index.plan(q) {
                Ok(plan) => {
                    plans.push(plan);
                    bytes += cost;
                    None
                }
                Err(e) => Some(BatchItem::from(ApiError::from(e))),
            }
        })
        .collect();
    let _charged = state.charge(bytes, own)?;
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
    json_off_runtime(BatchResponse { results }).await
}
