//! What a collection holds on disk and in RAM, from its grouped index's figures.
//!
//! RAM per document: the memtable's (documents not flushed yet); a flushed document costs its
//! group's directory slot in each segment holding the group (shared by all the group's
//! documents) and 4 bytes of its segment's id order. `ram_bytes_per_flushed_doc` = directory
//! bytes / records in segments. (The writer's map from (group, id) to the document is counted
//! apart: `id_map_bytes`.)

use serde::Serialize;

use crate::collection::Collection;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub dim: usize,
    pub segments: usize,
    /// Records in segments (live documents, plus replaced and deleted versions until compacted).
    pub segment_entries: u64,
    /// Sum over segments of the groups each holds.
    pub segment_groups: u64,
    /// Documents not yet in a segment (replaced and deleted versions included).
    pub memtable_entries: usize,
    pub memtable_bytes: usize,
    /// RAM of the segments' group directories and id orders.
    pub directory_bytes: usize,
    pub ram_bytes_per_flushed_doc: f64,
    /// RAM of the writer's map from (group, id) to its document.
    pub id_map_bytes: u64,
    pub disk_bytes: u64,
    pub wal_bytes: u64,
    /// The sequence number the last document written got (its version: see `collection`).
    pub last_seq: u64,
    /// Write batches applied, and the last one in a segment.
    pub last_batch: u64,
    pub flushed_batch: u64,
    pub flushes: u64,
    /// Flushes that failed after their writes were logged (a full disk): those writes stayed
    /// acknowledged, in the log and the memtable.
    pub flush_failures: u64,
    pub compactions: u64,
    /// Log syncs and write batches since open: each batch is one log record; with `Fsync`
    /// concurrent writers share syncs (group commit: fewer syncs than batches).
    pub log_syncs: u64,
    pub log_batches: u64,
    /// What opening the collection replayed from the log, and the torn tail it cut.
    pub recovered_records: u64,
    pub truncated_bytes: u64,
}

impl Collection {
    pub fn stats(&self) -> Stats {
        let index = self.index();
        let live = index.live_stats();
        let groups = index.group_stats();
        let segment_entries = live.records - live.memtable_docs as u64;
        let (recovered_records, truncated_bytes) = index.recovery();
        Stats {
            dim: self.dim(),
            segments: live.segments,
            segment_entries,
            segment_groups: groups.segment_groups,
            memtable_entries: live.memtable_docs,
            memtable_bytes: live.memtable_bytes as usize,
            directory_bytes: groups.directory_bytes as usize,
            ram_bytes_per_flushed_doc: groups.directory_bytes as f64 / segment_entries.max(1) as f64,
            id_map_bytes: live.id_map_bytes,
            disk_bytes: live.disk_bytes,
            wal_bytes: live.wal_bytes,
            last_seq: live.written,
            last_batch: live.last_seq,
            flushed_batch: live.flushed_seq,
            flushes: live.flushes,
            flush_failures: live.flush_failures,
            compactions: self.inner.compactions.load(std::sync::atomic::Ordering::Relaxed),
            log_syncs: live.log_syncs,
            log_batches: self.inner.log_batches.load(std::sync::atomic::Ordering::Relaxed),
            recovered_records,
            truncated_bytes,
        }
    }
}
