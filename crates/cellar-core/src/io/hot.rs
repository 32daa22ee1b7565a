//! The hot-record cache: a RAM budget of records kept after they were read, so the records that
//! queries read again and again are not read from disk every time (`--cache-mib`; off unless
//! given).
//!
//! Admission keeps the most re-read records, in the manner of TinyLFU: every lookup counts its
//! document in a small frequency sketch (four 4-bit-saturating counters per document in a
//! count-min array, all halved every `AGING_FACTOR` × its size lookups, so old popularity fades);
//! a record read while the cache is full replaces the least frequent of a few sampled residents
//! only when its own count is higher, so a scan of one-off records cannot flush the hot ones.
//! Records are immutable (a store's base never changes while it is open), so a cached copy is
//! never stale. One mutex guards the map: a query takes it twice (its lookups, then its offers).
//!
//! What a cache may hold is reserved process-wide ([`reserved_bytes`]) from its creation, so a
//! server sizes its other budgets from the memory cap's headroom less what its caches will grow to.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{HotRecord, RecordBatch};
use crate::error::{CellarError, Result};
use crate::ids::DocId;

/// Residents sampled for the least frequent one when a record needs room.
const VICTIM_SAMPLES: usize = 8;
/// Counters of the sketch per document of the store, and per record the cache can hold (the
/// larger count wins, within [`MIN_COUNTERS`]..=[`MAX_COUNTERS`] bytes).
const COUNTERS_PER_DOC: usize = 4;
const COUNTERS_PER_RECORD: usize = 16;
const MIN_COUNTERS: usize = 4096;
const MAX_COUNTERS: usize = 1 << 22;
/// Lookups, in multiples of the sketch's size, after which every counter is halved.
const AGING_FACTOR: usize = 8;
/// Most a counter reaches.
const MAX_COUNT: u8 = 15;
/// Bytes of bookkeeping counted per resident record besides its bytes.
const ENTRY_OVERHEAD: usize = 64;

static RESERVED: AtomicUsize = AtomicUsize::new(0);

/// Bytes every open cache may grow to, together.
pub fn reserved_bytes() -> usize {
    RESERVED.load(Ordering::Relaxed)
}

/// A cache's counters and size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotStats {
    pub capacity_bytes: u64,
    pub resident_bytes: u64,
    pub records: u64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that had to read.
    pub misses: u64,
    pub admitted: u64,
    pub evicted: u64,
    /// Records read while the cache was full that were less frequent than every sampled resident.
    pub rejected: u64,
}

