//! The hot-record cache of a store: what it returns is what the reader returns, it keeps the
//! records looked up most often within its bytes, and it never reads a cached record again.

use cellar_core::codec::CodecKind;
use cellar_core::io::{ReaderKind, ReaderOptions, RecordBatch};
use cellar_core::store::VectorStore;
use cellar_core::{CellarError, DocId};

use super::fixture;

fn ids(raw: &[u32]) -> Vec<DocId> {
    raw.iter().copied().map(DocId).collect()
}

/// A record's token count, pooled bytes, token bytes and passage table.
type Contents = (usize, Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// Every record of a batch.
fn contents(batch: &RecordBatch) -> Vec<Contents> {
    (0..batch.len())
        .map(|i| {
            let r = batch.record(i);
            (
                r.n_tokens,
                r.pooled.unwrap_or_default().to_vec(),
                r.tokens.to_vec(),
                r.passage_ends.map(<[u8]>::to_vec),
            )
        })
        .collect()
}

#[test]
fn cached_and_read_records_are_the_same_bytes_in_the_order_asked() {
    let dir = tempfile::tempdir().unwrap();
    fixture::write(dir.path(), CodecKind::Int8, &fixture::docs(50, 11));
    for kind in [ReaderKind::Mmap, ReaderKind::Direct] {
        let plain = VectorStore::open(dir.path(), &ReaderOptions::new(kind)).unwrap();
        let cached = VectorStore::open(dir.path(), &ReaderOptions::new(kind))
            .unwrap()
            .with_hot_cache(8 << 20)
            .unwrap();
        // Warm some records, then ask for a mix of cached and uncached ones, duplicates and all.
        let warm = ids(&[3, 10, 17, 40]);
        assert_eq!(contents(&cached.read_batch(&warm).unwrap()), contents(&plain.read_batch(&warm).unwrap()));
        for ask in [ids(&[0, 3, 4, 17, 17, 49, 10, 22]), ids(&[10, 3]), ids(&[40]), ids(&[1, 2])] {
            let (got, want) = (cached.read_batch(&ask).unwrap(), plain.read_batch(&ask).unwrap());
            assert_eq!(contents(&got), contents(&want), "{kind:?} {ask:?}");
        }
        let all_hits = cached.read_batch(&ids(&[3, 10, 17])).unwrap();
        assert_eq!(all_hits.stats().cached, 3, "{kind:?}");
        assert_eq!((all_hits.stats().bytes, all_hits.stats().read_calls), (0, 0), "nothing read: {kind:?}");
        let stats = cached.hot_stats().unwrap();
        assert!(stats.hits >= 3 + 4 && stats.misses >= 4, "{stats:?}");
        assert!(stats.resident_bytes <= stats.capacity_bytes);
    }
}

#[test]
fn a_full_cache_keeps_its_most_looked_up_records_through_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let docs = fixture::docs(400, 12);
    fixture::write(dir.path(), CodecKind::F16, &docs);
    let store = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Direct)).unwrap();
    // Room for about twelve records of the mean size.
    let mean = store.offsets().mean_record_page_bytes() as usize;
    let store = store.with_hot_cache(12 * mean).unwrap();
    let hot = ids(&[1, 2, 4, 5, 8, 9]);
    for _ in 0..6 {
        store.read_batch(&hot).unwrap();
    }
    assert!(hot.iter().all(|id| store.hot_stats().is_some() && cached(&store, *id)), "the hot set is in");
    // One pass over every other document, once each: the cache fills and turns over, but never
    // for a record seen once against one seen six times.
    for chunk in (10..400).collect::<Vec<u32>>().chunks(16) {
        store.read_batch(&ids(chunk)).unwrap();
    }
    let stats = store.hot_stats().unwrap();
    assert!(stats.resident_bytes <= stats.capacity_bytes, "{stats:?}");
    assert!(stats.rejected > 0, "one-off records were turned away once full: {stats:?}");
    for id in &hot {
        assert!(cached(&store, *id), "doc {id} was flushed by the scan: {stats:?}");
    }
    let again = store.read_batch(&hot).unwrap();
    assert_eq!(again.stats().cached, hot.len() as u64);
    assert_eq!(again.stats().bytes, 0);
}

fn cached(store: &VectorStore, id: DocId) -> bool {
    // A read of one record reports whether it came from the cache (and counts a lookup, which
    // only raises its own frequency).
    store.read_batch(&[id]).unwrap().stats().cached == 1
}

#[test]
fn a_record_larger_than_the_cache_is_read_and_never_kept() {
    let dir = tempfile::tempdir().unwrap();
    fixture::write(dir.path(), CodecKind::F16, &fixture::docs(20, 13));
    let store = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Mmap))
        .unwrap()
        .with_hot_cache(64)
        .unwrap();
    for _ in 0..3 {
        let batch = store.read_batch(&ids(&[0, 1, 2])).unwrap();
        assert_eq!((batch.len(), batch.stats().cached), (3, 0));
    }
    let stats = store.hot_stats().unwrap();
    assert_eq!((stats.records, stats.resident_bytes, stats.hits), (0, 0, 0), "{stats:?}");
}

#[test]
fn the_ram_reader_refuses_a_cache() {
    let dir = tempfile::tempdir().unwrap();
    fixture::write(dir.path(), CodecKind::Int8, &fixture::docs(5, 14));
    let store = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Ram)).unwrap();
    let err = store.with_hot_cache(1 << 20).err().expect("refused");
    assert!(matches!(err, CellarError::InvalidInput(_)), "{err}");
    assert!(err.to_string().contains("ram reader"), "{err}");
}
