//! `/v1/docs` (and `/v1/indexes/{name}/docs`, the same on a named index of the data directory):
//! writes to the served index — a batch of adds, updates and deletes (the body *is*
//! a [`WriteRequest`], the type every front end shares), and the delete of one document. A
//! write is answered once it is durable and visible to the next search. One that encodes text
//! runs on the write lane (`AppState::writes`), never on the searches' workers, and is stopped
//! before anything is logged at its deadline (504), or as soon as its first chunks show that
//! its texts cannot be encoded by then (413); the other writes run on the CPU pool.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{delete, get, post};
use axum::Json;
use cellar_search::live::write::EncodeProgress;
use cellar_search::{Index, Metadata, WriteOp, WriteReport, WriteRequest};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

use crate::app::{parse_body, run_blocking, submit_to, AppState};
use crate::error::ApiError;
use crate::indexes::Target;
use crate::openapi::{schema, Api, Operation};

const WRITE_ERRORS: &[(u16, &str)] = &[
    (404, "An update or delete names a document the index does not hold, or no index is served"),
    (409, "Another process writes this index"),
    (413, "The batch's texts cannot be encoded within the deadline: nothing was written; send fewer"),
    (422, "A document's vectors have the wrong dimension"),
    (429, "The write lane is full"),
    (503, "The model that encodes the documents' text is unavailable"),
    (504, "The deadline passed: nothing was written if it passed while the texts were encoded"),
    (
        507,
        "The disk is full: nothing of the batch was written (a batch whose BM25 commit failed is taken back out of the log; a segment flush failing after the batch was logged fails no write)",
    ),
];

/// The write endpoints, on the `--index` and on a named index of the data directory.
pub fn api() -> Api {
    Api::default()
        .route_twins(
            Operation {
                request: Some(schema::<WriteRequest>),
                response: Some(schema::<WriteReport>),
                ok: "The batch is durable and searchable",
                errors: WRITE_ERRORS,
                ..Operation::new(
                    "post",
                    "/v1/docs",
                    "Add, update and delete documents: one batch, all or nothing, up to 4096 operations",
                )
            },
            "/v1/indexes/{name}/docs",
            post(write),
        )
        .route_twins(
            Operation {
                response: Some(schema::<WriteReport>),
                ok: "The document is deleted, durably",
                errors: WRITE_ERRORS,
                ..Operation::new("delete", "/v1/docs/{id}", "Delete one document by its id")
            },
            "/v1/indexes/{name}/docs/{id}",
            delete(delete_one),
        )
        .route_twins(
            Operation {
                response: Some(schema::<StoredDoc>),
                ok: "The document as stored",
                errors: &[(404, "No such index, or no searchable document has this id")],
                ..Operation::new("get", "/v1/docs/{id}", "Read one document by its id")
            },
            "/v1/indexes/{name}/docs/{id}",
            get(get_one),
        )
}

/// `GET /v1/docs/{id}`'s answer.
#[derive(Serialize, JsonSchema)]
struct StoredDoc {
    id: String,
    /// The internal id its current version has (search hits carry it too).
    internal_id: u32,
    title: String,
    text: String,
    #[serde(skip_serializing_if = "Metadata::is_empty")]
    metadata: Metadata,
}

async fn get_one(State(state): State<Arc<AppState>>, target: Target) -> Result<Json<StoredDoc>, ApiError> {
    let (index, id) = (target.index(&state).await?, target.id()?);
    let wanted = id.clone();
    let found = run_blocking(&state, move || {
        let Some(internal) = index.lookup(&wanted)? else { return Ok(None) };
        let doc = index.document(internal)?;
        Ok(Some(StoredDoc {
            id: doc.id,
            internal_id: internal.0,
            title: doc.title,
            text: doc.text,
            metadata: doc.metadata,
        }))
    })
    .await?;
    // `details.id` tells a missing document from a missing index (`cellar.Client.get` answers
    // `None` for the first and raises for the second).
    found.map(Json).ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no document {id:?}"))
            .with_details(json!({ "id": id }))
    })
}

