//! The measurements of `cellar-bench stream`, each a function returning its serialisable figures.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cellar_core::io::cache::{evict_file, resident_pages};
use cellar_core::{CellarError, Result};
use cellar_search::{DocIn, Filter, MetaValue, Mode, QueryVectorsIn, SearchRequest};
use cellar_stream::doc::mean_or_zero;
use cellar_stream::{Collection, Options};
use serde::Serialize;

use super::data::{Corpus, VESPA_CLASSES};
use super::{bench_options, StreamArgs};
use crate::harness::stats::percentile_of;

fn io(path: &Path, e: std::io::Error) -> CellarError {
    CellarError::Io { path: path.into(), source: e }
}

#[derive(Clone, Debug, Serialize)]
pub struct Feed {
    pub docs: usize,
    pub batches: usize,
    /// Time inside `put_batch` (log write + fsync + memtable + flushes), generation excluded.
    pub put_seconds: f64,
    pub docs_per_s: f64,
    pub flushes: u64,
    pub background_compactions: u64,
    /// Memtable bytes per buffered document just before the final flush.
    pub memtable_bytes_per_doc: f64,
    /// Final flush, wait for background compaction, explicit compaction into one segment.
    pub compact_s: f64,
    pub disk_bytes: u64,
    pub disk_bytes_per_doc: f64,
}

/// Feeds the corpus in `batch`es in its interleaved order, then compacts it into one segment.
pub fn feed(
    corpus: &Corpus,
    dir: &Path,
    batch: usize,
    options: &Options,
    map: impl Fn(DocIn) -> DocIn,
) -> Result<Feed> {
    let collection = Collection::open(dir, Some(corpus.dim), options.clone())?;
    let order = corpus.feed_order();
    let mut put_seconds = 0.0;
    for chunk in order.chunks(batch) {
        let docs: Vec<DocIn> = chunk.iter().map(|&(u, i)| map(corpus.doc(u as usize, i as usize))).collect();
        let start = Instant::now();
        collection.put_batch(docs)?;
        put_seconds += start.elapsed().as_secs_f64();
    }
    let before = collection.stats();
    let start = Instant::now();
    collection.flush()?;
    collection.wait_idle();
    collection.compact()?;
    let compact_s = start.elapsed().as_secs_f64();
    let after = collection.stats();
    Ok(Feed {
        docs: order.len(),
        batches: order.len().div_ceil(batch),
        put_seconds,
        docs_per_s: order.len() as f64 / put_seconds,
        flushes: before.flushes,
        background_compactions: before.compactions,
        memtable_bytes_per_doc: before.memtable_bytes as f64 / before.memtable_entries.max(1) as f64,
        compact_s,
        disk_bytes: after.disk_bytes,
        disk_bytes_per_doc: after.disk_bytes as f64 / order.len() as f64,
    })
}

/// One global collection: every document in group `all`, its user in the metadata.
pub fn into_global(mut doc: DocIn) -> DocIn {
    let user = doc.group.replace("all".into()).expect("a stream document has a group");
    doc.metadata.0.insert("user".into(), MetaValue::Str(user.clone()));
    doc.id = format!("{user}/{}", doc.id);
    doc
}

