//! One server configuration of the benchmark, parsed from `--config 'key=value,...'`.

use std::path::PathBuf;

use cellar_core::io::ReaderKind;
use cellar_core::{CellarError, Result};
use serde::Serialize;

/// Who turns query text into vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vectors {
    /// The server encodes (it loads the model).
    Server,
    /// The bench encodes each query once before the run and sends `query_vectors`: the server
    /// never loads the encoder, so a memory cap measures the index, not the model.
    Client,
    /// As `Client`, the vectors in their compact form (`tokens_b64`, little-endian f32 base64)
    /// instead of JSON numbers.
    Compact,
}

impl Vectors {
    /// True when the bench sends the query's vectors (the server never encodes).
    pub fn by_client(self) -> bool {
        self != Vectors::Server
    }
}

impl std::str::FromStr for Vectors {
    type Err = CellarError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "server" => Ok(Vectors::Server),
            "client" => Ok(Vectors::Client),
            "compact" => Ok(Vectors::Compact),
            other => Err(CellarError::InvalidInput(format!(
                "vectors={other:?}: expected server, client or compact"
            ))),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ConfigSpec {
    pub name: String,
    /// The index the server opens (and the bench encodes with when `vectors=client`).
    pub index: Option<PathBuf>,
    /// `None` for a server that was already running (`--url`).
    pub reader: Option<String>,
    /// Memory cap as a percentage of the index's size on disk; `None`: uncapped.
    pub cap_pct: Option<f64>,
    /// The cap is the server's fixed footprint (measured first) plus `cap_pct` of the index
    /// (`cap=footprint+5`), not `cap_pct` of the index alone.
    pub cap_over_footprint: bool,
    pub threads: usize,
    pub ssd_latency_us: Option<u64>,
    /// Server's CPU pool threads (`--workers`); `None`: its default, one per core.
    pub workers: Option<usize>,
    /// Server's queue capacity (`--queue`); `None`: its default.
    pub queue: Option<usize>,
    /// Server's searches that may sleep on reads while others compute (`--io-waiters`, 0
    /// allowed); `None`: its default.
    pub io_waiters: Option<usize>,
    /// Server's hot-record cache in MiB (`--cache-mib`); `None`: none. Inside the cap: a
    /// `cap=footprint+X` footprint is measured without it, so the cache takes part of the X%.
    pub cache_mib: Option<usize>,
    /// Server's `--model-weights` (how its query encoder holds its layer weights); `None`: its
    /// default.
    pub model_weights: Option<cellar_encode::WeightPrecision>,
    pub vectors: Vectors,
    /// Set for a server that was already running.
    pub url: Option<String>,
    /// Search parameters this configuration's requests add (`nprobe`, `prefetch`,
    /// `prefetch_step`, `rescore`, `hybrid_candidates`, `early_read`), as JSON literals by name.
    pub request: Vec<(String, String)>,
}

impl Default for ConfigSpec {
    /// One intra-op thread, the server encodes, everything else the server's default.
    fn default() -> Self {
        ConfigSpec {
            name: String::new(),
            index: None,
            reader: None,
            cap_pct: None,
            cap_over_footprint: false,
            threads: 1,
            ssd_latency_us: None,
            workers: None,
            queue: None,
            io_waiters: None,
            cache_mib: None,
            model_weights: None,
            vectors: Vectors::Server,
            url: None,
            request: Vec::new(),
        }
    }
}

pub const KEYS: &str = "name, index, reader, cap, threads, ssd_latency_us, vectors, workers, queue, \
     io_waiters, cache_mib, model_weights, nprobe, prefetch, prefetch_step, rescore, hybrid_candidates, early_read";

/// Per-configuration request parameters, each checked for its JSON type here (its range is the
/// server's to check, which answers 400 and fails the level loudly).
fn request_param(key: &str, value: &str) -> Option<std::result::Result<String, String>> {
    let check = |ok: bool, what: &str| {
        if ok {
            Ok(value.to_string())
        } else {
            Err(format!("{key}={value:?}: expected {what}"))
        }
    };
    Some(match key {
        "nprobe" | "hybrid_candidates" => check(value.parse::<usize>().is_ok(), "an integer"),
        "prefetch" | "rescore" | "early_read" => check(value == "true" || value == "false", "true or false"),
        "prefetch_step" => check(value.parse::<f32>().is_ok_and(f32::is_finite), "a number"),
        _ => return None,
    })
}

/// Parses `name=ram-f16,index=DIR,reader=ram[,cap=25|cap=footprint+5][,threads=2][,ssd_latency_us=100]
/// [,vectors=client][,workers=2][,queue=128][,io_waiters=0][,cache_mib=4][,model_weights=f16]`.
pub fn parse(spec: &str) -> Result<ConfigSpec> {
    let bad = |why: String| CellarError::InvalidInput(format!("--config {spec:?}: {why}"));
    let mut c = ConfigSpec::default();
    let mut seen = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) =
            item.split_once('=').ok_or_else(|| bad(format!("{item:?} is not key=value (keys: {KEYS})")))?;
        let (key, value) = (key.trim(), value.trim());
        if seen.contains(&key) {
            return Err(bad(format!("{key} given twice")));
        }
        seen.push(key);
        match key {
            "name" => c.name = value.to_string(),
            "index" => c.index = Some(PathBuf::from(value)),
            "reader" => {
                value
                    .parse::<ReaderKind>()
                    .map_err(|_| bad(format!("reader={value:?}: expected ram, mmap or direct")))?;
                c.reader = Some(value.to_string());
            }
            "cap" => {
                let (over_footprint, value) = match value.strip_prefix("footprint+") {
                    Some(rest) => (true, rest),
                    None => (false, value),
                };
                c.cap_over_footprint = over_footprint;
                let pct: f64 = value
                    .trim_end_matches('%')
                    .parse()
                    .map_err(|_| bad(format!("cap={value:?} is not a number")))?;
                if !(pct > 0.0 && pct.is_finite()) {
                    return Err(bad(format!("cap={value}: must be a positive percentage of the index size")));
                }
                c.cap_pct = Some(pct);
            }
            "threads" => {
                c.threads = value
                    .parse()
                    .ok()
                    .filter(|t| *t >= 1)
                    .ok_or_else(|| bad(format!("threads={value:?}: expected an integer >= 1")))?;
            }
            "ssd_latency_us" => {
                c.ssd_latency_us = Some(
                    value
                        .parse()
                        .map_err(|_| bad(format!("ssd_latency_us={value:?}: expected an integer")))?,
                );
            }
            "workers" | "queue" => {
                let n = value
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad(format!("{key}={value:?}: expected an integer >= 1")))?;
                *(if key == "workers" { &mut c.workers } else { &mut c.queue }) = Some(n);
            }
            "cache_mib" => {
                let n: usize =
                    value.parse().map_err(|_| bad(format!("cache_mib={value:?}: expected an integer")))?;
                if n == 0 {
                    return Err(bad("cache_mib must be at least 1 (leave it out for no cache)".into()));
                }
                c.cache_mib = Some(n);
            }
            "model_weights" => {
                c.model_weights = Some(value.parse().map_err(|e: CellarError| bad(e.to_string()))?);
            }
            "io_waiters" => {
                let n =
                    value.parse().map_err(|_| bad(format!("io_waiters={value:?}: expected an integer")))?;
                c.io_waiters = Some(n);
            }
            "vectors" => c.vectors = value.parse().map_err(|e: CellarError| bad(e.to_string()))?,
            other => match request_param(other, value) {
                Some(checked) => c.request.push((other.to_string(), checked.map_err(bad)?)),
                None => return Err(bad(format!("unknown key {other:?} (keys: {KEYS})"))),
            },
        }
    }
    if c.name.is_empty() {
        return Err(bad("name is missing".into()));
    }
    if c.name.contains(|ch: char| ch.is_control() || ch == '|') {
        return Err(bad(format!("name {:?} has a control character or '|'", c.name)));
    }
    let index = c.index.as_ref().ok_or_else(|| bad("index is missing".into()))?;
    if !index.join("index.json").is_file() {
        return Err(bad(format!("{} is not an index (no index.json)", index.display())));
    }
    let reader = c.reader.get_or_insert_with(|| "mmap".into());
    if c.ssd_latency_us.is_some() && reader != "direct" {
        return Err(bad("ssd_latency_us applies to the direct reader only".into()));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.json"), "{}").unwrap();
        dir
    }

    #[test]
    fn parses_every_key() {
        let dir = index_dir();
        let d = dir.path().display();
        let c = parse(&format!(
            "name=direct-5,index={d},reader=direct,cap=5,threads=2,ssd_latency_us=100,vectors=client,workers=2,queue=9,io_waiters=0"
        ))
        .unwrap();
        assert_eq!(c.name, "direct-5");
        assert_eq!(c.reader.as_deref(), Some("direct"));
        assert_eq!(
            (c.cap_pct, c.threads, c.ssd_latency_us, c.vectors),
            (Some(5.0), 2, Some(100), Vectors::Client)
        );
        assert_eq!((c.workers, c.queue, c.io_waiters), (Some(2), Some(9), Some(0)));
        let c = parse(&format!("name=p,index={d},nprobe=8,prefetch=false,prefetch_step=0.1")).unwrap();
        let pairs = [("nprobe", "8"), ("prefetch", "false"), ("prefetch_step", "0.1")];
        assert_eq!(c.request, pairs.map(|(k, v)| (k.to_string(), v.to_string())));
        let c = parse(&format!("name=f,index={d},reader=direct,cap=footprint+5")).unwrap();
        assert_eq!((c.cap_pct, c.cap_over_footprint), (Some(5.0), true));
        let c = parse(&format!("name=b,index={d},vectors=compact")).unwrap();
        assert!(c.vectors == Vectors::Compact && c.vectors.by_client());
        assert!(parse(&format!("name=x,index={d},vectors=binary"))
            .unwrap_err()
            .to_string()
            .contains("compact"));
        let c = parse(&format!("name=m,index={d}")).unwrap();
        assert!(!c.cap_over_footprint && !c.vectors.by_client());
        assert_eq!(
            (c.reader.as_deref(), c.cap_pct, c.threads, c.vectors),
            (Some("mmap"), None, 1, Vectors::Server)
        );
    }

    #[test]
    fn refuses_bad_specs() {
        let dir = index_dir();
        let d = dir.path().display();
        for (spec, needle) in [
            (format!("name=a,index={d},colour=red"), "unknown key"),
            (format!("name=a,index={d},cap=0"), "positive"),
            (format!("name=a,index={d},cap=-5"), "positive"),
            (format!("name=a,index={d},cap=lots"), "not a number"),
            (format!("name=a,index={d},cap=footprint+0"), "positive"),
            (format!("name=a,index={d},cap=footprint"), "not a number"),
            (format!("name=a,index={d},reader=floppy"), "reader"),
            (format!("name=a,index={d},threads=0"), "threads"),
            (format!("name=a,index={d},vectors=both"), "vectors"),
            (format!("name=a,index={d},workers=0"), "workers"),
            (format!("name=a,index={d},queue=x"), "queue"),
            (format!("name=a,index={d},reader=mmap,ssd_latency_us=5"), "direct reader only"),
            (format!("name=a,index={d},name=b"), "twice"),
            (format!("index={d}"), "name is missing"),
            ("name=a".to_string(), "index is missing"),
            ("name=a,index=/nonexistent/cellar".to_string(), "not an index"),
            (format!("name=a,index={d},oops"), "key=value"),
            (format!("name=a,index={d},prefetch=maybe"), "true or false"),
            (format!("name=a,index={d},nprobe=-1"), "an integer"),
        ] {
            let err = parse(&spec).unwrap_err();
            assert!(matches!(err, CellarError::InvalidInput(_)), "{spec}: {err}");
            assert!(err.to_string().contains(needle), "{spec}: {err}");
        }
    }
}
