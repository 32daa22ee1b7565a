//! A living index: documents added, updated and deleted after the build, durably.
//!
//! The build's files stay as they were (the *base*); what is written later lives in `live/`:
//!
//! ```text
//! live/
//!   LOCK           the writer's lock: one process writes an index at a time
//!   MANIFEST.json  commit point: segments, tombstones, next internal id, last flushed batch
//!   wal.log        write-ahead log of the batches since the last flush (`batch`)
//!   seg-<seq>/     immutable segments of flushed documents (`segment`)
//! ```
//!
//! A write batch is validated and encoded, given internal ids after every existing one, logged
//! (one record, `fdatasync`: acknowledged = durable), applied to BM25 (tantivy's own add and
//! delete, committed with the batch's sequence number as its payload) and then to the *view*: an
//! immutable snapshot (segments, the memtable of unflushed documents, the tombstones) swapped
//! atomically, so a search sees a batch whole or not at all. An update is a delete of the old
//! version and an add of the new one under a new internal id; a delete is a tombstone that BM25,
//! the IVF probe, the dense scan, re-ranking and text fetch all honour. Once the memtable holds
//! [`FLUSH_BYTES`], it is written as a segment, the manifest names it, and the log is emptied.
//!
//! Opening replays the log past the manifest's last flushed batch (and, where tantivy's last
//! commit is older, into BM25), so every acknowledged write survives a crash. A process that
//! finds another holding the writer's lock opens the index read-only, as it was at that moment.

pub(crate) mod batch;
pub mod merge;
pub use batch::{OP_DELETE, OP_PUT};
pub(crate) mod segment;
pub mod write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use cellar_core::format::fsio::{write_atomic, DirLock};
use cellar_core::format::versioned::{parse_versioned_json, VersionRange};
use cellar_core::format::wal::{Durability, Wal};
use cellar_core::{CellarError, DocId, IoContext, Result};
use serde::{Deserialize, Serialize};

use crate::corpus::Document;
use crate::index::Index;
use crate::ivf::LiveMembers;
use batch::{LiveDoc, LogBatch, LogOp};
use segment::{Segment, SegmentWriter};

/// Sub-directory of everything written after the build.
pub const LIVE_DIR: &str = "live";
/// The live manifest, its commit point.
pub const LIVE_MANIFEST: &str = "MANIFEST.json";
/// The write-ahead log.
pub const WAL_FILE: &str = "wal.log";
/// Version of `MANIFEST.json`.
pub const LIVE_VERSION: u32 = 1;
/// The versions of `MANIFEST.json` this build reads.
pub const LIVE_READABLE_VERSIONS: VersionRange = VersionRange::only(LIVE_VERSION);
/// Memtable bytes (encoded vectors and text) past which a write flushes it to a segment.
pub const FLUSH_BYTES: usize = 16 << 20;

/// `live/MANIFEST.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LiveManifest {
    version: u32,
    /// The internal id the next written document gets.
    next_id: u32,
    /// The last batch whose documents are in a segment.
    flushed_seq: u64,
    segments: Vec<SegmentEntry>,
    /// Internal ids deleted up to `flushed_seq`, ascending.
    deleted: Vec<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SegmentEntry {
    name: String,
    first: u32,
    docs: u32,
}

impl LiveManifest {
    fn load(live: &Path) -> Result<Option<LiveManifest>> {
        let path = live.join(LIVE_MANIFEST);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CellarError::io(&path, e)),
        };
        let manifest: LiveManifest = parse_versioned_json(&path, &bytes, "version", LIVE_READABLE_VERSIONS)?;
        Ok(Some(manifest))
    }

    fn save(&self, live: &Path) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| CellarError::internal(e.to_string()))?;
        write_atomic(&live.join(LIVE_MANIFEST), &bytes)
    }
}

