//! The fuzz targets: every byte parser of Cellar (`parsers` of cellar-core, cellar-search and
//! cellar-stream), the area of the table it belongs to, whether its input is text, and
//! the fix-up that recomputes its checksums (applied to half the mutated inputs, so that they
//! also reach the decoding behind the checksum instead of stopping at it).

use std::path::Path;

use cellar_core::format::parsers as core;
use cellar_core::Result;
use cellar_search::parsers as search;
use cellar_stream::parsers as stream;

pub struct Target {
    pub name: &'static str,
    pub area: &'static str,
    pub text: bool,
    pub run: fn(&Path, &[u8]) -> Result<()>,
    pub fixup: Option<fn(&mut Vec<u8>)>,
    /// False for a decoder every input of its size is valid for (posting blocks: their size
    /// comes from the checksummed cluster table, and any bytes of that size decode).
    pub refuses: bool,
}

const fn bytes(name: &'static str, area: &'static str, run: fn(&Path, &[u8]) -> Result<()>) -> Target {
    Target { name, area, text: false, run, fixup: None, refuses: true }
}

const fn text(name: &'static str, area: &'static str, run: fn(&Path, &[u8]) -> Result<()>) -> Target {
    Target { name, area, text: true, run, fixup: None, refuses: true }
}

const fn infallible(mut target: Target) -> Target {
    target.refuses = false;
    target
}

const fn fixed(mut target: Target, fixup: fn(&mut Vec<u8>)) -> Target {
    target.fixup = Some(fixup);
    target
}

pub const TARGETS: [Target; 22] = [
    fixed(bytes("file-header", "file headers", |_, b| core::file_header(b)), |b| core::fixup::header_led(b)),
    fixed(bytes("small-file", "file headers", core::small_file), |b| core::fixup::header_led(b)),
    text("manifest", "manifests", core::manifest),
    text("index-config", "manifests", search::index_config),
    text("ivf-config", "manifests", search::ivf_config),
    text("live-manifest", "manifests", search::live_manifest),
    text("splade-config", "manifests", search::splade_config),
    text("stream-manifest", "manifests", stream::manifest),
    bytes("offsets", "offsets", |_, b| core::offsets(b)),
    bytes("record", "records", |_, b| core::record(b)),
    bytes("ivf-centroids", "IVF", |_, b| search::ivf_centroids(b)),
    infallible(bytes("ivf-postings", "IVF", |_, b| search::ivf_postings(b))),
    bytes("splade-terms", "SPLADE", |_, b| search::splade_terms(b)),
    fixed(bytes("index-log", "WAL records", search::log), core::fixup::wal_records),
    bytes("log-batch", "WAL records", |_, b| search::log_batch(b)),
    fixed(bytes("stream-log", "WAL records", stream::log), core::fixup::wal_records),
    fixed(bytes("stream-segment", "stream segments", stream::segment), |b| stream::fixup_segment(b)),
    bytes("stream-entry", "stream segments", |_, b| stream::entry(b)),
    text("corpus", "JSONL inputs", search::corpus),
    text("feed-line", "JSONL inputs", |_, b| stream::feed_line(b)),
    text("qrels", "JSONL inputs", search::qrels),
    bytes("embeddings", "JSONL inputs", search::embeddings),
];
