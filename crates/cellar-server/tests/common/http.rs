//! HTTP helpers of the in-process router tests (`router.rs`, `bounds.rs`): the router over the
//! shared index, requests and their answers, and a pool held busy.
#![allow(dead_code)] // each test binary uses some of them

use std::sync::{mpsc, Arc};
use std::time::Duration;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use axum::Router;
use cellar_server::pool::Job;
use cellar_server::{router, AppState, ServerConfig};
use serde_json::Value;
use tower::ServiceExt;

use super::index;

pub fn app_with(config: ServerConfig) -> (Arc<AppState>, Router) {
    let state = AppState::new(index(), config);
    (state.clone(), router(state))
}

pub fn post(path: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path).header("content-type", "application/json").body(body.into()).unwrap()
}

pub async fn call(app: &Router, request: Request<Body>) -> (StatusCode, Value, Option<String>) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
    let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value, retry)
}

pub async fn search(app: &Router, body: Value) -> (StatusCode, Value) {
    let (status, value, _) = call(app, post("/v1/search", body.to_string())).await;
    (status, value)
}

/// Occupies the pool's only worker until the returned sender is dropped or sent to.
pub fn block_worker(state: &AppState) -> mpsc::Sender<()> {
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let job: Job = Box::new(move || {
        started_tx.send(()).unwrap();
        let _ = release_rx.recv();
    });
    state.pool.try_submit_all(vec![job]).unwrap();
    started_rx.recv().unwrap();
    release_tx
}

/// Polls (at most 5 s) until `depth` searches wait in the pool's queue.
pub async fn wait_for_queue_depth(state: &AppState, depth: usize) {
    for _ in 0..500 {
        if state.pool.queue_depth() == depth {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
