//! Counters and histograms the server keeps, rendered in the Prometheus text format by
//! `GET /metrics`. Lock-free on the hot path except the per-(endpoint, status) request counter.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cellar_search::search::{IoReport, Timings};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 16] =
    [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.2, 0.35, 0.5, 1.0, 2.5, 5.0];

/// Stages with a histogram each: a search's (`Timings::STAGES`; "queue" is the wait for a CPU
/// worker), then "request", the whole request as the server saw it (parse to reply).
fn stage_names() -> impl Iterator<Item = &'static str> {
    Timings::STAGES.into_iter().chain(["request"])
}

#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, seconds: f64) {
        if let Some(i) = BUCKETS.iter().position(|&b| seconds <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// Everything `/metrics` reports that the server counts itself.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    stages: [Histogram; Timings::STAGES.len() + 1],
    read_calls: AtomicU64,
    read_pages: AtomicU64,
    read_bytes: AtomicU64,
    searches: AtomicU64,
}

/// Gauges read at render time.
pub struct Gauges {
    pub queue_depth: usize,
    pub queue_capacity: usize,
    pub busy_workers: usize,
    pub waiting_io: usize,
    pub workers: usize,
    pub docs: usize,
    pub request_bytes: usize,
    pub request_byte_budget: usize,
    /// The served index's hot-record cache, when it has one.
    pub hot: Option<cellar_core::io::hot::HotStats>,
    /// The memory guard's shedding episodes and refusals, and its line (0: no cap watched).
    pub memory_shed: (u64, u64, u64),
}

impl Metrics {
    pub fn count_request(&self, endpoint: &str, status: u16) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *requests.entry((endpoint.to_string(), status)).or_default() += 1;
    }

    fn observe(&self, stage: &str, ms: f64) {
        let i = stage_names().position(|s| s == stage).expect("a known stage");
        self.stages[i].observe(ms / 1e3);
    }

    pub fn observe_request(&self, ms: f64) {
        self.observe("request", ms);
    }

    /// Records one finished search: its stage timings, its wait in the queue and its reads.
    pub fn observe_search(&self, timings: &Timings, io: &IoReport) {
        for (stage, ms) in timings.stages() {
            self.observe(stage, ms);
        }
        self.read_calls.fetch_add(io.read_calls, Ordering::Relaxed);
        self.read_pages.fetch_add(io.pages, Ordering::Relaxed);
        self.read_bytes.fetch_add(io.bytes_read, Ordering::Relaxed);
        self.searches.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::new();
        header(&mut out, "cellar_requests_total", "counter", "HTTP requests by endpoint and status");
        for ((endpoint, status), n) in self.requests.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "cellar_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}");
        }
        header(&mut out, "cellar_stage_seconds", "histogram", "Time per pipeline stage of a search");
        for (stage, histogram) in stage_names().zip(&self.stages) {
            histogram.render(&mut out, "cellar_stage_seconds", &format!("stage=\"{stage}\""));
        }
        let counters = [
            ("cellar_searches_total", "Searches answered", &self.searches),
            ("cellar_read_calls_total", "Read calls issued by the vector reader", &self.read_calls),
            ("cellar_read_pages_total", "4 KiB pages read by the vector reader", &self.read_pages),
            ("cellar_read_bytes_total", "Bytes read by the vector reader", &self.read_bytes),
        ];
        for (name, help, value) in counters {
            header(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        let (episodes, shed) = (gauges.memory_shed.0, gauges.memory_shed.1);
        let memory = [
            (
                "cellar_memory_shed_episodes_total",
                "Times the server started refusing requests near its memory cap",
                episodes,
            ),
            ("cellar_memory_shed_requests_total", "Requests refused (429) near the memory cap", shed),
        ];
        for (name, help, value) in memory {
            header(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {value}");
        }
        let rss = resident_bytes().unwrap_or(0);
        let hot = gauges.hot;
        let gauges = [
            ("cellar_queue_depth", "Searches waiting for a CPU worker", gauges.queue_depth as u64),
            ("cellar_queue_capacity", "Most searches that may wait", gauges.queue_capacity as u64),
            ("cellar_busy_workers", "Searches computing (above the workers for a moment when searches back from I/O found every slot taken)", gauges.busy_workers as u64),
            (
                "cellar_searches_waiting_io",
                "Searches sleeping on their reads, CPU given back",
                gauges.waiting_io as u64,
            ),
            ("cellar_workers", "CPU workers (searches that compute at once)", gauges.workers as u64),
            ("cellar_index_docs", "Documents in the index", gauges.docs as u64),
            (
                "cellar_request_bytes_in_flight",
                "Bytes of the request bodies being read or admitted",
                gauges.request_bytes as u64,
            ),
            (
                "cellar_request_byte_budget",
                "Most bytes of request bodies admitted at once (0: unbounded)",
                if gauges.request_byte_budget == usize::MAX { 0 } else { gauges.request_byte_budget as u64 },
            ),
            ("cellar_process_rss_bytes", "Resident set size of the server process", rss),
            (
                "cellar_memory_shed_line_bytes",
                "Unreclaimable charge of the memory cgroup past which requests are refused (0: no cap)",
                gauges.memory_shed.2,
            ),
            (
                "cellar_read_buffer_bytes",
                "Read buffers held by searches",
                cellar_core::io::read_buffers_in_use() as u64,
            ),
            (
                "cellar_read_buffer_budget_bytes",
                "Most read buffers searches may hold (0: unbounded)",
                cellar_core::io::read_buffer_budget() as u64,
            ),
        ];
        for (name, help, value) in gauges {
            header(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {value}");
        }
        if let Some(hot) = hot {
            render_hot(&mut out, &hot);
        }
        out
    }
}

/// The hot-record cache's counters and gauges.
fn render_hot(out: &mut String, hot: &cellar_core::io::hot::HotStats) {
    let metrics = [
        ("cellar_hot_cache_hits_total", "counter", "Records served from the hot-record cache", hot.hits),
        ("cellar_hot_cache_misses_total", "counter", "Records looked up and not cached (read)", hot.misses),
        ("cellar_hot_cache_admitted_total", "counter", "Records the cache took in", hot.admitted),
        (
            "cellar_hot_cache_evicted_total",
            "counter",
            "Records the cache let go for more frequent ones",
            hot.evicted,
        ),
        (
            "cellar_hot_cache_rejected_total",
            "counter",
            "Records read while the cache was full and less frequent than its residents",
            hot.rejected,
        ),
        ("cellar_hot_cache_bytes", "gauge", "Bytes the hot-record cache holds", hot.resident_bytes),
        (
            "cellar_hot_cache_capacity_bytes",
            "gauge",
            "Most bytes the hot-record cache holds",
            hot.capacity_bytes,
        ),
        ("cellar_hot_cache_records", "gauge", "Records in the hot-record cache", hot.records),
    ];
    for (name, kind, help, value) in metrics {
        header(out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Resident set size of this process, from `/proc/self/statm`.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * page.max(1) as u64)
}
