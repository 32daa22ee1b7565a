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
//! finds another holding the writer's lock opens the index read-only, as it was at that moment,
//! and follows the writer's later commits (`follow`).

pub mod follow;
pub mod merge;
pub mod retrain;
pub mod write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

use cellar_core::format::fsio::{DirLock, TMP_SUFFIX};
use cellar_core::format::wal::{Durability, Wal};
use cellar_core::{CellarError, DocId, IoContext, Result};

use crate::corpus::Document;
use crate::index::Index;
use crate::written::batch::LogBatch;
pub use crate::written::batch::{OP_DELETE, OP_PUT, OP_PUT_META};
use crate::written::segment::{self, Segment, SegmentWriter};
use crate::written::state::{f16_row, LiveManifest, LiveView, Measured, SegmentEntry, Writer};
pub use crate::written::state::{
    LiveStats, DRIFT_RETRAIN, DRIFT_SAMPLE, FLUSH_BYTES, LIVE_DIR, LIVE_MANIFEST, LIVE_READABLE_VERSIONS,
    LIVE_VERSION, WAL_FILE,
};

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
        let ivf = self.current_ivf();
        move |pooled: &[f32]| ivf.as_ref().map(|ivf| ivf.assign(pooled))
    }

    fn load_live(&self, lock: Option<DirLock>, slot: &mut Option<Writer>) -> Result<()> {
        let live = &self.live.dir;
        let manifest = LiveManifest::load(live)?
            .ok_or_else(|| CellarError::corrupted(live, 0, format!("{LIVE_MANIFEST} is missing")))?;
        let base_docs = self.store.len() as u32;
        if lock.is_some() {
            sweep_orphans(live, &manifest)?;
            retrain::remove_leftovers(&self.dir)?;
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
        self.lookup(id)?.map(|i| self.document(i)).transpose()
    }

    /// The internal id of the searchable document whose collection id is `id`, if any.
    pub fn lookup(&self, id: &str) -> Result<Option<DocId>> {
        let found = {
            let slot = self.live.lock_writer();
            slot.as_ref().map(|w| w.ids.get(id).copied())
        };
        match found {
            Some(found) => Ok(found),
            None => self.scan_for(id),
        }
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
        let (bm25_commits, batches_committed) = *self.live.commits.lock().unwrap_or_else(|p| p.into_inner());
        let Measured { disk_bytes, ivf_drift, id_map_bytes } = self.measure(&view);
        LiveStats {
            ivf_drift,
            ivf_retrain_advised: ivf_drift.is_some_and(|d| d > DRIFT_RETRAIN),
            bm25_commits,
            batches_committed,
            segments: view.segments.len(),
            memtable_docs: view.memtable.len(),
            records: view.segments.iter().map(|s| s.len() as u64).sum::<u64>() + view.memtable.len() as u64,
            written: view.written(),
            deleted: view.deleted_count,
            disk_bytes,
            ram_bytes: segments + memtable + view.deleted.len() as u64 * 8,
            id_map_bytes,
        }
    }

    /// The costly parts of `live_stats` for `view`, measured once per published view.
    fn measure(&self, view: &Arc<LiveView>) -> Measured {
        let mut cached = self.live.measured.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, measured)) = cached.as_ref() {
            if std::ptr::eq(seen.as_ptr(), Arc::as_ptr(view)) {
                return *measured;
            }
        }
        let id_map_bytes = self.live.lock_writer().as_ref().map_or(0, |w| {
            w.ids.keys().map(|k| (k.len() + std::mem::size_of::<String>() + 4 + 8) as u64).sum()
        });
        let ivf_drift = self.ivf_drift(view).unwrap_or_else(|e| {
            log::warn!("measuring the IVF's drift: {e}");
            None
        });
        let measured =
            Measured { disk_bytes: crate::disk::dir_bytes(&self.live.dir), ivf_drift, id_map_bytes };
        *cached = Some((Arc::downgrade(view), measured));
        measured
    }

    /// `LiveStats::ivf_drift` of `view`.
    fn ivf_drift(&self, view: &LiveView) -> Result<Option<f64>> {
        let Some(ivf) = self.current_ivf() else { return Ok(None) };
        // The documents written since the IVF was trained (a retrained one holds the earlier).
        let covers = ivf.covers();
        let mut written: Vec<Vec<f32>> = Vec::new();
        let since = |id: u32| id >= covers && !view.is_deleted(DocId(id));
        let records: usize = view.segments.iter().map(|s| s.len()).sum::<usize>() + view.memtable.len();
        let stride = records.div_ceil(DRIFT_SAMPLE).max(1);
        let rows = view
            .segments
            .iter()
            .flat_map(|s| (0..s.len()).filter(|i| since(s.ids[*i])).map(|i| s.pooled.row(i)))
            .chain(view.memtable.iter().filter(|d| since(d.id.0)).map(|d| f16_row(&d.pooled)));
        written.extend(rows.step_by(stride));
        if written.is_empty() {
            return Ok(None);
        }
        let base = match (ivf.config().drift_baseline, self.live.base_error.get()) {
            (Some(baseline), _) => baseline,
            (None, Some(base)) => *base,
            (None, None) => {
                let path = self.dir.join(cellar_core::format::FileKind::Pooled.file_name());
                let sample = crate::pooled::sample_rows(
                    &path,
                    self.config.encoder.model_dim,
                    self.base_len(),
                    DRIFT_SAMPLE,
                )?;
                let mean = mean_error(&ivf, &sample);
                *self.live.base_error.get_or_init(|| mean)
            }
        };
        Ok((base > 0.0).then(|| mean_error(&ivf, &written) / base))
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

/// The mean squared distance from `rows` to their nearest centroids.
fn mean_error(ivf: &crate::ivf::Ivf, rows: &[Vec<f32>]) -> f64 {
    rows.iter().map(|r| f64::from(ivf.quantization_error(r))).sum::<f64>() / rows.len().max(1) as f64
}

/// Removes what a crash left in `live/`: a half-written segment, a whole one the manifest does
/// not name (written, then the process died before the manifest was committed, or a merge's
/// input after it was), or a half-written manifest.
fn sweep_orphans(live: &Path, manifest: &LiveManifest) -> Result<()> {
    for entry in live.read_dir().at(live)? {
        let path = entry.at(live)?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        let listed = manifest.segments.iter().any(|s| s.name == name);
        if path.is_dir() && (segment::is_unfinished(name) || (name.starts_with("seg-") && !listed)) {
            log::warn!("{}: removing a segment a crash left unfinished", path.display());
            std::fs::remove_dir_all(&path).at(&path)?;
        } else if path.is_file() && name.ends_with(TMP_SUFFIX) {
            // A manifest cut short while it was being replaced: the old one still stands.
            log::warn!("{}: removing a file a crash left half written", path.display());
            std::fs::remove_file(&path).at(&path)?;
        }
    }
    Ok(())
}
