//! A streaming collection: a grouped index (`cellar_search::Index`, `"grouped": true`), the one
//! document engine. Its writes go through the index's write-ahead log, memtable, segments and
//! merge; each group's records are one run in every segment; a search is the index's
//! `search_group`, exact inside one group through its one read pipeline. What is the stream's
//! own: the rules of its documents (`doc`), its options, opening (creating on first write,
//! migrating a first-format collection), and compaction on the process's one compaction thread
//! (`compactor`) once a flush leaves more than `compact_after` segments; the same thread commits
//! a background flush's segment once it is written.
//!
//! A document's sequence number is its version: the index's internal id of that write, plus
//! one (every write of a document takes a new, higher one).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use cellar_core::codec::CodecKind;
use cellar_core::{CellarError, Result};
use cellar_search::group::{GroupDoc, GroupResult};
use cellar_search::live::merge::MergeBudget;
use cellar_search::live::write::GroupKey;
use cellar_search::{
    BuildOptions, DocIn, Index, IndexConfig, OpenOptions, SearchRequest, WriteOp, WriteRequest,
};

use crate::compactor::{self, Compact};
use crate::doc;
use crate::legacy;
use crate::wal::Durability;

/// How a collection runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// `Fsync` (default): a write is on disk before it is acknowledged.
    pub durability: Durability,
    /// Memtable bytes that trigger a flush to a segment.
    pub memtable_bytes: usize,
    /// Segments that queue the collection for background compaction (when it runs).
    pub compact_after: usize,
    /// Compact on the process's compaction thread (otherwise only `compact()` does).
    pub background_compaction: bool,
    /// A full memtable's segment is written on a thread of its own while writes go on
    /// (`cellar_search::OpenOptions::background_flush`); otherwise the write that filled it
    /// returns once the segment is written.
    pub background_flush: bool,
    /// A collection created by this open takes its codec (and PCA) from the index in this
    /// folder, fitted on documents like the stream's: residual2 or int8 instead of f16 (`None`,
    /// the default: f16, which needs no fitting). A collection that exists keeps its own.
    pub codec_from: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Fsync,
            memtable_bytes: 64 << 20,
            compact_after: 4,
            background_compaction: true,
            background_flush: true,
            codec_from: None,
        }
    }
}

pub(crate) struct Inner {
    /// This collection, for queueing itself on the compaction thread.
    me: Weak<Inner>,
    pub(crate) dir: PathBuf,
    /// The collection's index, for the compaction thread: held by the `Collection` alone
    /// between compactions, so dropping the handle releases its locks at once.
    index: Weak<Index>,
    pub(crate) options: Options,
    /// Held while a compaction runs; `closed` and `queued` change under it.
    compacting: Mutex<()>,
    /// Waiting in the compaction thread's queue.
    queued: AtomicBool,
    /// The handle was dropped: no compaction may start any more.
    closed: AtomicBool,
    pub(crate) compactions: AtomicU64,
    /// Write batches acknowledged since open (each one log record, one sync with `Fsync`).
    pub(crate) log_batches: AtomicU64,
}

/// A streaming collection; share it between threads behind an `Arc`.
pub struct Collection {
    pub(crate) inner: Arc<Inner>,
    index: Arc<Index>,
}

impl std::fmt::Debug for Collection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection").field("dir", &self.inner.dir).field("dim", &self.dim()).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Creates the empty grouped index of a collection of dimension `dim` in `dir` (no model: a
/// stream's writers send vectors, or encode text before they write): f16 vectors, or the codec
/// and PCA of the index in `codec_from`.
fn create(dir: &Path, dim: usize, codec_from: Option<&Path>) -> Result<()> {
    cellar_core::codec::check_dim(dim)?;
    let mut build = BuildOptions::new("", dir);
    build.codec = CodecKind::F16;
    build.grouped = true;
    if let Some(from) = codec_from {
        let source = IndexConfig::load(from)?;
        build.codec = source.codec.parse::<CodecKind>()?;
        build.pca_dim = source.pca_dim;
        build.codec_from = Some(from.to_path_buf());
    }
    Index::create_empty(&build, Some(dim)).map(drop)
}