/// The search for `k` hits of query token vectors `tokens` (`n * dim` values).
fn query(tokens: &[f32], dim: usize, k: usize) -> SearchRequest {
    SearchRequest {
        k: Some(k),
        query_vectors: Some(QueryVectorsIn::from_flat(tokens, dim, None)),
        ..SearchRequest::default()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Single {
    pub threads: usize,
    pub docs: usize,
    pub docs_per_s: f64,
    /// Log writes (fsyncs) and the one-document batches they carried.
    pub log_syncs: u64,
    pub log_batches: u64,
}

/// Documents written one per call from `threads` writers: each call waits for its fsync, and
/// concurrent calls share one (group commit across callers).
pub fn single_puts(
    corpus: &Corpus,
    dir: &Path,
    n: usize,
    threads: usize,
    options: &Options,
) -> Result<Single> {
    let collection = Collection::open(dir, Some(corpus.dim), options.clone())?;
    let docs: Vec<DocIn> =
        corpus.feed_order().iter().take(n).map(|&(u, i)| corpus.doc(u as usize, i as usize)).collect();
    let start = Instant::now();
    std::thread::scope(|scope| {
        let writers: Vec<_> = docs
            .chunks(docs.len().div_ceil(threads))
            .map(|part| scope.spawn(|| part.iter().try_for_each(|doc| collection.put(doc).map(|_| ()))))
            .collect();
        writers.into_iter().try_for_each(|w| w.join().expect("a writer thread"))
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let stats = collection.stats();
    let (log_syncs, log_batches) = (stats.log_syncs, stats.log_batches);
    Ok(Single { threads, docs: docs.len(), docs_per_s: docs.len() as f64 / seconds, log_syncs, log_batches })
}

#[derive(Clone, Debug, Serialize)]
pub struct Ram {
    pub docs: usize,
    pub groups: u64,
    /// Bytes of the segments' group directories (the only RAM flushed documents cost).
    pub directory_bytes: usize,
    pub directory_bytes_per_doc: f64,
    /// Resident memory gained by opening the collection, per document (allocator included).
    pub rss_delta_bytes: i64,
    pub rss_bytes_per_doc: f64,
}

fn rss_bytes() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok());
    kb.unwrap_or(0) * 1024
}

/// RAM the compacted collection needs once open.
pub fn ram(dir: &Path, docs: usize) -> Result<Ram> {
    let before = rss_bytes();
    let collection = Collection::open(dir, None, bench_options())?;
    let delta = rss_bytes() - before;
    let stats = collection.stats();
    Ok(Ram {
        docs,
        groups: stats.segment_groups,
        directory_bytes: stats.directory_bytes,
        directory_bytes_per_doc: stats.directory_bytes as f64 / docs as f64,
        rss_delta_bytes: delta,
        rss_bytes_per_doc: delta as f64 / docs as f64,
    })
}

/// Every file of the collection's segments (`live/seg-*/`, their stores included), largest
/// first.
pub fn segment_files(collection: &Collection) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<(u64, PathBuf)>) -> Result<()> {
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out)?;
            } else {
                out.push((entry.metadata().map_err(|e| io(&path, e))?.len(), path));
            }
        }
        Ok(())
    }
    let live = collection.dir().join("live");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&live).map_err(|e| io(&live, e))?.flatten() {
        if entry.file_name().to_string_lossy().starts_with("seg-") {
            walk(&entry.path(), &mut files)?;
        }
    }
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

fn evict_all(collection: &Collection) -> Result<()> {
    // Mapped pages stay in the page cache through an eviction: unmapped first.
    collection.index().release_mapped()?;
    segment_files(collection)?.iter().try_for_each(|p| evict_file(p))
}

#[derive(Clone, Debug, Serialize)]
pub struct Disk {
    pub file_bytes: u64,
    /// Median of three cold sequential reads of the whole segment in 4 MiB calls.
    pub sequential_mb_s: f64,
    pub runs_mb_s: Vec<f64>,
    /// Pages still cached right after eviction (should be ~0 for cold figures to mean anything).
    pub resident_after_evict: u64,
}

