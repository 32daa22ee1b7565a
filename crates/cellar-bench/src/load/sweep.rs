//! One offered-load level: requests leave at their scheduled times whether or not earlier ones
//! returned (open loop), each on its own connection; latency runs from the scheduled send time
//! to the last byte of the response, so a late client or a queueing server both show up in it
//! (no coordinated omission).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellar_core::stats::as_ms;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::task::JoinSet;

use super::client;
use super::quality::ServedAnswers;
use super::schedule::send_offsets;
use crate::harness::stats::{summarize, LatencySummary};

/// What one level sends and for how long.
#[derive(Clone, Debug)]
pub struct LevelPlan {
    pub qps: f64,
    /// Sent, excluded from the statistics.
    pub warmup: Duration,
    /// The measured window, after the warm-up.
    pub duration: Duration,
    /// Longest wait for stragglers after the last send time.
    pub drain: Duration,
    /// Per-request limit, counted from the scheduled send time.
    pub timeout: Duration,
    /// Requests in flight above which a due request is dropped by the client, not sent.
    pub max_in_flight: usize,
    pub seed: u64,
}

impl LevelPlan {
    pub fn window(&self) -> Duration {
        self.warmup + self.duration
    }
}

/// Ready-to-write requests, handed out in a seeded random order that cycles, or drawn with
/// Zipf-distributed popularity ([`RequestCycle::zipf`]).
pub struct RequestCycle {
    requests: Vec<Arc<[u8]>>,
    order: Vec<usize>,
    next: usize,
    /// Zipf draws: cumulative weights of `order`'s ranks, and the generator.
    popularity: Option<(Vec<f64>, StdRng)>,
}

impl RequestCycle {
    pub fn new(requests: Vec<Arc<[u8]>>, seed: u64) -> Self {
        assert!(!requests.is_empty(), "at least one request");
        let mut order: Vec<usize> = (0..requests.len()).collect();
        order.shuffle(&mut StdRng::seed_from_u64(seed));
        RequestCycle { requests, order, next: 0, popularity: None }
    }

    /// Requests drawn independently with Zipf popularity of exponent `s` (`s > 0`): the request
    /// of rank r (ranks a seeded shuffle) is drawn with probability proportional to `r^-s`, so a
    /// few queries come back often, as in a real query log.
    pub fn zipf(requests: Vec<Arc<[u8]>>, s: f64, seed: u64) -> Self {
        let mut cycle = RequestCycle::new(requests, seed);
        let mut total = 0.0;
        let cumulative = (1..=cycle.order.len())
            .map(|rank| {
                total += (rank as f64).powf(-s);
                total
            })
            .collect();
        cycle.popularity = Some((cumulative, StdRng::seed_from_u64(seed ^ 0x5a5a_a5a5)));
        cycle
    }

    /// The cycle `--zipf` and `--seed` ask for.
    pub fn for_args(requests: Vec<Arc<[u8]>>, args: &super::LoadArgs) -> Self {
        match args.zipf {
            Some(s) => RequestCycle::zipf(requests, s, args.seed),
            None => RequestCycle::new(requests, args.seed),
        }
    }