/// Whether a write encodes text (an add or update without vectors).
fn encodes_text(request: &WriteRequest) -> bool {
    request.ops.iter().any(|op| op.document().is_some_and(|d| d.vectors.is_none()))
}

/// Why the write lane stopped a write before anything was logged.
enum Stopped {
    /// The deadline passed.
    Deadline,
    /// At the pace of the texts encoded so far the rest would finish past the deadline.
    TooSlow { progress: EncodeProgress, estimated: Duration },
}

/// Whether a write encoding its texts stops at `progress`, and why.
fn stop_at(progress: &EncodeProgress, deadline: Instant) -> Option<Stopped> {
    let now = Instant::now();
    if now >= deadline {
        return Some(Stopped::Deadline);
    }
    if progress.done_bytes == 0 || progress.done == progress.docs {
        return None;
    }
    let rest = (progress.bytes - progress.done_bytes) as f64 / progress.done_bytes as f64;
    let rest = progress.elapsed.mul_f64(rest);
    (now + rest > deadline)
        .then_some(Stopped::TooSlow { progress: *progress, estimated: progress.elapsed + rest })
}

/// The 413 of a write whose texts would be encoded past the deadline.
fn too_slow(progress: &EncodeProgress, estimated: Duration, deadline: Duration) -> ApiError {
    let fits = (progress.docs as f64 * deadline.as_secs_f64() / estimated.as_secs_f64()) as usize;
    let message = format!(
        "encoding this write's {} texts ({} bytes) would take about {:.1} s at the pace of its first {} \
         ({:.1} s), past the server's deadline of {} ms: nothing was written; send fewer documents per \
         write (about {} fit now)",
        progress.docs,
        progress.bytes,
        estimated.as_secs_f64(),
        progress.done,
        progress.elapsed.as_secs_f64(),
        deadline.as_millis(),
        fits.max(1)
    );
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "write_too_large", message).with_details(json!({
        "docs": progress.docs,
        "estimated_ms": estimated.as_millis() as u64,
        "deadline_ms": deadline.as_millis() as u64,
        "docs_that_fit": fits,
    }))
}

async fn run_write(
    state: &Arc<AppState>,
    index: Arc<Index>,
    request: WriteRequest,
) -> Result<Json<WriteReport>, ApiError> {
    if !encodes_text(&request) {
        return Ok(Json(run_blocking(state, move || index.write(request)).await?));
    }
    let deadline = Instant::now() + state.config.deadline;
    let work = move || -> cellar_core::Result<Result<WriteReport, Stopped>> {
        let mut stopped = None;
        let written = index.write_checked(request, &mut |progress| {
            stopped = stop_at(progress, deadline);
            stopped.is_none()
        })?;
        Ok(written.ok_or_else(|| stopped.expect("a write stops only when told why")))
    };
    let pending = submit_to(&state.writes, "write lane", vec![work], deadline)?;
    let (written, _) = pending.into_iter().next().expect("one write queued").wait(state, deadline).await?;
    match written {
        Ok(report) => Ok(Json(report)),
        Err(Stopped::Deadline) => Err(ApiError::deadline(state.config.deadline.as_millis() as u64)),
        Err(Stopped::TooSlow { progress, estimated }) => {
            Err(too_slow(&progress, estimated, state.config.deadline))
        }
    }
}

async fn write(
    State(state): State<Arc<AppState>>,
    target: Target,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<WriteReport>, ApiError> {
    let request: WriteRequest = parse_body(&headers, body)?;
    let index = target.index(&state).await?;
    run_write(&state, index, request).await
}

async fn delete_one(
    State(state): State<Arc<AppState>>,
    target: Target,
) -> Result<Json<WriteReport>, ApiError> {
    let (index, id) = (target.index(&state).await?, target.id()?);
    run_write(&state, index, WriteRequest { ops: vec![WriteOp::Delete(id)] }).await
}
