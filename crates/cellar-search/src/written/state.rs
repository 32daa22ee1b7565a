//! The state of a living index, apart from the `Index` that drives it: the live manifest, the
//! view searches read (segments, memtable, tombstones), the writer's state, and `Live`, which
//! holds them for an open index (`live/mod.rs` explains the whole).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use cellar_core::format::fsio::{write_atomic, DirLock};
use cellar_core::format::versioned::{parse_versioned_json, VersionRange};
use cellar_core::format::wal::Wal;
use cellar_core::{CellarError, DocId, Result};
use serde::{Deserialize, Serialize};

use crate::corpus::Document;
use crate::ivf::LiveMembers;
use crate::written::batch::{LiveDoc, LogBatch, LogOp};
use crate::written::memtable::Memtable;
use crate::written::segment::Segment;

/// Sub-directory of everything written after the build.
pub const LIVE_DIR: &str = "live";
/// The live manifest, its commit point.
pub const LIVE_MANIFEST: &str = "MANIFEST.json";
/// The write-ahead log.
pub const WAL_FILE: &str = "wal.log";
/// The log rotated out when the memtable was frozen (`Wal::rotate`): the batches of the
/// documents a flush is writing to a segment, replayed before `wal.log` until the manifest
/// names that segment.
pub const FROZEN_WAL_FILE: &str = "wal.frozen.log";
/// Version of `MANIFEST.json`.
pub const LIVE_VERSION: u32 = 1;
/// The versions of `MANIFEST.json` this build reads.
pub const LIVE_READABLE_VERSIONS: VersionRange = VersionRange::only(LIVE_VERSION);
/// Pooled vectors (of the build's, and of the written documents) the IVF's drift is measured on.
pub const DRIFT_SAMPLE: usize = 2048;
/// IVF drift past which `LiveStats` advises a retrain: written documents 1.5 times as far from
/// their centroids as the build's.
pub const DRIFT_RETRAIN: f64 = 1.5;

/// Memtable bytes (encoded vectors, text and keys) past which a write flushes it to a segment.
pub const FLUSH_BYTES: usize = 16 << 20;
/// While its flushes fail (a full disk), the memtable keeps every logged document and each
/// write tries the flush again; past this many times the flush threshold (`flush_bytes`), a
/// write whose flush still fails is refused before it is logged.
pub const MEMTABLE_BOUND_FLUSHES: usize = 4;
/// Recoveries from a failed BM25 commit remembered, so that every writer of the failed group
/// learns whether its batch was kept.
const RECOVERIES_KEPT: usize = 16;

/// `live/MANIFEST.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LiveManifest {
    pub(crate) version: u32,
    /// The internal id the next written document gets.
    pub(crate) next_id: u32,
    /// The last batch whose documents are in a segment.
    pub(crate) flushed_seq: u64,
    pub(crate) segments: Vec<SegmentEntry>,
    /// Internal ids deleted up to `flushed_seq`, ascending.
    pub(crate) deleted: Vec<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SegmentEntry {
    pub(crate) name: String,
    pub(crate) first: u32,
    pub(crate) docs: u32,
}

impl LiveManifest {
    pub(crate) fn load(live: &Path) -> Result<Option<LiveManifest>> {
        let path = live.join(LIVE_MANIFEST);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CellarError::io(&path, e)),
        };
        let manifest: LiveManifest = parse_versioned_json(&path, &bytes, "version", LIVE_READABLE_VERSIONS)?;
        Ok(Some(manifest))
    }

    pub(crate) fn save(&self, live: &Path) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| CellarError::internal(e.to_string()))?;
        write_atomic(&live.join(LIVE_MANIFEST), &bytes)
    }
}

/// One consistent state of the documents written since the build.
#[derive(Clone, Default)]
pub(crate) struct LiveView {
    pub base_docs: u32,
    pub segments: Vec<Arc<Segment>>,
    /// Written, logged, not yet in a segment; ascending ids (with their positions by group
    /// and by IVF cluster).
    pub(crate) memtable: Memtable,
    pub(crate) mem_bytes: usize,
    /// Per segment: IVF cluster → its documents' record numbers.
    pub(crate) seg_clusters: Vec<Arc<HashMap<u32, Vec<u32>>>>,
    /// One bit per internal id.
    pub(crate) deleted: Arc<Vec<u64>>,
    pub(crate) deleted_count: u64,
    pub next_id: u32,
    /// The last batch applied.
    pub seq: u64,
}

