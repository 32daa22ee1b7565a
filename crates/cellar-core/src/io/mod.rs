//! Reading immutable files, and the vector store's records in particular. Every byte range is
//! read through one seam, [`FileSlice`] (`slice.rs`): a file opened once in one reader kind,
//! chosen at open time:
//! - [`ReaderKind::Ram`]: the whole file in memory (the control);
//! - [`ReaderKind::Mmap`]: a memory map with `madvise(MADV_RANDOM)`; the pages a batch needs are
//!   announced with `MADV_WILLNEED` (optional) and fault in where the reader touches them;
//! - [`ReaderKind::Direct`]: `O_DIRECT` reads batched through io_uring, or, if the kernel refuses
//!   io_uring, a bounded pool of `pread` threads (logged once, loudly);
//! - [`ReaderKind::Pread`]: one `pread` per run of adjacent pages a batch needs, through the page
//!   cache, nothing mapped: what the kernel (or `posix_fadvise`) evicts is read again, and many
//!   small files cost no mapping (a streaming collection's segments).
//!
//! [`RecordReader`] reads the store's records through it: every batch parses each record's header
//! and reports [`ReadStats`]. Records read from the file (mmap, direct, pread) are checked against their
//! CRC-32C on every read, so an mmap batch's pages fault in (and are counted and timed) there; the
//! ram reader checks the whole body once when it loads it, so its batches skip the per-record CRC.

mod aligned;
mod budget;
pub mod cache;
mod direct;
pub mod hot;
mod latency;
mod plan;
mod pread_pool;
mod slice;
mod uring;
pub mod wait;

use std::sync::Arc;

pub use aligned::AlignedBuf;
pub use budget::{read_buffer_budget, read_buffers_in_use, set_read_buffer_budget};
pub use direct::{chunk_bytes, IoEngine, MIN_CHUNK_BYTES, POOLED_BUFFER_BYTES};
pub use latency::InjectedLatency;
pub use plan::Extent;
use slice::BatchBytes;
pub use slice::{FileSlice, SliceBatch, SliceBytes, SliceOpener};

use crate::error::{CellarError, Result};
use crate::format::offsets::OffsetsTable;
use crate::format::record::{self, RecordView};
use crate::format::FileHeader;
use crate::ids::DocId;

/// Which reader a store is opened with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReaderKind {
    Ram,
    Mmap,
    Direct,
    Pread,
}

impl ReaderKind {
    pub const ALL: [ReaderKind; 4] =
        [ReaderKind::Ram, ReaderKind::Mmap, ReaderKind::Direct, ReaderKind::Pread];

    pub fn name(self) -> &'static str {
        match self {
            ReaderKind::Ram => "ram",
            ReaderKind::Mmap => "mmap",
            ReaderKind::Direct => "direct",
            ReaderKind::Pread => "pread",
        }
    }
}

impl std::str::FromStr for ReaderKind {
    type Err = CellarError;
    fn from_str(s: &str) -> Result<Self> {
        ReaderKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            CellarError::InvalidInput(format!(
                "unknown reader {s:?}: expected one of ram, mmap, direct, pread"
            ))
        })
    }
}

/// Options for opening a reader.
#[derive(Clone, Debug)]
pub struct ReaderOptions {
    pub kind: ReaderKind,
    /// Direct reader only: io_uring, pread pool, or io_uring with a loud fallback.
    pub io_engine: IoEngine,
    /// Direct reader only: most reads in flight per batch.
    pub queue_depth: usize,
    /// Mmap reader only: `MADV_WILLNEED` every run of a batch longer than a page before
    /// touching it, so the kernel fetches them concurrently instead of one page fault at a time.
    pub mmap_willneed: bool,
    /// Direct reader only: an emulated per-read SSD latency (see [`InjectedLatency`]).
    pub inject_latency: Option<InjectedLatency>,
}

impl ReaderOptions {
    pub fn new(kind: ReaderKind) -> Self {
        ReaderOptions {
            kind,
            io_engine: IoEngine::Auto,
            queue_depth: 128,
            mmap_willneed: true,
            inject_latency: None,
        }
    }
}

/// What one batch cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Reads issued: io_uring reads or preads (direct), `MADV_WILLNEED` calls (mmap), 0 (ram).
    pub read_calls: u64,
    /// Distinct 4 KiB pages the batch covered.
    pub pages: u64,
    /// Bytes moved: pages * 4096 for mmap and direct, record bytes for ram.
    pub bytes: u64,
    /// Records served from the store's hot-record cache ([`hot::HotRecords`]): not read, and
    /// counted in none of the figures above.
    pub cached: u64,
}

impl std::ops::AddAssign for ReadStats {
    fn add_assign(&mut self, other: ReadStats) {
        self.read_calls += other.read_calls;
        self.pages += other.pages;
        self.bytes += other.bytes;
        self.cached += other.cached;
    }
}