/// One consistent state of the documents written since the build.
#[derive(Clone, Default)]
pub(crate) struct LiveView {
    pub base_docs: u32,
    pub segments: Vec<Arc<Segment>>,
    /// Written, logged, not yet in a segment; ascending ids.
    pub memtable: Vec<Arc<LiveDoc>>,
    mem_bytes: usize,
    /// IVF cluster → positions in `memtable` (with an IVF).
    mem_clusters: HashMap<u32, Vec<usize>>,
    /// Per segment: IVF cluster → its documents' record numbers.
    seg_clusters: Vec<Arc<HashMap<u32, Vec<u32>>>>,
    /// One bit per internal id.
    deleted: Arc<Vec<u64>>,
    deleted_count: u64,
    pub next_id: u32,
    /// The last batch applied.
    pub seq: u64,
}

/// Where a document's data lives.
pub(crate) enum Located<'a> {
    Base,
    Segment(&'a Segment, DocId),
    Memtable(&'a LiveDoc),
}

impl LiveView {
    fn empty(base_docs: u32) -> LiveView {
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
        if let Some(first) = self.memtable.first().map(|d| d.id) {
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

    fn mark_deleted(&mut self, id: DocId) {
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
    fn apply(&mut self, batch: &LogBatch, assign: &dyn Fn(&[f32]) -> Option<u32>, path: &Path) -> Result<()> {
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
                    if let Some(cluster) = assign(&f16_row(&doc.pooled)) {
                        self.mem_clusters.entry(cluster).or_default().push(self.memtable.len());
                    }
                    self.mem_bytes +=
                        doc.tokens.len() + doc.pooled.len() + doc.doc.text.len() + doc.doc.title.len();
                    self.memtable.push(Arc::clone(doc));
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

    fn add_segment(&mut self, segment: Segment) {
        self.seg_clusters.push(Arc::new(clusters_of(&segment)));
        self.segments.push(Arc::new(segment));
    }

    /// Replaces the first `n` segments (a merge's inputs) with `merged`.
    fn replace_segments(&mut self, n: usize, merged: Segment) {
        self.segments.splice(..n, [Arc::new(merged)]);
        let clusters = Arc::new(clusters_of(&self.segments[0]));
        self.seg_clusters.splice(..n, [clusters]);
    }

    /// Drops the first `n` segments (a merge's inputs whose every record was deleted).
    fn remove_segments(&mut self, n: usize) {
        self.segments.drain(..n);
        self.seg_clusters.drain(..n);
    }

    /// Records of segments whose documents are deleted (what a merge would drop).
    pub fn dead_records(&self) -> usize {
        self.segments.iter().map(|s| s.ids.iter().filter(|id| self.is_deleted(DocId(**id))).count()).sum()
    }

    fn deleted_ids(&self) -> Vec<u32> {
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
        for i in self.mem_clusters.get(&cluster).into_iter().flatten() {
            let doc = &self.memtable[*i];
            if !self.is_deleted(doc.id) {
                found(doc.id, &doc.pooled);
            }
        }
    }
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
    /// RAM of the writer's map from collection id to internal id (every searchable document,
    /// the build's included), estimated from its entries; 0 in a process that does not write.
    pub id_map_bytes: u64,
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

/// The writer's state, held by the one process that holds `live/LOCK`.
pub(crate) struct Writer {
    _lock: DirLock,
    wal: Wal,
    manifest: LiveManifest,
    /// Collection id → internal id of its current version, for every searchable document.
    ids: HashMap<String, DocId>,
}

/// The live part of an open index: its current view and, once a write needs it, the writer.
pub(crate) struct Live {
    dir: PathBuf,
    view: RwLock<Arc<LiveView>>,
    writer: Mutex<Option<Writer>>,
    /// Held by the one merge that runs at a time.
    merging: Mutex<()>,
    /// Batches logged but not yet in BM25 nor published, and the view they make.
    staged: Mutex<Staged>,
    /// Held by the one writer committing the staged batches (`commit_through`).
    committing: Mutex<()>,
    /// Set when BM25 refused logged batches: the log is ahead of what this process shows, so it
    /// takes no more writes (reopening replays the log).
    failed: std::sync::OnceLock<String>,
    /// (BM25 commits, batches they committed), for `LiveStats`.
    commits: Mutex<(u64, u64)>,
}

/// Logged batches waiting for their BM25 commit (group commit: one tantivy commit takes every
/// batch logged while the previous one ran) and the view that includes them.
#[derive(Default)]
struct Staged {
    batches: Vec<LogBatch>,
    view: Option<LiveView>,
}

impl Live {
    pub fn new(index_dir: &Path, base_docs: u32) -> Live {
        Live {
            dir: index_dir.join(LIVE_DIR),
            view: RwLock::new(Arc::new(LiveView::empty(base_docs))),
            writer: Mutex::new(None),
            merging: Mutex::new(()),
            staged: Mutex::new(Staged::default()),
            committing: Mutex::new(()),
            failed: std::sync::OnceLock::new(),
            commits: Mutex::new((0, 0)),
        }
    }

    /// The current view: a search holds one for its whole run.
    pub fn view(&self) -> Arc<LiveView> {
        Arc::clone(&self.view.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The newest state, published or staged: what the next batch builds on (with the writer
    /// held).
    fn latest(&self) -> LiveView {
        let staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        staged.view.clone().unwrap_or_else(|| (*self.view()).clone())
    }

    /// Queues a logged batch and the view after it, for the next BM25 commit.
    fn stage(&self, batch: LogBatch, view: LiveView) {
        let mut staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
        staged.batches.push(batch);
        staged.view = Some(view);
    }

    fn publish(&self, view: LiveView) {
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(view);
    }

    pub fn exists(&self) -> bool {
        self.dir.join(LIVE_MANIFEST).is_file()
    }

    /// Whether this process writes the index (holds `live/LOCK`).
    pub fn is_writer(&self) -> bool {
        self.lock_writer().is_some()
    }

    fn lock_writer(&self) -> MutexGuard<'_, Option<Writer>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Index {
    /// The live view this search reads.
    pub(crate) fn live_view(&self) -> Arc<LiveView> {
        self.live.view()
    }

    /// Called by `Index::open`: loads `live/` when the index has one, as its writer (replaying
    /// the log into BM25 where a crash left it behind) when no other process writes it, else
    /// read-only.
    pub(crate) fn open_live(&self) -> Result<()> {
        if !self.live.exists() {
            return Ok(());
        }
        let mut slot = self.live.lock_writer();
        match DirLock::exclusive(&self.live.dir, "index writer") {
            Ok(lock) => self.load_live(Some(lock), &mut slot),
            Err(CellarError::Locked { .. }) => self.load_live(None, &mut slot),
            Err(e) => Err(e),
        }
    }

    /// The writer, created on first use: takes `live/LOCK` (creating `live/` the first time)
    /// and reloads the live state from disk under it, since another process may have written.
    pub(crate) fn writer(&self) -> Result<MutexGuard<'_, Option<Writer>>> {
        if let Some(detail) = self.live.failed.get() {
            return Err(CellarError::internal(detail.clone()));
        }
        let mut slot = self.live.lock_writer();
        if slot.is_none() {
            std::fs::create_dir_all(&self.live.dir).at(&self.live.dir)?;
            let lock = DirLock::exclusive(&self.live.dir, "index writer")?;
            if !self.live.exists() {
                let manifest = LiveManifest {
                    version: LIVE_VERSION,
                    next_id: self.store.len() as u32,
                    ..LiveManifest::default()
                };
                manifest.save(&self.live.dir)?;
            }
            self.load_live(Some(lock), &mut slot)?;
        }
        Ok(slot)
    }

    fn assigner(&self) -> impl Fn(&[f32]) -> Option<u32> + '_ {
        move |pooled: &[f32]| self.ivf.as_ref().map(|ivf| ivf.assign(pooled))
    }

    fn load_live(&self, lock: Option<DirLock>, slot: &mut Option<Writer>) -> Result<()> {
        let live = &self.live.dir;
        let manifest = LiveManifest::load(live)?
            .ok_or_else(|| CellarError::corrupted(live, 0, format!("{LIVE_MANIFEST} is missing")))?;
        let base_docs = self.store.len() as u32;
        if lock.is_some() {
            sweep_orphans(live, &manifest)?;
        }
        let mut view = LiveView::empty(base_docs);
        let assign = self.assigner();
        let manifest_path = live.join(LIVE_MANIFEST);
        let mut after = base_docs;
        for entry in &manifest.segments {
            if entry.first < after {
                return Err(CellarError::corrupted(
                    &manifest_path,
                    0,
                    format!("segment {} starts at document {}, before {after}", entry.name, entry.first),
                ));
            }
            let segment = Segment::open(
                live,
                &entry.name,
                DocId(entry.first),
                entry.docs as usize,
                self.config.encoder.model_dim,
                &self.reader_options,
                &assign,
            )?;
            after = segment.last().0 + 1;
            view.add_segment(segment);
        }
        if manifest.next_id < after {
            return Err(CellarError::corrupted(
                &manifest_path,
                0,
                format!("next_id {} but the segments end at {after}", manifest.next_id),
            ));
        }
        let expected = manifest.next_id;
        view.next_id = expected;
        for id in &manifest.deleted {
            if *id >= expected {
                return Err(CellarError::corrupted(
                    &live.join(LIVE_MANIFEST),
                    0,
                    format!("deleted id {id} of {expected}"),
                ));
            }
            view.mark_deleted(DocId(*id));
        }
        view.seq = manifest.flushed_seq;
        let wal_path = live.join(WAL_FILE);
        let mut replayed: Vec<LogBatch> = Vec::new();
        let mut replay = |payload: &[u8]| -> Result<()> {
            let batch = LogBatch::decode(payload, &wal_path)?;
            if batch.seq > manifest.flushed_seq {
                view.apply(&batch, &assign, &wal_path)?;
                replayed.push(batch);
            }
            Ok(())
        };
        let Some(lock) = lock else {
            Wal::read(&wal_path, &mut replay)?;
            self.live.publish(view);
            return Ok(());
        };
        let (wal, _recovery) = Wal::open(&wal_path, Durability::Fsync, &mut replay)?;
        let applied = self.bm25.applied_seq()?;
        let behind: Vec<&LogBatch> = replayed.iter().filter(|b| b.seq > applied).collect();
        if !behind.is_empty() {
            self.bm25.apply(&behind)?;
        }
        let ids = self.live_ids(&view)?;
        *slot = Some(Writer { _lock: lock, wal, manifest, ids });
        self.live.publish(view);
        Ok(())
    }

    /// Collection id → internal id of every searchable document (read from the texts).
    fn live_ids(&self, view: &LiveView) -> Result<HashMap<String, DocId>> {
        let mut ids = HashMap::with_capacity(view.alive() as usize);
        for i in 0..view.next_id {
            let id = DocId(i);
            if view.is_deleted(id) {
                continue;
            }
            let doc = match view.document(id)? {
                Some(doc) => doc,
                None => self.texts.get(id)?,
            };
            ids.insert(doc.id, id);
        }
        Ok(ids)
    }

    /// Returns once batch `seq` is in BM25 and published: if no other writer committed it
    /// meanwhile, commits every staged batch to BM25 at once (group commit) and publishes the
    /// view after the last.
    pub(crate) fn commit_through(&self, seq: u64) -> Result<()> {
        let _one = self.live.committing.lock().unwrap_or_else(|p| p.into_inner());
        if self.live.view().seq >= seq {
            return Ok(());
        }
        // The view stays staged until it is published: the next batch builds on it meanwhile.
        let (batches, view) = {
            let mut staged = self.live.staged.lock().unwrap_or_else(|p| p.into_inner());
            (std::mem::take(&mut staged.batches), staged.view.clone())
        };
        let Some(view) = view else {
            return Err(CellarError::internal(format!("batch {seq} was neither staged nor published")));
        };
        let refs: Vec<&LogBatch> = batches.iter().collect();
        if let Err(e) = self.bm25.apply(&refs) {
            let detail = format!(
                "batches {}..={} are logged but BM25 refused them ({e}); they are applied when the index is \
                 next opened, and this process takes no more writes",
                batches.first().map_or(0, |b| b.seq),
                view.seq
            );
            let _ = self.live.failed.set(detail.clone());
            return Err(CellarError::internal(detail));
        }
        let published = view.seq;
        self.live.publish(view);
        {
            let mut staged = self.live.staged.lock().unwrap_or_else(|p| p.into_inner());
            if staged.view.as_ref().is_some_and(|v| v.seq == published) {
                staged.view = None;
            }
        }
        let mut commits = self.live.commits.lock().unwrap_or_else(|p| p.into_inner());
        *commits = (commits.0 + 1, commits.1 + batches.len() as u64);
        Ok(())
    }

    /// Commits and publishes every staged batch (with the writer held, so none is added).
    pub(crate) fn settle(&self) -> Result<()> {
        let latest = self.live.latest().seq;
        self.commit_through(latest)
    }

    /// Writes the memtable as a segment, commits the manifest, empties the log. Called with the
    /// writer held.
    fn flush_locked(&self, writer: &mut Writer) -> Result<()> {
        self.settle()?;
        let view = self.live.view();
        if view.memtable.is_empty() {
            return Ok(());
        }
        let live = &self.live.dir;
        let name = format!("seg-{:016x}", view.seq);
        let model_dim = self.config.encoder.model_dim;
        let mut out = SegmentWriter::create(live, &name, Arc::clone(self.store.codec()), model_dim)?;
        for doc in &view.memtable {
            out.add(doc.id, doc.n_tokens as usize, &doc.tokens, &doc.pooled, &doc.doc)?;
        }
        let ids = out.finish()?;
        let first = DocId(ids[0]);
        let segment =
            Segment::open(live, &name, first, ids.len(), model_dim, &self.reader_options, &self.assigner())?;
        let mut next = (*view).clone();
        next.memtable.clear();
        next.mem_clusters.clear();
        next.mem_bytes = 0;
        next.add_segment(segment);
        let mut manifest = writer.manifest.clone();
        manifest.segments.push(SegmentEntry { name, first: first.0, docs: ids.len() as u32 });
        manifest.next_id = next.next_id;
        manifest.flushed_seq = next.seq;
        manifest.deleted = next.deleted_ids();
        manifest.save(live)?;
        writer.manifest = manifest;
        self.live.publish(next);
        writer.wal.reset()
    }

    /// The searchable document whose collection id is `id`, if any. A process that writes the
    /// index looks it up in its id map; one that reads beside a writer scans the documents.
    pub fn get(&self, id: &str) -> Result<Option<Document>> {
        let internal = {
            let slot = self.live.lock_writer();
            slot.as_ref().map(|w| w.ids.get(id).copied())
        };
        let internal = match internal {
            Some(found) => found,
            None => self.scan_for(id)?,
        };
        internal.map(|i| self.document(i)).transpose()
    }

    fn scan_for(&self, id: &str) -> Result<Option<DocId>> {
        let view = self.live_view();
        for i in (0..view.next_id).rev() {
            let internal = DocId(i);
            if !view.is_deleted(internal) && self.document(internal)?.id == id {
                return Ok(Some(internal));
            }
        }
        Ok(None)
    }

    /// What is written since the build, and its disk and RAM.
    pub fn live_stats(&self) -> LiveStats {
        let view = self.live_view();
        let per_record = 4 + 4 + 4 + 16 + 16;
        let segments: u64 =
            view.segments.iter().map(|s| s.len() as u64 * per_record + s.pooled.ram_bytes() as u64).sum();
        let memtable: u64 = view.mem_bytes as u64 + 64 * view.memtable.len() as u64;
        let id_map_bytes = self.live.lock_writer().as_ref().map_or(0, |w| {
            w.ids.keys().map(|k| (k.len() + std::mem::size_of::<String>() + 4 + 8) as u64).sum()
        });
        let (bm25_commits, batches_committed) = *self.live.commits.lock().unwrap_or_else(|p| p.into_inner());
        LiveStats {
            bm25_commits,
            batches_committed,
            segments: view.segments.len(),
            memtable_docs: view.memtable.len(),
            records: view.segments.iter().map(|s| s.len() as u64).sum::<u64>() + view.memtable.len() as u64,
            written: view.written(),
            deleted: view.deleted_count,
            disk_bytes: crate::disk::dir_bytes(&self.live.dir),
            ram_bytes: segments + memtable + view.deleted.len() as u64 * 8,
            id_map_bytes,
        }
    }

    /// `Index::verify`'s part for `live/`: every segment's records, texts and pooled vectors
    /// against their checksums (the log's records were checked when it was replayed).
    pub(crate) fn verify_live(&self, done: &mut dyn FnMut(PathBuf, String)) -> Result<()> {
        let view = self.live_view();
        if !self.live.exists() {
            return Ok(());
        }
        done(
            Path::new(LIVE_DIR).join(LIVE_MANIFEST),
            format!("{} segments, {} written documents", view.segments.len(), view.written()),
        );
        for segment in &view.segments {
            let dir = Path::new(LIVE_DIR).join(&segment.name);
            let records = segment.store.verify()?;
            let texts = segment.texts.verify()?;
            let model_dim = self.config.encoder.model_dim;
            crate::pooled::PooledMatrix::verify(
                &self.live.dir.join(&segment.name),
                model_dim,
                segment.len(),
            )?;
            done(
                dir,
                format!(
                    "{records} records, {} texts and their pooled vectors against their checksums",
                    texts.records
                ),
            );
        }
        done(
            Path::new(LIVE_DIR).join(WAL_FILE),
            format!("{} logged documents not yet in a segment, replayed", view.memtable.len()),
        );
        Ok(())
    }

    /// Writes every logged document not yet in a segment to one, so the log is empty.
    pub fn flush(&self) -> Result<()> {
        if !self.live.exists() {
            return Ok(());
        }
        let mut slot = self.writer()?;
        let writer = slot.as_mut().expect("the writer was just loaded");
        self.flush_locked(writer)
    }
}

/// Refuses an index that was written to after its build, for `what` (a command that reads the
/// build's files alone and would leave the written documents out, or keep the deleted ones).
pub fn refuse_written(index_dir: &Path, what: &str) -> Result<()> {
    if index_dir.join(LIVE_DIR).exists() {
        return Err(CellarError::invalid(format!(
            "{}: documents were added, updated or deleted after this index was built ({LIVE_DIR}/); \
             {what} reads the build's files alone and would miss those changes",
            index_dir.display()
        )));
    }
    Ok(())
}

/// Removes what a crash left in `live/`: a half-written segment, or a whole one the manifest
/// does not name (written, then the process died before the manifest was committed).
fn sweep_orphans(live: &Path, manifest: &LiveManifest) -> Result<()> {
    for entry in live.read_dir().at(live)? {
        let path = entry.at(live)?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        let listed = manifest.segments.iter().any(|s| s.name == name);
        if path.is_dir() && (segment::is_unfinished(name) || (name.starts_with("seg-") && !listed)) {
            log::warn!("{}: removing a segment a crash left unfinished", path.display());
            std::fs::remove_dir_all(&path).at(&path)?;
        }
    }
    Ok(())
}
