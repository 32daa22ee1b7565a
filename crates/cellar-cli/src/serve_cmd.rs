//! `cellar serve`: opens an index (and/or a data directory of indexes, and/or streams) and
//! answers the HTTP API until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use cellar_core::io::{InjectedLatency, ReaderKind};
use cellar_core::{CellarError, Result};
use cellar_search::{Index, OpenOptions, WeightPrecision};
use cellar_server::ServerConfig;
use clap::Args;

#[derive(Args)]
#[command(group(clap::ArgGroup::new("served").required(true).multiple(true).args(["index", "data_dir", "streams"])))]
pub struct ServeArgs {
    /// The index to serve under /v1/search and /v1/docs (optional when --data-dir or --streams
    /// is given).
    #[arg(long)]
    pub index: Option<PathBuf>,
    /// A directory of indexes, each served by its name under /v1/indexes/{name}/... and created
    /// or dropped over the API as well as on disk (created if missing).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Root directory of streaming collections to serve under /v1/streams (created if missing).
    #[arg(long)]
    pub streams: Option<PathBuf>,
    /// Token-vector reader: ram, mmap or direct.
    #[arg(long, default_value = "mmap")]
    pub reader: ReaderKind,
    /// Address to listen on. Loopback by default; anything else should come with an API key.
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub bind: SocketAddr,
    /// Searches that compute in parallel (CPU slots of the pool); default: one per core.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Further searches that may sleep on their disk reads while --workers others compute
    /// (extra pool threads; 0: a search waiting on a read keeps its core idle); default: one
    /// per worker.
    #[arg(long)]
    pub io_waiters: Option<usize>,
    /// Searches that may wait for a worker before new requests get 429; default: 16 per worker,
    /// at least 64 (the largest batch, which is queued whole).
    #[arg(long)]
    pub queue: Option<usize>,
    /// Requests admitted at once (queued or running; a body is read, bounded by
    /// --read-timeout-ms and --max-body-bytes, before admission) before new ones get 429;
    /// default: the queue plus one per pool thread (workers and io waiters).
    #[arg(long)]
    pub max_in_flight: Option<usize>,
    /// MiB of request bodies held at once (being read, queued or running; counted from their
    /// Content-Length before they are read); a request that would pass it gets 429 unless no
    /// other is held. Default: a quarter of the memory cgroup's headroom
    /// once the index is open; unbounded without a cap.
    #[arg(long)]
    pub max_in_flight_mib: Option<usize>,
    /// Connections served at once; past it new ones wait in the kernel's backlog until one
    /// closes (an idle one is closed after --read-timeout-ms without a request).
    #[arg(long, default_value_t = cellar_server::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Most time one request may take, queue included, before it is answered with 504.
    #[arg(long, default_value_t = 10_000)]
    pub deadline_ms: u64,
    /// MiB of read buffers the searches may hold at once; a read past it waits for one to be
    /// freed. Default: half of the memory cgroup's headroom once the index is open, 4 to 64.
    #[arg(long)]
    pub read_buffer_mib: Option<usize>,
    /// MiB of the most re-read records kept in RAM after they are read (the hot-record cache;
    /// mmap or direct reader). Inside the memory cap: the read-buffer and request budgets are
    /// sized from the cap's headroom less this, and more than half of it is refused. Default:
    /// none (see the README for what it wins).
    #[arg(long)]
    pub cache_mib: Option<usize>,
    /// Intra-op threads of one query's encoding.
    #[arg(long, default_value_t = 1)]
    pub intra_op_threads: usize,
    /// How the query encoder holds its layer weights: f32 (the checkpoint's arithmetic) or f16
    /// (half the memory; products still in f32). See the README on a server with its model.
    #[arg(long, default_value_t)]
    pub model_weights: WeightPrecision,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 2 << 20)]
    pub max_body_bytes: usize,
    /// Time a client may take to send its request head, and again its body, before the
    /// connection is closed (head) or answered 408 (body).
    #[arg(long, default_value_t = 10_000)]
    pub read_timeout_ms: u64,
    /// Direct reader only: emulate an SSD by adding this latency to every read call.
    #[arg(long)]
    pub inject_latency_us: Option<u64>,
    /// With --inject-latency-us: reads the emulated SSD serves at once.
    #[arg(long, default_value_t = 32)]
    pub inject_max_in_flight: usize,
    /// Require this key on /v1/* (`Authorization: Bearer KEY` or `X-Api-Key`). Any user can
    /// read it from the process list: prefer --api-key-file or the CELLAR_API_KEY variable.
    #[arg(long, conflicts_with = "api_key_file")]
    pub api_key: Option<String>,
    /// Read the API key from this file (its first line; trailing whitespace dropped).
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Streaming collections kept open at once (each holds a few files); the least recently
    /// used idle ones are closed beyond it. Default: from the open-file limit (`ulimit -n`).
    #[arg(long)]
    pub max_open_streams: Option<usize>,
    /// With --data-dir: indexes kept open at once (each holds its files, maps and lock); the
    /// least recently used ones no request holds are closed beyond it, and opened again on
    /// their next use.
    #[arg(long, default_value_t = cellar_server::registry::DEFAULT_MAX_OPEN_INDEXES)]
    pub max_open_indexes: usize,
    /// With --data-dir: most indexes the directory may hold; a PUT past it is refused with 409
    /// `too_many_indexes`.
    #[arg(long, default_value_t = cellar_server::registry::DEFAULT_MAX_INDEXES)]
    pub max_indexes: usize,
    /// Unflushed bytes a streaming collection keeps in RAM (and in its log) before it writes a
    /// segment; at most this times --max-open-streams in all.
    #[arg(long, default_value_t = 64)]
    pub stream_memtable_mb: usize,
    /// Streaming collections the server creates take their codec (and PCA) from this index,
    /// fitted on documents like theirs (residual2 or int8 instead of f16); existing ones keep
    /// their own.
    #[arg(long, value_name = "INDEX")]
    pub stream_codec_from: Option<std::path::PathBuf>,
    /// Load the query encoder on the first request that needs it instead of at start (a server
    /// whose clients send query vectors then never loads the model).
    #[arg(long)]
    pub lazy_encoder: bool,
    #[arg(long)]
    pub model: Option<PathBuf>,
}

