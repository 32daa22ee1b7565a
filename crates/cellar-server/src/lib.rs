//! `cellar serve`: the HTTP/JSON API over one index.
//!
//! - `routes`: the axum router: assembles the API modules' routes, the system endpoints, the
//!   API-key check, admission and request counting
//! - `search_api`: `/v1/search` and `/v1/search/batch` (`SearchRequest` → `Index::plan` → pool)
//! - `docs_api`: `/v1/docs` (writes, one document's read and delete)
//! - `indexes`: `--data-dir DIR`: every index under DIR by name (`/v1/indexes/{name}/...`),
//!   created and dropped over the API or on disk; `registry`: those indexes, apart from HTTP
//! - `streams`: the streaming collections' endpoints (`/v1/streams/...`, `--streams DIR`)
//! - `ui`: the search console at `/ui` (page, script and style embedded from `ui/`)
//! - `app`: the shared state, body parsing, the one pool + deadline + 429 path (the search pool,
//!   or the write lane for writes that encode text), the charge of what a request allocates
//!   against the in-flight byte budget, answers serialized off the runtime
//! - `pool`: the fixed CPU pool with its bounded queue (searches never run on the async runtime)
//! - `openapi`: `Api` (routes registered with their operations) and the generated document
//! - `metrics`: Prometheus counters and histograms
//! - `cap`: the memory cap the process runs under (its cgroup's), for the read-buffer budget
//! - `error`: `{code, message, details}` with a status, mapped exhaustively from `CellarError`

pub mod app;
pub mod cap;
pub mod config;
pub mod docs_api;
pub mod error;
pub mod indexes;
pub mod metrics;
pub mod openapi;
pub mod pool;
pub mod pressure;
pub mod registry;
pub mod routes;
pub mod search_api;
pub mod streams;
pub mod ui;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cellar_core::{CellarError, Result};
use cellar_search::Index;

pub use app::{AppState, StreamsState};
pub use config::{
    default_in_flight_bytes, default_queue, default_read_buffer_bytes, ServerConfig, DEFAULT_MAX_CONNECTIONS,
    IO_WAITERS_PER_WORKER, MAX_READ_BUFFER_BYTES, QUEUE_PER_WORKER, WRITE_LANE_QUEUE, WRITE_LANE_THREADS,
};
use config::{in_flight_bytes_within, read_buffer_bytes_within};
pub use error::ApiError;
pub use routes::router;

/// The cap's headroom less `cached` bytes of hot-record caches; caches of more than half the
/// headroom are refused: the other half is what the server needs besides them under load
/// (read buffers, request bodies, and the page cache of BM25's postings and its own code, which
/// the cache would otherwise squeeze). With client vectors on SciFact, 4 MiB in a 14 MiB
/// headroom ran to saturation; 8 MiB in 20 got a server OOM-killed at 80 QPS, though that was
/// before a cached record had pages of its own and caches took 1.5x their size
/// (`bench/results/hot-cache-*.md`).
fn headroom_after_caches(headroom: Option<u64>, cached: usize) -> Result<Option<u64>> {
    match headroom {
        Some(h) if cached as u64 > h / 2 => Err(CellarError::InvalidInput(format!(
            "--cache-mib: {} MiB of hot-record cache is more than half of the {} MiB the memory cap leaves \
             once the index is open (at most {} MiB)",
            cached.div_ceil(1 << 20),
            h >> 20,
            (h / 2) >> 20
        ))),
        Some(h) => Ok(Some(h - cached as u64)),
        None => Ok(None),
    }
}

/// Serves `index` until SIGINT or SIGTERM; `on_ready` gets the bound address (port 0 resolved).
pub fn serve(index: Index, config: ServerConfig, on_ready: impl FnOnce(SocketAddr)) -> Result<()> {
    serve_with(Some(index), None, None, config, on_ready)
}

