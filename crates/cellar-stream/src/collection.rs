//! A streaming collection on disk: settings, manifest, write-ahead log, segments.
//!
//! Writes: validate → assign sequence numbers → one log record per batch (one `fdatasync`) →
//! memtable → acknowledged. When the memtable passes its byte budget it is flushed: segment
//! written atomically, then the manifest (its segment list and `flushed_seq`), then the log is
//! emptied. Compaction merges every segment into one (newest sequence number wins, shadowed
//! versions and tombstones dropped), so each group becomes one contiguous extent; it runs on
//! the process's one compaction thread (`compactor`) or when `compact()` is called.
//!
//! A flush that fails after the batch reached the log (a full disk) does not fail the batch: it
//! is durable and visible, the memtable keeps it, and the next write tries the flush again.
//!
//! Lock order: `writer` (log, manifest) before `state` (memtable, segment list). Searches only
//! take `state` for reading, long enough to clone `Arc`s.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::{Duration, Instant};

use cellar_core::format::fsio::DirLock;
use cellar_core::{CellarError, IoContext, Result};

use crate::compactor::{self, Compact};
use cellar_search::doc::check_key;
use cellar_search::DocIn;

use crate::doc::{self, EntryView};
use crate::manifest::{segment_file, Manifest, SegmentRef, Settings, MANIFEST_VERSION, WAL_FILE};
use crate::memtable::Memtable;
use crate::merge::merge_segments;
use crate::segment::{self, Segment, SegmentWriter, CHUNK_BYTES};
use crate::wal::{Durability, Wal, MAX_RECORD_BYTES};

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
    /// Largest read a query makes at once from a group's extent.
    pub chunk_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Fsync,
            memtable_bytes: 64 << 20,
            compact_after: 4,
            background_compaction: true,
            chunk_bytes: CHUNK_BYTES,
        }
    }
}

struct Writer {
    wal: Wal,
    next_seq: u64,
    manifest: Manifest,
}

pub(crate) struct State {
    pub memtable: Memtable,
    /// Oldest first; sequence ranges do not overlap.
    pub segments: Vec<Arc<Segment>>,
}

/// Group commit across callers: a caller queues its batch; if no leader is writing it becomes
/// the leader and writes every queued batch with one write and one fsync; otherwise it waits
/// until a leader has answered its slot (or leadership is free again).
#[derive(Default)]
struct Commits {
    queue: Vec<(Vec<Vec<u8>>, Slot)>,
    leader: bool,
}

pub(crate) struct Inner {
    /// This collection, for queueing itself on the compaction thread.
    me: Weak<Inner>,
    pub dir: PathBuf,
    pub settings: Settings,
    pub options: Options,
    writer: Mutex<Writer>,
    /// Batches waiting for the log, and whether a leader is writing (group commit).
    commits: Mutex<Commits>,
    committed: Condvar,
    state: RwLock<State>,
    /// Held while a compaction runs; `closed` and `queued` change under it.
    compacting: Mutex<()>,
    /// Waiting in the compaction thread's queue.
    queued: AtomicBool,
    /// The handle was dropped: no compaction may start any more (its lock is released).
    closed: AtomicBool,
    pub flushes: AtomicU64,
    /// Flushes that failed after their batch was logged (the batch stayed acknowledged).
    pub flush_failures: AtomicU64,
    pub compactions: AtomicU64,
    /// Log writes (one fsync each with `Durability::Fsync`) and the batches they carried.
    pub log_syncs: AtomicU64,
    pub log_batches: AtomicU64,
    pub recovered_records: u64,
    pub truncated_bytes: u64,
}

/// A streaming collection; share it between threads behind an `Arc`.
pub struct Collection {
    pub(crate) inner: Arc<Inner>,
    /// Released when the handle drops, after any running compaction has finished.
    _lock: DirLock,
}

impl std::fmt::Debug for Collection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection").field("dir", &self.inner.dir).field("dim", &self.dim()).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn dim(&self) -> usize {
        self.settings.dim
    }
}