    /// The next request and the index of its query.
    pub fn next_request(&mut self) -> (usize, Arc<[u8]>) {
        let rank = match &mut self.popularity {
            Some((cumulative, rng)) => {
                let total = cumulative[cumulative.len() - 1];
                let u: f64 = rng.gen::<f64>() * total;
                cumulative.partition_point(|c| *c <= u).min(cumulative.len() - 1)
            }
            None => self.next % self.order.len(),
        };
        self.next += 1;
        let i = self.order[rank];
        (i, Arc::clone(&self.requests[i]))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Ok,
    Status(u16),
    /// The per-request limit passed.
    Timeout,
    /// Still running when the level's drain ended.
    Cut,
    Io(String),
}

#[derive(Clone, Debug)]
pub struct Record {
    /// Scheduled send time, from the level's start.
    pub scheduled: Duration,
    /// When the response was read in full (or the request gave up), from the level's start.
    pub done: Duration,
    pub outcome: Outcome,
    /// How late the client started it (its own lag, not the server's).
    pub send_lag: Duration,
}

impl Record {
    pub fn latency(&self) -> Duration {
        self.done.saturating_sub(self.scheduled)
    }
}

/// Everything one level saw, before summarising.
pub struct LevelRaw {
    pub records: Vec<Record>,
    /// Scheduled send times of the requests dropped by the in-flight cap.
    pub dropped: Vec<Duration>,
    pub wall: Duration,
}

/// Runs one level against `addr`. `start` is the level's time zero (normally now; a test passes
/// a time in the past to play a late client). Returns once every request has finished, timed
/// out or been cut at the end of the drain: at most `warmup + duration + drain` after `start`.
/// With `answers`, the body of every 200 answer is offered to it (served quality).
pub async fn run_level(
    addr: SocketAddr,
    cycle: &mut RequestCycle,
    plan: &LevelPlan,
    start: Instant,
    answers: Option<&Arc<ServedAnswers>>,
) -> LevelRaw {
    let offsets = send_offsets(plan.qps, plan.window(), plan.seed);
    let drain_end = start + plan.window() + plan.drain;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    let mut dropped = Vec::new();
    for offset in offsets {
        let due = start + offset;
        tokio::time::sleep_until(due.into()).await;
        if in_flight.load(Ordering::Relaxed) >= plan.max_in_flight {
            dropped.push(offset);
            continue;
        }
        in_flight.fetch_add(1, Ordering::Relaxed);
        let send_lag = Instant::now().saturating_duration_since(due);
        let (query, request) = cycle.next_request();
        let in_flight = Arc::clone(&in_flight);
        let answers = answers.map(Arc::clone);
        let deadline = due + plan.timeout;
        tasks.spawn(async move {
            let limit = deadline.min(drain_end);
            let outcome = match tokio::time::timeout_at(limit.into(), client::send(addr, &request)).await {
                Ok(Ok(r)) if r.status == 200 => {
                    if let Some(answers) = &answers {
                        answers.offer(query, &r.body);
                    }
                    Outcome::Ok
                }
                Ok(Ok(r)) => Outcome::Status(r.status),
                Ok(Err(e)) => Outcome::Io(format!("{:?}", e.kind())),
                Err(_) if deadline <= drain_end => Outcome::Timeout,
                Err(_) => Outcome::Cut,
            };
            in_flight.fetch_sub(1, Ordering::Relaxed);
            Record { scheduled: offset, done: start.elapsed(), outcome, send_lag }
        });
    }
    let mut records = Vec::with_capacity(tasks.len());
    while let Some(joined) = tasks.join_next().await {
        // A request task only panics on a bug; count it rather than lose the level.
        records.push(joined.unwrap_or_else(|e| Record {
            scheduled: Duration::ZERO,
            done: start.elapsed(),
            outcome: Outcome::Io(format!("task failed: {e}")),
            send_lag: Duration::ZERO,
        }));
    }
    records.sort_by_key(|r| r.scheduled);
    LevelRaw { records, dropped, wall: start.elapsed() }
}

/// One level's figures over its measured window (warm-up excluded): requests scheduled inside
/// `[warmup, warmup + duration)` for the counts and latencies, responses completed inside it for
/// the achieved throughput.
#[derive(Clone, Debug, Serialize)]
pub struct LevelStats {
    pub offered_qps: f64,
    /// Requests sent in the measured window (not counting client drops).
    pub sent: u64,
    pub warmup_sent: u64,
    pub completed_ok: u64,
    /// Failed requests other than 429 and timeouts, by HTTP status or I/O error kind.
    pub errors: BTreeMap<String, u64>,
    pub http_429: u64,
    pub timeouts: u64,
    /// Still running when the drain ended.
    pub cut_at_drain: u64,
    pub client_dropped: u64,
    /// 200 responses completed inside the measured window, per second of it.
    pub achieved_qps: f64,
    /// Over the measured window's 200 responses.
    pub latency: Option<LatencySummary>,
    /// (errors + 429 + timeouts + cut + dropped) / scheduled, in the measured window.
    pub failed_fraction: f64,
    /// 200 responses over the whole level, warm-up included (what the server's counters saw).
    pub ok_whole_level: u64,
    /// P99 and max of how late the client itself started the measured window's requests: when
    /// these approach the latencies, the load generator, not the server, is the bottleneck.
    pub client_send_lag_p99_ms: f64,
    pub client_send_lag_max_ms: f64,
    pub wall_s: f64,
}

impl LevelStats {
    pub fn from_raw(raw: &LevelRaw, plan: &LevelPlan) -> Self {
        let (lo, hi) = (plan.warmup, plan.window());
        let measured = |t: Duration| t >= lo && t < hi;
        let mut s = LevelStats {
            offered_qps: plan.qps,
            sent: 0,
            warmup_sent: 0,
            completed_ok: 0,
            errors: BTreeMap::new(),
            http_429: 0,
            timeouts: 0,
            cut_at_drain: 0,
            client_dropped: raw.dropped.iter().filter(|t| measured(**t)).count() as u64,
            achieved_qps: 0.0,
            latency: None,
            failed_fraction: 0.0,
            ok_whole_level: raw.records.iter().filter(|r| r.outcome == Outcome::Ok).count() as u64,
            client_send_lag_p99_ms: 0.0,
            client_send_lag_max_ms: 0.0,
            wall_s: raw.wall.as_secs_f64(),
        };
        let mut latencies = Vec::new();
        let mut lags = Vec::new();
        let mut ok_in_window = 0u64;
        for r in &raw.records {
            if r.outcome == Outcome::Ok && measured(r.done) {
                ok_in_window += 1;
            }
            if !measured(r.scheduled) {
                s.warmup_sent += u64::from(r.scheduled < lo);
                continue;
            }
            s.sent += 1;
            lags.push(as_ms(r.send_lag));
            match &r.outcome {
                Outcome::Ok => {
                    s.completed_ok += 1;
                    latencies.push(as_ms(r.latency()));
                }
                Outcome::Status(429) => s.http_429 += 1,
                Outcome::Status(code) => *s.errors.entry(code.to_string()).or_default() += 1,
                Outcome::Timeout => s.timeouts += 1,
                Outcome::Cut => s.cut_at_drain += 1,
                Outcome::Io(kind) => *s.errors.entry(format!("io:{kind}")).or_default() += 1,
            }
        }
        s.achieved_qps = ok_in_window as f64 / plan.duration.as_secs_f64();
        s.latency = summarize(&latencies);
        if let Some(lag) = summarize(&lags) {
            (s.client_send_lag_p99_ms, s.client_send_lag_max_ms) = (lag.p99_ms, lag.max_ms);
        }
        let scheduled = s.sent + s.client_dropped;
        let failed =
            s.errors.values().sum::<u64>() + s.http_429 + s.timeouts + s.cut_at_drain + s.client_dropped;
        s.failed_fraction = if scheduled == 0 { 0.0 } else { failed as f64 / scheduled as f64 };
        s
    }

