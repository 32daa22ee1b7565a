//! `cellar stream-search`: the exact top-k of one group of a streaming collection, printed as
//! one JSON object (hits, what was scanned, timings).

use std::path::PathBuf;
use std::time::Instant;

use cellar_core::{CellarError, Result};
use cellar_stream::encoding::{query_with_vectors, LazyEncoder};
use cellar_stream::input::{meta_to_json, QueryJson};
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
    /// maxsim (token vectors) or pooled (one vector per document).
    #[arg(long, default_value = "maxsim")]
    pub mode: String,
    /// Only documents containing every term of this text.
    #[arg(long)]
    pub require_terms: Option<String>,
    /// Metadata equality filter KEY=VALUE (VALUE parsed as JSON when it can be, else a string);
    /// repeatable, all must hold.
    #[arg(long = "filter")]
    pub filters: Vec<String>,
    #[arg(long)]
    pub model: Option<PathBuf>,
}

fn filter(raw: &str) -> Result<(String, Value)> {
    let (key, value) = raw
        .split_once('=')
        .ok_or_else(|| CellarError::InvalidInput(format!("--filter {raw:?}: expected KEY=VALUE")))?;
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key.to_string(), value))
}

pub fn run(args: StreamSearchArgs) -> Result<()> {
    let streams = Streams::open_existing(
        &args.streams,
        Options { background_compaction: false, ..Options::default() },
    )?;
    let collection = streams.get(&args.name, None)?;
    let request = QueryJson {
        query: Some(args.query.clone()),
        mode: Some(args.mode.clone()),
        k: Some(args.k),
        require_terms: args.require_terms.clone(),
        filters: args.filters.iter().map(|f| filter(f)).collect::<Result<_>>()?,
        ..QueryJson::default()
    };
    let start = Instant::now();
    let query = query_with_vectors(request, collection.dim(), &LazyEncoder::new(args.model.clone()))?;
    let encoded = start.elapsed();
    let result = collection.search(&args.group, &query)?;
    let hits: Vec<Value> = result
        .hits
        .iter()
        .map(|h| {
            let metadata: serde_json::Map<String, Value> =
                h.metadata.iter().map(|(k, v)| (k.clone(), meta_to_json(v))).collect();
            json!({ "id": h.id, "score": h.score, "text": h.text, "metadata": metadata })
        })
        .collect();
    let s = result.stats;
    let out = json!({
        "hits": hits,
        "stats": { "docs_scanned": s.docs_scanned, "docs_scored": s.docs_scored, "bytes_read": s.bytes_read,
                   "read_calls": s.read_calls, "segments_read": s.segments_read },
        "timings": { "encode_ms": encoded.as_secs_f64() * 1e3, "search_ms": (start.elapsed() - encoded).as_secs_f64() * 1e3 },
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("serializable"));
    Ok(())
}
