//! Several indexes per server (`cellar serve --data-dir DIR`): every index directory under DIR
//! is served by its name, under `/v1/indexes/{name}/...` (search, batch search, documents: the
//! handlers of `search_api` and `docs_api`, on the named index), and indexes are created
//! (`PUT /v1/indexes/{name}` with their first documents) and dropped (`DELETE`) over the API as
//! well as on disk: a directory copied under DIR is served at its first request, one removed is
//! 404 from then on. Indexes open on first use; the least recently used are closed past
//! `--max-open-indexes`, and a PUT past `--max-indexes` is 409 `too_many_indexes`. A drop waits
//! for the requests on the index to finish and is 409 `locked` while another process holds the
//! index (`registry`). An index this process does not write follows the writes of the process
//! that does (`cellar add`, another server) at each request (`Index::behind`, `Index::follow`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::path::RawPathParams;
use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{FromRequestParts, Path as UrlPath, State};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::routing::get;
use axum::Json;
use cellar_core::CellarError;
use cellar_search::Index;
use serde::Serialize;
use serde_json::{json, Value};

use crate::app::{parse_body, path, run_blocking, run_on_write_lane, AppState};
use crate::error::ApiError;
use crate::openapi::{schema, Api, Operation};
use crate::registry::CreateIndex;

const INDEX_ERRORS: &[(u16, &str)] = &[
    (404, "No index of this name (or the server has no --data-dir)"),
    (
        409,
        "Another process holds the index, or it is being dropped (`locked`); a PUT past --max-indexes \
         (`too_many_indexes`)",
    ),
];

/// The data directory's endpoints; the named index's search and document endpoints are
/// registered by `search_api` and `docs_api`.
pub fn api() -> Api {
    let op = |method, path, summary, ok| Operation {
        ok,
        errors: INDEX_ERRORS,
        ..Operation::new(method, path, summary)
    };
    Api::default()
        .route(op("get", "/v1/indexes", "The indexes of the data directory", "{indexes: [name]}"), get(list))
        .route(
            op(
                "get",
                "/v1/indexes/{name}",
                "An index's facts: documents, codec, what was written",
                "{name, docs, codec, live}",
            ),
            get(info),
        )
        .route(
            Operation {
                request: Some(schema::<CreateIndex>),
                ..op(
                    "put",
                    "/v1/indexes/{name}",
                    "Create an index of its first documents (400 when the name is taken, 409 past \
                     --max-indexes)",
                    "{name, docs, codec}",
                )
            },
            axum::routing::put(create),
        )
        .route(
            op("delete", "/v1/indexes/{name}", "Drop an index and every file of it", "{dropped, index}"),
            axum::routing::delete(drop_index),
        )
}

/// The index a request addresses: the `{name}` of `/v1/indexes/{name}/...`, or the server's
/// `--index` on the routes without one; and the `{id}` of a document route. One handler serves
/// both forms of a route. The index is resolved by [`Target::index`] after the body is read, so
/// a bad body is a 400 before a missing index is a 404.
pub struct Target {
    name: Option<String>,
    id: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for Target {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Target, ApiError> {
        let mut target = Target { name: None, id: None };
        let params = match RawPathParams::from_request_parts(parts, state).await {
            Ok(params) => params,
            Err(RawPathParamsRejection::MissingPathParams(_)) => return Ok(target),
            Err(e) => return Err(ApiError::invalid(format!("request path: {}", e.body_text()))),
        };
        for (key, value) in &params {
            match key {
                "name" => target.name = Some(value.to_string()),
                "id" => target.id = Some(value.to_string()),
                _ => {}
            }
        }
        Ok(target)
    }
}

impl Target {
    /// The addressed index (a named one opened off the async runtime when it is not open yet,
    /// returned at once when it is), having loaded what another process wrote to it since this
    /// one last looked (off the runtime; two `stat` calls when nothing was);
    /// 404 when the server does not serve it.
    pub async fn index(&self, state: &AppState) -> Result<Arc<Index>, ApiError> {
        let index = match self.name.clone() {
            None => state.index()?.clone(),
            Some(name) => {
                let indexes = state.indexes()?.clone();
                match indexes.get_open(&name)? {
                    Some(index) => index,
                    None => {
                        let opened = tokio::task::spawn_blocking(move || indexes.get(&name)).await;
                        opened.map_err(|e| CellarError::internal(format!("opening the index: {e}")))??
                    }
                }
            }
        };
        if index.behind() {
            let follower = index.clone();
            let followed = tokio::task::spawn_blocking(move || follower.follow()).await;
            match followed {
                Ok(Ok(_)) => {}
                // The index answers as it was; the next request tries again.
                Ok(Err(e)) => log::warn!("{}: loading another process's writes: {e}", index.dir().display()),
                Err(e) => log::warn!("{}: loading another process's writes: {e}", index.dir().display()),
            }
        }
        Ok(index)
    }

    /// The `{id}` of a document route.
    pub fn id(&self) -> Result<String, ApiError> {
        self.id.clone().ok_or_else(|| CellarError::internal("a document route without {id}").into())
    }
}

#[derive(Serialize)]
struct Facts {
    name: String,
    docs: usize,
    codec: String,
    live: Value,
}

fn facts(name: &str, index: &Index) -> Facts {
    Facts {
        name: name.to_string(),
        docs: index.len(),
        codec: index.config().codec.clone(),
        live: serde_json::to_value(index.live_stats()).unwrap_or(Value::Null),
    }
}

async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "indexes": state.indexes()?.names() })))
}

async fn info(State(state): State<Arc<AppState>>, target: Target) -> Result<Json<Value>, ApiError> {
    let index = target.index(&state).await?;
    Ok(Json(json!(facts(target.name.as_deref().unwrap_or_default(), &index))))
}

async fn create(
    State(state): State<Arc<AppState>>,
    name: Result<UrlPath<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = path(name)?;
    let request: CreateIndex = parse_body(&headers, body)?;
    let indexes = state.indexes()?.clone();
    // Documents without vectors have their text encoded: on the write lane, as a write's are, so
    // a large creation (or a model's loading) never takes the searches' workers.
    let encodes_text = match &request.docs {
        Some(docs) => docs.iter().any(|d| d.vectors.is_none()),
        // An empty index of the server's model loads it.
        None => request.dim.is_none(),
    };
    // A refusal of the registry's own (`--max-indexes`) is mapped by `ApiError`.
    let work = move || Ok(indexes.create(&name, request).map(|index| facts(&name, &index)));
    let created = if encodes_text {
        run_on_write_lane(&state, work).await??
    } else {
        run_blocking(&state, work).await??
    };
    Ok(Json(json!(created)))
}

async fn drop_index(
    State(state): State<Arc<AppState>>,
    name: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let name = path(name)?;
    let indexes = state.indexes()?.clone();
    let dropped = {
        let name = name.clone();
        tokio::task::spawn_blocking(move || indexes.drop_index(&name)).await
    };
    dropped.map_err(|e| CellarError::internal(format!("dropping the index: {e}")))??;
    Ok(Json(json!({ "dropped": true, "index": name })))
}
