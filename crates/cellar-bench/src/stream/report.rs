//! `stream-bench.json` and `stream-bench.md`.

use std::path::Path;

use cellar_core::Result;
use serde::Serialize;

use super::measure::{ClassResult, Disk, Feed, Ram, Single};
use crate::harness::output::write_report;
use crate::harness::provenance::Provenance;

#[derive(Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub provenance: Provenance,
    pub users: usize,
    pub docs: usize,
    pub tokens: usize,
    pub dim: usize,
    /// The streams' codec (`--codec`).
    pub codec: String,
    pub batch: usize,
    pub feed: Feed,
    pub single: Vec<Single>,
    pub ram: Ram,
    pub disk: Disk,
    pub queries: Vec<ClassResult>,
    pub global: Option<(Feed, Vec<ClassResult>)>,
    pub seconds: f64,
}

fn class_rows(rows: &[ClassResult], disk_mb_s: f64) -> String {
    let mut out = String::from(
        "| docs/user | users | cold p50 ms | cold p95 ms | cold max ms | warm p50 ms | warm p95 ms | pooled cold p50 ms | docs scanned | docs scored | MB read | scan MB/s | scan / disk | docs/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        out += &format!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {:.2} | {:.0} | {:.2} | {:.0} |\n",
            r.docs_per_user,
            r.users_in_class,
            r.cold_ms_p50,
            r.cold_ms_p95,
            r.cold_ms_max,
            r.warm_ms_p50,
            r.warm_ms_p95,
            r.pooled_cold_ms_p50,
            r.docs_scanned,
            r.docs_scored,
            r.bytes_read as f64 / 1e6,
            r.scan_mb_s,
            r.scan_mb_s / disk_mb_s,
            r.docs_per_s
        );
    }
    out
}

fn markdown(r: &Report) -> String {
    let f = &r.feed;
    let mut md = format!(
        "# Streaming mode benchmark\n\n{}\n{} users in the Vespa post's classes (35/28/22/10/5% of users with 100/1,000/10,000/50,000/100,000 documents, scaled), {} documents of {} token vectors x {} dims ({}), batches of {}. Synthetic vectors clustered per user. Latencies are measured in-process (no HTTP), one query at a time.\n\n",
        r.provenance.markdown(), r.users, r.docs, r.tokens, r.dim, r.codec, r.batch
    );
    md += &format!(
        "## Feed\n\n| | value |\n|---|---:|\n| documents/s, batches of {} (one fsync each) | {:.0} |\n",
        r.batch, f.docs_per_s
    );
    for s in &r.single {
        md += &format!(
            "| documents/s, one document per call, {} writer thread(s) (each call waits for its fsync; {} fsyncs for {} calls) | {:.0} |\n",
            s.threads, s.log_syncs, s.log_batches, s.docs_per_s
        );
    }
    md += &format!(
        "| flushes / background compactions during the feed | {} / {} |\n| final flush + compaction into one segment | {:.1} s |\n| disk bytes per document after compaction | {:.0} |\n\n",
        f.flushes, f.background_compactions, f.compact_s, f.disk_bytes_per_doc
    );
    md += &format!(
        "## RAM per document\n\n| | bytes |\n|---|---:|\n| group directory, per flushed document ({} groups) | {:.3} |\n| resident memory gained by opening the compacted collection: {} bytes in all, per document | {:.3} |\n| memtable, per buffered (unflushed) document, vectors included (bounded by its 64 MiB budget) | {:.0} |\n\n",
        r.ram.groups, r.ram.directory_bytes_per_doc, r.ram.rss_delta_bytes, r.ram.rss_bytes_per_doc, f.memtable_bytes_per_doc
    );
    md += &format!(
        "## Per-group search, cold page cache\n\nSequential read bandwidth of the same segment file (cold, 4 MiB reads, median of 3): **{:.0} MB/s** ({:.0} MB file; pages cached right after eviction: {}). `scan / disk` is the group's bytes read per second of cold query time over that bandwidth.\n\n{}\n",
        r.disk.sequential_mb_s,
        r.disk.file_bytes as f64 / 1e6,
        r.disk.resident_after_evict,
        class_rows(&r.queries, r.disk.sequential_mb_s)
    );
    if let Some((feed, rows)) = &r.global {
        md += &format!(
            "## The same searches on one global collection filtered by user\n\nEvery document in one group, the user in a metadata field; each search reads and filters the whole collection (fed at {:.0} docs/s).\n\n{}\n",
            feed.docs_per_s,
            class_rows(rows, r.disk.sequential_mb_s)
        );
    }
    md += &format!("Total run: {:.0} s.\n", r.seconds);
    md
}

/// Writes `OUT/stream-bench.json` and `OUT/stream-bench.md`.
pub fn write(report: &Report, out: &Path) -> Result<()> {
    let md = markdown(report);
    write_report(&out.join("stream-bench"), report, &md)?;
    println!("{md}");
    Ok(())
}