pub fn run(args: ServeArgs) -> Result<()> {
    // Before the index, the model and the pools start their threads.
    cellar_server::pressure::limit_heap_arenas();
    let config = server_config(&args)?;
    let index = match &args.index {
        Some(path) => Some(Index::open(path, open_options(&args)?)?),
        None => None,
    };
    if let (Some(index), false) = (&index, args.lazy_encoder) {
        if index.encodes_text() {
            index.encoder()?;
        } else {
            eprintln!("cellar serve: the index holds precomputed embeddings and no model: it answers query_vectors and BM25 (--model names a model for text queries)");
        }
    }
    let streams = match &args.streams {
        Some(root) => Some(streams_state(root, &args)?),
        None => None,
    };
    if !config.bind.ip().is_loopback() && config.api_key.is_none() {
        eprintln!("WARNING: cellar serve: listening on {} without an API key", config.bind);
    }
    let indexes = match &args.data_dir {
        Some(root) => Some(
            cellar_server::registry::Indexes::open(root, open_options(&args)?)?
                .with_max_open(positive(args.max_open_indexes, "max-open-indexes")?)
                .with_max_indexes(positive(args.max_indexes, "max-indexes")?),
        ),
        None => None,
    };
    let mut served = Vec::new();
    if let Some(index) = &index {
        served.push(format!("{} docs, {} reader", index.len(), args.reader.name()));
    }
    if let Some(indexes) = &indexes {
        served.push(format!("{} indexes in {}", indexes.names().len(), indexes.root().display()));
    }
    if let Some(root) = &args.streams {
        served.push(format!("streams in {}", root.display()));
    }
    let served = served.join(", ");
    let (workers, queue) = (config.workers, config.queue_capacity);
    cellar_server::serve_with(index, indexes, streams, config, |address| {
        let buffers = cellar_core::io::read_buffer_budget() >> 20;
        eprintln!(
            "cellar serve: listening on http://{address} ({served}, {workers} workers, queue {queue}, read buffers {buffers} MiB)"
        );
    })
}

