//! `cellar-bench live`: a living index under writes, on a copy of a built index. It measures, in
//! one process, one after the other: search latency with nothing else running (idle); ingest from
//! vectors (one writer in batches of 64, four writers in batches of 16, one document per write);
//! time to visibility (a write's acknowledgement, after which the very next search finds it);
//! search latency while a writer ingests without pause; ingest from text (the index's encoder);
//! search latency while a merge folds the segments within its default I/O budget; and disk and
//! RAM per written document against the build's. Documents written from vectors are the
//! `--vectors` folder's (`cellar-bench embeddings encode`), under new ids.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use cellar_core::stats::ms_since;
use cellar_core::{CellarError, IoContext, Result};
use cellar_search::corpus::BeirPaths;
use cellar_search::embeddings::EmbeddingsDir;
use cellar_search::live::merge::{MergeBudget, MergeReport};
use cellar_search::live::LiveStats;
use cellar_search::query::PreparedQuery;
use cellar_search::{
    DocIn, Index, Mode, OpenOptions, QueryVectorsIn, SearchParams, SearchRequest, WriteOp, WriteRequest,
};
use clap::Args;
use serde::Serialize;

use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;
use crate::harness::stats::{summarize, LatencySummary};

#[derive(Args)]
pub struct LiveArgs {
    /// A built index (copied into --work; never written).
    #[arg(long)]
    pub index: PathBuf,
    /// The BEIR folder of the index: its queries drive the searches, its corpus the text writes.
    #[arg(long)]
    pub data: PathBuf,
    /// An embeddings folder of the same model (`cellar-bench embeddings encode`): the documents
    /// written from vectors.
    #[arg(long)]
    pub vectors: PathBuf,
    #[arg(long, default_value = "bench/work/live")]
    pub work: PathBuf,
    /// Prefix of the report (`.json`, `.md`).
    #[arg(long, default_value = "bench/results/live-ingest")]
    pub out: PathBuf,
    /// Documents written from vectors by each batched ingest variant.
    #[arg(long, default_value_t = 1024)]
    pub docs: usize,
    /// Single-document writes (each one fsync, then a search for it).
    #[arg(long, default_value_t = 100)]
    pub single: usize,
    /// Documents written from text.
    #[arg(long, default_value_t = 64)]
    pub text_docs: usize,
    /// Searches per phase.
    #[arg(long, default_value_t = 150)]
    pub searches: usize,
    #[arg(long, default_value = "hybrid")]
    pub mode: Mode,
}

#[derive(Serialize)]
struct Ingest {
    what: String,
    docs: usize,
    secs: f64,
    docs_per_sec: f64,
    /// Per write call (ms).
    writes: Option<LatencySummary>,
    /// Write batches per BM25 commit (above 1: concurrent writers shared commits).
    batches_per_bm25_commit: Option<f64>,
}

#[derive(Serialize)]
struct Phase {
    what: String,
    searches: Option<LatencySummary>,
    /// P95 over the idle phase's.
    p95_ratio: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    provenance: Provenance,
    index: String,
    mode: String,
    base_docs: usize,
    ingest: Vec<Ingest>,
    /// Fraction of single-document writes the next search found (every one, by design).
    visible_after_ack: f64,
    phases: Vec<Phase>,
    merge: Option<MergeReport>,
    stats_before_merge: LiveStats,
    stats_after_merge: LiveStats,
    base_disk_bytes_per_doc: f64,
    written_disk_bytes_per_doc: f64,
    written_ram_bytes_per_doc: f64,
    /// What `bm25/` grew by, per written record (tantivy's segments, before its own merges).
    bm25_growth_bytes_per_doc: f64,
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).at(to)?;
    for entry in std::fs::read_dir(from).at(from)? {
        let entry = entry.at(from)?;
        let target = to.join(entry.file_name());
        if entry.file_type().at(&entry.path())?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), &target).at(&target)?;
        }
    }
    Ok(())
}

fn dir_bytes(dir: &Path) -> u64 {
    cellar_search::disk::dir_bytes(dir)
}

/// Documents from the vectors folder, as writes under fresh ids (`tag` + n).
struct Source {
    docs: Vec<DocIn>,
    next: AtomicUsize,
}

/// A document of an embeddings folder (`dim`-wide token vectors) as a write takes it.
pub(crate) fn written_from(doc: cellar_search::EmbeddedDoc, dim: usize) -> DocIn {
    DocIn {
        id: doc.id,
        group: None,
        title: doc.title,
        text: doc.text,
        metadata: doc.metadata,
        vectors: Some(QueryVectorsIn::from_flat(&doc.tokens, dim, doc.pooled)),
    }
}

