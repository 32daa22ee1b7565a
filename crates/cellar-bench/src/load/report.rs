//! The benchmark's record: everything as JSON, and markdown tables (one per configuration, the
//! served quality across configurations when qrels were given, then P95 against the baseline at
//! each offered level).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cellar_core::Result;
use serde::Serialize;

use super::config::ConfigSpec;
use super::quality::ServedQuality;
use super::sweep::LevelStats;
use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;

const MIB: f64 = 1024.0 * 1024.0;

/// One level of one configuration: the client's figures and what the server's side showed.
#[derive(Clone, Debug, Serialize)]
pub struct LevelRecord {
    #[serde(flatten)]
    pub stats: LevelStats,
    /// `cellar_read_bytes_total` difference over the level / 200 responses of the level.
    pub server_read_bytes_per_query: Option<f64>,
    /// `/proc/PID/io` `read_bytes` difference over the level / 200 responses of the level.
    pub proc_read_bytes_per_query: Option<f64>,
    /// The server's CPU time over the level (user + system, /proc/PID/stat) per second of it:
    /// cores kept busy.
    pub server_cpu_cores: Option<f64>,
    /// `cellar_process_rss_bytes` at the end of the level.
    pub server_rss_bytes: Option<u64>,
    /// The server's mean ms per search in each stage over the level (`cellar_stage_seconds`),
    /// by stage name; empty when its /metrics could not be read.
    pub stage_ms: std::collections::BTreeMap<String, f64>,
    /// The cgroup's charge (RSS + page cache) at the end of the level.
    pub cgroup_usage_bytes: Option<u64>,
    /// Hot-record cache hits over lookups during the level (`cellar_hot_cache_*_total`), when
    /// the server has a cache.
    pub hot_cache_hit_rate: Option<f64>,
    pub saturated: bool,
}