/// Where a verified record lies in the batch bytes, and its parsed layout.
#[derive(Clone, Copy)]
struct RecordSpan {
    start: usize,
    len: usize,
    n_tokens: usize,
    pooled_bytes: usize,
    /// The passage table's bytes (its count included); 0 without one.
    table_bytes: usize,
}

/// Where the i-th record of a batch is: in the bytes the batch read, or in a cached record.
#[derive(Clone, Copy)]
enum Slot {
    Read(RecordSpan),
    /// An index into the batch's `cached` records.
    Cached(usize),
}

/// The records of one batch, in the order their ids were asked for; all verified (a cached
/// record was verified when it was read).
pub struct RecordBatch {
    bytes: BatchBytes,
    slots: Vec<Slot>,
    cached: Vec<Arc<HotRecord>>,
    stats: ReadStats,
}

/// One record copied out of a batch, with its parsed layout: what the hot-record cache keeps.
/// Its bytes are an anonymous mapping of whole pages of their own, unmapped when it is dropped:
/// copies of ~20 KiB made on many threads and freed on others left the allocator's arenas
/// holding 1.5-1.6x the cache's bytes (a 4 MiB cache raised a server's peak RSS by 6 MiB, a
/// 16 MiB one by 26), enough to get capped servers OOM-killed.
pub struct HotRecord {
    bytes: memmap2::MmapMut,
    span: RecordSpan,
}

impl HotRecord {
    pub fn view(&self) -> RecordView<'_> {
        view_of(&self.bytes, self.span)
    }

    /// Bytes of memory it holds (its pages).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

fn view_of(data: &[u8], span: RecordSpan) -> RecordView<'_> {
    let body = &data[span.start + record::RECORD_HEADER_BYTES..span.start + span.len];
    let (pooled, rest) = body.split_at(span.pooled_bytes);
    let (table, tokens) = rest.split_at(span.table_bytes);
    RecordView {
        n_tokens: span.n_tokens,
        pooled: (span.pooled_bytes > 0).then_some(pooled),
        tokens,
        passage_ends: (span.table_bytes > 0).then(|| &table[4..]),
    }
}

impl RecordBatch {
    /// A batch of `found.len()` records: the cached ones where `found` holds one, the records
    /// of `read` in order in the other places (`read` holds exactly as many as there are).
    pub fn with_cached(read: RecordBatch, found: Vec<Option<Arc<HotRecord>>>) -> Result<Self> {
        let misses = found.iter().filter(|f| f.is_none()).count();
        if misses != read.len() {
            return Err(CellarError::internal(format!(
                "{} records read for {misses} cache misses",
                read.len()
            )));
        }
        let mut read_slots = read.slots.into_iter();
        let mut cached = read.cached;
        let mut slots = Vec::with_capacity(found.len());
        for hit in found {
            slots.push(match hit {
                Some(record) => {
                    cached.push(record);
                    Slot::Cached(cached.len() - 1)
                }
                None => read_slots.next().expect("as many read records as misses"),
            });
        }
        let mut stats = read.stats;
        stats.cached += (slots.len() - misses) as u64;
        Ok(RecordBatch { bytes: read.bytes, slots, cached, stats })
    }

