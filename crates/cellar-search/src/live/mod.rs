//! A living index: documents added, updated and deleted after the build, durably.
//!
//! The build's files stay as they were (the *base*); what is written later lives in `live/`:
//!
//! ```text
//! live/
//!   LOCK           the writer's lock: one process writes an index at a time
//!   MANIFEST.json  commit point: segments, tombstones, next internal id, last flushed batch
//!   wal.log        write-ahead log of the batches since the last flush (`batch`)
//!   wal.frozen.log the log a flush under way rotated out, its documents being written
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
//! [`FLUSH_BYTES`], it is frozen: the log is rotated to [`FROZEN_WAL_FILE`] and its documents are
//! written as a segment on a thread of their own while writes go on into a fresh log and the
//! memtable; the manifest then names the segment, the view drops those documents from the
//! memtable, and the frozen log goes. The write that froze it waits for that (without holding
//! the writer) unless the index was opened with `background_flush`, when a later write commits it.
//! A flush that fails (a full disk) fails no write: the next write tries again, and past
//! [`MEMTABLE_BOUND_FLUSHES`] times the threshold a new batch is refused before it is logged. A
//! BM25 commit that fails is undone: its batches are taken back out of the log before their
//! writers are answered with its error (`recover_bm25`), so none of them comes back later.
//!
//! Opening replays the log past the manifest's last flushed batch (and, where tantivy's last
//! commit is older, into BM25), so every acknowledged write survives a crash. A process that
//! finds another holding the writer's lock opens the index read-only, as it was at that moment,
//! and follows the writer's later commits (`follow`).

pub mod flush;
pub mod follow;
pub mod merge;
pub mod retrain;
pub mod write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

use cellar_core::format::fsio::{DirLock, TMP_SUFFIX};
use cellar_core::format::wal::Wal;
use cellar_core::{CellarError, DocId, IoContext, Result};

use crate::corpus::Document;
use crate::index::Index;
use crate::written::batch::LogBatch;
pub use crate::written::batch::{OP_DELETE, OP_PUT, OP_PUT_GROUP, OP_PUT_META};
use crate::written::segment::{self, Segment};
use crate::written::state::{
    f16_row, Bm25Failure, Frozen, LiveManifest, LiveView, Measured, Recovered, StagedBatch, Writer,
};
pub use crate::written::state::{
    LiveStats, DRIFT_RETRAIN, DRIFT_SAMPLE, FLUSH_BYTES, FROZEN_WAL_FILE, LIVE_DIR, LIVE_MANIFEST,
    LIVE_READABLE_VERSIONS, LIVE_VERSION, MEMTABLE_BOUND_FLUSHES, WAL_FILE,
};