/// The cache of one store. `Send + Sync`.
pub struct HotRecords {
    capacity: usize,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Inner {
    index: HashMap<DocId, usize>,
    residents: Vec<(DocId, Arc<HotRecord>)>,
    used: usize,
    sketch: Sketch,
    /// xorshift state for sampling victims (seeded: the same run keeps the same records).
    rng: u64,
    admitted: u64,
    evicted: u64,
    rejected: u64,
}

impl HotRecords {
    /// A cache of at most `capacity` bytes over a store of `docs` records of about
    /// `mean_record_bytes` each (which size the frequency sketch: [`COUNTERS_PER_DOC`] counters
    /// per document up to [`MAX_COUNTERS`], and at least [`COUNTERS_PER_RECORD`] per record the
    /// cache holds, so that counts of different documents seldom share every counter).
    pub fn new(capacity: usize, mean_record_bytes: usize, docs: usize) -> Result<Self> {
        if capacity == 0 {
            return Err(CellarError::InvalidInput("a hot-record cache needs at least 1 byte".into()));
        }
        let records = capacity / (mean_record_bytes.max(1) + ENTRY_OVERHEAD);
        let counters = docs
            .saturating_mul(COUNTERS_PER_DOC)
            .min(MAX_COUNTERS)
            .max(records.saturating_mul(COUNTERS_PER_RECORD))
            .clamp(MIN_COUNTERS, MAX_COUNTERS);
        RESERVED.fetch_add(capacity, Ordering::Relaxed);
        Ok(HotRecords {
            capacity,
            inner: Mutex::new(Inner {
                index: HashMap::new(),
                residents: Vec::new(),
                used: 0,
                sketch: Sketch::new(counters.next_power_of_two()),
                rng: 0x9e37_79b9_7f4a_7c15,
                admitted: 0,
                evicted: 0,
                rejected: 0,
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached record of each of `ids` (`None`: not cached), counting each lookup.
    pub fn lookup(&self, ids: &[DocId]) -> Vec<Option<Arc<HotRecord>>> {
        let mut inner = self.lock();
        let found: Vec<Option<Arc<HotRecord>>> = ids
            .iter()
            .map(|id| {
                inner.sketch.touch(*id);
                inner.index.get(id).map(|&slot| Arc::clone(&inner.residents[slot].1))
            })
            .collect();
        drop(inner);
        let hits = found.iter().filter(|f| f.is_some()).count() as u64;
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses.fetch_add(ids.len() as u64 - hits, Ordering::Relaxed);
        found
    }

    /// Offers the records `batch` read for `ids` (in order): each is kept if it fits, or if it
    /// was looked up more often than the least frequent of the sampled residents it displaces.
    pub fn offer(&self, batch: &RecordBatch, ids: &[DocId]) {
        let mut inner = self.lock();
        for (i, id) in ids.iter().enumerate() {
            if inner.index.contains_key(id) {
                continue;
            }
            let Some(copy_bytes) = batch.copy_bytes(i) else { continue };
            let size = copy_bytes + ENTRY_OVERHEAD;
            if size > self.capacity || !inner.make_room(size, self.capacity, *id) {
                continue;
            }
            let Some(record) = batch.copy_record(i) else { continue };
            let slot = inner.residents.len();
            inner.residents.push((*id, Arc::new(record)));
            inner.index.insert(*id, slot);
            inner.used += size;
            inner.admitted += 1;
        }
    }

    pub fn stats(&self) -> HotStats {
        let inner = self.lock();
        HotStats {
            capacity_bytes: self.capacity as u64,
            resident_bytes: inner.used as u64,
            records: inner.residents.len() as u64,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            admitted: inner.admitted,
            evicted: inner.evicted,
            rejected: inner.rejected,
        }
    }
}

impl Drop for HotRecords {
    fn drop(&mut self) {
        RESERVED.fetch_sub(self.capacity, Ordering::Relaxed);
    }
}

impl Inner {
    /// Evicts residents until `size` more bytes fit, each the least frequent of a sample, as
    /// long as `candidate` is more frequent than it; false (nothing more evicted) otherwise.
    fn make_room(&mut self, size: usize, capacity: usize, candidate: DocId) -> bool {
        let wanted = self.sketch.count(candidate);
        while self.used + size > capacity {
            let Some(victim) = self.sample_victim() else { return false };
            let victim_count = self.sketch.count(self.residents[victim].0);
            if wanted <= victim_count {
                self.rejected += 1;
                return false;
            }
            self.evict(victim);
        }
        true
    }

    /// The slot of the least frequent of [`VICTIM_SAMPLES`] residents drawn at random.
    fn sample_victim(&mut self) -> Option<usize> {
        let n = self.residents.len();
        if n == 0 {
            return None;
        }
        (0..VICTIM_SAMPLES.min(n))
            .map(|_| {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                (self.rng % n as u64) as usize
            })
            .min_by_key(|&slot| self.sketch.count(self.residents[slot].0))
    }

    fn evict(&mut self, slot: usize) {
        let (id, record) = self.residents.swap_remove(slot);
        self.index.remove(&id);
        if let Some((moved, _)) = self.residents.get(slot) {
            self.index.insert(*moved, slot);
        }
        self.used -= record.len() + ENTRY_OVERHEAD;
        self.evicted += 1;
    }
}

/// A count-min sketch of lookups per document: four counters per document in one array,
/// conservative increments, halved with age.
struct Sketch {
    counters: Vec<u8>,
    mask: usize,
    touches: usize,
}

impl Sketch {
    fn new(size: usize) -> Self {
        Sketch { counters: vec![0; size], mask: size - 1, touches: 0 }
    }

    fn slots(&self, id: DocId) -> [usize; 4] {
        let h = u64::from(id.0).wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let h = (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let h = h ^ (h >> 32);
        [0, 16, 32, 48].map(|shift| ((h >> shift) as usize ^ (shift * 0x2545)) & self.mask)
    }

    fn count(&self, id: DocId) -> u8 {
        self.slots(id).iter().map(|&s| self.counters[s]).min().unwrap_or(0)
    }

    fn touch(&mut self, id: DocId) {
        let slots = self.slots(id);
        let least = slots.iter().map(|&s| self.counters[s]).min().unwrap_or(0);
        if least < MAX_COUNT {
            for s in slots {
                if self.counters[s] == least {
                    self.counters[s] += 1;
                }
            }
        }
        self.touches += 1;
        if self.touches >= AGING_FACTOR * self.counters.len() {
            self.counters.iter_mut().for_each(|c| *c /= 2);
            self.touches = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sketch_counts_lookups_and_forgets_with_age() {
        let mut sketch = Sketch::new(4096);
        for _ in 0..5 {
            sketch.touch(DocId(7));
        }
        sketch.touch(DocId(8));
        assert_eq!(sketch.count(DocId(7)), 5);
        assert_eq!(sketch.count(DocId(8)), 1);
        assert_eq!(sketch.count(DocId(9)), 0);
        for _ in 0..20 {
            sketch.touch(DocId(7));
        }
        assert_eq!(sketch.count(DocId(7)), MAX_COUNT, "saturates");
        // Enough other lookups to pass the aging point once: every count halves.
        for i in 0..(AGING_FACTOR * 4096) as u32 {
            sketch.touch(DocId(1_000_000 + i));
            if sketch.touches == 0 {
                break;
            }
        }
        assert!(sketch.count(DocId(7)) <= MAX_COUNT / 2 + 1, "{}", sketch.count(DocId(7)));
    }

    #[test]
    fn an_empty_cache_is_refused() {
        let err = HotRecords::new(0, 4096, 100).err().expect("refused");
        assert!(matches!(err, CellarError::InvalidInput(_)), "{err}");
    }
}
