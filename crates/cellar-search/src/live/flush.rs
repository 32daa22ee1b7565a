//! Flushing the memtable to a segment beside the writes: `freeze` rotates the log to
//! [`FROZEN_WAL_FILE`] and notes the documents the segment takes (`Frozen`), a `SegmentJob`
//! thread writes them without the writer, and `commit_frozen` names the segment in the manifest
//! and drops them from the memtable (`live/mod.rs` explains the whole; `docs/format/live.md`
//! every crash order).

use std::sync::{Arc, MutexGuard};

use cellar_core::{CellarError, DocId, Result};

use crate::index::Index;
use crate::written::batch::LiveDoc;
use crate::written::segment::{self, Segment, SegmentWriter};
use crate::written::state::{Frozen, JobResult, SegmentEntry, SegmentJob, Writer, FROZEN_WAL_FILE};

impl Index {
    /// Flushes every logged document to a segment now, with the writer held: a frozen flush
    /// (`Frozen`) is finished first (waited for, or written again after a failure), then what
    /// was written since is frozen, written and committed. On an error nothing is lost: a
    /// frozen flush stays frozen (its segment's files removed) and the next flush writes it again.
    pub(crate) fn flush_locked(&self, writer: &mut Writer) -> Result<()> {
        self.settle(writer)?;
        for _ in 0..2 {
            if self.live.lock_frozen().is_none() {
                if self.live.view().memtable.is_empty() {
                    return Ok(());
                }
                self.freeze(writer)?;
            }
            let (done, _) = self.start_segment_job(true)?;
            SegmentJob::wait(&done);
            self.commit_frozen(writer)?;
        }
        Ok(())
    }