impl Collection {
    /// Opens the collection in `dir`, creating it with vectors of `dim` when it does not exist
    /// (`dim: None` makes a missing collection a `NotFound` error). A collection of the first
    /// format is migrated first (`legacy::migrate`). One process opens a collection at a time:
    /// a second is `Locked`.
    pub fn open(dir: &Path, dim: Option<usize>, options: Options) -> Result<Collection> {
        legacy::finish_migration(dir)?;
        if legacy::is_legacy(dir) {
            // The first format's f16 vectors stay f16: a migration loses nothing.
            let migrated = legacy::migrate(dir, &|new, dim| {
                create(new, dim, None)?;
                Index::open(new, OpenOptions::default())
            })?;
            log::info!(
                "{}: migrated from the first stream format: {} documents from {} entries",
                dir.display(),
                migrated.docs,
                migrated.entries
            );
        }
        let exists = dir.join(cellar_search::config::CONFIG_FILE).is_file();
        match (exists, dim) {
            (false, None) => {
                return Err(CellarError::NotFound(format!("no streaming collection at {}", dir.display())))
            }
            (false, Some(dim)) => create(dir, dim, options.codec_from.as_deref())?,
            (true, _) => {}
        }
        // Records mapped: a warm group's search borrows its records from the page cache with no
        // call (a run of more than a page is announced with MADV_WILLNEED first), where positioned
        // reads copied them with a pread each (bench/results/stream-mmap.md). A root keeps at
        // most `Streams::max_open` collections open, so the mappings stay bounded.
        let open = OpenOptions {
            reader: cellar_core::io::ReaderKind::Mmap,
            flush_bytes: options.memtable_bytes,
            background_flush: options.background_flush,
            durability: options.durability,
            ..OpenOptions::default()
        };
        let index = Index::open(dir, open)?;
        if !index.config().grouped {
            return Err(CellarError::invalid(format!(
                "{}: an index, not a streaming collection (its documents have no groups)",
                dir.display()
            )));
        }
        let have = index.config().encoder.model_dim;
        if let Some(dim) = dim.filter(|d| *d != have) {
            return Err(CellarError::WrongDimension { expected: have, received: dim });
        }
        // Before anything is written: a second process writing the same log would lose writes.
        index.take_writer().map_err(|e| match e {
            CellarError::Locked { detail, .. } => CellarError::Locked { path: dir.to_path_buf(), detail },
            other => other,
        })?;
        let index = Arc::new(index);
        let inner = Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            dir: dir.to_path_buf(),
            index: Arc::downgrade(&index),
            options,
            compacting: Mutex::new(()),
            queued: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            compactions: AtomicU64::new(0),
            log_batches: AtomicU64::new(0),
        });
        Ok(Collection { inner, index })
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn dim(&self) -> usize {
        self.index.config().encoder.model_dim
    }

    /// The grouped index the collection is.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Writes (or replaces) one document; durable when this returns (with `Durability::Fsync`).
    pub fn put(&self, doc: &DocIn) -> Result<u64> {
        self.put_batch(std::slice::from_ref(doc))
    }

    /// Writes documents as one log record: one sync, and after a crash all of them or none.
    /// Returns the sequence number of the last one. Given a `Vec`, the documents move into the
    /// write; given a slice, they are copied first.
    pub fn put_batch(&self, docs: impl Into<Vec<DocIn>>) -> Result<u64> {
        let docs: Vec<DocIn> = docs.into();
        Self::check_batch(&docs, self.dim())?;
        let ops = docs.into_iter().map(WriteOp::Put).collect();
        let report = self.write(ops)?;
        Ok(u64::from(report.next_id))
    }

    /// Checks a batch for a collection of dimension `dim` as `put_batch` does, before any
    /// collection exists (so a rejected first write creates none).
    pub fn check_batch(docs: &[DocIn], dim: usize) -> Result<()> {
        if docs.is_empty() {
            return Err(CellarError::InvalidInput("a batch holds at least one document".into()));
        }
        cellar_core::codec::check_dim(dim)?;
        for (i, d) in docs.iter().enumerate() {
            doc::check_doc(d, dim, "document").map_err(|e| with_position(e, i, docs.len()))?;
        }
        Ok(())
    }

    /// Whether no compaction of this collection is queued or running now.
    pub fn is_idle(&self) -> bool {
        !self.inner.queued.load(Ordering::Acquire) && self.inner.compacting.try_lock().is_ok()
    }

    /// Deletes one document; `NotFound` when (group, id) holds no live document. Returns the
    /// collection's last sequence number.
    pub fn delete(&self, group: &str, id: &str) -> Result<u64> {
        let op = WriteOp::DeleteInGroup(GroupKey { group: group.to_string(), id: id.to_string() });
        let report = self.write(vec![op]).map_err(|e| match e {
            CellarError::NotFound(_) => {
                CellarError::NotFound(format!("no document {id:?} in group {group:?}"))
            }
            other => other,
        })?;
        Ok(u64::from(report.next_id))
    }

    /// Flushes the memtable to a segment now (nothing to do when it is empty).
    pub fn flush(&self) -> Result<()> {
        self.index.flush()
    }

    /// Merges every segment into one; returns whether there was anything to merge.
    pub fn compact(&self) -> Result<bool> {
        let _one_at_a_time = lock(&self.inner.compacting);
        self.inner.compact_locked(&self.index)
    }

    /// Waits until no background compaction of this collection is queued or running (at most
    /// `IDLE_WAIT`).
    pub fn wait_idle(&self) {
        let start = Instant::now();
        loop {
            let running = lock(&self.inner.compacting);
            if !self.inner.queued.load(Ordering::Acquire) || start.elapsed() > IDLE_WAIT {
                return;
            }
            drop(running);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The exact top-k of `request` among the live documents of `group`
    /// (`Index::search_group`); `NotFound` when the collection holds nothing of the group.
    pub fn search(&self, group: &str, request: &SearchRequest) -> Result<GroupResult> {
        self.index.search_group(group, request)
    }

    /// The live document (group, id); `NotFound` when there is none.
    pub fn get(&self, group: &str, id: &str) -> Result<GroupDoc> {
        self.index.get_in_group(group, id)
    }
}

/// Longest `wait_idle` waits for a queued compaction to run.
const IDLE_WAIT: Duration = Duration::from_secs(60);

fn with_position(error: CellarError, i: usize, n: usize) -> CellarError {
    match error {
        CellarError::InvalidInput(m) if n > 1 => {
            CellarError::InvalidInput(format!("document {i} of the batch: {m}"))
        }
        other => other,
    }
}

impl Collection {
    /// Applies `ops` as one batch, then queues the collection on the compaction thread when the
    /// segments are past `compact_after`, or when the batch started a background flush (whose
    /// segment the thread commits once written, instead of the next write).
    fn write(&self, ops: Vec<WriteOp>) -> Result<cellar_search::WriteReport> {
        let report = self.index.write(WriteRequest { ops })?;
        let inner = &self.inner;
        inner.log_batches.fetch_add(1, Ordering::Relaxed);
        let wanted = (inner.options.background_compaction
            && self.index.written_segments() > inner.options.compact_after)
            || (inner.options.background_flush && self.index.flush_under_way());
        if wanted && !inner.queued.swap(true, Ordering::AcqRel) {
            compactor::request(inner.me.clone() as Weak<dyn Compact>);
        }
        Ok(report)
    }
}

impl Inner {
    /// Merges every segment into one; the caller holds `compacting`.
    fn compact_locked(&self, index: &Index) -> Result<bool> {
        if index.written_segments() < 2 {
            return Ok(false);
        }
        let merged = index.merge(&MergeBudget { bytes_per_sec: 0, ..MergeBudget::default() })?;
        if merged.is_some() {
            self.compactions.fetch_add(1, Ordering::Relaxed);
        }
        Ok(merged.is_some())
    }
}

impl Compact for Inner {
    /// What the compaction thread runs for this collection, unless its handle was dropped
    /// meanwhile: a background flush's segment committed once written, then a compaction when
    /// the segments are past `compact_after`.
    fn compact_queued(&self) {
        let _one_at_a_time = lock(&self.compacting);
        self.queued.store(false, Ordering::Release);
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // Upgraded under `compacting`, and dropped before it is released: the handle's drop
        // waits for it, and then holds the last reference.
        let Some(index) = self.index.upgrade() else { return };
        index.commit_flush_when_done();
        let wanted =
            self.options.background_compaction && index.written_segments() > self.options.compact_after;
        if let Err(e) = if wanted { self.compact_locked(&index) } else { Ok(false) } {
            log::error!("{}: background compaction failed: {e}", self.dir.display());
        }
    }
}

impl Drop for Collection {
    fn drop(&mut self) {
        // After this no compaction writes here; one running now finishes first.
        let _running = lock(&self.inner.compacting);
        self.inner.closed.store(true, Ordering::Release);
        // A segment a background flush is writing is committed, not written again at the next open.
        if let Err(e) = self.index.finish_flush() {
            log::warn!(
                "{}: the flush under way at close ({e}); the next open writes it again",
                self.inner.dir.display()
            );
        }
    }
}