/// The memtable's oldest documents, frozen: a flush writes them to a segment while writes go on
/// into the memtable and a fresh log. One at a time.
pub(crate) struct Frozen {
    /// The last batch they hold, and the id after their last document.
    pub(crate) seq: u64,
    pub(crate) next_id: u32,
    /// How many of the memtable's documents (its oldest), and their `LiveView::mem_bytes`.
    pub(crate) docs: usize,
    pub(crate) bytes: usize,
    /// Ids deleted up to `seq`: the manifest's `deleted` once it names the segment.
    pub(crate) deleted: Vec<u32>,
    /// Whether they include the log's batches too (a flush written again with the writer held
    /// throughout took the documents written since): the log is emptied at the commit.
    pub(crate) with_log: bool,
    /// The segment being written on its own thread; `None` before it starts and after it
    /// failed (the next flush writes it again).
    pub(crate) job: Option<SegmentJob>,
}

impl Frozen {
    /// Every document of `view`'s memtable, frozen.
    pub(crate) fn of(view: &LiveView) -> Frozen {
        Frozen {
            seq: view.seq,
            next_id: view.next_id,
            docs: view.memtable.len(),
            bytes: view.mem_bytes,
            deleted: view.deleted_ids(),
            with_log: false,
            job: None,
        }
    }

    /// The name of the segment its documents go to.
    pub(crate) fn segment_name(&self) -> String {
        format!("seg-{:016x}", self.seq)
    }
}

/// What a segment job hands back: whether it is done, and the record ids it wrote (taken by
/// the commit; `done` stays, so a writer still waiting on it wakes).
#[derive(Default)]
pub(crate) struct JobState {
    done: bool,
    written: Option<Result<Vec<u32>>>,
}

pub(crate) type JobResult = (Mutex<JobState>, std::sync::Condvar);

/// A segment written on a thread of its own.
pub(crate) struct SegmentJob {
    thread: Option<std::thread::JoinHandle<()>>,
    pub(crate) done: Arc<JobResult>,
}

impl SegmentJob {
    /// Runs `write` on a new thread.
    pub(crate) fn spawn(write: impl FnOnce() -> Result<Vec<u32>> + Send + 'static) -> Result<SegmentJob> {
        let done: Arc<JobResult> = Arc::new((Mutex::new(JobState::default()), std::sync::Condvar::new()));
        let slot = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name("cellar-flush".into())
            .spawn(move || {
                let written = write();
                *slot.0.lock().unwrap_or_else(|p| p.into_inner()) =
                    JobState { done: true, written: Some(written) };
                slot.1.notify_all();
            })
            .map_err(|e| CellarError::internal(format!("starting a flush thread: {e}")))?;
        Ok(SegmentJob { thread: Some(thread), done })
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.0.lock().unwrap_or_else(|p| p.into_inner()).done
    }

