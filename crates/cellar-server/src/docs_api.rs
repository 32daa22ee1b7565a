//! `/v1/docs` (and `/v1/indexes/{name}/docs`, the same on a named index of the data directory):
//! writes to the served index — a batch of adds, updates and deletes (the body *is*
//! a [`WriteRequest`], the type every front end shares), and the delete of one document. A
//! write runs on the CPU pool (its texts are encoded there) and is answered once it is durable
//! and visible to the next search.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{delete, get, post};
use axum::Json;
use cellar_core::CellarError;
use cellar_search::{Index, Metadata, WriteOp, WriteReport, WriteRequest};
use schemars::JsonSchema;
use serde::Serialize;

use crate::app::{parse_body, run_blocking, AppState};
use crate::error::ApiError;
use crate::indexes::Target;
use crate::openapi::{schema, Api, Operation};

const WRITE_ERRORS: &[(u16, &str)] = &[
    (404, "An update or delete names a document the index does not hold, or no index is served"),
    (409, "Another process writes this index"),
    (422, "A document's vectors have the wrong dimension"),
    (503, "The model that encodes the documents' text is unavailable"),
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
    let found = run_blocking(&state, move || {
        let internal =
            index.lookup(&id)?.ok_or_else(|| CellarError::NotFound(format!("no document {id:?}")))?;
        let doc = index.document(internal)?;
        Ok(StoredDoc {
            id: doc.id,
            internal_id: internal.0,
            title: doc.title,
            text: doc.text,
            metadata: doc.metadata,
        })
    })
    .await?;
    Ok(Json(found))
}

async fn run_write(
    state: &Arc<AppState>,
    index: Arc<Index>,
    request: WriteRequest,
) -> Result<Json<WriteReport>, ApiError> {
    Ok(Json(run_blocking(state, move || index.write(request)).await?))
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