/// Serves an index, streaming collections, or both, until SIGINT or SIGTERM.
pub fn serve_with(
    index: Option<Index>,
    indexes: Option<registry::Indexes>,
    streams: Option<StreamsState>,
    config: ServerConfig,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<()> {
    if index.is_none() && indexes.is_none() && streams.is_none() {
        return Err(CellarError::InvalidInput(
            "serve an index, a data directory, streams, or any of them".into(),
        ));
    }
    // Both budgets from one reading of the cap's headroom, taken with the index open, less
    // what the hot-record caches will grow to.
    let headroom = headroom_after_caches(cap::memory_headroom(), cellar_core::io::hot::reserved_bytes())?;
    cellar_core::io::set_read_buffer_budget(
        config.read_buffer_bytes.unwrap_or_else(|| read_buffer_bytes_within(headroom)),
    );
    let mut config = config;
    config.max_in_flight_bytes.get_or_insert_with(|| in_flight_bytes_within(headroom));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cellar-net")
        .enable_all()
        .build()
        .map_err(|e| CellarError::Unsupported(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|e| CellarError::io(Path::new(&format!("tcp://{}", config.bind)), e))?;
        let address = listener.local_addr().map_err(|e| CellarError::io(Path::new("listener"), e))?;
        let memory = pressure::watch();
        let state = AppState::guarded(index.map(Arc::new), indexes.map(Arc::new), streams, config, memory);
        let merger = spawn_merger(state.clone());
        on_ready(address);
        let closing = state.clone();
        let served = serve_on(listener, state, shutdown_signal()).await;
        merger.store(true, std::sync::atomic::Ordering::SeqCst);
        // A segment a background flush is writing is committed before the process exits, not
        // written again from the frozen log at the next start.
        for index in closing.open_indexes() {
            if let Err(e) = index.finish_flush() {
                log::warn!(
                    "{}: the flush under way at shutdown ({e}); the next open writes it again",
                    index.dir().display()
                );
            }
        }
        served
    })
}

/// The served indexes' background merger: once a second, for each open index, a flush that
/// failed after its batches were logged tried again, or a background flush's segment committed
/// (`Index::retry_flush`); where the written
/// segments need it, a merge within the default budget (`MergeBudget`: 32 MiB/s of records
/// copied, 256 records held), one index at a time; and an IVF retrain where written documents
/// drifted past `DRIFT_RETRAIN` (`Index::needs_retrain`: writes wait while it runs, searches go
/// on with the old IVF), and a token-stage retrain where enough documents were written since it
/// was built (`Index::needs_tokens_retrain`). Returns the flag that stops it; a merge cut
/// short by the process's exit is as safe as a crash (the manifest commits it or it never
/// happened).
fn spawn_merger(state: Arc<AppState>) -> Arc<std::sync::atomic::AtomicBool> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let spawned = std::thread::Builder::new().name("cellar-merge".into()).spawn(move || {
        while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_secs(1));
            for index in state.open_indexes() {
                index.retry_flush();
                if index.needs_merge() {
                    merge_one(&index);
                }
                if index.needs_retrain() {
                    match index.retrain_ivf() {
                        Ok(config) => log::info!(
                            "{}: the IVF drifted past {}: retrained on {} documents",
                            index.dir().display(),
                            cellar_search::live::DRIFT_RETRAIN,
                            config.docs
                        ),
                        Err(e) => log::warn!("retraining the IVF of {} failed: {e}", index.dir().display()),
                    }
                }
                if index.needs_tokens_retrain() {
                    match index.retrain_tokens() {
                        Ok(config) => log::info!(
                            "{}: retrained the token stage over the written documents ({} postings)",
                            index.dir().display(),
                            config.build.postings
                        ),
                        Err(e) => {
                            log::warn!("retraining the token stage of {} failed: {e}", index.dir().display())
                        }
                    }
                }
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("no background merger (cannot start its thread: {e}); segments are not merged");
    }
    stop
}

