//! Reading and scoring candidates' token records, in chunks, and the prefetcher's accounting.
//!
//! ESPN's idea: while the IVF probe is still running, the likely winners are already known well
//! enough to start reading their token records; scoring each chunk as it arrives (early
//! re-ranking) leaves only the misses for after the probe.

use std::collections::HashMap;
use std::time::Instant;

use cellar_core::io::ReadStats;
use cellar_core::{DocId, Result};
use schemars::JsonSchema;
use serde::Serialize;

use crate::index::Index;
use crate::query::PreparedQuery;

/// Records read per batch when reading and scoring in chunks: large enough that one batch keeps
/// the device's queue full (chunks of 16 cost a third more time per query than one batch of 64 in
/// the prefetch study), small enough that scoring starts before a large re-rank is all read.
pub const CHUNK_RECORDS: usize = 64;

/// MaxSim scores of a set of documents and what reading them cost.
#[derive(Debug, Default)]
pub struct ScoredRecords {
    pub scores: HashMap<DocId, f32>,
    pub io: ReadStats,
    pub read_ms: f64,
    pub score_ms: f64,
}

/// What the prefetcher did for one query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, JsonSchema)]
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

impl Index {
    /// Reads the records of `ids` in chunks of [`CHUNK_RECORDS`] and scores each chunk with
    /// MaxSim as soon as it is read.
    pub fn read_and_score(&self, query: &PreparedQuery, ids: &[DocId]) -> Result<ScoredRecords> {
        let mut out = ScoredRecords { scores: HashMap::with_capacity(ids.len()), ..ScoredRecords::default() };
        let codec = self.store.codec();
        for chunk in ids.chunks(CHUNK_RECORDS) {
            let read_start = Instant::now();
            let batch = self.store.read_batch(chunk)?;
            out.read_ms += read_start.elapsed().as_secs_f64() * 1e3;
            out.io += batch.stats();
            let score_start = Instant::now();
            for (i, id) in chunk.iter().enumerate() {
                out.scores.insert(*id, codec.maxsim(self.isa, &query.tokens, batch.record(i).tokens));
            }
            out.score_ms += score_start.elapsed().as_secs_f64() * 1e3;
        }
        Ok(out)
    }
}
