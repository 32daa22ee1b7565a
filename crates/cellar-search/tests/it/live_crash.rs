//! Crash safety of writes. `sigkill_during_writes_loses_no_acknowledged_write` re-runs this test
//! binary as a writer (the `writer` test, which does nothing unless `CELLAR_LIVE_CRASH_DIR` is
//! set), kills it with SIGKILL after a random delay, reopens the index and checks: every
//! acknowledged add, update and delete is there (a document's text names its version), the
//! batch in flight is all there or not at all, BM25 finds what was written and nothing deleted,
//! and no file a write was making is left behind. The writer's tiny flush budget makes it flush
//! every few batches (in every other round on a thread of its own while writes go on), and it
//! merges every sixth, so kills land inside flushes and merges too.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cellar_search::{DocIn, Index, Mode, OpenOptions, QueryVectorsIn, SearchRequest, WriteOp, WriteRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::fixture::copy_index;

const DIR_VAR: &str = "CELLAR_LIVE_CRASH_DIR";
const SEED_VAR: &str = "CELLAR_LIVE_CRASH_SEED";
const ROUNDS: u64 = 12;
/// Ids the writer draws from (so updates and deletes meet existing documents).
const IDS: u64 = 24;
const DIM: usize = 384;

fn say(lines: &str) {
    let mut out = std::io::stdout().lock();
    out.write_all(lines.as_bytes()).unwrap();
    out.flush().unwrap();
}

/// A document whose text names its version (`v<version>`, a token BM25 indexes).
fn versioned(id: &str, version: u64, rng: &mut StdRng) -> DocIn {
    let tokens: Vec<Vec<f32>> = (0..rng.gen_range(2..6))
        .map(|_| {
            let row: Vec<f32> = (0..DIM).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            row.iter().map(|v| v / norm).collect()
        })
        .collect();
    DocIn {
        id: id.into(),
        title: String::new(),
        text: format!("crash test document v{version}"),
        vectors: Some(QueryVectorsIn { tokens, ..Default::default() }),
        ..DocIn::default()
    }
}

/// The child role: batches of adds, updates and deletes of the ids `c<0..IDS>`, each announced
/// (`OP ADD|UPD id version` / `OP DEL id`, then `END`) before it is written and acknowledged
/// (`ACK`) after. It knows which ids exist from the index itself, so it never sends an
/// operation the index refuses.
#[test]
fn writer() {
    let Ok(dir) = std::env::var(DIR_VAR) else { return };
    let seed: u64 = std::env::var(SEED_VAR).unwrap().parse().unwrap();
    // Odd rounds flush in the background: kills land inside a segment written beside writes.
    let options =
        OpenOptions { flush_bytes: 24 << 10, background_flush: seed % 2 == 1, ..OpenOptions::default() };
    let index = Index::open(Path::new(&dir), options).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut exists: HashMap<String, bool> =
        (0..IDS).map(|i| (format!("c{i}"), index.get(&format!("c{i}")).unwrap().is_some())).collect();
    say("\nSTART\n");
    let start = Instant::now();
    for batch in 0..10_000u64 {
        if start.elapsed() > Duration::from_secs(90) {
            break;
        }
        let mut ops = Vec::new();
        let mut announce = String::new();
        let mut touched = HashMap::new();
        for _ in 0..rng.gen_range(1..5) {
            let id = format!("c{}", rng.gen_range(0..IDS));
            if touched.contains_key(&id) {
                continue;
            }
            let version = seed * 1_000_000 + batch * 10 + ops.len() as u64;
            let op = match (exists[&id], rng.gen_bool(0.3)) {
                (false, _) => {
                    announce += &format!("OP ADD {id} {version}\n");
                    WriteOp::Add(versioned(&id, version, &mut rng))
                }
                (true, true) => {
                    announce += &format!("OP DEL {id}\n");
                    WriteOp::Delete(id.clone())
                }
                (true, false) => {
                    announce += &format!("OP UPD {id} {version}\n");
                    WriteOp::Update(versioned(&id, version, &mut rng))
                }
            };
            touched.insert(id, !matches!(op, WriteOp::Delete(_)));
            ops.push(op);
        }
        say(&(announce + "END\n"));
        index.write(WriteRequest { ops }).unwrap();
        exists.extend(touched);
        say("ACK\n");
        if batch % 6 == 5 {
            let budget = cellar_search::live::merge::MergeBudget { bytes_per_sec: 0, chunk_docs: 3 };
            index.merge(&budget).unwrap();
        }
    }
}

/// What an id holds: the version written, or `None` (deleted).
type State = BTreeMap<String, Option<u64>>;

