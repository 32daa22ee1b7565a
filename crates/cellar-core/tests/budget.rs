//! The read-buffer budget holds across threads: with room for one pooled buffer, concurrent
//! direct reads take turns, every read still returns its records, and the bytes in use never
//! pass the budget. Its own test binary: the budget is the process's.

#[path = "it/fixture.rs"]
#[allow(dead_code)]
mod fixture;

use cellar_core::codec::CodecKind;
use cellar_core::io::{
    read_buffers_in_use, set_read_buffer_budget, ReaderKind, ReaderOptions, POOLED_BUFFER_BYTES,
};
use cellar_core::store::VectorStore;
use cellar_core::DocId;

#[test]
fn concurrent_direct_reads_stay_within_the_budget_and_all_complete() {
    let dir = tempfile::tempdir().unwrap();
    let docs = fixture::docs(120, 11);
    fixture::write(dir.path(), CodecKind::F16, &docs);
    let store = VectorStore::open(dir.path(), &ReaderOptions::new(ReaderKind::Direct)).unwrap();
    set_read_buffer_budget(POOLED_BUFFER_BYTES);
    std::thread::scope(|scope| {
        for t in 0..4u32 {
            let (store, docs) = (&store, &docs);
            scope.spawn(move || {
                for round in 0..25u32 {
                    let ids: Vec<DocId> =
                        (0..120u32).filter(|i| (i + t + round) % 3 == 0).map(DocId).collect();
                    let batch = store.read_batch(&ids).unwrap();
                    let held = read_buffers_in_use();
                    assert!(
                        held <= POOLED_BUFFER_BYTES,
                        "{held} bytes of buffers in use, budget {POOLED_BUFFER_BYTES}"
                    );
                    for (i, id) in ids.iter().enumerate() {
                        let expected = docs[id.0 as usize].tokens.len() / fixture::DIM;
                        assert_eq!(batch.record(i).n_tokens, expected, "doc {id:?}");
                    }
                    std::thread::yield_now();
                }
            });
        }
    });
    assert_eq!(read_buffers_in_use(), 0, "every buffer was given back");
    set_read_buffer_budget(0);
}