/// What [`Index::commit_through`] found of a batch.
pub(crate) enum Committed {
    /// In BM25 and published.
    Yes,
    /// A BM25 commit failed since it was logged ([`Index::await_commit`] tells its fate).
    Undone,
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
    /// A failed BM25 commit is undone first (`recover_bm25`); while that fails, so does this.
    pub(crate) fn writer(&self) -> Result<MutexGuard<'_, Option<Writer>>> {
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
        self.recover_bm25(slot.as_mut().expect("the writer was just loaded"))?;
        Ok(slot)
    }

    /// The IVF cluster of a pooled vector given as f16 bytes (converted only when the index has
    /// an IVF).
    fn assigner(&self) -> impl Fn(&[u8]) -> Option<u32> + '_ {
        let ivf = self.current_ivf();
        move |pooled: &[u8]| ivf.as_ref().map(|ivf| ivf.assign(&f16_row(pooled)))
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
                self.config.grouped,
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
        let frozen_path = live.join(FROZEN_WAL_FILE);
        let mut replayed: Vec<LogBatch> = Vec::new();
        // The frozen log first (a flush was under way), then the log. A batch already applied
        // (flushed, or in both files after a crash between a rotation's renames) is skipped.
        let mut replay_from = |path: &Path, view: &mut LiveView, payload: &[u8]| -> Result<()> {
            let batch = LogBatch::decode(payload, path)?;
            if batch.seq > view.seq {
                view.apply(&batch, &assign, path)?;
                replayed.push(batch);
            }
            Ok(())
        };
        Wal::read(&frozen_path, |payload| replay_from(&frozen_path, &mut view, payload))?;
        let Some(lock) = lock else {
            Wal::read(&wal_path, |payload| replay_from(&wal_path, &mut view, payload))?;
            self.live.publish(view);
            return Ok(());
        };
        // The writer takes up a flush a crash cut short: the memtable's documents so far are the
        // frozen ones (written to a segment by the next flush); none left, the frozen log goes.
        let frozen = match view.memtable.is_empty() {
            true => {
                if frozen_path.exists() {
                    std::fs::remove_file(&frozen_path).at(&frozen_path)?;
                }
                None
            }
            false => Some(Frozen::of(&view)),
        };
        let (wal, recovery) =
            Wal::open(&wal_path, self.durability(), |payload| replay_from(&wal_path, &mut view, payload))?;
        *self.live.lock_frozen() = frozen;
        *self.live.recovery.lock().unwrap_or_else(|p| p.into_inner()) =
            (recovery.records, recovery.truncated_bytes);
        *self.live.log_sync.lock().unwrap_or_else(|p| p.into_inner()) = wal.syncer();
        // A grouped index's writes skip BM25 (its searches are exact inside a group).
        if !self.config.grouped {
            let applied = self.bm25.applied_seq()?;
            let behind: Vec<&LogBatch> = replayed.iter().filter(|b| b.seq > applied).collect();
            if !behind.is_empty() {
                self.bm25.apply(&behind)?;
            }
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
            ids.insert(crate::doc::doc_key(doc.group.as_deref(), &doc.id), id);
        }
        Ok(ids)
    }

    /// Returns once batch `seq`, logged in `epoch` (`Live::latest`), is in BM25 and published
    /// (`Yes`): if no other writer committed it meanwhile, commits every staged batch to BM25 at
    /// once (group commit) and publishes the view after the last. `Undone` when a BM25 commit
    /// failed since the batch was logged: `await_commit` then tells whether it was kept.
    pub(crate) fn commit_through(&self, seq: u64, epoch: u64) -> Result<Committed> {
        // Published in its epoch by a commit that ran meanwhile: nothing to wait for.
        let published = || {
            let staged = self.live.lock_staged();
            staged.epoch == epoch && staged.failure.is_none() && self.live.view().seq >= seq
        };
        let Some(_turn) = self.live.lead_commit(&published) else { return Ok(Committed::Yes) };
        // The view stays staged until it is published: the next batch builds on it meanwhile.
        let (batches, view) = {
            let mut staged = self.live.lock_staged();
            if staged.epoch != epoch || staged.failure.is_some() {
                return Ok(Committed::Undone);
            }
            if self.live.view().seq >= seq {
                return Ok(Committed::Yes);
            }
            let Some(view) = staged.view.clone() else {
                return Err(CellarError::internal(format!("batch {seq} was neither staged nor published")));
            };
            (std::mem::take(&mut staged.batches), view)
        };
        let refs: Vec<&LogBatch> = batches.iter().map(|b| &b.batch).collect();
        // Durable first (one sync for every batch taken: group commit), then in BM25.
        let applied = self.sync_log().and_then(|()| match self.config.grouped {
            true => Ok(()),
            false => self.bm25.apply(&refs),
        });
        if let Err(error) = applied {
            // Nothing of them is in BM25: they, and every batch logged after them, are taken
            // back out of the log by the next holder of the writer (`recover_bm25`).
            self.bm25.abandon_writer();
            log::error!(
                "{}: the log's sync or BM25 refused batches {}..={} ({error}); they are taken back out of the log and answered with that error",
                self.live.dir.display(),
                batches.first().map_or(0, |b| b.batch.seq),
                view.seq
            );
            let mut staged = self.live.lock_staged();
            staged.failure = Some(Bm25Failure { error, batches });
            staged.epoch += 1;
            return Ok(Committed::Undone);
        }
        let published = view.seq;
        self.live.publish(view);
        {
            let mut staged = self.live.lock_staged();
            if staged.view.as_ref().is_some_and(|v| v.seq == published) {
                staged.view = None;
            }
        }
        let mut commits = self.live.commits.lock().unwrap_or_else(|p| p.into_inner());
        *commits = (commits.0 + 1, commits.1 + batches.len() as u64);
        Ok(Committed::Yes)
    }

    /// Syncs the log: every batch appended so far is durable when it returns.
    fn sync_log(&self) -> Result<()> {
        let sync = self.live.log_sync.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sync) = sync.as_ref() {
            sync.sync()?;
            self.live.log_syncs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// [`Index::commit_through`] for the writer of batch `seq`: `Ok` once it is in BM25 and
    /// published, or the error of the BM25 commit that failed when it was taken back out of the
    /// log (then nothing of it is applied, now or after a restart).
    pub(crate) fn await_commit(&self, seq: u64, epoch: u64) -> Result<()> {
        if let Committed::Yes = self.commit_through(seq, epoch)? {
            return Ok(());
        }
        drop(self.writer()?);
        let staged = self.live.lock_staged();
        match staged.recoveries.iter().find(|r| r.epoch == epoch) {
            Some(r) if seq <= r.kept_through => Ok(()),
            Some(r) => Err(r.error.clone()),
            None => Err(CellarError::internal(format!(
                "batch {seq}: the outcome of the BM25 commit that failed after it is forgotten"
            ))),
        }
    }

    /// Commits and publishes every staged batch (with the writer held, so none is added); a
    /// failed BM25 commit is undone here, and its error returned.
    pub(crate) fn settle(&self, writer: &mut Writer) -> Result<()> {
        let (seq, epoch) = self.live.latest_seq();
        match self.commit_through(seq, epoch)? {
            Committed::Yes => Ok(()),
            Committed::Undone => {
                let error = self.live.lock_staged().failure.as_ref().map(|f| f.error.clone());
                self.recover_bm25(writer)?;
                error.map_or(Ok(()), Err)
            }
        }
    }

    /// Undoes a failed BM25 commit (see `Staged`), with the writer held: its batches and every
    /// batch logged after them are cut from the log and from the writer's id map, and the view
    /// goes back to the last one published. No-op when nothing failed. On an error the failure
    /// stays, and the next holder of the writer tries again.
    pub(crate) fn recover_bm25(&self, writer: &mut Writer) -> Result<()> {
        // Nothing failed: return without waiting for a commit under way (its log sync), so a
        // writer logs its batch meanwhile and the next commit takes it too (group commit). A
        // failure that commit meets is found by `ready_to_log` or by this batch's commit.
        if self.live.lock_staged().failure.is_none() {
            return Ok(());
        }
        let _turn = self.live.lead_commit(&|| false);
        let mut staged = self.live.lock_staged();
        let Some(failure) = staged.failure.take() else { return Ok(()) };
        let mut batches = failure.batches;
        batches.append(&mut staged.batches);
        staged.view = None;
        match self.take_back(writer, &batches, &failure.error) {
            Ok(kept_through) => {
                let epoch = staged.epoch - 1;
                staged.recovered(Recovered { epoch, kept_through, error: failure.error });
                Ok(())
            }
            Err(e) => {
                staged.failure = Some(Bm25Failure { error: failure.error, batches });
                Err(e)
            }
        }
    }

    /// `recover_bm25`'s work; returns the last batch kept. Safe to repeat after an error.
    fn take_back(&self, writer: &mut Writer, batches: &[StagedBatch], error: &CellarError) -> Result<u64> {
        self.bm25.abandon_writer();
        // A commit that failed replaced no commit point, unless the directory's sync failed
        // after the rename: tantivy's payload decides (unreadable, e.g. out of descriptors: none).
        let applied = self.bm25.applied_seq().unwrap_or_else(|e| {
            log::warn!(
                "{}: reading BM25's commit point ({e}); taking it as unchanged",
                self.live.dir.display()
            );
            0
        });
        let view = self.live.view();
        let (keep, undo): (Vec<&StagedBatch>, Vec<&StagedBatch>) =
            batches.iter().filter(|b| b.batch.seq > view.seq).partition(|b| b.batch.seq <= applied);
        if let Some(first) = undo.first() {
            if first.log_at < writer.wal.len() {
                writer.wal.truncate(first.log_at)?;
            }
        }
        if !keep.is_empty() {
            self.bm25.reload()?;
            let mut next = (*view).clone();
            for b in &keep {
                next.apply(&b.batch, &self.assigner(), writer.wal.path())?;
            }
            self.live.publish(next);
        }
        for b in undo.iter().rev() {
            for (id, before) in b.undo.iter().rev() {
                match before {
                    Some(doc) => writer.ids.insert(id.clone(), *doc),
                    None => writer.ids.remove(id),
                };
            }
        }
        if let (Some(first), Some(last)) = (undo.first(), undo.last()) {
            self.live.taken_back.fetch_add(undo.len() as u64, std::sync::atomic::Ordering::Relaxed);
            log::warn!(
                "{}: batches {}..={} taken back out of the log after BM25 refused them ({error})",
                self.live.dir.display(),
                first.batch.seq,
                last.batch.seq
            );
        }
        Ok(self.live.view().seq)
    }

    /// With the writer held, before a batch is logged: the newest state and its epoch
    /// (`Live::latest`), a failed BM25 commit undone first. A memtable past
    /// `MEMTABLE_BOUND_FLUSHES` times `flush_bytes` (its flushes failed) is flushed now; if that
    /// fails too, the batch is refused with that error before anything of it is logged.
    pub(crate) fn ready_to_log(&self, writer: &mut Writer) -> Result<(LiveView, u64)> {
        let bound = self.flush_bytes().saturating_mul(MEMTABLE_BOUND_FLUSHES);
        for _ in 0..3 {
            let Some((view, epoch)) = self.live.latest() else {
                self.recover_bm25(writer)?;
                continue;
            };
            if view.mem_bytes <= bound {
                return Ok((view, epoch));
            }
            if let Err(e) = self.flush_locked(writer) {
                self.live.flush_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(memtable_full(&self.live.dir, view.mem_bytes, bound, e));
            }
        }
        Err(CellarError::internal("the live state kept changing under the writer"))
    }

    /// Takes the writer's lock now, not at the first write: `Locked` when another process
    /// writes this index (a stream's collection writes, and holds it from its open).
    pub fn take_writer(&self) -> Result<()> {
        drop(self.writer()?);
        Ok(())
    }

    /// What the writer's open of the log replayed: (records, bytes of a torn tail it cut).
    pub fn recovery(&self) -> (u64, u64) {
        *self.live.recovery.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Segments of written documents there are now.
    pub fn written_segments(&self) -> usize {
        self.live_view().segments.len()
    }

    /// The searchable document whose collection id is `id`, if any: looked up in the writer's
    /// id map, or in a process that does not write, in the maps its first lookup builds.
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
            None => self.read_lookup(id),
        }
    }

    /// `lookup` in a process that does not write: the written documents of the current view
    /// first (their map built once per view), then the build's (built once).
    fn read_lookup(&self, id: &str) -> Result<Option<DocId>> {
        let view = self.live_view();
        if let Some(internal) = self.written_ids(&view)?.get(id) {
            return Ok(Some(*internal));
        }
        Ok(self.base_ids()?.get(id).copied().filter(|internal| !view.is_deleted(*internal)))
    }

    /// Collection id → internal id of every document of the build (deleted ones included).
    fn base_ids(&self) -> Result<Arc<HashMap<String, DocId>>> {
        if let Some(ids) = self.live.base_ids.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return Ok(Arc::clone(ids));
        }
        let base = self.base_len() as u32;
        let mut ids = HashMap::with_capacity(base as usize);
        for i in 0..base {
            ids.insert(self.texts.get(DocId(i))?.id, DocId(i));
        }
        let ids = Arc::new(ids);
        *self.live.base_ids.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&ids));
        // `live_stats` counts the map from now on.
        *self.live.measured.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(ids)
    }

    /// Collection id → internal id of the written documents of `view` not deleted.
    fn written_ids(&self, view: &Arc<LiveView>) -> Result<Arc<HashMap<String, DocId>>> {
        let mut cached = self.live.written_ids.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, ids)) = cached.as_ref() {
            if std::ptr::eq(seen.as_ptr(), Arc::as_ptr(view)) {
                return Ok(Arc::clone(ids));
            }
        }
        let mut ids = HashMap::new();
        for i in view.base_docs..view.next_id {
            let internal = DocId(i);
            if view.is_deleted(internal) {
                continue;
            }
            if let Some(doc) = view.document(internal)? {
                ids.insert(crate::doc::doc_key(doc.group.as_deref(), &doc.id), internal);
            }
        }
        let ids = Arc::new(ids);
        *cached = Some((Arc::downgrade(view), Arc::clone(&ids)));
        Ok(ids)
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
        let (wal_bytes, flushed_seq) =
            self.live.lock_writer().as_ref().map_or((0, 0), |w| (w.wal.len(), w.manifest.flushed_seq));
        // The frozen log's batches are not in a segment yet either.
        let frozen_log = self.live.lock_frozen().as_ref().map(|_| self.live.dir.join(FROZEN_WAL_FILE));
        let wal_bytes =
            wal_bytes + frozen_log.and_then(|log| std::fs::metadata(log).ok()).map_or(0, |m| m.len());
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
            flush_failures: self.live.flush_failures.load(std::sync::atomic::Ordering::Relaxed),
            batches_taken_back: self.live.taken_back.load(std::sync::atomic::Ordering::Relaxed),
            tokens_written_bytes: self.current_tokens().map_or(0, |t| t.written_ram_bytes()),
            tokens_retrain_advised: self.needs_tokens_retrain(),
            flushes: self.live.flushes.load(std::sync::atomic::Ordering::Relaxed),
            merges: self.live.merges.load(std::sync::atomic::Ordering::Relaxed),
            wal_bytes,
            last_seq: view.seq,
            flushed_seq,
            memtable_bytes: view.mem_bytes as u64,
            log_syncs: self.live.log_syncs.load(std::sync::atomic::Ordering::Relaxed),
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
        let entry = |k: &String| (k.len() + std::mem::size_of::<String>() + 4 + 8) as u64;
        let id_map_bytes = match self.live.lock_writer().as_ref() {
            Some(w) => w.ids.keys().map(entry).sum(),
            None => {
                let base = self.live.base_ids.lock().unwrap_or_else(|p| p.into_inner());
                let written = self.live.written_ids.lock().unwrap_or_else(|p| p.into_inner());
                base.iter()
                    .flat_map(|m| m.keys())
                    .chain(written.iter().flat_map(|(_, m)| m.keys()))
                    .map(entry)
                    .sum()
            }
        };
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

/// The refusal of a write while the memtable is past its bound (`bytes` of `bound`) and its
/// flush fails (`flush`): of the flush's kind (`disk_full` on a full disk), saying that nothing
/// of the batch was written.
fn memtable_full(live: &Path, bytes: usize, bound: usize, flush: CellarError) -> CellarError {
    let CellarError::Io { source, .. } = &flush else { return flush };
    let kind = if flush.is_disk_full() { std::io::ErrorKind::StorageFull } else { source.kind() };
    let mib = |b: usize| b as f64 / f64::from(1u32 << 20);
    let detail = format!(
        "the memtable holds {:.1} MiB of logged documents, past its bound of {:.1} MiB, and flushing them to a segment failed ({source}): this batch was not written; retry once the disk has room",
        mib(bytes),
        mib(bound)
    );
    CellarError::io(live, std::io::Error::new(kind, detail))
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