    /// A batch of no records, nothing read.
    pub fn empty() -> Self {
        RecordBatch {
            bytes: BatchBytes::Shared(Arc::new(Vec::<u8>::new())),
            slots: Vec::new(),
            cached: Vec::new(),
            stats: ReadStats::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The i-th record (parsed and checked when the batch was built).
    pub fn record(&self, i: usize) -> RecordView<'_> {
        match self.slots[i] {
            Slot::Read(span) => view_of(self.bytes.as_slice(), span),
            Slot::Cached(c) => self.cached[c].view(),
        }
    }

    /// Bytes a [`RecordBatch::copy_record`] of the i-th record takes (whole pages), when it
    /// was read by this batch (`None` when it came from the cache).
    pub fn copy_bytes(&self, i: usize) -> Option<usize> {
        match self.slots[i] {
            Slot::Read(span) => {
                Some(span.len.div_ceil(crate::format::PAGE_BYTES) * crate::format::PAGE_BYTES)
            }
            Slot::Cached(_) => None,
        }
    }

    /// A copy of the i-th record when it was read by this batch (`None` when it came from the
    /// cache already, or when no memory could be mapped for it).
    pub fn copy_record(&self, i: usize) -> Option<HotRecord> {
        let Slot::Read(span) = self.slots[i] else { return None };
        let mut bytes = memmap2::MmapMut::map_anon(self.copy_bytes(i)?).ok()?;
        bytes[..span.len].copy_from_slice(&self.bytes.as_slice()[span.start..span.start + span.len]);
        Some(HotRecord { bytes, span: RecordSpan { start: 0, ..span } })
    }

    pub fn stats(&self) -> ReadStats {
        self.stats
    }
}

/// Everything a reader is opened over.
pub struct ReaderSource {
    pub path: std::path::PathBuf,
    pub header: FileHeader,
    pub offsets: Arc<OffsetsTable>,
    pub bytes_per_vector: usize,
}

/// Reads batches of document records from `vectors.bin` through a [`FileSlice`] of the kind the
/// options name. The ram kind checks the whole body against its CRC once at open, so its
/// batches skip the per-record CRC; mmap and direct check every record they read.
pub struct RecordReader {
    source: ReaderSource,
    file: FileSlice,
    kind: ReaderKind,
}

impl RecordReader {
    /// Opens the reader `options` ask for; a direct reader's pooled buffers are the store's
    /// chunk ([`chunk_bytes`]).
    pub fn open(source: ReaderSource, options: &ReaderOptions) -> Result<RecordReader> {
        let chunk = chunk_bytes(&source.offsets);
        let idle = direct::POOLED_BUFFERS * (POOLED_BUFFER_BYTES / chunk);
        let file = FileSlice::opener(options).direct_buffers(chunk, idle).open(&source.path)?;
        if options.kind == ReaderKind::Ram {
            let body = file.read_bytes(source.header.body_offset..file.len())?;
            source.header.check_body_crc(&source.path, crc32c::crc32c(&body))?;
        }
        Ok(RecordReader { source, file, kind: options.kind })
    }

    pub fn kind(&self) -> ReaderKind {
        self.kind
    }

    /// How reads are issued ("memory", "willneed+faults", "page-faults", "io_uring",
    /// "pread-pool").
    pub fn engine(&self) -> &'static str {
        self.file.engine()
    }

    /// Tells the kernel that the records of `ids` will be read soon, when they lie close
    /// together (their span at most twice their bytes: a run of adjacent records), so it reads
    /// the whole span ahead at once while the caller reads and scores it chunk by chunk
    /// (`FileSlice::will_need`; a hint, nothing for ram and direct). Records scattered over the
    /// file are left alone: their span would read what nobody asked for. Returns whether it
    /// advised.
    pub fn will_need(&self, ids: &[DocId]) -> Result<bool> {
        let (mut start, mut end, mut bytes) = (u64::MAX, 0u64, 0u64);
        for id in ids {
            let e = self.source.offsets.get(*id)?;
            (start, end) = (start.min(e.offset), end.max(e.offset + u64::from(e.len)));
            bytes += u64::from(e.len);
        }
        if ids.is_empty() || end - start > 2 * bytes {
            return Ok(false);
        }
        self.file.will_need(start..end)?;
        Ok(true)
    }

    /// [`FileSlice::release_mapped`] of the records file.
    pub fn release_mapped(&self) -> Result<()> {
        self.file.release_mapped()
    }

    /// Reads the records of `ids` (duplicates allowed), in order. Records read from the file
    /// (mmap, direct, pread) are checked against their CRC: for mmap this is where the pages fault in.
    pub fn read_batch(&self, ids: &[DocId]) -> Result<RecordBatch> {
        let entries = ids.iter().map(|id| self.source.offsets.get(*id)).collect::<Result<Vec<_>>>()?;
        let extents: Vec<Extent> =
            entries.iter().map(|e| Extent { offset: e.offset, len: e.len as usize }).collect();
        let (bytes, spans, stats) = self.file.read_batch(&extents)?.into_parts();
        // The ram kind's body was checked against its CRC at open and has been in RAM since.
        let check_crc = self.kind != ReaderKind::Ram;
        let (path, data) = (&self.source.path, bytes.as_slice());
        let mut slots = Vec::with_capacity(spans.len());
        for ((start, len), (entry, id)) in spans.into_iter().zip(entries.iter().zip(ids)) {
            let rec = &data[start..start + len];
            if check_crc && crc32c::crc32c(rec) != entry.crc32c {
                return Err(CellarError::corrupted(
                    path,
                    entry.offset,
                    format!("record of doc {id} ({} bytes) fails its checksum", entry.len),
                ));
            }
            let view = record::parse(rec, self.source.bytes_per_vector, path, entry.offset)?;
            let pooled_bytes = view.pooled.map_or(0, <[u8]>::len);
            let table_bytes = view.passage_ends.map_or(0, |e| e.len() + 4);
            let span = RecordSpan { start, len, n_tokens: view.n_tokens, pooled_bytes, table_bytes };
            slots.push(Slot::Read(span));
        }
        Ok(RecordBatch { bytes, slots, cached: Vec::new(), stats })
    }
}