/// Applies the writer's acknowledged batches to `state`; returns the batch in flight, if any.
fn replay(lines: &[String], state: &mut State) -> Vec<(String, Option<u64>)> {
    let mut current: Vec<(String, Option<u64>)> = Vec::new();
    let mut announced = false;
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["OP", "ADD" | "UPD", id, version] => {
                current.push((id.to_string(), Some(version.parse().unwrap())))
            }
            ["OP", "DEL", id] => current.push((id.to_string(), None)),
            ["END"] => announced = true,
            ["ACK"] => {
                assert!(announced, "an acknowledgement without its batch");
                state.extend(current.drain(..));
                announced = false;
            }
            _ => {}
        }
    }
    if announced {
        current
    } else {
        Vec::new()
    }
}

fn holds(index: &Index, id: &str) -> Option<u64> {
    let doc = index.get(id).unwrap()?;
    Some(doc.text.rsplit('v').next().unwrap().parse().unwrap())
}

fn bm25_finds(index: &Index, version: u64) -> Vec<String> {
    let request = SearchRequest {
        query: format!("v{version}"),
        mode: Some(Mode::Bm25),
        k: Some(5),
        ..Default::default()
    };
    index.search(request).unwrap().hits.into_iter().map(|h| h.id).collect()
}

#[test]
fn sigkill_during_writes_loses_no_acknowledged_write() {
    let (_tmp, dir) = copy_index();
    let mut state: State = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(7);
    let mut acked = 0;
    // Kills that found a flush under way (its frozen log not yet replaced by a named segment).
    let mut mid_flush = 0;
    for round in 0..ROUNDS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["live_crash::writer", "--exact", "--nocapture", "--test-threads=1"])
            .env(DIR_VAR, &dir)
            .env(SEED_VAR, (round + 1).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        // The kill lands a random moment after a random number of acknowledged batches, so
        // every round writes and a slow machine changes when, not whether (at most a minute).
        let target = rng.gen_range(11..=20);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut lines = Vec::new();
        while lines.iter().filter(|l| *l == "ACK").count() < target && Instant::now() < deadline {
            match lines_rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => lines.push(line),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..40)));
        let _ = child.kill();
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(lines_rx.try_iter());
        assert!(lines.iter().any(|l| l == "START"), "round {round}: the writer never started: {lines:?}");
        acked += lines.iter().filter(|l| *l == "ACK").count();
        let frozen = dir.join(cellar_search::live::LIVE_DIR).join(cellar_search::live::FROZEN_WAL_FILE);
        mid_flush += usize::from(frozen.exists());
        let in_flight = replay(&lines, &mut state);

        let index = Index::open(&dir, OpenOptions::default()).unwrap();
        let mut expected = state.clone();
        if !in_flight.is_empty() {
            let applied = in_flight.iter().map(|(id, v)| holds(&index, id) == *v).collect::<Vec<_>>();
            assert!(
                applied.iter().all(|a| *a)
                    || applied.iter().all(|a| !*a)
                    || in_flight.iter().all(|(id, v)| state.get(id).copied().flatten() == *v),
                "round {round}: the batch in flight {in_flight:?} is half applied: {applied:?}"
            );
            if applied.iter().all(|a| *a) {
                expected.extend(in_flight);
            }
        }
        for (id, version) in &expected {
            assert_eq!(holds(&index, id), *version, "round {round}: {id}");
            if let Some(version) = version {
                assert_eq!(
                    bm25_finds(&index, *version),
                    std::slice::from_ref(id),
                    "round {round}: BM25 of {id} v{version}"
                );
            }
        }
        state = expected;
        let live = dir.join(cellar_search::live::LIVE_DIR);
        for entry in std::fs::read_dir(&live).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            // The frozen log of a flush a kill cut short stays until the next flush names its segment.
            let known = ["LOCK", "MANIFEST.json", "wal.log", cellar_search::live::FROZEN_WAL_FILE]
                .contains(&name.as_str())
                || (name.starts_with("seg-") && !name.contains('.'));
            assert!(known, "round {round}: stray {name} in live/");
        }
    }
    eprintln!(
        "live crash test: {ROUNDS} SIGKILLs, {acked} acknowledged batches, {mid_flush} kills during a flush"
    );
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    assert!(acked > 10 * ROUNDS as usize, "{acked} batches acknowledged in {ROUNDS} rounds");
    let deleted = state.values().filter(|v| v.is_none()).count();
    assert!(deleted > 0 && state.len() > deleted, "the rounds wrote and deleted: {state:?}");
    assert!(
        std::fs::read_dir(dir.join("live")).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("seg-")),
        "some round flushed"
    );
    drop(index);
}
