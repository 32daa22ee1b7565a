//! Reading one document back, and what a collection holds on disk and in RAM.
//!
//! RAM per document: the only per-document RAM is the memtable's (documents not flushed yet);
//! flushed documents cost their group's directory slot in each segment holding the group, shared
//! by all the group's documents. `ram_bytes_per_flushed_doc` = directory bytes / entries on disk.

use cellar_core::{CellarError, Result};
use serde::Serialize;

use crate::collection::Collection;
use cellar_search::doc::check_key;
use cellar_search::Metadata;

use crate::doc::EntryView;

/// A stored document as `get` returns it (vectors decoded from f16).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredDoc {
    pub group: String,
    pub id: String,
    pub seq: u64,
    pub text: String,
    pub n_tokens: usize,
    pub tokens: Vec<f32>,
    pub pooled: Vec<f32>,
    pub metadata: Metadata,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub dim: usize,
    pub segments: usize,
    /// Entries in segments (live documents, plus shadowed versions and tombstones until compacted).
    pub segment_entries: u64,
    /// Sum over segments of the groups each holds.
    pub segment_groups: u64,
    pub memtable_entries: usize,
    pub memtable_bytes: usize,
    /// RAM of the segments' group directories.
    pub directory_bytes: usize,
    pub ram_bytes_per_flushed_doc: f64,
    pub disk_bytes: u64,
    pub wal_bytes: u64,
    pub last_seq: u64,
    pub flushed_seq: u64,
    pub flushes: u64,
    /// Flushes that failed after their writes were logged (a full disk): those writes stayed
    /// acknowledged, in the log and the memtable.
    pub flush_failures: u64,
    pub compactions: u64,
    /// Log writes since open (one fsync each by default) and the batches they carried: more
    /// batches than syncs means concurrent writers shared syncs (group commit).
    pub log_syncs: u64,
    pub log_batches: u64,
    /// What opening the collection replayed from the log, and the torn tail it cut.
    pub recovered_records: u64,
    pub truncated_bytes: u64,
}

impl Collection {
    /// The newest live version of (group, id); `NotFound` when there is none.
    pub fn get(&self, group: &str, id: &str) -> Result<StoredDoc> {
        check_key("group", group)?;
        check_key("document id", id)?;
        let missing = || CellarError::NotFound(format!("no document {id:?} in group {group:?}"));
        let entry = self.inner.lookup(group, id)?.ok_or_else(missing)?;
        let view = EntryView::parse_at(self.dir(), &entry)?;
        let metadata = view.metadata().map_err(|d| CellarError::corrupted(self.dir(), 0, d))?;
        Ok(StoredDoc {
            group: view.group.to_string(),
            id: view.id.to_string(),
            seq: view.seq,
            text: view.text.to_string(),
            n_tokens: view.n_tokens,
            tokens: view.tokens_f32(),
            pooled: view.pooled_f32(),
            metadata,
        })
    }

    pub fn stats(&self) -> Stats {
        let (last_seq, flushed_seq, wal_bytes) = self.inner.writer_state();
        let state = self.inner.read();
        let segment_entries: u64 = state.segments.iter().map(|s| s.entries).sum();
        let directory_bytes: usize = state.segments.iter().map(|s| s.ram_bytes()).sum();
        let disk_bytes =
            state.segments.iter().filter_map(|s| std::fs::metadata(&s.path).ok()).map(|m| m.len()).sum();
        Stats {
            dim: self.dim(),
            segments: state.segments.len(),
            segment_entries,
            segment_groups: state.segments.iter().map(|s| s.n_groups() as u64).sum(),
            memtable_entries: state.memtable.len(),
            memtable_bytes: state.memtable.bytes(),
            directory_bytes,
            ram_bytes_per_flushed_doc: directory_bytes as f64 / segment_entries.max(1) as f64,
            disk_bytes,
            wal_bytes,
            last_seq,
            flushed_seq,
            flushes: self.inner.flushes.load(std::sync::atomic::Ordering::Relaxed),
            flush_failures: self.inner.flush_failures.load(std::sync::atomic::Ordering::Relaxed),
            compactions: self.inner.compactions.load(std::sync::atomic::Ordering::Relaxed),
            log_syncs: self.inner.log_syncs.load(std::sync::atomic::Ordering::Relaxed),
            log_batches: self.inner.log_batches.load(std::sync::atomic::Ordering::Relaxed),
            recovered_records: self.inner.recovered_records,
            truncated_bytes: self.inner.truncated_bytes,
        }
    }
}
