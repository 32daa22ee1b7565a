//! What every API module shares: the state (`AppState`), body parsing (`parse_body`), and the
//! one path by which work reaches the CPU pool — queued all at once or refused with 429, run
//! only if its deadline has not passed when a worker takes it, waited for until the deadline
//! (504) — [`submit`] and [`Pending::wait`]; writes that encode text take the same path on a lane
//! of their own (`AppState::writes`), so they never hold every search worker. Also what a request
//! allocates beyond its body, charged against the in-flight byte budget ([`AppState::charge`]),
//! and answers serialized off the async runtime ([`json_off_runtime`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use cellar_core::stats::ms_since;
use cellar_core::CellarError;
use cellar_search::Index;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;
use tokio::sync::oneshot;

use crate::config::{ServerConfig, WRITE_LANE_QUEUE, WRITE_LANE_THREADS};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::pool::{CpuPool, Job};
use crate::registry::Indexes;

/// The streams' root and the encoder for documents and queries sent without vectors.
pub struct StreamsState {
    pub streams: cellar_stream::Streams,
    pub encoder: cellar_stream::encoding::LazyEncoder,
}

/// What every handler shares. A server has an index, the indexes of a data directory,
/// streaming collections, or any of them together.
pub struct AppState {
    pub index: Option<Arc<Index>>,
    pub indexes: Option<Arc<Indexes>>,
    pub streams: Option<StreamsState>,
    pub pool: CpuPool,
    /// The write lane: writes that encode text run here, one at a time, beside the searches'
    /// pool (a 4,096-document text write once held a search worker for 110 s).
    pub writes: CpuPool,
    pub metrics: Metrics,
    pub config: ServerConfig,
    /// Requests to `/v1` admitted and not yet answered.
    pub(crate) in_flight: AtomicUsize,
    /// Bytes of the `/v1` request bodies being read or admitted (see `routes::read_body`), and
    /// what the admitted requests are estimated to allocate ([`AppState::charge`]).
    pub(crate) in_flight_bytes: AtomicUsize,
    /// Whether the memory cap is near: admission refuses new work while it says so (`pressure`).
    pub memory: Arc<crate::pressure::Guard>,
}

impl AppState {
    pub fn new(index: Arc<Index>, config: ServerConfig) -> Arc<AppState> {
        AppState::with_streams(Some(index), None, config)
    }

    pub fn with_streams(
        index: Option<Arc<Index>>,
        streams: Option<StreamsState>,
        config: ServerConfig,
    ) -> Arc<AppState> {
        AppState::serving(index, None, streams, config)
    }

    /// A state serving what is given: an index, the indexes of a data directory, streams.
    pub fn serving(
        index: Option<Arc<Index>>,
        indexes: Option<Arc<Indexes>>,
        streams: Option<StreamsState>,
        config: ServerConfig,
    ) -> Arc<AppState> {
        AppState::guarded(index, indexes, streams, config, Arc::default())
    }

    /// [`AppState::serving`] with the memory guard that admission consults (`pressure::watch`).
    pub fn guarded(
        index: Option<Arc<Index>>,
        indexes: Option<Arc<Indexes>>,
        streams: Option<StreamsState>,
        config: ServerConfig,
        memory: Arc<crate::pressure::Guard>,
    ) -> Arc<AppState> {
        let pool = CpuPool::new(config.workers, config.io_waiters, config.queue_capacity);
        let writes = CpuPool::new(WRITE_LANE_THREADS, 0, WRITE_LANE_QUEUE);
        Arc::new(AppState {
            index,
            indexes,
            streams,
            pool,
            writes,
            metrics: Metrics::default(),
            config,
            in_flight: AtomicUsize::new(0),
            in_flight_bytes: AtomicUsize::new(0),
            memory,
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

    /// The data directory's indexes, or 404 on a server started without `--data-dir`.
    pub fn indexes(&self) -> Result<&Arc<Indexes>, ApiError> {
        self.indexes.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "this server serves no data directory (started without --data-dir)",
            )
        })
    }

    /// Every index open now (the one of `--index`, and those of `--data-dir` opened so far).
    pub fn open_indexes(&self) -> Vec<Arc<Index>> {
        let named = self.indexes.iter().flat_map(|i| i.opened());
        self.index.iter().cloned().chain(named).collect()
    }

    /// The streams, or 404 on a server started without them.
    pub fn streams(&self) -> Result<&StreamsState, ApiError> {
        self.streams.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "this server serves no streams (started without --streams)",
            )
        })
    }

    /// Requests admitted now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Bytes of the `/v1` request bodies being read or admitted now, and what those requests
    /// were charged for what they allocate.
    pub fn in_flight_bytes(&self) -> usize {
        self.in_flight_bytes.load(Ordering::Acquire)
    }

    /// Charges `bytes` that a request will allocate (its answer, its filter's evaluation)
    /// against `max_in_flight_bytes` until the returned guard is dropped, or refuses with 429
    /// when they do not fit beside what other requests hold. `own` is what this request already
    /// holds (its body): a request alone always passes, whatever its size.
    pub fn charge(&self, bytes: usize, own: usize) -> Result<Charged<'_>, ApiError> {
        let budget = self.config.max_in_flight_bytes.unwrap_or(usize::MAX);
        let before = self.in_flight_bytes.fetch_add(bytes, Ordering::AcqRel);
        let charged = Charged { counter: &self.in_flight_bytes, bytes };
        let others = before.saturating_sub(own);
        if others == 0 || before.saturating_add(bytes) <= budget {
            return Ok(charged);
        }
        let message = format!(
            "this request would allocate about {bytes} bytes (its answer and filter), and the server \
             already holds {before} bytes of requests of the {budget} it takes at once (a quarter of its \
             memory cap's headroom unless --max-in-flight-mib says otherwise); retry later, or ask for \
             fewer hits"
        );
        Err(ApiError::overloaded(message, json!({ "max_in_flight_bytes": budget, "charged_bytes": bytes })))
    }
}