    /// Waits until the job's segment is written (or failed), whether or not a commit took it since.
    pub(crate) fn wait(done: &JobResult) {
        let mut state = done.0.lock().unwrap_or_else(|p| p.into_inner());
        while !state.done {
            state = done.1.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// What it wrote, once done (the thread joined): `None` while it runs.
    pub(crate) fn take(&mut self) -> Option<Result<Vec<u32>>> {
        let result = self.done.0.lock().unwrap_or_else(|p| p.into_inner()).written.take()?;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        Some(result)
    }
}

impl Drop for SegmentJob {
    /// Nothing writes in `live/` after its index is dropped: a job under way is waited for.
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Where a document's data lives.
pub(crate) enum Located<'a> {
    Base,
    Segment(&'a Segment, DocId),
    Memtable(&'a LiveDoc),
}

impl LiveView {
    pub(crate) fn empty(base_docs: u32) -> LiveView {
        LiveView { base_docs, next_id: base_docs, ..LiveView::default() }
    }

    pub fn is_deleted(&self, id: DocId) -> bool {
        let (word, bit) = (id.0 as usize / 64, id.0 % 64);
        self.deleted.get(word).is_some_and(|w| w >> bit & 1 == 1)
    }

    /// Whether anything is deleted (searches skip the checks otherwise).
    pub fn has_deletes(&self) -> bool {
        self.deleted_count > 0
    }

    /// Documents written since the build (deleted ones included).
    pub fn written(&self) -> u64 {
        u64::from(self.next_id - self.base_docs)
    }

    /// Searchable documents: the base's and the written ones, less the deleted.
    pub fn alive(&self) -> u64 {
        u64::from(self.next_id) - self.deleted_count
    }

    pub fn locate(&self, id: DocId) -> Result<Located<'_>> {
        if id.0 < self.base_docs {
            return Ok(Located::Base);
        }
        if let Some(first) = self.memtable.first_id() {
            if id >= first {
                let doc = self.memtable.get((id.0 - first.0) as usize);
                return doc.map(|d| Located::Memtable(d)).ok_or(CellarError::DocOutOfRange {
                    id: u64::from(id.0),
                    count: u64::from(self.next_id),
                });
            }
        }
        let at = self.segments.partition_point(|s| s.first() <= id);
        let segment = at.checked_sub(1).map(|i| &self.segments[i]);
        match segment.and_then(|s| s.local(id).map(|local| (s, local))) {
            Some((segment, local)) => Ok(Located::Segment(segment, local)),
            None => Err(CellarError::DocOutOfRange { id: u64::from(id.0), count: u64::from(self.next_id) }),
        }
    }

    /// The display text and collection id of a written document.
    pub fn document(&self, id: DocId) -> Result<Option<Document>> {
        Ok(match self.locate(id)? {
            Located::Base => None,
            Located::Segment(segment, local) => Some(segment.texts.get(local)?),
            Located::Memtable(doc) => Some(doc.doc.clone()),
        })
    }

    pub(crate) fn mark_deleted(&mut self, id: DocId) {
        if self.is_deleted(id) {
            return;
        }
        let words = Arc::make_mut(&mut self.deleted);
        let word = id.0 as usize / 64;
        if words.len() <= word {
            words.resize(word + 1, 0);
        }
        words[word] |= 1 << (id.0 % 64);
        self.deleted_count += 1;
    }

    /// Applies one logged batch (its puts take the next ids, in order).
    pub(crate) fn apply(
        &mut self,
        batch: &LogBatch,
        assign: &dyn Fn(&[u8]) -> Option<u32>,
        path: &Path,
    ) -> Result<()> {
        for op in &batch.ops {
            match op {
                LogOp::Put(doc) => {
                    if doc.id.0 != self.next_id {
                        return Err(CellarError::corrupted(
                            path,
                            0,
                            format!(
                                "batch {} puts document {} where {} comes next",
                                batch.seq, doc.id.0, self.next_id
                            ),
                        ));
                    }
                    let cluster = assign(&doc.pooled);
                    // Its keys too: a grouped index's documents are often small beside them.
                    let keys = doc.doc.id.len() + doc.doc.group.as_ref().map_or(0, String::len);
                    self.mem_bytes +=
                        doc.tokens.len() + doc.pooled.len() + doc.doc.text.len() + doc.doc.title.len() + keys;
                    self.memtable.push(Arc::clone(doc), cluster);
                    self.next_id += 1;
                }
                LogOp::Delete(id) => {
                    if id.0 >= self.next_id {
                        return Err(CellarError::corrupted(
                            path,
                            0,
                            format!("batch {} deletes document {} of {}", batch.seq, id.0, self.next_id),
                        ));
                    }
                    self.mark_deleted(*id);
                }
            }
        }
        self.seq = batch.seq;
        Ok(())
    }

    pub(crate) fn add_segment(&mut self, segment: Segment) {
        self.seg_clusters.push(Arc::new(clusters_of(&segment)));
        self.segments.push(Arc::new(segment));
    }

    /// Replaces the first `n` segments (a merge's inputs) with `merged`.
    pub(crate) fn replace_segments(&mut self, n: usize, merged: Segment) {
        self.segments.splice(..n, [Arc::new(merged)]);
        let clusters = Arc::new(clusters_of(&self.segments[0]));
        self.seg_clusters.splice(..n, [clusters]);
    }

    /// Drops the first `n` segments (a merge's inputs whose every record was deleted).
    pub(crate) fn remove_segments(&mut self, n: usize) {
        self.segments.drain(..n);
        self.seg_clusters.drain(..n);
    }

    /// Records of segments whose documents are deleted (what a merge would drop).
    pub fn dead_records(&self) -> usize {
        self.segments.iter().map(|s| s.ids.iter().filter(|id| self.is_deleted(DocId(**id))).count()).sum()
    }

    pub(crate) fn deleted_ids(&self) -> Vec<u32> {
        let mut ids = Vec::with_capacity(self.deleted_count as usize);
        for (w, word) in self.deleted.iter().enumerate() {
            (0..64).filter(|b| word >> b & 1 == 1).for_each(|b| ids.push((w * 64 + b) as u32));
        }
        ids
    }
}

impl LiveMembers for LiveView {
    fn excluded(&self, id: u32) -> bool {
        self.is_deleted(DocId(id))
    }

    fn visit(&self, cluster: u32, found: &mut dyn FnMut(DocId, &[u8])) {
        for (segment, clusters) in self.segments.iter().zip(&self.seg_clusters) {
            for local in clusters.get(&cluster).into_iter().flatten() {
                let id = DocId(segment.ids[*local as usize]);
                if !self.is_deleted(id) {
                    found(id, segment.pooled.row_bytes(*local as usize));
                }
            }
        }
        for doc in self.memtable.in_cluster(cluster) {
            if !self.is_deleted(doc.id) {
                found(doc.id, &doc.pooled);
            }
        }
    }
}

/// The costly parts of `LiveStats`, kept per view.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Measured {
    pub disk_bytes: u64,
    pub ivf_drift: Option<f64>,
    pub id_map_bytes: u64,
}

/// The written documents' state and what they cost (`Index::live_stats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LiveStats {
    pub segments: usize,
    /// Written documents not yet in a segment (in RAM and in the log).
    pub memtable_docs: usize,
    /// Documents written since the build (deleted ones included) and documents deleted.
    pub written: u64,
    pub deleted: u64,
    /// Records in segments and the memtable (written documents less those a merge dropped).
    pub records: u64,
    /// Bytes of `live/` on disk.
    pub disk_bytes: u64,
    /// RAM the written documents take: the memtable's bytes, and per segment record its id,
    /// cluster and record and text offsets (its pooled vector is mapped: page cache); plus the
    /// tombstone bitmap.
    pub ram_bytes: u64,
    /// BM25 commits this process made and write batches it committed: with concurrent writers
    /// one commit takes several batches (group commit).
    pub bm25_commits: u64,
    pub batches_committed: u64,
    /// The IVF's drift: the mean squared distance from written documents' pooled vectors to
    /// their nearest centroid over the same for the build's (a sample of each, at most
    /// `DRIFT_SAMPLE`). About 1 while written documents look like the build's; past
    /// `DRIFT_RETRAIN` the clusters no longer cover them (`None`: no IVF or nothing written).
    pub ivf_drift: Option<f64>,
    /// Whether `ivf_drift` is past `DRIFT_RETRAIN`: rebuilding the IVF would serve written
    /// documents better (`cellar ivf build`).
    pub ivf_retrain_advised: bool,
    /// RAM of the map from collection id to internal id (every searchable document, the
    /// build's included), estimated from its entries: the writer's, or in a process that does
    /// not write, the one its first `get` builds (0 before).
    pub id_map_bytes: u64,
    /// Segment flushes that failed (a full disk) after their batches were logged: those
    /// batches stay acknowledged, in the log and the memtable, and the next write tries again.
    pub flush_failures: u64,
    /// Write batches taken back out of the log because BM25 refused their commit (a full disk,
    /// too many open files): each was answered with that error and is not applied.
    pub batches_taken_back: u64,
    /// RAM the token stage holds for written documents past the ids it covers: assigned to its
    /// leaves at the first search after each open, until a retrain takes them into its lists (0
    /// without a token stage).
    #[serde(default)]
    pub tokens_written_bytes: u64,
    /// Whether enough documents were written since the token stage was built that a retrain
    /// would take them in (`Index::needs_tokens_retrain`).
    #[serde(default)]
    pub tokens_retrain_advised: bool,
    /// Segments this process flushed and merges it committed.
    #[serde(default)]
    pub flushes: u64,
    #[serde(default)]
    pub merges: u64,
    /// Bytes of the write-ahead log (the batches not yet in a segment: the log, and the frozen
    /// log while a flush writes its segment); 0 in a process that does not write.
    #[serde(default)]
    pub wal_bytes: u64,
    /// The last batch applied, and the last one in a segment.
    #[serde(default)]
    pub last_seq: u64,
    #[serde(default)]
    pub flushed_seq: u64,
    /// Bytes of the memtable's documents (encoded vectors and text).
    #[serde(default)]
    pub memtable_bytes: u64,
    /// Syncs of the log this process made: with concurrent writers one sync makes several
    /// batches durable (group commit); 0 without `Durability::Fsync`.
    #[serde(default)]
    pub log_syncs: u64,
}

/// A segment's records by IVF cluster.
fn clusters_of(segment: &Segment) -> HashMap<u32, Vec<u32>> {
    let mut clusters: HashMap<u32, Vec<u32>> = HashMap::new();
    for (i, c) in segment.clusters.iter().enumerate() {
        clusters.entry(*c).or_default().push(i as u32);
    }
    clusters
}

/// f16 little-endian bytes → f32 values.
pub(crate) fn f16_row(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
}

/// Collection id → internal id.
pub(crate) type IdMap = HashMap<String, DocId>;

/// The writer's state, held by the one process that holds `live/LOCK`.
pub(crate) struct Writer {
    pub(crate) _lock: DirLock,
    pub(crate) wal: Wal,
    pub(crate) manifest: LiveManifest,
    /// Collection id → internal id of its current version, for every searchable document.
    pub(crate) ids: HashMap<String, DocId>,
}

/// The live part of an open index: its current view and, once a write needs it, the writer.
pub(crate) struct Live {
    pub(crate) dir: PathBuf,
    pub(crate) view: RwLock<Arc<LiveView>>,
    pub(crate) writer: Mutex<Option<Writer>>,
    /// Held by the one merge that runs at a time.
    pub(crate) merging: Mutex<()>,
    /// Batches logged but not yet in BM25 nor published, and the view they make.
    pub(crate) staged: Mutex<Staged>,
    /// Whether a writer is committing the staged batches (`commit_through`) or undoing a failed
    /// commit (`recover_bm25`): one at a time (`Live::lead_commit`); `committed` wakes the
    /// writers waiting on it when it ends.
    pub(crate) committing: Mutex<bool>,
    pub(crate) committed: std::sync::Condvar,
    /// `LiveStats::flush_failures`, `batches_taken_back`, `flushes` and `merges`.
    pub(crate) flush_failures: AtomicU64,
    pub(crate) taken_back: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) merges: AtomicU64,
    /// What the writer's open of the log replayed (records) and cut (a torn tail's bytes).
    pub(crate) recovery: Mutex<(u64, u64)>,
    /// Syncs the writer's log (with `Durability::Fsync`): a write appends its batch unsynced,
    /// and the commit that publishes batches syncs them all at once (group commit).
    pub(crate) log_sync: Mutex<Option<cellar_core::format::wal::LogSync>>,
    /// Log syncs this process made, for `LiveStats`.
    pub(crate) log_syncs: AtomicU64,
    /// The documents a flush is writing to a segment (changed with the writer held).
    pub(crate) frozen: Mutex<Option<Frozen>>,
    /// In a process that does not write: collection id → internal id of the build's documents
    /// (built by the first lookup), and of the written ones of one view (built again for a newer
    /// view), so `get` is a lookup, not a scan.
    pub(crate) base_ids: Mutex<Option<Arc<IdMap>>>,
    pub(crate) written_ids: Mutex<Option<(std::sync::Weak<LiveView>, Arc<IdMap>)>>,
    /// What `live_stats` measured by walking files and samples (disk bytes, IVF drift, id map
    /// bytes), for the view it measured: asked again (a polled `/healthz`) before the next
    /// write or merge publishes another view, it answers without measuring again. (A `Weak`:
    /// it pins no old view's segments, and its allocation outlives any reuse of the address.)
    pub(crate) measured: Mutex<Option<(std::sync::Weak<LiveView>, Measured)>>,
    /// The build's mean quantization error in the IVF, measured once (`ivf_drift`).
    pub(crate) base_error: std::sync::OnceLock<f64>,
    /// (BM25 commits, batches they committed), for `LiveStats`.
    pub(crate) commits: Mutex<(u64, u64)>,
}

