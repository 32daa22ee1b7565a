//! Several indexes per server (`cellar serve --data-dir DIR`): every index directory under DIR
//! is served by its name, under `/v1/indexes/{name}/...` (search, batch search, documents: the
//! handlers of `search_api` and `docs_api`, on the named index), and indexes are created
//! (`PUT /v1/indexes/{name}` with their first documents) and dropped (`DELETE`) over the API as
//! well as on disk: a directory copied under DIR is served at its first request, one removed is
//! 404 from then on. Indexes open on first use and stay open; a dropped one is renamed aside at
//! once (its name is free) and removed, while searches that hold it finish.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path as UrlPath, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::Json;
use cellar_core::codec::CodecKind;
use cellar_core::ids::check_name;
use cellar_core::{CellarError, IoContext};
type Result<T, E = CellarError> = std::result::Result<T, E>;
use cellar_search::config::CONFIG_FILE as INDEX_FILE;
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::{BuildOptions, DocIn, Index, OpenOptions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::app::{parse_body, path, run_blocking, AppState};
use crate::error::ApiError;
use crate::openapi::{schema, Api, Operation};

/// Prefix of a dropped index's directory until it is removed (never a valid index name).
const DROPPED_PREFIX: &str = ".dropped-";

/// The indexes under a data directory.
pub struct Indexes {
    root: PathBuf,
    options: OpenOptions,
    open: Mutex<HashMap<String, Arc<Index>>>,
}

/// `PUT /v1/indexes/{name}`: a new index of its first documents.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateIndex {
    /// 1 to 4096 documents as writes take them: all with `vectors` (an index of the caller's
    /// embeddings) or none (their text is encoded by the server's model).
    pub docs: Vec<DocIn>,
    /// Codec of the token vectors: f16, int8, residual1, residual2 or residual4 (default: the
    /// build's).
    #[serde(default)]
    pub codec: Option<String>,
    /// Also build the IVF first stage (the dense and ivf modes); default false.
    #[serde(default)]
    pub ivf: bool,
}

impl Indexes {
    /// The indexes under `root` (created when missing), opened with `options` on first use.
    /// What a crash left of a drop is removed.
    pub fn open(root: &Path, options: OpenOptions) -> Result<Indexes> {
        std::fs::create_dir_all(root).at(root)?;
        for entry in std::fs::read_dir(root).at(root)?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(DROPPED_PREFIX) {
                let path = entry.path();
                std::fs::remove_dir_all(&path).at(&path)?;
            }
        }
        Ok(Indexes { root: root.to_path_buf(), options, open: Mutex::new(HashMap::new()) })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Index>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dir(&self, name: &str) -> Result<PathBuf> {
        check_name("index name", name)?;
        Ok(self.root.join(name))
    }

    /// The index `name`: opened now if it is on disk and not open yet; `NotFound` when its
    /// directory holds no index (never created, dropped, or removed on disk).
    pub fn get(&self, name: &str) -> Result<Arc<Index>> {
        let dir = self.dir(name)?;
        let on_disk = dir.join(INDEX_FILE).is_file();
        let mut open = self.lock();
        if !on_disk {
            open.remove(name);
            return Err(CellarError::NotFound(format!("no index {name:?} in {}", self.root.display())));
        }
        if let Some(index) = open.get(name) {
            return Ok(index.clone());
        }
        let index = Arc::new(Index::open(&dir, self.options.clone())?);
        open.insert(name.to_string(), index.clone());
        Ok(index)
    }

    /// The indexes open now.
    pub fn opened(&self) -> Vec<Arc<Index>> {
        self.lock().values().cloned().collect()
    }

    /// Names of the indexes on disk, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.root)
            .map(|d| d.flatten().filter(|e| e.path().join(INDEX_FILE).is_file()).collect())
            .unwrap_or_else(|_| Vec::new())
            .into_iter()
            .map(|e: std::fs::DirEntry| e.file_name().to_string_lossy().into_owned())
            .filter(|name| check_name("index name", name).is_ok())
            .collect();
        names.sort();
        names
    }

    /// Builds the index `name` of `request`'s documents and opens it; refused when the name is
    /// taken.
    pub fn create(&self, name: &str, request: CreateIndex) -> Result<Arc<Index>> {
        let dir = self.dir(name)?;
        if dir.exists() {
            return Err(CellarError::invalid(format!("index {name:?} exists; drop it first")));
        }
        let mut options = BuildOptions::new("", &dir);
        options.model_dir = self.options.model_dir.clone();
        options.encode_threads = 1;
        if let Some(codec) = &request.codec {
            options.codec = codec.parse::<CodecKind>()?;
        }
        options.ivf = request.ivf.then(IvfBuildOptions::default);
        Index::create(&options, request.docs)?;
        self.get(name)
    }

    /// Drops the index `name`: its directory is renamed aside at once, then removed.
    pub fn drop_index(&self, name: &str) -> Result<()> {
        let dir = self.dir(name)?;
        let mut open = self.lock();
        if !dir.join(INDEX_FILE).is_file() {
            open.remove(name);
            return Err(CellarError::NotFound(format!("no index {name:?} in {}", self.root.display())));
        }
        let aside = self.root.join(format!("{DROPPED_PREFIX}{name}-{}", std::process::id()));
        std::fs::rename(&dir, &aside).at(&dir)?;
        open.remove(name);
        drop(open);
        std::fs::remove_dir_all(&aside).at(&aside)
    }
}

const INDEX_ERRORS: &[(u16, &str)] = &[
    (404, "No index of this name (or the server has no --data-dir)"),
    (409, "Another process holds the index"),
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
                    "Create an index of its first documents (400 when the name is taken)",
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

/// The named index of a request (opened off the async runtime when it is not open yet), or the
/// 404 of a server without a data directory.
pub async fn named(
    state: &AppState,
    name: Result<UrlPath<String>, PathRejection>,
) -> Result<Arc<Index>, ApiError> {
    let name = path(name)?;
    let indexes = state.indexes()?.clone();
    let opened = tokio::task::spawn_blocking(move || indexes.get(&name)).await;
    Ok(opened.map_err(|e| CellarError::internal(format!("opening the index: {e}")))??)
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

async fn info(
    State(state): State<Arc<AppState>>,
    name: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let index = named(&state, name).await?;
    let name = index.dir().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Json(json!(facts(&name, &index))))
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
    let created = run_blocking(&state, move || {
        let index = indexes.create(&name, request)?;
        Ok(facts(&name, &index))
    })
    .await?;
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