    /// Past saturation: achieved below 80% of offered, or more than 5% of requests failed.
    pub fn saturated(&self) -> bool {
        self.achieved_qps < 0.8 * self.offered_qps || self.failed_fraction > 0.05
    }
}

#[cfg(test)]
mod tests {
    use super::super::testserver::{self, Behaviour};
    use super::*;

    fn plan(qps: f64, warmup: f64, duration: f64) -> LevelPlan {
        LevelPlan {
            qps,
            warmup: Duration::from_secs_f64(warmup),
            duration: Duration::from_secs_f64(duration),
            drain: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            max_in_flight: 2000,
            seed: 1,
        }
    }

    fn cycle(addr: SocketAddr) -> RequestCycle {
        let host = addr.to_string();
        let reqs = (0..3)
            .map(|i| {
                let body = format!("{{\"query\":\"q{i}\"}}");
                Arc::from(client::build_request("POST", "/v1/search", &host, Some(body.as_bytes())))
            })
            .collect();
        RequestCycle::new(reqs, 5)
    }

    #[tokio::test]
    async fn counts_oks_and_429s_and_respects_the_count_bound() {
        let server = testserver::spawn(Behaviour { delay: Duration::ZERO, reject_every: 4 }).await;
        let p = plan(100.0, 0.2, 0.8);
        let raw = run_level(server.addr, &mut cycle(server.addr), &p, Instant::now(), None).await;
        let s = LevelStats::from_raw(&raw, &p);
        assert!(raw.records.len() as f64 <= p.qps * p.window().as_secs_f64() + 1.0);
        assert_eq!(raw.records.len() as u64, s.sent + s.warmup_sent);
        assert_eq!(server.searches(), raw.records.len());
        // Every fourth search the server receives is refused with 429.
        let total_429 = raw.records.iter().filter(|r| r.outcome == Outcome::Status(429)).count();
        assert_eq!(total_429, server.searches() / 4);
        assert_eq!(s.completed_ok + s.http_429, s.sent, "{s:?}");
        assert!(s.http_429 > 0 && s.errors.is_empty() && s.timeouts == 0 && s.client_dropped == 0);
        assert!(s.failed_fraction > 0.05 && s.saturated());
        assert!(s.latency.as_ref().is_some_and(|l| l.n as u64 == s.completed_ok));
    }