impl Source {
    fn load(dir: &Path, n: usize) -> Result<Source> {
        let folder = EmbeddingsDir::open(dir)?;
        let dim = folder.dim();
        let docs =
            folder.docs()?.take(n).map(|doc| Ok(written_from(doc?, dim))).collect::<Result<Vec<_>>>()?;
        if docs.is_empty() {
            return Err(CellarError::invalid(format!("{}: no documents", dir.display())));
        }
        Ok(Source { docs, next: AtomicUsize::new(0) })
    }

    /// The next `n` documents, each under a new id.
    fn take(&self, n: usize) -> Vec<WriteOp> {
        (0..n)
            .map(|_| {
                let i = self.next.fetch_add(1, Ordering::SeqCst);
                let mut doc = self.docs[i % self.docs.len()].clone();
                doc.id = format!("live-{i}");
                WriteOp::Add(doc)
            })
            .collect()
    }
}

fn commits(index: &Index) -> (u64, u64) {
    let stats = index.live_stats();
    (stats.bm25_commits, stats.batches_committed)
}

fn per_commit(before: (u64, u64), after: (u64, u64)) -> Option<f64> {
    let commits = after.0 - before.0;
    (commits > 0).then(|| (after.1 - before.1) as f64 / commits as f64)
}

fn ingest(
    index: &Index,
    source: &Source,
    what: &str,
    total: usize,
    batch: usize,
    writers: usize,
) -> Result<Ingest> {
    let before = commits(index);
    let start = Instant::now();
    let per_writer = total / writers;
    let latencies: Vec<f64> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|_| {
                scope.spawn(move || -> Result<Vec<f64>> {
                    let mut out = Vec::new();
                    for _ in 0..per_writer.div_ceil(batch) {
                        let t = Instant::now();
                        index.write(WriteRequest { ops: source.take(batch) })?;
                        out.push(ms_since(t));
                    }
                    Ok(out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a writer panicked")).collect::<Result<Vec<_>>>()
    })?
    .into_iter()
    .flatten()
    .collect();
    let docs = latencies.len() * batch;
    let secs = start.elapsed().as_secs_f64();
    Ok(Ingest {
        what: what.into(),
        docs,
        secs,
        docs_per_sec: docs as f64 / secs,
        writes: summarize(&latencies),
        batches_per_bm25_commit: per_commit(before, commits(index)),
    })
}

/// Runs the prepared searches one after the other: once through, or with `until`, as long as
/// it is false (at most 20 times through): each one's latency in ms.
fn search_all(
    index: &Index,
    queries: &[PreparedQuery],
    params: &SearchParams,
    until: Option<&AtomicBool>,
) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for (i, query) in queries.iter().cycle().enumerate() {
        let done = match until {
            None => i >= queries.len(),
            Some(stop) => stop.load(Ordering::SeqCst) || i >= 20 * queries.len(),
        };
        if done {
            break;
        }
        let t = Instant::now();
        index.respond(query, params, false)?;
        out.push(ms_since(t));
    }
    Ok(out)
}

fn phase(what: &str, latencies: &[f64], idle_p95: Option<f64>) -> Phase {
    let searches = summarize(latencies);
    let p95_ratio = match (&searches, idle_p95) {
        (Some(s), Some(idle)) if idle > 0.0 => Some(s.p95_ms / idle),
        _ => None,
    };
    Phase { what: what.into(), searches, p95_ratio }
}

pub fn run(args: LiveArgs) -> Result<()> {
    if args.docs == 0 || args.searches == 0 || args.single == 0 {
        return Err(CellarError::invalid("--docs, --single and --searches must be at least 1"));
    }
    let copy = args.work.join("index");
    if copy.exists() {
        std::fs::remove_dir_all(&copy).at(&copy)?;
    }
    copy_dir(&args.index, &copy)?;
    let index = Index::open(&copy, OpenOptions::default())?;
    let base_docs = index.len();
    let base_disk = dir_bytes(&copy);
    let bm25_before = dir_bytes(&copy.join("bm25"));
    let collection = BeirPaths::locate(&args.data)?;
    let queries = collection.queries()?;
    eprintln!("preparing {} queries", args.searches.min(queries.len()));
    let prepared = queries
        .iter()
        .take(args.searches)
        .map(|q| cellar_search::eval::prepare(&index, &q.text, args.mode))
        .collect::<Result<Vec<_>>>()?;
    let params = index.params(&SearchRequest { mode: Some(args.mode), ..Default::default() })?;
    let source = Source::load(&args.vectors, 2048)?;

    eprintln!("idle searches");
    search_all(&index, &prepared[..prepared.len().min(20)], &params, None)?;
    let idle = search_all(&index, &prepared, &params, None)?;
    let idle_p95 = summarize(&idle).map(|s| s.p95_ms);
    let mut phases = vec![phase("idle", &idle, idle_p95)];
    let mut ingests = Vec::new();

    eprintln!("ingest from vectors");
    ingests.push(ingest(&index, &source, "vectors, 1 writer, batches of 64", args.docs, 64, 1)?);
    ingests.push(ingest(&index, &source, "vectors, 4 writers, batches of 16", args.docs, 16, 4)?);
    ingests.push(ingest(&index, &source, "vectors, 1 writer, 1 document per write", args.single, 1, 1)?);
    ingests.push(ingest(&index, &source, "vectors, 4 writers, 1 document per write", args.single, 1, 4)?);

    eprintln!("time to visibility");
    let mut found = 0;
    let mut ack = Vec::new();
    for n in 0..args.single {
        let token = format!("visibilitytoken{n}");
        let mut ops = source.take(1);
        if let WriteOp::Add(doc) = &mut ops[0] {
            doc.title = token.clone();
        }
        let t = Instant::now();
        index.write(WriteRequest { ops })?;
        ack.push(ms_since(t));
        let request =
            SearchRequest { query: token, mode: Some(Mode::Bm25), k: Some(1), ..Default::default() };
        found += usize::from(!index.search(request)?.hits.is_empty());
    }
    ingests.push(Ingest {
        what: "time to visibility: one document per write, acknowledged = searchable".into(),
        docs: args.single,
        secs: ack.iter().sum::<f64>() / 1e3,
        docs_per_sec: args.single as f64 / (ack.iter().sum::<f64>() / 1e3),
        writes: summarize(&ack),
        batches_per_bm25_commit: None,
    });
    let visible_after_ack = found as f64 / args.single as f64;

    eprintln!("searches during ingest");
    let stop = AtomicBool::new(false);
    let (during, writer) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| -> Result<usize> {
            let mut written = 0;
            while !stop.load(Ordering::SeqCst) {
                index.write(WriteRequest { ops: source.take(16) })?;
                written += 16;
            }
            Ok(written)
        });
        let searched = search_all(&index, &prepared, &params, None);
        stop.store(true, Ordering::SeqCst);
        (searched, writer.join().expect("the writer panicked"))
    });
    let during = during?;
    let written = writer?;
    phases.push(phase(
        &format!("during sustained ingest ({written} documents from vectors, batches of 16)"),
        &during,
        idle_p95,
    ));

    if args.text_docs > 0 {
        eprintln!("ingest from text");
        let mut reader = cellar_search::corpus::CorpusReader::open(&collection.corpus)?;
        let mut ops = Vec::new();
        for n in 0..args.text_docs {
            let Some(doc) = reader.next() else { break };
            let doc = doc?;
            ops.push(WriteOp::Add(DocIn {
                group: None,
                id: format!("text-{n}"),
                title: doc.title,
                text: doc.text,
                metadata: doc.metadata,
                vectors: None,
            }));
        }
        let docs = ops.len();
        let start = Instant::now();
        let mut latencies = Vec::new();
        for chunk in ops.chunks(16) {
            let t = Instant::now();
            index.write(WriteRequest { ops: chunk.to_vec() })?;
            latencies.push(ms_since(t));
        }
        let secs = start.elapsed().as_secs_f64();
        ingests.push(Ingest {
            what: "text, 1 writer, batches of 16 (encoded by the index's model, 1 thread)".into(),
            docs,
            secs,
            docs_per_sec: docs as f64 / secs,
            writes: summarize(&latencies),
            batches_per_bm25_commit: None,
        });
    }

    eprintln!("searches during a merge");
    index.flush()?;
    let victims: Vec<WriteOp> = (0..source.next.load(Ordering::SeqCst))
        .step_by(3)
        .map(|i| WriteOp::Delete(format!("live-{i}")))
        .collect();
    for chunk in victims.chunks(1024) {
        index.write(WriteRequest { ops: chunk.to_vec() })?;
    }
    let stats_before_merge = index.live_stats();
    let merging = AtomicBool::new(false);
    let (merged, searched) = std::thread::scope(|scope| {
        let merger = scope.spawn(|| {
            let report = index.merge(&MergeBudget::default());
            merging.store(true, Ordering::SeqCst);
            report
        });
        let searched = search_all(&index, &prepared, &params, Some(&merging));
        (merger.join().expect("the merge panicked"), searched)
    });
    let merge = merged?;
    phases.push(phase(
        &format!("during a merge (default budget: {} MiB/s)", MergeBudget::default().bytes_per_sec >> 20),
        &searched?,
        idle_p95,
    ));
    let stats_after_merge = index.live_stats();
    let written_docs = stats_after_merge.records.max(1) as f64;
    let bm25_growth = dir_bytes(&copy.join("bm25")).saturating_sub(bm25_before);
    let report = Report {
        provenance: Provenance::now(),
        index: args.index.display().to_string(),
        mode: args.mode.to_string(),
        base_docs,
        ingest: ingests,
        visible_after_ack,
        phases,
        merge,
        base_disk_bytes_per_doc: base_disk as f64 / base_docs as f64,
        written_disk_bytes_per_doc: stats_after_merge.disk_bytes as f64 / written_docs,
        written_ram_bytes_per_doc: stats_after_merge.ram_bytes as f64 / written_docs,
        bm25_growth_bytes_per_doc: bm25_growth as f64 / written_docs,
        stats_before_merge,
        stats_after_merge,
    };
    let (json, md) = write_report(&args.out, &report, &markdown(&report))?;
    println!("wrote {} and {}", json.display(), md.display());
    Ok(())
}