/// The streams' root, and the encoder for texts sent without vectors (loaded now unless
/// `--lazy-encoder`).
fn streams_state(root: &std::path::Path, args: &ServeArgs) -> Result<cellar_server::streams::StreamsState> {
    let memtable_bytes = positive(args.stream_memtable_mb, "stream-memtable-mb")? << 20;
    let codec_from = args.stream_codec_from.clone();
    if let Some(from) = &codec_from {
        cellar_search::IndexConfig::load(from)?; // refused now, not at the first stream created
    }
    let options = cellar_stream::Options { memtable_bytes, codec_from, ..cellar_stream::Options::default() };
    let mut streams = cellar_stream::Streams::open(root, options)?;
    if let Some(n) = args.max_open_streams {
        streams = streams.with_max_open(positive(n, "max-open-streams")?);
    }
    let encoder = cellar_stream::encoding::LazyEncoder::new(args.model.clone());
    if !args.lazy_encoder {
        encoder.get()?;
    }
    Ok(cellar_server::streams::StreamsState { streams, encoder })
}

fn positive(value: usize, name: &str) -> Result<usize> {
    if value == 0 {
        return Err(CellarError::InvalidInput(format!("--{name} must be at least 1")));
    }
    Ok(value)
}

fn server_config(args: &ServeArgs) -> Result<ServerConfig> {
    let mut config = match args.workers {
        Some(workers) => ServerConfig::with_workers(args.bind, positive(workers, "workers")?),
        None => ServerConfig::new(args.bind),
    };
    config.read_buffer_bytes =
        args.read_buffer_mib.map(|m| positive(m, "read-buffer-mib")).transpose()?.map(|m| m << 20);
    config.io_waiters = args.io_waiters.unwrap_or(config.io_waiters);
    config.queue_capacity = positive(args.queue.unwrap_or(config.queue_capacity), "queue")?;
    let in_flight = args.max_in_flight.unwrap_or(config.queue_capacity + config.threads());
    config.max_in_flight = positive(in_flight, "max-in-flight")?;
    config.max_in_flight_bytes =
        args.max_in_flight_mib.map(|m| positive(m, "max-in-flight-mib")).transpose()?.map(|m| m << 20);
    config.deadline = Duration::from_millis(positive(args.deadline_ms as usize, "deadline-ms")? as u64);
    config.max_body_bytes = positive(args.max_body_bytes, "max-body-bytes")?;
    config.read_timeout =
        Duration::from_millis(positive(args.read_timeout_ms as usize, "read-timeout-ms")? as u64);
    config.api_key = api_key(args)?;
    config.max_connections = positive(args.max_connections, "max-connections")?;
    Ok(config)
}

/// The key from --api-key-file, --api-key or CELLAR_API_KEY, in that order.
fn api_key(args: &ServeArgs) -> Result<Option<String>> {
    let key = match (&args.api_key_file, &args.api_key) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path).map_err(|e| CellarError::io(path, e))?;
            Some(text.lines().next().unwrap_or("").trim_end().to_string())
        }
        (None, Some(key)) => {
            eprintln!("WARNING: cellar serve: --api-key is visible to every user in the process list; use --api-key-file or CELLAR_API_KEY");
            Some(key.clone())
        }
        (None, None) => std::env::var("CELLAR_API_KEY").ok(),
    };
    if key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        return Err(CellarError::InvalidInput("the API key is empty".into()));
    }
    Ok(key)
}

fn open_options(args: &ServeArgs) -> Result<OpenOptions> {
    let inject_latency = match args.inject_latency_us {
        None => None,
        Some(us) => Some(InjectedLatency {
            per_read: Duration::from_micros(positive(us as usize, "inject-latency-us")? as u64),
            max_in_flight: positive(args.inject_max_in_flight, "inject-max-in-flight")?,
        }),
    };
    Ok(OpenOptions {
        reader: args.reader,
        model_dir: args.model.clone(),
        encoder_threads: positive(args.intra_op_threads, "intra-op-threads")?,
        model_weights: args.model_weights,
        inject_latency,
        hot_cache_bytes: args.cache_mib.map(|m| positive(m, "cache-mib")).transpose()?.unwrap_or(0) << 20,
        // A write that fills the memtable is answered without waiting for its segment; the
        // merger thread commits it within a second (`Index::retry_flush`) if no write does.
        background_flush: true,
        ..OpenOptions::default()
    })
}
