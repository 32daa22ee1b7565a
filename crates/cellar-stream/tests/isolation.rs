//! Property: a search in group g never returns another group's document, while writers keep
//! adding, replacing and deleting documents in every group and the collection flushes and
//! compacts underneath (seeded, bounded in count and time).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cellar_core::CellarError;
use cellar_search::MetaValue;
use cellar_stream::{Collection, Options};
use common::{doc, doc_ins, query, search, DIM};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const GROUPS: u64 = 12;
const WRITERS: u64 = 4;
const BATCHES: u64 = 150;

/// A tiny memtable and eager background compaction: segments change under the searchers.
fn options() -> Options {
    Options {
        compact_after: 2,
        background_compaction: true,
        background_flush: true,
        ..common::options(16 << 10)
    }
}

/// Ids carry their group (`g3:17`), and so does the metadata field `group`.
fn writer(c: &Collection, seed: u64, live: &Mutex<HashMap<(String, String), bool>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    for batch in 0..BATCHES {
        let g = format!("g{}", rng.gen_range(0..GROUPS));
        let id = format!("{g}:{}", rng.gen_range(0..25));
        if rng.gen_bool(0.2) {
            // Deletes and their bookkeeping under one lock, so the final check knows the truth.
            let mut live = live.lock().unwrap();
            match c.delete(&g, &id) {
                Ok(_) => {
                    live.insert((g, id), false);
                }
                Err(CellarError::NotFound(_)) => {}
                Err(e) => panic!("{e}"),
            }
        } else {
            let docs: Vec<_> = (0..rng.gen_range(1..4))
                .map(|i| {
                    doc(
                        &g,
                        &format!("{id}{}", if i == 0 { String::new() } else { format!("-{i}") }),
                        seed * 1000 + batch,
                    )
                })
                .collect();
            let mut live = live.lock().unwrap();
            c.put_batch(doc_ins(&docs)).unwrap();
            for d in &docs {
                live.insert((d.group.clone(), d.id.clone()), true);
            }
        }
    }
}

fn searcher(c: &Collection, seed: u64, done: &AtomicBool, searches: &AtomicU64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done.load(Ordering::Acquire) && Instant::now() < deadline {
        let group = format!("g{}", rng.gen_range(0..GROUPS));
        let result = match c.search(&group, &search(query(rng.gen(), 2), rng.gen_range(1..50))) {
            Ok(r) => r,
            Err(CellarError::NotFound(_)) => continue,
            Err(e) => panic!("{e}"),
        };
        for hit in &result.hits {
            assert!(hit.id.starts_with(&format!("{group}:")), "search in {group} returned {}", hit.id);
            assert_eq!(hit.metadata["group"], MetaValue::Str(group.clone()));
        }
        searches.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn searches_never_cross_groups_under_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let c = Arc::new(Collection::open(dir.path(), Some(DIM), options()).unwrap());
    let live = Arc::new(Mutex::new(HashMap::new()));
    let (done, searches) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let searchers: Vec<_> = (0..2)
        .map(|s| {
            let (c, done, searches) = (c.clone(), done.clone(), searches.clone());
            std::thread::spawn(move || searcher(&c, 100 + s, &done, &searches))
        })
        .collect();
    let writers: Vec<_> = (1..=WRITERS)
        .map(|w| {
            let (c, live) = (c.clone(), live.clone());
            std::thread::spawn(move || writer(&c, w, &live))
        })
        .collect();
    writers.into_iter().for_each(|w| w.join().unwrap());
    done.store(true, Ordering::Release);
    searchers.into_iter().for_each(|s| s.join().unwrap());
    let stats = c.stats();
    assert!(searches.load(Ordering::Relaxed) > 0, "the searchers ran");
    assert!(stats.flushes > 0, "writes were flushed while searched: {stats:?}");
    let live = live.lock().unwrap();
    for g in 0..GROUPS {
        let group = format!("g{g}");
        let expected: BTreeSet<&str> = live
            .iter()
            .filter(|((lg, _), alive)| *lg == group && **alive)
            .map(|((_, id), _)| id.as_str())
            .collect();
        let found: BTreeSet<String> = match c.search(&group, &search(query(g, 1), 1000)) {
            Ok(r) => r.hits.into_iter().map(|h| h.id).collect(),
            Err(CellarError::NotFound(_)) => BTreeSet::new(),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(found.iter().map(String::as_str).collect::<BTreeSet<_>>(), expected, "{group}");
    }
    eprintln!(
        "isolation: {} searches during {} flushes and {} compactions",
        searches.load(Ordering::Relaxed),
        stats.flushes,
        stats.compactions
    );
}
