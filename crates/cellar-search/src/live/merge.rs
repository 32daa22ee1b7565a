//! Merging: the segments of a living index folded into one, deleted documents' records dropped.
//!
//! A merge reads its input segments (every segment there is when it starts) record by record in
//! chunks of [`MergeBudget::chunk_docs`], throttled to [`MergeBudget::bytes_per_sec`] of records
//! copied, and writes the survivors as a new segment, without holding the writer: writes (and
//! flushes, which append segments after the inputs) go on meanwhile. It then commits under the
//! writer: the manifest names the merged segment in place of its inputs, the view is swapped,
//! and the inputs' directories are removed (a search still holding the old view keeps reading
//! their open files). A crash leaves either the old manifest (the merged directory is an orphan
//! the next writer removes) or the new one (the inputs are orphans).

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellar_core::{CellarError, DocId, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::index::Index;
use crate::written::segment::{Segment, SegmentWriter};
use crate::written::state::SegmentEntry;

/// What a merged segment's name ends with (`seg-<seq>-merged`).
pub const MERGED_SUFFIX: &str = "-merged";

/// Segments past which [`Index::needs_merge`] says so.
pub const MERGE_AFTER_SEGMENTS: usize = 8;
/// Share of the segments' records deleted past which [`Index::needs_merge`] says so.
pub const MERGE_AFTER_DEAD: f64 = 0.25;

/// What a merge may take from a serving machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MergeBudget {
    /// Bytes of records (vectors, pooled vectors, text) copied per second; 0: unbounded.
    pub bytes_per_sec: u64,
    /// Documents read per batch (their records, then their texts in one read): what the merge
    /// holds in memory at once.
    pub chunk_docs: usize,
}

impl Default for MergeBudget {
    fn default() -> Self {
        MergeBudget { bytes_per_sec: 32 << 20, chunk_docs: 256 }
    }
}

/// What a merge did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MergeReport {
    /// Segments folded into one.
    pub segments: usize,
    /// Records kept and dropped (deleted).
    pub kept: usize,
    pub dropped: usize,
    /// Bytes of records copied.
    pub bytes: u64,
    pub secs: f64,
}

impl Index {
    /// Whether the written documents would gain from a merge: many segments, or many of their
    /// records deleted.
    pub fn needs_merge(&self) -> bool {
        let view = self.live_view();
        let records: usize = view.segments.iter().map(|s| s.len()).sum();
        view.segments.len() >= MERGE_AFTER_SEGMENTS
            || (records > 0 && view.dead_records() as f64 > MERGE_AFTER_DEAD * records as f64)
    }

    /// Folds every segment into one within `budget`, dropping deleted documents' records;
    /// `None` when there is nothing to gain (one segment without deleted records, or none). One
    /// merge runs at a time; writes and searches go on while it copies.
    pub fn merge(&self, budget: &MergeBudget) -> Result<Option<MergeReport>> {
        if budget.chunk_docs == 0 {
            return Err(CellarError::invalid("a merge reads at least one record per batch"));
        }
        if !self.live.exists() {
            return Ok(None);
        }
        let _one = self.live.merging.lock().unwrap_or_else(|p| p.into_inner());
        drop(self.writer()?);
        let view = self.live.view();
        let inputs: Vec<Arc<Segment>> = view.segments.clone();
        if inputs.is_empty() || (inputs.len() == 1 && view.dead_records() == 0) {
            return Ok(None);
        }
        let start = Instant::now();
        let live = &self.live.dir;
        let name = format!("seg-{:016x}{MERGED_SUFFIX}", view.seq);
        let model_dim = self.config.encoder.model_dim;
        let grouped = self.config.grouped;
        let mut out = SegmentWriter::create(live, &name, Arc::clone(self.store.codec()), model_dim, grouped)?;
        let mut report = MergeReport { segments: inputs.len(), ..MergeReport::default() };
        for (segment, run) in runs_in_order(&inputs, grouped) {
            let run_len = run.len();
            let locals: Vec<DocId> = run
                .map(DocId)
                .filter(|local| !view.is_deleted(DocId(segment.ids[local.0 as usize])))
                .collect();
            report.dropped += run_len - locals.len();
            for chunk in locals.chunks(budget.chunk_docs) {
                let batch = segment.store.read_batch(chunk)?;
                // The chunk's texts lie together (a run, or in id order): read in one go.
                let docs = segment.texts.get_many(chunk)?;
                for ((i, local), doc) in chunk.iter().enumerate().zip(docs) {
                    let record = batch.record(i);
                    let pooled = segment.pooled.row_bytes(local.0 as usize);
                    let id = DocId(segment.ids[local.0 as usize]);
                    out.add(id, record.n_tokens, record.tokens, pooled, &doc)?;
                    report.bytes +=
                        (record.tokens.len() + pooled.len() + doc.text.len() + doc.title.len()) as u64;
                }
                report.kept += chunk.len();
                throttle(budget, report.bytes, start);
            }
        }
        let ids = if report.kept > 0 { Some(out.finish()?) } else { None };
        self.commit_merge(&inputs, &name, ids)?;
        report.secs = start.elapsed().as_secs_f64();
        Ok(Some(report))
    }

