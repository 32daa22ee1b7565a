//! `cellar stream-search`: the exact top-k of one group of a streaming collection, printed as
//! one JSON object (hits, what was scanned, timings).

use std::path::PathBuf;
use std::time::Instant;

use cellar_core::stats::as_ms;
use cellar_core::{CellarError, Result};
use cellar_search::{Filter, SearchRequest};
use cellar_stream::encoding::{request_with_vectors, LazyEncoder};
use cellar_stream::input::legacy_mode;
use cellar_stream::{Options, Streams};
use clap::Args;
use serde_json::{json, Value};

#[derive(Args)]
pub struct StreamSearchArgs {
    /// The query text (encoded with the model).
    pub query: String,
    #[arg(long)]
    pub streams: PathBuf,
    #[arg(long)]
    pub name: String,
    #[arg(long)]
    pub group: String,
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// dense (MaxSim over token vectors; also `maxsim`) or dense-exact (one pooled vector per
    /// document; also `pooled`).
    #[arg(long, default_value = "dense")]
    pub mode: String,
    /// Only documents containing every term of this text.
    #[arg(long)]
    pub require_terms: Option<String>,
    /// A filter in the grammar of `cellar search --filter` (JSON: `{"lang": "en"}`, `eq`, `in`,
    /// `range`, `and`, `or`, `not`), or an equality KEY=VALUE (VALUE parsed as JSON when it
    /// can be, else a string); repeatable, all must hold.
    #[arg(long = "filter")]
    pub filters: Vec<String>,
    #[arg(long)]
    pub model: Option<PathBuf>,
}

fn filter(raw: &str) -> Result<Filter> {
    let bad = |e: String| CellarError::InvalidInput(format!("--filter {raw:?}: {e}"));
    if raw.trim_start().starts_with('{') {
        return serde_json::from_str(raw).map_err(|e| bad(e.to_string()));
    }
    let (key, value) =
        raw.split_once('=').ok_or_else(|| bad("expected a JSON filter or KEY=VALUE".into()))?;
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    serde_json::from_value(json!({ key: value })).map_err(|e| bad(e.to_string()))
}

pub fn run(args: StreamSearchArgs) -> Result<()> {
    let streams = Streams::open_existing(
        &args.streams,
        Options { background_compaction: false, ..Options::default() },
    )?;
    let collection = streams.get(&args.name, None)?;
    let mut filters = args.filters.iter().map(|f| filter(f)).collect::<Result<Vec<_>>>()?;
    let request = SearchRequest {
        query: args.query.clone(),
        mode: Some(legacy_mode(&args.mode)?),
        k: Some(args.k),
        require_terms: args.require_terms.clone(),
        filter: if filters.len() > 1 { Some(Filter::And(filters)) } else { filters.pop() },
        ..SearchRequest::default()
    };
    let start = Instant::now();
    let request = request_with_vectors(request, collection.dim(), &LazyEncoder::new(args.model.clone()))?;
    let encoded = start.elapsed();
    let result = collection.search(&args.group, &request)?;
    let hits: Vec<Value> = result
        .hits
        .iter()
        .map(|h| json!({ "id": h.id, "score": h.score, "text": h.text, "metadata": h.metadata }))
        .collect();
    let s = result.stats;
    let out = json!({
        "hits": hits,
        "stats": { "docs_scanned": s.docs_scanned, "docs_scored": s.docs_scored, "bytes_read": s.bytes_read,
                   "read_calls": s.read_calls, "segments_read": s.segments_read },
        "timings": { "encode_ms": as_ms(encoded), "search_ms": as_ms(start.elapsed() - encoded) },
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("serializable"));
    Ok(())
}