/// Removes temporaries and segment files the manifest does not list (a crash between writing a
/// segment and committing the manifest, or after a compaction's commit and before its cleanup).
fn sweep(dir: &Path, manifest: &Manifest) -> Result<()> {
    let entries = std::fs::read_dir(dir).at(dir)?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let live = manifest.segments.iter().any(|s| s.file == name);
        let stray_segment = name.starts_with("seg-") && !live;
        if stray_segment || name.ends_with(".tmp") || name.ends_with(".cellar-tmp") {
            let path = entry.path();
            std::fs::remove_file(&path).at(&path)?;
        }
    }
    Ok(())
}

/// Replays the log into a memtable: records wholly in segments (seq <= flushed) are skipped.
fn replay(dir: &Path, options: &Options, flushed: u64) -> Result<(Wal, Memtable, u64, (u64, u64))> {
    let path = dir.join(WAL_FILE);
    let mut memtable = Memtable::default();
    let mut last = flushed;
    let (wal, recovery) = Wal::open(&path, options.durability, |payload| {
        let entries = split_record(payload)
            .map_err(|d| CellarError::corrupted(&path, 0, format!("a log record: {d}")))?;
        for entry in entries {
            let view = EntryView::parse(entry).expect("checked by split_record");
            if view.seq > flushed {
                memtable.insert(view.group, view.id, entry.into());
                last = last.max(view.seq);
            }
        }
        Ok(())
    })?;
    Ok((wal, memtable, last, (recovery.records, recovery.truncated_bytes)))
}