    /// Puts the merged segment (or nothing, when every record was deleted) in place of `inputs`
    /// in the manifest and the view, then removes the inputs.
    fn commit_merge(&self, inputs: &[Arc<Segment>], name: &str, ids: Option<Vec<u32>>) -> Result<()> {
        let live = &self.live.dir;
        let mut slot = self.writer()?;
        let writer = slot.as_mut().expect("the writer was just loaded");
        self.settle(writer)?;
        let current = self.live.view();
        let n = inputs.len();
        let same = current.segments.len() >= n
            && current.segments.iter().zip(inputs).all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            return Err(CellarError::internal("the segments a merge read changed under it"));
        }
        let mut next = (*current).clone();
        let mut manifest = writer.manifest.clone();
        match ids {
            Some(ids) => {
                let merged = self.open_segment(name, &ids)?;
                let first = merged.first().0;
                next.replace_segments(n, merged);
                let entry = SegmentEntry { name: name.to_string(), first, docs: ids.len() as u32 };
                manifest.segments.splice(..n, [entry]);
            }
            None => {
                next.remove_segments(n);
                manifest.segments.drain(..n);
            }
        }
        manifest.save(live)?;
        writer.manifest = manifest;
        self.live.publish(next);
        self.live.merges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        drop(slot);
        for segment in inputs {
            let dir = live.join(&segment.name);
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                log::warn!("{}: not removed after a merge ({e}); the next writer removes it", dir.display());
            }
        }
        Ok(())
    }
}

/// The records a merge copies, as runs of its inputs' records in the order it writes them: each
/// segment whole, oldest first; in a grouped index group after group, each group's runs oldest
/// segment first (so its ids stay ascending: older segments hold smaller ids).
fn runs_in_order(inputs: &[Arc<Segment>], grouped: bool) -> Vec<(&Segment, Range<u32>)> {
    if !grouped {
        return inputs.iter().map(|s| (&**s, 0..s.len() as u32)).collect();
    }
    let mut runs: Vec<(&str, usize, Range<u32>)> = inputs
        .iter()
        .enumerate()
        .flat_map(|(at, s)| s.groups.iter().flat_map(|g| g.iter()).map(move |(group, run)| (group, at, run)))
        .collect();
    runs.sort_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)));
    runs.into_iter().map(|(_, at, run)| (&*inputs[at], run)).collect()
}

/// Sleeps while `bytes` copied since `start` are ahead of the budget's rate.
fn throttle(budget: &MergeBudget, bytes: u64, start: Instant) {
    if budget.bytes_per_sec == 0 {
        return;
    }
    let due = Duration::from_secs_f64(bytes as f64 / budget.bytes_per_sec as f64);
    if let Some(ahead) = due.checked_sub(start.elapsed()) {
        std::thread::sleep(ahead);
    }
}