/// Logged batches waiting for their BM25 commit (group commit: one tantivy commit takes every
/// batch logged while the previous one ran) and the view that includes them; and what a failed
/// commit left to undo.
///
/// A BM25 commit that fails makes its batches, and every batch logged after them, not applied:
/// the next holder of the writer takes them back out of the log (`Index::recover_bm25`), so a
/// batch answered with an error never reappears. `epoch` counts the failures: a writer notes it
/// before logging, and finding it changed at its commit learns from `recoveries` whether its
/// batch was kept (committed before the failure) or taken back.
#[derive(Default)]
pub(crate) struct Staged {
    pub(crate) batches: Vec<StagedBatch>,
    pub(crate) view: Option<LiveView>,
    pub(crate) epoch: u64,
    pub(crate) failure: Option<Bm25Failure>,
    pub(crate) recoveries: std::collections::VecDeque<Recovered>,
}

/// A logged batch waiting for its BM25 commit.
pub(crate) struct StagedBatch {
    pub(crate) batch: LogBatch,
    /// The log's length before it: where the log is cut to take it back.
    pub(crate) log_at: u64,
    /// What the writer's id map held before it, for each collection id it changed.
    pub(crate) undo: Vec<(String, Option<DocId>)>,
}

/// A BM25 commit that failed: its error and its batches (ascending).
pub(crate) struct Bm25Failure {
    pub(crate) error: CellarError,
    pub(crate) batches: Vec<StagedBatch>,
}