    #[tokio::test]
    async fn latency_runs_from_the_scheduled_time() {
        let delay = Duration::from_millis(150);
        let server = testserver::spawn(Behaviour { delay, reject_every: 0 }).await;
        let p = plan(20.0, 0.0, 0.5);
        // A client that starts 600 ms late, past the whole 500 ms window: every request leaves
        // late, and its latency must include the wait since its scheduled time.
        let late = Duration::from_millis(600);
        let raw = run_level(server.addr, &mut cycle(server.addr), &p, Instant::now() - late, None).await;
        let s = LevelStats::from_raw(&raw, &p);
        assert_eq!(s.completed_ok, 10);
        for r in &raw.records {
            assert!(r.scheduled < late);
            let floor = delay + (late - r.scheduled);
            assert!(r.latency() >= floor, "{r:?}: latency {:?} < {floor:?}", r.latency());
        }
        assert!(s.latency.as_ref().unwrap().p50_ms >= as_ms(delay + Duration::from_millis(100)));
        // The client's own lateness is reported apart: at least 100 ms for every request.
        assert!(
            s.client_send_lag_max_ms >= s.client_send_lag_p99_ms && s.client_send_lag_p99_ms >= 100.0,
            "{s:?}"
        );
    }

    #[tokio::test]
    async fn in_flight_cap_drops_instead_of_sending() {
        let server =
            testserver::spawn(Behaviour { delay: Duration::from_millis(800), reject_every: 0 }).await;
        let mut p = plan(100.0, 0.0, 0.5);
        p.max_in_flight = 3;
        let raw = run_level(server.addr, &mut cycle(server.addr), &p, Instant::now(), None).await;
        let s = LevelStats::from_raw(&raw, &p);
        // The first three requests hold their slots for 800 ms, longer than the whole window.
        assert_eq!(s.sent, 3, "{s:?}");
        assert_eq!(s.client_dropped, 47);
        assert_eq!(server.searches(), 3);
        assert!(s.saturated());
    }

    #[tokio::test]
    async fn slow_server_times_out_and_the_drain_bounds_the_wall_time() {
        let server = testserver::spawn(Behaviour { delay: Duration::from_secs(30), reject_every: 0 }).await;
        let mut p = plan(10.0, 0.0, 0.5);
        p.timeout = Duration::from_millis(300);
        p.drain = Duration::from_millis(200);
        let raw = run_level(server.addr, &mut cycle(server.addr), &p, Instant::now(), None).await;
        let s = LevelStats::from_raw(&raw, &p);
        assert_eq!((s.sent, s.completed_ok), (5, 0));
        // A request gives up at its own limit, or when the drain ends if that comes first.
        let drain_end = p.window() + p.drain;
        for r in &raw.records {
            let expected = if r.scheduled + p.timeout <= drain_end { Outcome::Timeout } else { Outcome::Cut };
            assert_eq!(r.outcome, expected, "{r:?}");
        }
        assert_eq!(s.timeouts + s.cut_at_drain, 5);
        assert!(s.latency.is_none() && s.achieved_qps == 0.0 && s.saturated());
        assert!(raw.wall < Duration::from_secs(10), "{:?}", raw.wall);
    }