/// Stages of the server's histograms the report shows, in pipeline order.
pub const STAGES_REPORTED: [&str; 7] =
    ["queue", "encode", "first_stage", "read", "read_hidden", "maxsim", "total"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The sweep ran (possibly stopped at saturation).
    Completed,
    /// The server could not start, or died during the sweep (e.g. the cap's OOM killer).
    Failed,
    /// Not run: what it asks for cannot be measured here (no cgroup for a memory cap).
    Skipped,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConfigResult {
    #[serde(flatten)]
    pub spec: ConfigSpec,
    pub status: Status,
    pub reason: Option<String>,
    pub notes: Vec<String>,
    /// Sum of the file sizes under the index directory.
    pub index_bytes: Option<u64>,
    pub cap_bytes: Option<u64>,
    /// The server's fixed footprint (`cap=footprint+X`): the charge of an uncapped server after
    /// its start and warm-up queries.
    pub footprint_bytes: Option<u64>,
    /// That server's peak charge over its start and warm-up queries (reported, not used).
    pub footprint_peak_bytes: Option<u64>,
    /// Whether the cap was in force (false when cgroups were unavailable).
    pub capped: bool,
    pub server_args: Vec<String>,
    pub healthz: Option<serde_json::Value>,
    pub levels: Vec<LevelRecord>,
    /// Highest achieved throughput over the levels.
    pub saturation_qps: Option<f64>,
    /// `VmHWM` of the server just before it was stopped.
    pub peak_rss_bytes: Option<u64>,
    pub cgroup_max_usage_bytes: Option<u64>,
    pub cgroup_failcnt: Option<u64>,
    /// With `--qrels`: the quality of the answers the server returned during the sweep.
    pub quality: Option<ServedQuality>,
}

impl ConfigResult {
    pub fn new(spec: ConfigSpec) -> Self {
        ConfigResult {
            spec,
            status: Status::Completed,
            reason: None,
            notes: Vec::new(),
            index_bytes: None,
            cap_bytes: None,
            footprint_bytes: None,
            footprint_peak_bytes: None,
            capped: false,
            server_args: Vec::new(),
            healthz: None,
            levels: Vec::new(),
            saturation_qps: None,
            peak_rss_bytes: None,
            cgroup_max_usage_bytes: None,
            cgroup_failcnt: None,
            quality: None,
        }
    }

    pub fn p95_at(&self, qps: f64) -> Option<f64> {
        self.levels.iter().find(|l| l.stats.offered_qps == qps)?.stats.latency.as_ref().map(|l| l.p95_ms)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub queries: PathBuf,
    pub qrels: Option<PathBuf>,
    pub n_queries: usize,
    pub qps: Vec<f64>,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub drain_s: f64,
    pub timeout_s: f64,
    pub max_in_flight: usize,
    pub stop_at_saturation: bool,
    pub mode: String,
    pub k: usize,
    pub rerank_k: Option<usize>,
    pub alpha: Option<f32>,
    pub seed: u64,
    pub evict_cache: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub provenance: Provenance,
    pub client: String,
    pub settings: Settings,
    pub baseline: String,
    pub configurations: Vec<ConfigResult>,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn mib(v: Option<u64>) -> String {
    opt(v.map(|b| b as f64 / MIB), 0)
}

/// "nDCG@10 0.720, Recall@10 0.800 over 300/300 judged queries".
fn quality_line(q: &ServedQuality) -> String {
    let mut line = match (q.ndcg_at_10, q.recall_at_10) {
        (Some(n), Some(r)) => format!("nDCG@10 {n:.3}, Recall@10 {r:.3} over "),
        _ => "no answer to score among ".into(),
    };
    let _ = write!(line, "{}/{} judged queries", q.queries_answered, q.queries_judged);
    if q.unreadable_answers > 0 {
        let _ = write!(line, " ({} 200 answers had no readable hits[].id)", q.unreadable_answers);
    }
    line
}

impl Report {
    pub fn to_markdown(&self) -> String {
        let s = &self.settings;
        let mut md = String::new();
        let _ = writeln!(md, "# cellar-bench load: open-loop load\n");
        let _ = writeln!(
            md,
            "Poisson arrivals (seed {}), offered QPS {:?}, {} s warm-up (excluded) + {} s measured per level, \
             drain up to {} s, per-request timeout {} s, at most {} requests in flight. Latency runs from each \
             request's scheduled send time to its last response byte (no coordinated omission); one TCP \
             connection per request; \"client lag\" is how late the bench itself started requests (when \
             it nears the latencies, the load generator is the bottleneck). Queries: {} from {}{}. Request: mode {}, k {}{}{}, include_text false. \
             {}",
            s.seed,
            s.qps,
            s.warmup_s,
            s.duration_s,
            s.drain_s,
            s.timeout_s,
            s.max_in_flight,
            s.n_queries,
            s.queries.display(),
            s.qrels.as_ref().map_or(String::new(), |q| format!(" (judged in {})", q.display())),
            s.mode,
            s.k,
            s.rerank_k.map_or(String::new(), |r| format!(", rerank_k {r}")),
            s.alpha.map_or(String::new(), |a| format!(", alpha {a}")),
            if s.evict_cache {
                "The index's pages are evicted from the page cache before each server starts."
            } else {
                "The page cache is left as it is between configurations."
            }
        );
        let _ = writeln!(md, "\n{}\nClient: {}.\n", self.provenance.markdown(), self.client);
        for c in &self.configurations {
            self.config_table(&mut md, c);
        }
        self.quality_table(&mut md);
        self.ratio_table(&mut md);
        md
    }

    fn config_table(&self, md: &mut String, c: &ConfigResult) {
        let sp = &c.spec;
        let _ = writeln!(md, "## {}\n", sp.name);
        let mut facts = Vec::new();
        if let Some(url) = &sp.url {
            facts.push(format!("server already running at {url}"));
        }
        if let Some(r) = &sp.reader {
            facts.push(format!("reader {r}"));
        }
        if let Some(i) = &sp.index {
            facts.push(format!("index {} ({} MiB on disk)", i.display(), mib(c.index_bytes)));
        }
        match (sp.cap_pct, c.capped) {
            (Some(p), true) if c.footprint_bytes.is_some() => facts.push(format!(
                "memory cap = the server's fixed footprint {} MiB (the charge of an uncapped server after its start and 16 warm-up queries; its peak over them {} MiB) + {p}% of the index = {} MiB (memory cgroup, page cache counted)",
                mib(c.footprint_bytes),
                mib(c.footprint_peak_bytes),
                mib(c.cap_bytes)
            )),
            (Some(p), true) => facts
                .push(format!("memory cap {p}% = {} MiB (memory cgroup, page cache counted)", mib(c.cap_bytes))),
            (Some(p), false) => facts.push(format!("memory cap {p}% NOT applied")),
            (None, _) => facts.push("no memory cap".into()),
        }
        facts.push(format!("intra-op threads {}", sp.threads));
        if let Some(w) = sp.workers {
            facts.push(format!("{w} server workers"));
        }
        if let Some(q) = sp.queue {
            facts.push(format!("server queue {q}"));
        }
        if let Some(n) = sp.io_waiters {
            facts.push(format!("{n} io waiters"));
        }
        if let Some(w) = &sp.model_weights {
            facts.push(format!("model weights {w}"));
        }
        if let Some(us) = sp.ssd_latency_us {
            facts.push(format!("injected read latency {us} µs"));
        }
        for (key, value) in &sp.request {
            facts.push(format!("requests with {key}={value}"));
        }
        facts.push(format!(
            "query vectors encoded by the {}",
            match sp.vectors {
                super::config::Vectors::Client => "bench (client)",
                super::config::Vectors::Compact => "bench (client, base64)",
                super::config::Vectors::Server => "server",
            }
        ));
        let _ = writeln!(md, "{}.\n", facts.join(", "));
        let status = match c.status {
            Status::Completed => "completed".to_string(),
            Status::Failed => "**FAILED**".to_string(),
            Status::Skipped => "**SKIPPED**".to_string(),
        };
        let _ = writeln!(
            md,
            "Status: {status}{}. Saturation (highest achieved): {} QPS. Server peak RSS (VmHWM): {} MiB. \
             Cgroup peak: {} MiB, failcnt {}.{}\n",
            c.reason.as_ref().map_or(String::new(), |r| format!(": {}", r.lines().next().unwrap_or(""))),
            opt(c.saturation_qps, 1),
            mib(c.peak_rss_bytes),
            mib(c.cgroup_max_usage_bytes),
            c.cgroup_failcnt.map_or("-".into(), |f| f.to_string()),
            c.quality.as_ref().map_or(String::new(), |q| format!(" Served quality: {}.", quality_line(q))),
        );
        for n in &c.notes {
            let _ = writeln!(md, "Note: {n}\n");
        }
        if c.levels.is_empty() {
            return;
        }
        let _ = writeln!(
            md,
            "| offered QPS | achieved QPS | P50 ms | P95 ms | P99 ms | max ms | sent | ok | 429 | errors | timeouts | dropped | client lag P99 ms | KiB read/query (server) | KiB read/query (/proc io) | server CPU cores | server RSS MiB | cgroup MiB |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for l in &c.levels {
            let st = &l.stats;
            let lat = st.latency.as_ref();
            let errors: u64 = st.errors.values().sum();
            let _ = writeln!(
                md,
                "| {}{} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} |",
                st.offered_qps,
                if l.saturated { " (saturated)" } else { "" },
                st.achieved_qps,
                opt(lat.map(|l| l.p50_ms), 1),
                opt(lat.map(|l| l.p95_ms), 1),
                opt(lat.map(|l| l.p99_ms), 1),
                opt(lat.map(|l| l.max_ms), 1),
                st.sent,
                st.completed_ok,
                st.http_429,
                errors,
                st.timeouts + st.cut_at_drain,
                st.client_dropped,
                st.client_send_lag_p99_ms,
                opt(l.server_read_bytes_per_query.map(|b| b / 1024.0), 0),
                opt(l.proc_read_bytes_per_query.map(|b| b / 1024.0), 0),
                opt(l.server_cpu_cores, 2),
                mib(l.server_rss_bytes),
                mib(l.cgroup_usage_bytes),
            );
        }
        let _ = writeln!(md);
        let hit_rates: Vec<String> = c
            .levels
            .iter()
            .filter_map(|l| {
                l.hot_cache_hit_rate.map(|r| format!("{} QPS {:.1}%", l.stats.offered_qps, 100.0 * r))
            })
            .collect();
        if !hit_rates.is_empty() {
            let _ = writeln!(md, "Hot-record cache hit rate by level: {}.\n", hit_rates.join(", "));
        }
        if c.levels.iter().all(|l| l.stage_ms.is_empty()) {
            return;
        }
        let stages = STAGES_REPORTED;
        let _ = writeln!(md, "Server mean ms per search and stage (`read_hidden`: the part of `read` done under the encoding):\n");
        let _ = writeln!(md, "| offered QPS | {} |", stages.join(" | "));
        let _ = writeln!(md, "|---|{}", "---|".repeat(stages.len()));
        for l in &c.levels {
            let cells: Vec<String> = stages.iter().map(|s| opt(l.stage_ms.get(*s).copied(), 2)).collect();
            let _ = writeln!(md, "| {} | {} |", l.stats.offered_qps, cells.join(" | "));
        }
        let _ = writeln!(md);
    }

    /// Served quality across configurations (only with qrels).
    fn quality_table(&self, md: &mut String) {
        if self.configurations.iter().all(|c| c.quality.is_none()) {
            return;
        }
        let _ = writeln!(
            md,
            "## Served quality\n\nnDCG@10 and Recall@10 (trec_eval semantics) of the first 200 answer to each \
             judged query during the configuration's whole sweep (warm-ups included), over the judged \
             queries that got one.\n"
        );
        let _ = writeln!(md, "| configuration | nDCG@10 | Recall@10 | judged queries answered |");
        let _ = writeln!(md, "|---|---|---|---|");
        for c in &self.configurations {
            let Some(q) = &c.quality else { continue };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {}/{} |",
                c.spec.name,
                opt(q.ndcg_at_10, 3),
                opt(q.recall_at_10, 3),
                q.queries_answered,
                q.queries_judged
            );
        }
        let _ = writeln!(md);
    }

    fn ratio_table(&self, md: &mut String) {
        let Some(base) = self.configurations.iter().find(|c| c.spec.name == self.baseline) else { return };
        let others: Vec<&ConfigResult> =
            self.configurations.iter().filter(|c| c.spec.name != self.baseline).collect();
        if others.is_empty() {
            return;
        }
        let _ = writeln!(md, "## P95 relative to {}\n", self.baseline);
        let mut head = format!("| offered QPS | {} P95 ms |", self.baseline);
        for c in &others {
            let _ = write!(head, " {} |", c.spec.name);
        }
        let _ = writeln!(md, "{head}");
        let _ = writeln!(md, "|---|---|{}", "---|".repeat(others.len()));
        for &qps in &self.settings.qps {
            let b = base.p95_at(qps);
            let mut row = format!("| {qps} | {} |", opt(b, 1));
            for c in &others {
                let ratio = match (c.p95_at(qps), b) {
                    (Some(x), Some(b)) if b > 0.0 => format!("{:.2}x", x / b),
                    _ => "-".into(),
                };
                let _ = write!(row, " {ratio} |");
            }
            let _ = writeln!(md, "{row}");
        }
        let _ =
            writeln!(md, "\n(-: no measurement at that level, e.g. after the sweep stopped at saturation.)");
    }

    /// Writes PREFIX.json and PREFIX.md; returns their paths.
    pub fn write(&self, prefix: &Path) -> Result<(PathBuf, PathBuf)> {
        write_report(prefix, self, &self.to_markdown())
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::Vectors;
    use super::*;
    use crate::harness::stats::summarize;

    fn level(qps: f64, p95: Option<f64>) -> LevelRecord {
        let stats = LevelStats {
            offered_qps: qps,
            sent: 10,
            warmup_sent: 2,
            completed_ok: 10,
            errors: Default::default(),
            http_429: 0,
            timeouts: 0,
            cut_at_drain: 0,
            client_dropped: 0,
            achieved_qps: qps,
            latency: p95.and_then(|p| summarize(&[p])),
            failed_fraction: 0.0,
            ok_whole_level: 12,
            client_send_lag_p99_ms: 0.5,
            client_send_lag_max_ms: 0.9,
            wall_s: 1.0,
        };
        LevelRecord {
            stats,
            server_read_bytes_per_query: Some(8192.0),
            proc_read_bytes_per_query: None,
            server_cpu_cores: Some(1.5),
            server_rss_bytes: Some(64 << 20),
            stage_ms: [("read".to_string(), 2.0), ("read_hidden".to_string(), 1.5)].into(),
            cgroup_usage_bytes: None,
            hot_cache_hit_rate: None,
            saturated: false,
        }
    }

    fn config(name: &str, levels: Vec<LevelRecord>) -> ConfigResult {
        let mut c = ConfigResult::new(ConfigSpec {
            name: name.into(),
            index: Some("idx".into()),
            reader: Some("mmap".into()),
            cap_pct: Some(25.0),
            cap_over_footprint: false,
            threads: 1,
            ssd_latency_us: None,
            workers: None,
            queue: None,
            io_waiters: None,
            cache_mib: None,
            model_weights: None,
            vectors: Vectors::Client,
            url: None,
            request: Vec::new(),
        });
        c.capped = true;
        c.cap_bytes = Some(10 << 20);
        c.levels = levels;
        c
    }

    #[test]
    fn markdown_has_a_table_per_configuration_and_p95_ratios() {
        let mut report = Report {
            provenance: Provenance {
                command_line: "cellar-bench load".into(),
                date_utc: "2025-01-01T00:00:00Z".into(),
                git_commit: "abc".into(),
                cpu_model: "cpu".into(),
                cores: 2,
            },
            client: "test".into(),
            settings: Settings {
                queries: "q.jsonl".into(),
                qrels: None,
                n_queries: 3,
                qps: vec![5.0, 10.0],
                warmup_s: 1.0,
                duration_s: 2.0,
                drain_s: 1.0,
                timeout_s: 1.0,
                max_in_flight: 10,
                stop_at_saturation: true,
                mode: "hybrid".into(),
                k: 10,
                rerank_k: None,
                alpha: None,
                seed: 1,
                evict_cache: true,
            },
            baseline: "base".into(),
            configurations: vec![
                config("base", vec![level(5.0, Some(10.0)), level(10.0, Some(20.0))]),
                config("other", vec![level(5.0, Some(25.0))]),
            ],
        };
        assert!(!report.to_markdown().contains("Served quality"));
        report.configurations[0].quality = Some(ServedQuality {
            ndcg_at_10: Some(0.72),
            recall_at_10: Some(0.8),
            queries_answered: 299,
            queries_judged: 300,
            unreadable_answers: 0,
        });
        let md = report.to_markdown();
        assert!(md.contains("## base") && md.contains("## other"), "{md}");
        assert!(md.contains("memory cap 25% = 10 MiB"), "{md}");
        assert!(md.contains("## P95 relative to base"), "{md}");
        assert!(md.contains("| 5 | 10.0 | 2.50x |"), "{md}");
        assert!(md.contains("| 10 | 20.0 | - |"), "{md}");
        // KiB read per query from the server's counter, then its CPU cores.
        assert!(md.contains("| 0.5 | 8 | - | 1.50 | 64 | - |"), "{md}");
        assert!(
            md.contains("Served quality: nDCG@10 0.720, Recall@10 0.800 over 299/300 judged queries."),
            "{md}"
        );
        assert!(
            md.contains("## Served quality") && md.contains("| base | 0.720 | 0.800 | 299/300 |"),
            "{md}"
        );
        assert!(!md.contains("| other | "), "{md}");
        // The server's stage means, a row per level; a stage it did not report is "-".
        assert!(md.contains("| offered QPS | queue | encode | first_stage | read | read_hidden |"), "{md}");
        assert!(md.contains("| 5 | - | - | - | 2.00 | 1.50 | - | - |"), "{md}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["configurations"][1]["levels"][0]["latency"]["p95_ms"], 25.0);
        assert_eq!(json["configurations"][0]["status"], "completed");
        assert_eq!(json["configurations"][0]["vectors"], "client");
        assert_eq!(json["configurations"][0]["quality"]["ndcg_at_10"], 0.72);
        assert!(json["configurations"][1]["quality"].is_null());
        // A cap over the footprint names the steady charge it was built on and the start's peak.
        let other = &mut report.configurations[1];
        (other.footprint_bytes, other.footprint_peak_bytes) = (Some(60 << 20), Some(97 << 20));
        other.cap_bytes = Some(66 << 20);
        let md = report.to_markdown();
        assert!(
            md.contains("fixed footprint 60 MiB (the charge of an uncapped server after its start and 16 warm-up queries; its peak over them 97 MiB) + 25% of the index = 66 MiB"),
            "{md}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["configurations"][1]["footprint_peak_bytes"], 97 << 20);
    }
}