/// What the recovery from the failure that ended epoch `epoch` kept: every batch up to
/// `kept_through`; the later ones of that epoch were answered `error`.
pub(crate) struct Recovered {
    pub(crate) epoch: u64,
    pub(crate) kept_through: u64,
    pub(crate) error: CellarError,
}

impl Staged {
    /// Remembers a recovery (the oldest forgotten past `RECOVERIES_KEPT`).
    pub(crate) fn recovered(&mut self, recovered: Recovered) {
        if self.recoveries.len() == RECOVERIES_KEPT {
            self.recoveries.pop_front();
        }
        self.recoveries.push_back(recovered);
    }
}

impl Live {
    pub fn new(index_dir: &Path, base_docs: u32) -> Live {
        Live {
            dir: index_dir.join(LIVE_DIR),
            view: RwLock::new(Arc::new(LiveView::empty(base_docs))),
            writer: Mutex::new(None),
            merging: Mutex::new(()),
            staged: Mutex::new(Staged::default()),
            committing: Mutex::new(false),
            committed: std::sync::Condvar::new(),
            flush_failures: AtomicU64::new(0),
            taken_back: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            merges: AtomicU64::new(0),
            recovery: Mutex::new((0, 0)),
            log_sync: Mutex::new(None),
            log_syncs: AtomicU64::new(0),
            frozen: Mutex::new(None),
            base_ids: Mutex::new(None),
            written_ids: Mutex::new(None),
            commits: Mutex::new((0, 0)),
            base_error: std::sync::OnceLock::new(),
            measured: Mutex::new(None),
        }
    }

