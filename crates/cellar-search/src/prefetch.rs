//! What reading and scoring candidates' token records produced (`ScoredRecords`, made by the
//! pipeline in `reads`), and the prefetcher's accounting.
//!
//! ESPN's idea: while the IVF probe is still running, the likely winners are already known well
//! enough to start reading their token records; scoring each chunk as it arrives (early
//! re-ranking) leaves only the misses for after the probe.

use std::collections::HashMap;

use cellar_core::io::ReadStats;
use cellar_core::DocId;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// MaxSim scores of a set of documents and what reading them cost.
#[derive(Debug, Default)]
pub struct ScoredRecords {
    pub scores: HashMap<DocId, f32>,
    pub io: ReadStats,
    /// Time spent reading the chunks (on the I/O thread).
    pub read_ms: f64,
    pub score_ms: f64,
    /// Time the scoring thread waited for chunks: the part of `read_ms` not hidden under other
    /// work (scoring earlier chunks, the query's encoding, the probe).
    pub wait_ms: f64,
}

impl ScoredRecords {
    /// Read time that overlapped other work.
    pub fn hidden_ms(&self) -> f64 {
        (self.read_ms - self.wait_ms).max(0.0)
    }
}

/// What the prefetcher did for one query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PrefetchStats {
    /// Clusters probed when the prefetch started.
    pub after_clusters: usize,
    /// Records prefetched.
    pub prefetched: usize,
    /// Records re-ranked in the end.
    pub needed: usize,
    /// Needed records that had been prefetched.
    pub hits: usize,
    /// Needed records read before the probe, while the query was encoded (BM25's best; see
    /// `early_read`): neither prefetched nor missed.
    pub early_read: usize,
    /// `hits / needed` (1 when nothing was needed).
    pub hit_rate: f64,
    pub bytes_prefetched: u64,
    /// Bytes of prefetched records that were not needed (prorated per record within the batch).
    pub bytes_wasted: u64,
    /// Needed records read after the probe.
    pub misses_read: usize,
    pub bytes_missed: u64,
    /// Time the query's own thread waited for records after the probe: the misses, read while
    /// the rest of the prefetch completes, and that rest.
    pub wait_ms: f64,
}

impl PrefetchStats {
    /// Fills the counters from what was read early, prefetched, needed and missed.
    pub fn account(
        &mut self,
        early: &ScoredRecords,
        prefetched: &ScoredRecords,
        needed: &[DocId],
        misses: &ScoredRecords,
    ) {
        self.prefetched = prefetched.scores.len();
        self.needed = needed.len();
        self.early_read = needed.iter().filter(|id| early.scores.contains_key(id)).count();
        self.hits = needed.iter().filter(|id| prefetched.scores.contains_key(id)).count();
        self.hit_rate = if needed.is_empty() { 1.0 } else { self.hits as f64 / needed.len() as f64 };
        self.bytes_prefetched = prefetched.io.bytes;
        let unused = self.prefetched.saturating_sub(self.hits);
        if self.prefetched > 0 {
            self.bytes_wasted = prefetched.io.bytes * unused as u64 / self.prefetched as u64;
        }
        self.misses_read = misses.scores.len();
        self.bytes_missed = misses.io.bytes;
    }
}