/// The disk's sequential read bandwidth, measured on the segment's largest file (its vectors).
pub fn sequential_read(collection: &Collection) -> Result<Disk> {
    let path = segment_files(collection)?
        .into_iter()
        .next()
        .ok_or_else(|| CellarError::InvalidInput("no segment".into()))?;
    let file = std::fs::File::open(&path).map_err(|e| io(&path, e))?;
    let len = file.metadata().map_err(|e| io(&path, e))?.len();
    let mut buf = vec![0u8; 4 << 20];
    let mut runs = Vec::new();
    let mut resident = 0;
    for _ in 0..3 {
        evict_file(&path)?;
        resident = resident.max(resident_pages(&path)?.0);
        let start = Instant::now();
        let mut at = 0;
        while at < len {
            let n = (len - at).min(buf.len() as u64) as usize;
            file.read_exact_at(&mut buf[..n], at).map_err(|e| io(&path, e))?;
            at += n as u64;
        }
        runs.push(len as f64 / 1e6 / start.elapsed().as_secs_f64());
    }
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(Disk { file_bytes: len, sequential_mb_s: sorted[1], runs_mb_s: runs, resident_after_evict: resident })
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassResult {
    pub docs_per_user: usize,
    pub users_in_class: usize,
    pub queries: usize,
    pub cold_ms_p50: f64,
    /// Nearest-rank P95 of the class's `queries` cold timings (their max below 20 queries).
    pub cold_ms_p95: f64,
    pub cold_ms_max: f64,
    pub warm_ms_p50: f64,
    pub warm_ms_p95: f64,
    pub pooled_cold_ms_p50: f64,
    /// Live documents examined; with the global collection, every document of every user.
    pub docs_scanned: u64,
    /// Documents that passed the filter and were scored (the user's).
    pub docs_scored: u64,
    pub bytes_read: u64,
    /// Group bytes read per second of cold query time.
    pub scan_mb_s: f64,
    pub docs_per_s: f64,
}

/// The nearest-rank percentile `p` of a class's timings (`--queries` is at least 1).
fn pct(v: &[f64], p: f64) -> f64 {
    percentile_of(v, p).unwrap_or(f64::NAN)
}

fn timed(
    collection: &Collection,
    group: &str,
    query: &SearchRequest,
) -> Result<(f64, cellar_stream::GroupResult)> {
    let start = Instant::now();
    let result = collection.search(group, query)?;
    Ok((start.elapsed().as_secs_f64() * 1e3, result))
}

/// Cold (evicted) and warm latency of per-user searches, per size class. With `global`, the
/// same searches run on the global collection as a scan of group `all` filtered by user.
pub fn per_group(
    corpus: &Corpus,
    collection: &Collection,
    args: &StreamArgs,
    global: bool,
) -> Result<Vec<ClassResult>> {
    let mut out = Vec::new();
    for class in 0..VESPA_CLASSES.len() {
        let users: Vec<usize> = (0..corpus.users.len()).filter(|&u| corpus.users[u].class == class).collect();
        if users.is_empty() {
            continue;
        }
        let (mut cold, mut warm, mut pooled) = (Vec::new(), Vec::new(), Vec::new());
        let (mut scanned, mut scored, mut bytes) = (0, 0, 0);
        for q in 0..args.queries {
            let user = users[q % users.len()];
            let name = &corpus.users[user].name;
            let mut query = query(&corpus.query(user, args.query_tokens, q as u64), corpus.dim, 10);
            let group = if global {
                query.filter = Some(
                    serde_json::from_value::<Filter>(serde_json::json!({ "user": name })).expect("a filter"),
                );
                "all"
            } else {
                name.as_str()
            };
            evict_all(collection)?;
            let (ms, result) = timed(collection, group, &query)?;
            cold.push(ms);
            (scanned, scored) = (result.stats.docs_scanned, result.stats.docs_scored);
            bytes = result.stats.bytes_read;
            warm.push(timed(collection, group, &query)?.0);
            query.mode = Some(Mode::DenseExact);
            evict_all(collection)?;
            pooled.push(timed(collection, group, &query)?.0);
        }
        let cold_p50 = pct(&cold, 50.0);
        out.push(ClassResult {
            docs_per_user: corpus.users[users[0]].docs,
            users_in_class: users.len(),
            queries: args.queries,
            cold_ms_p50: cold_p50,
            cold_ms_p95: pct(&cold, 95.0),
            cold_ms_max: cold.iter().copied().fold(0.0, f64::max),
            warm_ms_p50: pct(&warm, 50.0),
            warm_ms_p95: pct(&warm, 95.0),
            pooled_cold_ms_p50: pct(&pooled, 50.0),
            docs_scanned: scanned,
            docs_scored: scored,
            bytes_read: bytes,
            scan_mb_s: bytes as f64 / 1e6 / (cold_p50 / 1e3),
            docs_per_s: scanned as f64 / (cold_p50 / 1e3),
        });
    }
    Ok(out)
}

/// Pooled vectors, users, queries and exact pooled answers for `bench/stream_global.py`.
pub fn export(corpus: &Corpus, collection: &Collection, dir: &Path, args: &StreamArgs) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let mut pooled = Vec::with_capacity(corpus.total_docs() * corpus.dim * 4);
    let mut tokens = Vec::with_capacity(corpus.total_docs() * corpus.tokens * corpus.dim * 2);
    let mut offsets = Vec::new();
    for (u, user) in corpus.users.iter().enumerate() {
        offsets.push(pooled.len() / (corpus.dim * 4));
        for i in 0..user.docs {
            let doc = corpus.doc(u, i);
            let rows = doc.vectors.expect("the corpus gives vectors").tokens.concat();
            pooled.extend(mean_or_zero(&rows, corpus.dim).iter().flat_map(|v| v.to_le_bytes()));
            tokens.extend(rows.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()));
        }
    }
    for (name, bytes) in [("pooled.f32", pooled), ("tokens.f16", tokens)] {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| io(&path, e))?;
    }
    let mut queries = Vec::new();
    for (u, user) in corpus.users.iter().enumerate() {
        let seen = queries.iter().filter(|q: &&serde_json::Value| q["class"] == user.class).count();
        if seen >= args.queries {
            continue;
        }
        let tokens = corpus.query(u, args.query_tokens, seen as u64);
        let mut query = query(&tokens, corpus.dim, 10);
        let to_index = |hits: Vec<cellar_stream::GroupHit>| -> Vec<usize> {
            hits.iter().map(|h| offsets[u] + h.id[1..].parse::<usize>().expect("d%06 ids")).collect()
        };
        collection.search(&user.name, &query)?; // warm the group's pages
        let start = Instant::now();
        let maxsim = to_index(collection.search(&user.name, &query)?.hits);
        let warm_ms = start.elapsed().as_secs_f64() * 1e3;
        query.mode = Some(Mode::DenseExact);
        let exact = to_index(collection.search(&user.name, &query)?.hits);
        let rows: Vec<&[f32]> = tokens.chunks(corpus.dim).collect();
        queries.push(serde_json::json!({
            "class": user.class, "user": u, "docs": user.docs, "offset": offsets[u],
            "query": mean(&tokens, corpus.dim), "query_tokens": rows, "exact": exact,
            "exact_maxsim": maxsim, "stream_warm_ms": warm_ms,
        }));
    }
    let users: Vec<_> = corpus
        .users
        .iter()
        .zip(&offsets)
        .map(|(u, o)| serde_json::json!({ "offset": o, "docs": u.docs }))
        .collect();
    let meta = serde_json::json!({ "dim": corpus.dim, "tokens": corpus.tokens, "docs": corpus.total_docs(), "users": users, "queries": queries });
    let path = dir.join("queries.json");
    std::fs::write(&path, meta.to_string()).map_err(|e| io(&path, e))
}

fn mean(tokens: &[f32], dim: usize) -> Vec<f32> {
    let mut m = vec![0f32; dim];
    tokens.chunks_exact(dim).for_each(|r| m.iter_mut().zip(r).for_each(|(a, b)| *a += b));
    let norm = m.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
    m.iter_mut().for_each(|x| *x /= norm);
    m
}