    /// The current view: a search holds one for its whole run.
    pub fn view(&self) -> Arc<LiveView> {
        Arc::clone(&self.view.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The newest state, published or staged: what the next batch builds on (with the writer
    /// held), and the epoch it belongs to; `None` while a failed BM25 commit waits to be
    /// undone (`Index::recover_bm25`).
    pub(crate) fn latest(&self) -> Option<(LiveView, u64)> {
        let staged = self.lock_staged();
        if staged.failure.is_some() {
            return None;
        }
        let view = staged.view.clone().unwrap_or_else(|| (*self.view()).clone());
        Some((view, staged.epoch))
    }

    /// The sequence number of the newest batch, published or staged, and the epoch it was
    /// logged in (while a failed BM25 commit waits to be undone, the epoch that failure ended).
    pub(crate) fn latest_seq(&self) -> (u64, u64) {
        let staged = self.lock_staged();
        let seq = staged.view.as_ref().map_or_else(|| self.view().seq, |v| v.seq);
        (seq, staged.epoch - u64::from(staged.failure.is_some()))
    }

    /// Queues a logged batch and the view after it, for the next BM25 commit.
    pub(crate) fn stage(&self, batch: StagedBatch, view: LiveView) {
        let mut staged = self.lock_staged();
        staged.batches.push(batch);
        staged.view = Some(view);
    }

    /// Waits for the right to commit (one writer at a time), held until the guard drops; `None`
    /// once `done()` holds, asked before and after each commit that ends meanwhile. A writer
    /// whose batch someone else's commit made durable returns then, not after the next commit
    /// (which another writer may have started first).
    pub(crate) fn lead_commit(&self, done: &dyn Fn() -> bool) -> Option<CommitTurn<'_>> {
        let mut running = self.committing.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if done() {
                return None;
            }
            if !*running {
                *running = true;
                return Some(CommitTurn { live: self });
            }
            running = self.committed.wait(running).unwrap_or_else(|p| p.into_inner());
        }
    }

    pub(crate) fn lock_staged(&self) -> MutexGuard<'_, Staged> {
        self.staged.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn publish(&self, view: LiveView) {
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(view);
    }

    pub fn exists(&self) -> bool {
        self.dir.join(LIVE_MANIFEST).is_file()
    }

    /// Whether this process writes the index (holds `live/LOCK`).
    pub fn is_writer(&self) -> bool {
        self.lock_writer().is_some()
    }

    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, Option<Writer>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer's slot if no one holds it now.
    pub(crate) fn try_lock_writer(&self) -> Option<MutexGuard<'_, Option<Writer>>> {
        match self.writer.try_lock() {
            Ok(slot) => Some(slot),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    pub(crate) fn lock_frozen(&self) -> MutexGuard<'_, Option<Frozen>> {
        self.frozen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Live {
    /// A flush's segment job is waited for before the writer's lock is released (the fields'
    /// order would release it first), so no other writer sweeps a segment still being written.
    fn drop(&mut self) {
        drop(self.lock_frozen().take());
    }
}

/// The right to commit (`Live::lead_commit`), given back when dropped.
pub(crate) struct CommitTurn<'a> {
    live: &'a Live,
}

impl Drop for CommitTurn<'_> {
    fn drop(&mut self) {
        *self.live.committing.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.live.committed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// Two writers may wait on one flush's segment (the one that froze it, outside the writer,
    /// and one whose write filled the memtable again); the first to commit takes what the job
    /// wrote, and the other must still wake (a hang of `make test`'s Python threads test).
    #[test]
    fn a_writer_waiting_on_a_segment_job_wakes_after_another_took_what_it_wrote() {
        let mut job = SegmentJob::spawn(|| Ok(vec![7])).unwrap();
        SegmentJob::wait(&job.done);
        assert_eq!(job.take().unwrap().unwrap(), vec![7]);
        assert!(job.take().is_none() && job.is_done(), "taken once; still done");
        let done = Arc::clone(&job.done);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            SegmentJob::wait(&done);
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_secs(10)).is_ok(), "a waiter after the take wakes at once");
    }

    #[test]
    fn a_writer_whose_batch_is_published_does_not_wait_for_the_commit_under_way() {
        let live = Live::new(Path::new("/nonexistent"), 0);
        let published = AtomicBool::new(false);
        let turn = live.lead_commit(&|| false).expect("nobody commits yet");
        let (live, published) = (&live, &published);
        std::thread::scope(|scope| {
            // A second writer waits for its turn while the first commits...
            let (tx, rx) = std::sync::mpsc::channel();
            scope.spawn(move || {
                let got = live.lead_commit(&|| published.load(Ordering::SeqCst)).is_some();
                tx.send(got).unwrap();
            });
            assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "waits while a commit runs");
            // ...and once its batch is published, returns without the turn, though the commit
            // still runs (it is woken by the end of this one, or finds it published at once).
            published.store(true, Ordering::SeqCst);
            let another = std::thread::scope(|inner| {
                let handle = inner.spawn(|| live.lead_commit(&|| published.load(Ordering::SeqCst)).is_none());
                handle.join().unwrap()
            });
            assert!(another, "a published batch's writer takes no turn while one runs");
            drop(turn);
            assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(false));
            assert!(!*live.committing.lock().unwrap(), "the turn was given back");
        });
    }
}