    /// Freezes the memtable, with the writer held and nothing staged (`settle`), when no flush
    /// is frozen already: the log is rotated (`Wal::rotate`; its batches move to
    /// [`FROZEN_WAL_FILE`]) and the memtable's documents become the ones the next segment takes,
    /// while writes go on into the fresh log and the memtable.
    fn freeze(&self, writer: &mut Writer) -> Result<()> {
        let view = self.live.view();
        let mut frozen = self.live.lock_frozen();
        if frozen.is_some() || view.memtable.is_empty() {
            return Ok(());
        }
        let to = self.live.dir.join(FROZEN_WAL_FILE);
        // One a crash left after its segment was committed (every batch in it is flushed).
        match std::fs::remove_file(&to) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(CellarError::io(&to, e)),
            _ => {}
        }
        let rotated = writer.wal.rotate(&to);
        if rotated.is_err() && !to.exists() {
            return rotated;
        }
        // The group commit syncs the fresh log from now on.
        *self.live.log_sync.lock().unwrap_or_else(|p| p.into_inner()) = writer.wal.syncer();
        *frozen = Some(Frozen::of(&view));
        rotated
    }

    /// Starts writing the frozen documents' segment on a thread of its own, unless it is being
    /// written; returns what to wait on for it. Called with the writer held; `held_throughout`:
    /// and held until the segment is committed, so no batch is logged meanwhile. Then a frozen
    /// flush written again (after a failure, or a crash) takes the documents written since
    /// too, in one segment, and its commit empties the log as well. The flag it returns says
    /// the frozen documents include the log's (now or from such an earlier try): the caller
    /// must then hold the writer until the commit, whatever it asked.
    fn start_segment_job(&self, held_throughout: bool) -> Result<(Arc<JobResult>, bool)> {
        let mut frozen = self.live.lock_frozen();
        let Some(f) = frozen.as_mut() else {
            return Err(CellarError::internal("no frozen documents to write to a segment"));
        };
        if let Some(job) = &f.job {
            return Ok((Arc::clone(&job.done), f.with_log));
        }
        let view = self.live.view();
        if held_throughout && view.memtable.len() > f.docs {
            *f = Frozen { with_log: true, ..Frozen::of(&view) };
        }
        let mut docs: Vec<Arc<LiveDoc>> = view.memtable.iter().take(f.docs).cloned().collect();
        if docs.len() != f.docs || docs.last().map(|d| d.id.0 + 1) != Some(f.next_id) {
            return Err(CellarError::internal(format!(
                "the memtable no longer begins with the {} frozen documents before id {}",
                f.docs, f.next_id
            )));
        }
        let grouped = self.config.grouped;
        if grouped {
            // In (group, id) order: ids are unique, so the order is total.
            docs.sort_unstable_by(|a, b| a.doc.group.cmp(&b.doc.group).then(a.id.cmp(&b.id)));
        }
        let (live, name) = (self.live.dir.clone(), f.segment_name());
        let (codec, model_dim) = (Arc::clone(self.store.codec()), self.config.encoder.model_dim);
        let job = SegmentJob::spawn(move || {
            let mut out = SegmentWriter::create(&live, &name, codec, model_dim, grouped)?;
            for doc in &docs {
                out.add(doc.id, doc.n_tokens as usize, &doc.tokens, &doc.pooled, &doc.doc)?;
            }
            out.finish()
        })?;
        let done = Arc::clone(&job.done);
        f.job = Some(job);
        Ok((done, f.with_log))
    }

    /// Commits the frozen documents' segment once its job is done, with the writer held: the
    /// manifest names it (the flushed batch and the deletions as of the freeze), the view
    /// after it holds it in place of the memtable's oldest documents, and the frozen log goes.
    /// `Ok(false)` while the job runs. A job that failed leaves the documents frozen, its
    /// files removed, and returns its error.
    fn commit_frozen(&self, writer: &mut Writer) -> Result<bool> {
        self.settle(writer)?;
        let mut frozen = self.live.lock_frozen();
        let Some(f) = frozen.as_mut() else { return Ok(true) };
        let Some(written) = f.job.as_mut().and_then(SegmentJob::take) else { return Ok(false) };
        f.job = None;
        let (live, name) = (&self.live.dir, f.segment_name());
        let committed = written.and_then(|ids| {
            let segment = self.open_segment(&name, &ids)?;
            let mut manifest = writer.manifest.clone();
            manifest.segments.push(SegmentEntry {
                name: name.clone(),
                first: segment.first().0,
                docs: segment.len() as u32,
            });
            manifest.next_id = f.next_id;
            manifest.flushed_seq = f.seq;
            manifest.deleted = f.deleted.clone();
            manifest.save(live)?;
            Ok((segment, manifest))
        });
        let (segment, manifest) = match committed {
            Ok(done) => done,
            Err(e) => {
                // On a full disk its files would take the space the next try needs.
                segment::discard(live, &name);
                return Err(e);
            }
        };
        let view = self.live.view();
        let mut next = (*view).clone();
        next.memtable = view.memtable.without_first(f.docs);
        next.mem_bytes -= f.bytes;
        next.add_segment(segment);
        writer.manifest = manifest;
        self.live.publish(next);
        let with_log = f.with_log;
        *frozen = None;
        self.live.flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if with_log {
            // Every batch in it is flushed too; should emptying it fail, replays skip them.
            if let Err(e) = writer.wal.reset() {
                log::warn!("{}: not emptied after its flush ({e})", writer.wal.path().display());
            }
        }
        let log = live.join(FROZEN_WAL_FILE);
        if let Err(e) = std::fs::remove_file(&log) {
            // Every batch in it is flushed: replays skip them, and the next freeze replaces it.
            log::warn!("{}: not removed after its flush ({e})", log.display());
        }
        Ok(true)
    }

    /// Opens segment `name` just written with the records of `ids`.
    pub(crate) fn open_segment(&self, name: &str, ids: &[u32]) -> Result<Segment> {
        let first = DocId(ids.iter().copied().min().expect("a segment holds a record"));
        let model_dim = self.config.encoder.model_dim;
        let (live, reader, grouped) = (&self.live.dir, &self.reader_options, self.config.grouped);
        Segment::open(live, name, first, ids.len(), model_dim, reader, grouped, &self.assigner())
    }

    /// Whether a flush has something to do after a write: the memtable's documents written since
    /// the last freeze are past `flush_bytes`, or a frozen flush's job is done (to commit) or
    /// not running (to start again).
    fn flush_due(&self) -> bool {
        let frozen = self.live.lock_frozen();
        let frozen_bytes = frozen.as_ref().map_or(0, |f| f.bytes);
        let filled = self.live.view().mem_bytes.saturating_sub(frozen_bytes) > self.flush_bytes();
        filled || frozen.as_ref().is_some_and(|f| f.job.as_ref().is_none_or(SegmentJob::is_done))
    }

    /// After a write logged and published its batch: flushes the memtable once the documents
    /// written since the last flush are past `flush_bytes`. The memtable is frozen and its
    /// segment written on a thread of its own while writes go on (`freeze`); without
    /// `background_flush` this write waits for that segment, without holding the writer, and
    /// commits it; with it, a later write (or `flush`, `retry_flush`) commits it once done, and
    /// a write that fills the memtable again before then waits for it (so the memtable holds
    /// about twice `flush_bytes` at most). A failure is the flush's, not the batch's: counted
    /// (`flush_failures`), logged, and tried again by the next write or [`Index::retry_flush`];
    /// the memtable keeps serving meanwhile.
    pub(crate) fn flush_after_write(&self) {
        if self.flush_due() {
            self.flush_counted(self.writer());
        }
    }

    /// [`Index::flush_step`] with the writer's `slot`, a failure counted and logged.
    fn flush_counted(&self, slot: Result<MutexGuard<'_, Option<Writer>>>) {
        if let Err(e) = slot.and_then(|slot| self.flush_step(slot)) {
            self.live.flush_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            log::error!(
                "{}: flushing the memtable ({} bytes) failed ({e}); its batches stay acknowledged, in the log and the memtable, and the next write tries again",
                self.live.dir.display(),
                self.live.view().mem_bytes
            );
        }
    }

    /// `flush_after_write`'s work, the writer's `slot` held.
    fn flush_step(&self, mut slot: MutexGuard<'_, Option<Writer>>) -> Result<()> {
        let Some(writer) = slot.as_mut() else { return Ok(()) };
        self.settle(writer)?;
        let filled = || {
            let frozen_bytes = self.live.lock_frozen().as_ref().map_or(0, |f| f.bytes);
            self.live.view().mem_bytes.saturating_sub(frozen_bytes) > self.flush_bytes()
        };
        if self.live.lock_frozen().is_some() {
            let (done, with_log) = self.start_segment_job(!self.background_flush())?;
            if filled() || with_log || !self.background_flush() {
                // Filled again before the frozen flush is done (or it is tried again without
                // `background_flush`, or it takes the log's batches): this write waits for it.
                SegmentJob::wait(&done);
            }
            if !self.commit_frozen(writer)? {
                return Ok(());
            }
        }
        if !filled() {
            return Ok(());
        }
        self.freeze(writer)?;
        let (done, _) = self.start_segment_job(false)?;
        if self.background_flush() {
            return Ok(());
        }
        // Written without the writer held: other writes go on meanwhile.
        drop(slot);
        SegmentJob::wait(&done);
        let mut slot = self.writer()?;
        match slot.as_mut() {
            Some(writer) => self.commit_frozen(writer).map(drop),
            None => Ok(()),
        }
    }

    /// Waits for a flush whose segment is being written (`background_flush`) and commits it;
    /// nothing to do when none is. What an owner calls before it closes the index, so the next
    /// open finds the segment committed instead of writing it again from the frozen log.
    pub fn finish_flush(&self) -> Result<()> {
        if self.live.lock_frozen().as_ref().is_none_or(|f| f.job.is_none()) {
            return Ok(());
        }
        let mut slot = self.writer()?;
        let Some(writer) = slot.as_mut() else { return Ok(()) };
        let done = match self.live.lock_frozen().as_ref().and_then(|f| f.job.as_ref()) {
            Some(job) => Arc::clone(&job.done),
            None => return Ok(()),
        };
        SegmentJob::wait(&done);
        self.commit_frozen(writer).map(drop)
    }

    /// Whether a background flush's segment is being written or waits to be committed.
    pub fn flush_under_way(&self) -> bool {
        self.live.lock_frozen().as_ref().is_some_and(|f| f.job.is_some())
    }

    /// Waits for a background flush's segment being written, without holding the writer (writes
    /// go on meanwhile), then commits it unless a write holds the writer: what an owner with a
    /// thread of its own runs so that a flush is committed without waiting for the next write
    /// (a stream's compaction thread). A write holding the writer then commits it itself after
    /// its batch (`flush_after_write` finds the segment written), so a steady feed keeps
    /// committing on its own thread, uncontended. Nothing to do when no flush is under way.
    pub fn commit_flush_when_done(&self) {
        let done = match self.live.lock_frozen().as_ref().and_then(|f| f.job.as_ref()) {
            Some(job) => Arc::clone(&job.done),
            None => return,
        };
        SegmentJob::wait(&done);
        if let Some(slot) = self.live.try_lock_writer().filter(|slot| slot.is_some()) {
            if self.flush_due() {
                self.flush_counted(Ok(slot));
            }
        }
    }

    /// A flush due without a write to run it (the server's background thread calls this once
    /// a second): one that failed after its batches were logged tried again, or a background
    /// flush's segment committed, as after a write. A process that does not write never flushes.
    pub fn retry_flush(&self) {
        // Lock-free first: the writer's mutex would wait out a write.
        if self.flush_due() && self.live.is_writer() {
            self.flush_after_write();
        }
    }
}
