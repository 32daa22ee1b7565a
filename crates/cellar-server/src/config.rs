//! How the server runs (`ServerConfig`) and the defaults of its limits: queue, admission, the
//! write lane, connections, and the byte budgets derived from the memory cap (`cap`). Below
//! `app` and everything else that reads the configuration; `lib.rs` re-exports it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::cap;

/// Connections served at once by default (`ServerConfig::max_connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Searches that may wait per worker by default. A search takes 5-30 ms here, so a full queue
/// already means 100-500 ms of waiting; a deeper one only holds more request bodies in memory
/// (a server under a memory cap was OOM-killed at 64 per worker under overload).
pub const QUEUE_PER_WORKER: usize = 16;

/// Searches per worker that may sleep on reads while others compute, by default (see
/// `bench/results/io-waiters.md`).
pub const IO_WAITERS_PER_WORKER: usize = 1;

/// Threads of the write lane: writes that encode text run there one at a time, beside the
/// search pool, so they never take its workers (the OS shares the cores between them).
pub const WRITE_LANE_THREADS: usize = 1;

/// Writes that may wait for the write lane before more are refused with 429. A text write may
/// take its whole deadline, so a deeper queue only holds bodies for writes that would expire.
pub const WRITE_LANE_QUEUE: usize = 4;

/// The default queue for `workers` threads: 16 per worker, and never less than the largest
/// batch, which is queued whole (a 64-query batch on 2 cores was otherwise always 429).
pub fn default_queue(workers: usize) -> usize {
    (QUEUE_PER_WORKER * workers).max(cellar_search::request::MAX_BATCH)
}

/// How the server runs; see `cellar serve --help` for each default.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    /// CPU slots of the pool: searches that compute at once.
    pub workers: usize,
    /// Threads of the pool beyond `workers`: searches that may sleep on their reads while
    /// `workers` others compute (see `pool`).
    pub io_waiters: usize,
    /// Searches that may wait for a worker before requests are refused with 429.
    pub queue_capacity: usize,
    /// Requests admitted at once (queued or running); beyond it, 429. A body is read first,
    /// bounded by `max_body_bytes` and `read_timeout`, so slow clients take no admission slot.
    pub max_in_flight: usize,
    /// Bytes of request bodies held at once (being read, queued or running; counted from their
    /// Content-Length before they are read); a request that would pass it gets 429 unless no
    /// other is held. `None`: [`default_in_flight_bytes`] when
    /// serving starts (unbounded without a memory cap).
    pub max_in_flight_bytes: Option<usize>,
    /// Time a request may take, queue included, before it is answered with 504.
    pub deadline: Duration,
    pub max_body_bytes: usize,
    /// Time a client may take to send its request head, and again its body: past it the
    /// connection is closed (head) or answered 408 (body), so slow clients hold nothing for long.
    pub read_timeout: Duration,
    /// When set, `/v1/*` requires it.
    pub api_key: Option<String>,
    /// Connections served at once; past it the server accepts no more until one closes (the
    /// kernel's backlog holds them), so idle or trickling clients cannot exhaust its file
    /// descriptors. Each idle one is closed after `read_timeout` without a request head.
    pub max_connections: usize,
    /// Bytes of read buffers the searches may hold at once (`cellar_core::io`'s budget; a read
    /// past it waits); `None`: [`default_read_buffer_bytes`] when serving starts.
    pub read_buffer_bytes: Option<usize>,
}

/// Most read-buffer bytes by default: 32 pooled buffers, enough for about ten searches reading
/// at once.
pub const MAX_READ_BUFFER_BYTES: usize = 64 << 20;

/// The read-buffer budget when none is given: half of what the process's memory cgroup may still
/// be charged once the index is open (so concurrent searches cannot push a capped server past
/// its cap), at least two pooled buffers, at most [`MAX_READ_BUFFER_BYTES`] (also without a cap).
pub fn default_read_buffer_bytes() -> usize {
    read_buffer_bytes_within(cap::memory_headroom())
}

pub(crate) fn read_buffer_bytes_within(headroom: Option<u64>) -> usize {
    let least = 2 * cellar_core::io::POOLED_BUFFER_BYTES;
    headroom
        .map_or(MAX_READ_BUFFER_BYTES, |h| {
            usize::try_from(h / 2).unwrap_or(usize::MAX).min(MAX_READ_BUFFER_BYTES)
        })
        .max(least)
}

/// The request-body budget when none is given: a quarter of what the process's memory cgroup
/// may still be charged once the index is open (the read buffers take half), unbounded without a
/// cap. A full queue of query-vector bodies (about 120 KB each as JSON numbers) otherwise got a
/// server capped at its footprint + 5% of a residual index OOM-killed under overload
/// (`bench/results/footprint-caps-client.md`).
pub fn default_in_flight_bytes() -> usize {
    in_flight_bytes_within(cap::memory_headroom())
}

pub(crate) fn in_flight_bytes_within(headroom: Option<u64>) -> usize {
    headroom.map_or(usize::MAX, |h| usize::try_from(h / 4).unwrap_or(usize::MAX))
}

impl ServerConfig {
    /// One worker per core, everything else its default.
    pub fn new(bind: SocketAddr) -> Self {
        ServerConfig::with_workers(bind, std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// `workers` CPU slots and the defaults that follow from them: an io waiter per worker, a
    /// queue of [`default_queue`], admission of the queue plus one request per pool thread.
    pub fn with_workers(bind: SocketAddr, workers: usize) -> Self {
        let io_waiters = workers * IO_WAITERS_PER_WORKER;
        ServerConfig {
            bind,
            workers,
            io_waiters,
            queue_capacity: default_queue(workers),
            max_in_flight: default_queue(workers) + workers + io_waiters,
            max_in_flight_bytes: None,
            deadline: Duration::from_secs(10),
            max_body_bytes: 2 << 20,
            read_timeout: Duration::from_secs(10),
            api_key: None,
            read_buffer_bytes: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// Threads of the CPU pool: searches that may be under way at once.
    pub fn threads(&self) -> usize {
        self.workers + self.io_waiters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_a_cap_requests_get_a_quarter_of_the_headroom_and_read_buffers_half() {
        let headroom = 40 << 20;
        assert_eq!(in_flight_bytes_within(Some(headroom)), 10 << 20);
        assert_eq!(read_buffer_bytes_within(Some(headroom)), 20 << 20);
        assert_eq!(in_flight_bytes_within(None), usize::MAX, "no cap: bounded by count only");
        assert_eq!(read_buffer_bytes_within(None), MAX_READ_BUFFER_BYTES);
    }
}