    #[tokio::test]
    async fn refused_connections_are_io_errors() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let p = plan(20.0, 0.0, 0.25);
        let raw = run_level(port, &mut cycle(port), &p, Instant::now(), None).await;
        let s = LevelStats::from_raw(&raw, &p);
        assert_eq!(s.errors.get("io:ConnectionRefused"), Some(&5), "{s:?}");
    }

    #[tokio::test]
    async fn answers_keep_the_first_200_of_each_query_across_levels() {
        use super::super::quality::{score, ServedAnswers};
        use cellar_search::corpus::{Qrels, Query};
        let server = testserver::spawn(Behaviour { delay: Duration::ZERO, reject_every: 2 }).await;
        let answers = Arc::new(ServedAnswers::new(3));
        let mut cycle = cycle(server.addr);
        for _ in 0..2 {
            let p = plan(50.0, 0.1, 0.3);
            run_level(server.addr, &mut cycle, &p, Instant::now(), Some(&answers)).await;
        }
        // The fake server's one hit is the query text: every judged query ranks it first.
        let queries: Vec<Query> =
            (0..3).map(|i| Query { id: format!("q{i}"), text: String::new() }).collect();
        let mut qrels = Qrels::new();
        for q in &queries {
            qrels.entry(q.id.clone()).or_default().insert(q.id.clone(), 1);
        }
        let q = score(&answers, &queries, &qrels);
        assert_eq!((q.queries_answered, q.queries_judged, q.unreadable_answers), (3, 3, 0), "{q:?}");
        assert_eq!((q.ndcg_at_10, q.recall_at_10), (Some(1.0), Some(1.0)));
    }

    #[test]
    fn the_cycle_visits_every_request_once_per_round_in_a_seeded_order() {
        let reqs: Vec<Arc<[u8]>> = (0..5u8).map(|i| Arc::from(vec![i])).collect();
        let mut a = RequestCycle::new(reqs.clone(), 1);
        let round: Vec<u8> = (0..5).map(|_| a.next_request().1[0]).collect();
        let mut sorted = round.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
        let again: Vec<u8> = (0..5).map(|_| a.next_request().1[0]).collect();
        assert_eq!(round, again);
        let mut b = RequestCycle::new(reqs, 1);
        assert_eq!((0..5).map(|_| b.next_request().1[0]).collect::<Vec<_>>(), round);
    }

    #[test]
    fn zipf_draws_favour_the_top_ranks_by_their_weights_and_repeat_with_the_seed() {
        let reqs: Vec<Arc<[u8]>> = (0..100u8).map(|i| Arc::from(vec![i])).collect();
        let draw = |seed| {
            let mut cycle = RequestCycle::zipf(reqs.clone(), 1.0, seed);
            (0..20_000).map(|_| cycle.next_request().0).collect::<Vec<usize>>()
        };
        let draws = draw(3);
        assert_eq!(draws, draw(3));
        let mut counts = vec![0usize; 100];
        draws.iter().for_each(|&i| counts[i] += 1);
        counts.sort_unstable_by(|a, b| b.cmp(a));
        // Zipf(1) over 100: the top rank has 1/H(100) = 19.3% of the draws, the second half.
        let top = counts[0] as f64 / 20_000.0;
        assert!((top - 0.193).abs() < 0.02, "top share {top}");
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((1.6..2.5).contains(&ratio), "first / second {ratio}");
        assert!(counts[99] < counts[0] / 20, "the tail is rare: {counts:?}");
    }
}