/// The entries of one log record (`count u32 | entry*`), each parsed once to check it.
pub(crate) fn split_record(payload: &[u8]) -> std::result::Result<Vec<&[u8]>, String> {
    let count = doc::entry_len(payload).ok_or("no entry count")?;
    let mut rest = &payload[4..];
    // Not `with_capacity(count)`: the count is a field of the record, and a record whose
    // checksum matches can still say 4 billion (found by `cellar-bench fuzz`, issue 16.3).
    let mut out = Vec::new();
    for _ in 0..count {
        let len = doc::entry_len(rest).filter(|&l| l >= 4 && l <= rest.len()).ok_or("entry cut short")?;
        EntryView::parse(&rest[..len])?;
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    if !rest.is_empty() {
        return Err("bytes after the last entry".into());
    }
    Ok(out)
}

fn seq_of(entry: &[u8]) -> u64 {
    u64::from_le_bytes(entry[5..13].try_into().expect("8 bytes"))
}

impl Collection {
    /// Opens the collection in `dir`, creating it with vectors of `dim` when it does not exist
    /// (`dim: None` makes a missing collection a `NotFound` error).
    pub fn open(dir: &Path, dim: Option<usize>, options: Options) -> Result<Collection> {
        // `stream.json` never changes once written, so the cheap refusals need no lock.
        match (Settings::load(dir)?, dim) {
            (Some(settings), Some(dim)) if settings.dim != dim => {
                return Err(CellarError::WrongDimension { expected: settings.dim, received: dim })
            }
            (None, None) => {
                return Err(CellarError::NotFound(format!("no streaming collection at {}", dir.display())))
            }
            (None, Some(dim)) => check_dim(dim)?,
            _ => {}
        }
        std::fs::create_dir_all(dir).at(dir)?;
        // Before anything is read: a second process replaying and appending to the same log
        // would truncate the first one's acknowledged writes as a torn tail.
        let lock = DirLock::exclusive(dir, "streaming collection")?;
        let settings = match (Settings::load(dir)?, dim) {
            (Some(settings), Some(dim)) if settings.dim != dim => {
                return Err(CellarError::WrongDimension { expected: settings.dim, received: dim })
            }
            (Some(settings), _) => settings,
            (None, None) => {
                return Err(CellarError::NotFound(format!("no streaming collection at {}", dir.display())))
            }
            (None, Some(dim)) => create(dir, dim)?,
        };
        let manifest = Manifest::load(dir)?;
        sweep(dir, &manifest)?;
        let segments = manifest
            .segments
            .iter()
            .map(|s| Segment::open(&dir.join(&s.file)).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        if let Some(bad) = segments.iter().find(|s| s.dim != settings.dim) {
            let detail = format!("segment of dim {} in a collection of dim {}", bad.dim, settings.dim);
            return Err(CellarError::corrupted(&bad.path, segment::header_field("dim") as u64, detail));
        }
        let (wal, memtable, last, (records, truncated)) = replay(dir, &options, manifest.flushed_seq)?;
        let writer = Writer { wal, next_seq: last + 1, manifest };
        let inner = Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            dir: dir.to_path_buf(),
            settings,
            options,
            writer: Mutex::new(writer),
            commits: Mutex::new(Commits::default()),
            committed: Condvar::new(),
            state: RwLock::new(State { memtable, segments }),
            compacting: Mutex::new(()),
            queued: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            flushes: AtomicU64::new(0),
            flush_failures: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            log_syncs: AtomicU64::new(0),
            log_batches: AtomicU64::new(0),
            recovered_records: records,
            truncated_bytes: truncated,
        });
        Ok(Collection { inner, _lock: lock })
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn dim(&self) -> usize {
        self.inner.dim()
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Writes (or replaces) one document; durable when this returns (with `Durability::Fsync`).
    pub fn put(&self, doc: &DocIn) -> Result<u64> {
        self.put_batch(std::slice::from_ref(doc))
    }

    /// Writes documents as one log record: one sync, and after a crash all of them or none.
    /// Returns the sequence number of the last one.
    pub fn put_batch(&self, docs: &[DocIn]) -> Result<u64> {
        let entries = Self::check_batch(docs, self.dim())?;
        self.inner.commit_queued(entries)
    }

    /// Checks a batch for a collection of dimension `dim` as `put_batch` does, before any
    /// collection exists (so a rejected first write creates none); returns its log entries.
    pub fn check_batch(docs: &[DocIn], dim: usize) -> Result<Vec<Vec<u8>>> {
        if docs.is_empty() {
            return Err(CellarError::InvalidInput("a batch holds at least one document".into()));
        }
        check_dim(dim)?;
        let entries = docs
            .iter()
            .enumerate()
            .map(|(i, d)| doc::encode_doc(d, dim, "document").map_err(|e| with_position(e, i, docs.len())))
            .collect::<Result<Vec<Vec<u8>>>>()?;
        check_record_size(&entries)?;
        Ok(entries)
    }

    /// Whether no compaction of this collection is queued or running now.
    pub fn is_idle(&self) -> bool {
        !self.inner.queued.load(Ordering::Acquire) && self.inner.compacting.try_lock().is_ok()
    }

    /// Deletes one document (a tombstone); `NotFound` when (group, id) holds no live document.
    pub fn delete(&self, group: &str, id: &str) -> Result<u64> {
        check_key("group", group)?;
        check_key("document id", id)?;
        let mut writer = lock(&self.inner.writer);
        if self.inner.lookup(group, id)?.is_none() {
            return Err(CellarError::NotFound(format!("no document {id:?} in group {group:?}")));
        }
        let slot: Slot = Arc::new(Mutex::new(None));
        self.inner.commit_group(&mut writer, vec![(vec![doc::encode_tombstone(group, id)], slot.clone())]);
        let done = lock(&slot).take();
        done.expect("committed")
    }

    /// Flushes the memtable to a segment now (nothing to do when it is empty).
    pub fn flush(&self) -> Result<()> {
        let mut writer = lock(&self.inner.writer);
        self.inner.flush_locked(&mut writer)
    }

    /// Merges every segment into one; returns whether there was anything to merge.
    pub fn compact(&self) -> Result<bool> {
        self.inner.compact()
    }

    /// Waits until no background compaction of this collection is queued or running (at most
    /// `IDLE_WAIT`; a queue busy with other collections longer than that ends the wait early).
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
}

/// Longest `wait_idle` waits for a queued compaction to run.
const IDLE_WAIT: Duration = Duration::from_secs(60);

/// Where a queued batch's outcome lands: its last sequence number, or the error.
type Slot = Arc<Mutex<Option<Result<u64>>>>;

fn check_record_size(entries: &[Vec<u8>]) -> Result<()> {
    let size: usize = 4 + entries.iter().map(Vec::len).sum::<usize>();
    if size > MAX_RECORD_BYTES {
        return Err(CellarError::InvalidInput(format!(
            "a batch of {size} bytes is over the limit of {MAX_RECORD_BYTES}; split it"
        )));
    }
    Ok(())
}

fn with_position(error: CellarError, i: usize, n: usize) -> CellarError {
    match error {
        CellarError::InvalidInput(m) if n > 1 => {
            CellarError::InvalidInput(format!("document {i} of the batch: {m}"))
        }
        other => other,
    }
}

fn check_dim(dim: usize) -> Result<()> {
    if dim == 0 || dim > doc::MAX_DIM {
        return Err(CellarError::InvalidInput(format!("dimension {dim}: 1 to {} allowed", doc::MAX_DIM)));
    }
    Ok(())
}

fn create(dir: &Path, dim: usize) -> Result<Settings> {
    check_dim(dim)?;
    std::fs::create_dir_all(dir).at(dir)?;
    let settings = Settings { version: MANIFEST_VERSION, dim, encoder: None };
    settings.save(dir)?;
    Ok(settings)
}

impl Inner {
    /// Queues `entries` and returns once a leader (maybe this caller) has logged them.
    fn commit_queued(&self, entries: Vec<Vec<u8>>) -> Result<u64> {
        let slot: Slot = Arc::new(Mutex::new(None));
        let mut commits = lock(&self.commits);
        commits.queue.push((entries, slot.clone()));
        loop {
            if let Some(done) = lock(&slot).take() {
                return done;
            }
            if !commits.leader {
                commits.leader = true;
                break;
            }
            commits = self.committed.wait(commits).unwrap_or_else(|p| p.into_inner());
        }
        let group = std::mem::take(&mut commits.queue);
        drop(commits);
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut writer = lock(&self.writer);
            self.commit_group(&mut writer, group);
        }));
        lock(&self.commits).leader = false;
        self.committed.notify_all();
        if let Err(panic) = written {
            std::panic::resume_unwind(panic);
        }
        let done = lock(&slot).take();
        // Empty only when the leader that took this batch panicked: its outcome is unknown.
        done.unwrap_or_else(|| {
            Err(CellarError::internal(format!(
                "{}: the log writer vanished while writing this batch; it may or may not be logged",
                self.dir.join(WAL_FILE).display()
            )))
        })
    }

    /// Logs each queued batch as one record, all with one write and one sync, then makes them
    /// visible, flushes when over budget, and answers every batch's slot.
    fn commit_group(&self, writer: &mut Writer, group: Vec<(Vec<Vec<u8>>, Slot)>) {
        let first_seq = writer.next_seq;
        let mut payloads = Vec::with_capacity(group.len());
        let mut lasts = Vec::with_capacity(group.len());
        for (entries, _) in &group {
            let mut payload = Vec::with_capacity(4 + entries.iter().map(Vec::len).sum::<usize>());
            payload.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            for entry in entries {
                payload.extend_from_slice(entry);
                let at = payload.len() - entry.len();
                doc::set_seq(&mut payload[at..], writer.next_seq);
                writer.next_seq += 1;
            }
            payloads.push(payload);
            lasts.push(writer.next_seq - 1);
        }
        let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        let outcome = writer.wal.append(&refs);
        match &outcome {
            Err(_) => writer.next_seq = first_seq, // nothing was logged
            Ok(()) => {
                self.log_syncs.fetch_add(1, Ordering::Relaxed);
                self.log_batches.fetch_add(group.len() as u64, Ordering::Relaxed);
                self.make_visible(&payloads);
                if self.read().memtable.bytes() > self.options.memtable_bytes {
                    // The batches are logged and visible: a failed flush is not theirs to report.
                    if let Err(e) = self.flush_locked(writer) {
                        self.flush_failures.fetch_add(1, Ordering::Relaxed);
                        log::error!(
                            "{}: flushing the memtable failed ({e}); the logged writes stay in the log and the memtable, the next write tries again",
                            self.dir.display()
                        );
                    }
                }
            }
        }
        for ((_, slot), last) in group.iter().zip(lasts) {
            *lock(slot) = Some(outcome.as_ref().map(|()| last).map_err(CellarError::clone));
        }
    }

    /// Inserts the entries of logged payloads into the memtable.
    fn make_visible(&self, payloads: &[Vec<u8>]) {
        let mut state = self.write_state();
        for payload in payloads {
            for entry in split_record(payload).expect("encoded by us") {
                let view = EntryView::parse(entry).expect("encoded by us");
                let (group, id) = (view.group.to_string(), view.id.to_string());
                state.memtable.insert(&group, &id, entry.into());
            }
        }
    }

    fn flush_locked(&self, writer: &mut Writer) -> Result<()> {
        let number = writer.manifest.next_segment;
        let segment = {
            let state = self.read();
            if state.memtable.is_empty() {
                return Ok(());
            }
            let mut out = SegmentWriter::create(&self.dir.join(segment_file(number)), self.dim())?;
            for (group, entries) in state.memtable.iter() {
                out.begin_group(group)?;
                for entry in entries {
                    out.push(entry, seq_of(entry))?;
                }
            }
            Arc::new(out.finish()?)
        };
        let mut manifest = writer.manifest.clone();
        manifest.segments.push(segment_ref(number, &segment));
        manifest.flushed_seq = writer.next_seq - 1;
        manifest.next_segment = number + 1;
        manifest.save(&self.dir)?;
        writer.manifest = manifest;
        let n_segments = {
            let mut state = self.write_state();
            state.segments.push(segment);
            state.memtable = Memtable::default();
            state.segments.len()
        };
        writer.wal.reset()?;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let wanted = self.options.background_compaction && n_segments > self.options.compact_after;
        if wanted && !self.queued.swap(true, Ordering::AcqRel) {
            compactor::request(self.me.clone() as Weak<dyn Compact>);
        }
        Ok(())
    }

    fn compact(&self) -> Result<bool> {
        let _one_at_a_time = lock(&self.compacting);
        self.compact_locked()
    }

    /// Merges every segment into one; the caller holds `compacting`.
    fn compact_locked(&self) -> Result<bool> {
        let inputs = self.read().segments.clone();
        if inputs.len() < 2 {
            return Ok(false);
        }
        let number = {
            let mut writer = lock(&self.writer);
            writer.manifest.next_segment += 1;
            writer.manifest.next_segment - 1
        };
        let merged = Arc::new(merge_segments(&inputs, &self.dir.join(segment_file(number)), self.dim())?);
        {
            let mut writer = lock(&self.writer);
            let mut manifest = writer.manifest.clone();
            manifest.segments.splice(..inputs.len(), [segment_ref(number, &merged)]);
            manifest.save(&self.dir)?;
            writer.manifest = manifest;
            let mut state = self.write_state();
            state.segments.splice(..inputs.len(), [merged]);
        }
        for old in &inputs {
            // Already out of the manifest: a failure here leaves an orphan that open removes.
            let _ = std::fs::remove_file(&old.path);
        }
        self.compactions.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// The newest live entry of (group, id), if any.
    pub(crate) fn lookup(&self, group: &str, id: &str) -> Result<Option<Arc<[u8]>>> {
        let segments = {
            let state = self.read();
            if let Some(entry) = state.memtable.get(group, id) {
                return Ok((entry[4] == doc::KIND_PUT).then_some(entry));
            }
            state.segments.clone()
        };
        for segment in segments.iter().rev() {
            let Some(mut cursor) = segment.cursor(group, self.options.chunk_bytes) else { continue };
            while let Some(entry) = cursor.next_entry()? {
                let view = EntryView::parse_at(&segment.path, entry)?;
                if view.id == id {
                    return Ok((!view.is_tombstone()).then(|| entry.into()));
                }
                if view.id > id {
                    break;
                }
            }
        }
        Ok(None)
    }

    pub(crate) fn writer_state(&self) -> (u64, u64, u64) {
        let writer = lock(&self.writer);
        (writer.next_seq - 1, writer.manifest.flushed_seq, writer.wal.len())
    }
}

impl Compact for Inner {
    /// A compaction the compaction thread runs for this collection, unless its handle was
    /// dropped meanwhile (another process may hold the directory by now).
    fn compact_queued(&self) {
        let _one_at_a_time = lock(&self.compacting);
        self.queued.store(false, Ordering::Release);
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.compact_locked() {
            log::error!("{}: background compaction failed: {e}", self.dir.display());
        }
    }
}

fn segment_ref(number: u64, segment: &Segment) -> SegmentRef {
    SegmentRef {
        file: segment_file(number),
        min_seq: segment.min_seq,
        max_seq: segment.max_seq,
        entries: segment.entries,
    }
}

impl Drop for Collection {
    fn drop(&mut self) {
        // After this no compaction writes here; one running now finishes first. The directory
        // lock is released after this body, when the fields drop.
        let _running = lock(&self.inner.compacting);
        self.inner.closed.store(true, Ordering::Release);
    }
}