fn ms(s: &Option<LatencySummary>, f: fn(&LatencySummary) -> f64) -> String {
    s.as_ref().map_or("-".into(), |s| format!("{:.1}", f(s)))
}

fn markdown(r: &Report) -> String {
    let mut out = format!("# A living index under writes\n\n{}\n", r.provenance.markdown());
    out += &format!(
        "Index: `{}` ({} documents), searches in mode `{}` (queries encoded beforehand), one search at a time.\n\n",
        r.index, r.base_docs, r.mode
    );
    out +=
        "## Ingest\n\n| writes | documents | docs/s | per write P50 ms | P95 ms | batches per BM25 commit |\n|---|---|---|---|---|---|\n";
    for i in &r.ingest {
        out += &format!(
            "| {} | {} | {:.0} | {} | {} | {} |\n",
            i.what,
            i.docs,
            i.docs_per_sec,
            ms(&i.writes, |s| s.p50_ms),
            ms(&i.writes, |s| s.p95_ms),
            i.batches_per_bm25_commit.map_or("-".into(), |x| format!("{x:.2}"))
        );
    }
    out += &format!(
        "\nFound by the next search after its write was acknowledged: {:.0}% of single-document writes.\n\n",
        r.visible_after_ack * 100.0
    );
    out += "## Search latency beside writes\n\n| phase | searches | P50 ms | P95 ms | P99 ms | P95 / idle |\n|---|---|---|---|---|---|\n";
    for p in &r.phases {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            p.what,
            p.searches.as_ref().map_or(0, |s| s.n),
            ms(&p.searches, |s| s.p50_ms),
            ms(&p.searches, |s| s.p95_ms),
            ms(&p.searches, |s| s.p99_ms),
            p.p95_ratio.map_or("-".into(), |x| format!("{x:.2}x"))
        );
    }
    if let Some(m) = &r.merge {
        out += &format!(
            "\nMerge: {} segments into one, {} records kept, {} dropped, {:.1} MB copied in {:.1} s.\n",
            m.segments,
            m.kept,
            m.dropped,
            m.bytes as f64 / 1e6,
            m.secs
        );
    }
    out += &format!(
        "\n## Footprint\n\n| | disk bytes/doc | RAM bytes/doc |\n|---|---|---|\n| the build's documents (every file: vectors, BM25, IVF, texts, pooled) | {:.0} | |\n| written documents after the merge: `live/`, per record kept | {:.0} | {:.0} |\n| written documents: what `bm25/` grew by, per record kept | {:.0} | |\n",
        r.base_disk_bytes_per_doc, r.written_disk_bytes_per_doc, r.written_ram_bytes_per_doc, r.bm25_growth_bytes_per_doc
    );
    out += &format!(
        "\nBefore the merge: {} segments, {} written, {} deleted; after: {} segments, {} records. RAM per written document is what the process keeps for it: its id, IVF cluster and record and text offsets (its pooled vector is mapped from the segment: page cache). Besides, the writer's map from collection id to internal id holds every searchable document, the build's included: {} bytes, {:.0} per document.\n",
        r.stats_before_merge.segments,
        r.stats_before_merge.written,
        r.stats_before_merge.deleted,
        r.stats_after_merge.segments,
        r.stats_after_merge.records,
        r.stats_after_merge.id_map_bytes,
        r.stats_after_merge.id_map_bytes as f64 / (r.base_docs as f64 + r.stats_after_merge.records as f64)
    );
    out += &format!(
        "\nIVF drift after the merge (written documents' mean squared distance to their nearest centroid over the build's): {} (retrain advised past {}: {}). The written documents here are the collection's own, under new ids.\n",
        r.stats_after_merge.ivf_drift.map_or("-".into(), |d| format!("{d:.3}")),
        cellar_search::live::DRIFT_RETRAIN,
        r.stats_after_merge.ivf_retrain_advised
    );
    out
}