fn merge_one(index: &Index) {
    match index.merge(&cellar_search::live::merge::MergeBudget::default()) {
        Ok(Some(report)) => log::info!(
            "merged {} segments: {} records kept, {} dropped, {:.1} s",
            report.segments,
            report.kept,
            report.dropped,
            report.secs
        ),
        Ok(None) => {}
        Err(e) => log::warn!("background merge of {} failed: {e}", index.dir().display()),
    }
}

/// Serves `state` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish. Every connection must send its request head within `read_timeout` or is closed (the
/// body's own timeout is `routes::read_body`'s), so idle or trickling clients cannot pile up.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let read_timeout = state.config.read_timeout;
    let connections = Arc::new(tokio::sync::Semaphore::new(state.config.max_connections.max(1)));
    let app = router(state);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        // A free connection slot first: at the limit, nothing more is accepted until one closes.
        let slot = tokio::select! {
            slot = connections.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors or a connection reset before it was accepted: the
                // listener itself is fine; wait a moment instead of spinning.
                Err(e) => {
                    log::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(read_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                log::debug!("connection closed: {e}");
            }
            drop(slot);
        });
    }
    log::info!("shutting down: finishing requests in flight");
    graceful.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let term = async {
        match terminate.as_mut() {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_caches_come_out_of_the_headroom_and_must_fit_in_it() {
        assert_eq!(headroom_after_caches(None, 8 << 20).unwrap(), None);
        assert_eq!(headroom_after_caches(Some(40 << 20), 8 << 20).unwrap(), Some(32 << 20));
        assert_eq!(headroom_after_caches(Some(40 << 20), 20 << 20).unwrap(), Some(20 << 20));
        let err = headroom_after_caches(Some(40 << 20), (20 << 20) + 1).unwrap_err();
        assert!(matches!(err, CellarError::InvalidInput(_)), "{err}");
        assert!(err.to_string().contains("at most 20 MiB"), "{err}");
    }
}

/// The router with `app`'s serialization off the runtime: at the top, since `app` sits below the
/// routes.
#[cfg(test)]
mod serving_tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Mutex};

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use serde::Serialize;
    use tower::ServiceExt;

    use super::*;
    use crate::app::json_off_runtime;

    /// An answer whose serialization says it started, then waits (at most 10 s) to be told to
    /// go on.
    struct Slow {
        started: Arc<AtomicBool>,
        go: Mutex<mpsc::Receiver<()>>,
    }

    impl Serialize for Slow {
        fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
            self.started.store(true, Ordering::SeqCst);
            let go = self.go.lock().unwrap().recv_timeout(Duration::from_secs(10));
            go.map_err(|_| serde::ser::Error::custom("never told to go on: the runtime was held"))?;
            s.serialize_str("done")
        }
    }

    /// Issue 43.5: `/healthz` stalled 3.3 s while a 553 MB answer was serialized on the async
    /// runtime. On a runtime of one thread, `/healthz` is answered while an answer is being
    /// serialized: the serialization goes on only once `/healthz` has answered.
    #[tokio::test(flavor = "current_thread")]
    async fn healthz_answers_while_an_answer_is_serialized() {
        let config = ServerConfig::new("127.0.0.1:0".parse().unwrap());
        let app = crate::router(AppState::serving(None, None, None, config));
        let (go, wait) = mpsc::channel();
        let started = Arc::new(AtomicBool::new(false));
        let slow = Slow { started: started.clone(), go: Mutex::new(wait) };
        let answer = tokio::spawn(json_off_runtime(slow));
        for _ in 0..2000 {
            if started.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(started.load(Ordering::SeqCst), "the serialization started");
        let health = app.oneshot(Request::get("/healthz").body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(health.status(), StatusCode::OK);
        let _ = go.send(());
        let answer = answer.await.unwrap().expect("the answer was serialized once /healthz answered");
        let body = axum::body::to_bytes(answer.into_body(), usize::MAX).await.unwrap();
        assert_eq!(&body[..], b"\"done\"");
    }
}