/// Bytes charged against the in-flight budget by [`AppState::charge`], given back on drop.
pub struct Charged<'a> {
    counter: &'a AtomicUsize,
    bytes: usize,
}

impl Drop for Charged<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// `value` as a JSON answer, serialized on a blocking thread: a large answer (10,000 hits with
/// their texts) never holds the async runtime, so `/healthz` and every other request go on
/// being answered meanwhile (serializing 553 MB on it once stalled `/healthz` for 3.3 s).
pub async fn json_off_runtime<T: Serialize + Send + 'static>(value: T) -> Result<Response, ApiError> {
    let bytes = tokio::task::spawn_blocking(move || serde_json::to_vec(&value))
        .await
        .map_err(|e| CellarError::internal(format!("serializing the answer stopped: {e}")))?
        .map_err(|e| CellarError::internal(format!("the answer does not serialize: {e}")))?;
    let mut response = bytes.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// Parses a JSON body, turning every way it can be wrong into a typed 4xx.
pub fn parse_body<T: DeserializeOwned>(
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
    let mut deserializer = serde_json::Deserializer::from_slice(&body);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        ApiError::from_json(e.into_inner(), &path)
    })?;
    deserializer.end().map_err(|e| ApiError::from_json(e, "."))?;
    Ok(value)
}

/// What a pool worker sends back for one job.
enum Outcome<T> {
    /// The job's result; `queue_ms` is how long it waited for a worker.
    Done { result: cellar_core::Result<T>, queue_ms: f64 },
    /// The deadline had passed before a worker picked it up: not run at all.
    Expired,
}

/// Where one queued job's result will arrive.
pub struct Pending<T>(oneshot::Receiver<Outcome<T>>);

/// Queues every job at once (or none: 429) with one deadline. A job gets the milliseconds it
/// waited for a worker.
pub fn submit<T, F>(state: &AppState, works: Vec<F>, deadline: Instant) -> Result<Vec<Pending<T>>, ApiError>
where
    T: Send + 'static,
    F: FnOnce() -> cellar_core::Result<T> + Send + 'static,
{
    submit_to(&state.pool, "queue", works, deadline)
}

/// [`submit`] to `pool` (the searches' or the write lane), which `what` names in a 429.
pub fn submit_to<T, F>(
    pool: &CpuPool,
    what: &str,
    works: Vec<F>,
    deadline: Instant,
) -> Result<Vec<Pending<T>>, ApiError>
where
    T: Send + 'static,
    F: FnOnce() -> cellar_core::Result<T> + Send + 'static,
{
    let enqueued = Instant::now();
    let (jobs, pending): (Vec<Job>, Vec<Pending<T>>) = works
        .into_iter()
        .map(|work| {
            let (tx, rx) = oneshot::channel();
            let job: Job = Box::new(move || {
                let queue_ms = ms_since(enqueued);
                let outcome = if Instant::now() >= deadline {
                    Outcome::Expired
                } else {
                    Outcome::Done { result: work(), queue_ms }
                };
                let _ = tx.send(outcome);
            });
            (job, Pending(rx))
        })
        .unzip();
    pool.try_submit_all(jobs).map_err(|_| {
        let capacity = pool.capacity();
        let message = format!("the server's {what} is full ({capacity} jobs waiting); retry later");
        ApiError::overloaded(message, json!({ "queue_capacity": capacity }))
    })?;
    Ok(pending)
}

impl<T> Pending<T> {
    /// Waits for the result until the deadline; returns it with the time it queued (ms).
    pub async fn wait(self, state: &AppState, deadline: Instant) -> Result<(T, f64), ApiError> {
        let expired = || ApiError::deadline(state.config.deadline.as_millis() as u64);
        match tokio::time::timeout_at(deadline.into(), self.0).await {
            Err(_) | Ok(Ok(Outcome::Expired)) => Err(expired()),
            Ok(Err(_)) => Err(CellarError::internal("the worker stopped without answering").into()),
            Ok(Ok(Outcome::Done { result, queue_ms })) => Ok((result?, queue_ms)),
        }
    }
}

/// A path parameter, or a 400 naming what is wrong with it.
pub fn path<T>(
    extracted: Result<axum::extract::Path<T>, axum::extract::rejection::PathRejection>,
) -> Result<T, ApiError> {
    extracted
        .map(|axum::extract::Path(p)| p)
        .map_err(|e| ApiError::invalid(format!("request path: {}", e.body_text())))
}

/// Runs one job on the pool with the server's deadline and waits for it.
pub async fn run_blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce() -> cellar_core::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let deadline = Instant::now() + state.config.deadline;
    let pending = submit(state, vec![work], deadline)?.pop().expect("one job submitted");
    pending.wait(state, deadline).await.map(|(value, _)| value)
}

/// [`run_blocking`] on the write lane: for work that encodes text (an index's creation).
pub async fn run_on_write_lane<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce() -> cellar_core::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    let deadline = Instant::now() + state.config.deadline;
    let pending =
        submit_to(&state.writes, "write lane", vec![work], deadline)?.pop().expect("one job submitted");
    pending.wait(state, deadline).await.map(|(value, _)| value)
}
