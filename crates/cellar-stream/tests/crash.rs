//! Crash safety. `sigkill_during_feeds_loses_no_acknowledged_write` re-runs this test binary as a
//! feeder (the `feeder` test, which does nothing unless `CELLAR_CRASH_DIR` is set), kills it with
//! SIGKILL after a random delay, reopens the collection and checks: every acknowledged write is
//! there and intact, each batch in flight (one per feeder thread; the threads' writes share log
//! syncs through group commit) is all there or not at all, searches return exactly the live
//! documents of their group. The feeder's tiny memtable makes it flush every few batches and
//! compact in the background, so kills also land inside flushes and compactions;
//! `every_crash_point_of_flush_and_compaction_recovers` builds each of those states on purpose.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cellar_core::CellarError;
use cellar_stream::{Collection, Durability, Options};
use common::{doc, doc_ins, query, search, vectors_of, DIM};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DIR_VAR: &str = "CELLAR_CRASH_DIR";
const SEED_VAR: &str = "CELLAR_CRASH_SEED";
const ROUNDS: u64 = 30;
const GROUPS: u64 = 6;
const IDS: u64 = 30;
/// Writer threads in the feeder.
const WRITERS: u64 = 3;

fn feeder_options() -> Options {
    Options {
        durability: Durability::Fsync,
        memtable_bytes: 12 << 10,
        compact_after: 2,
        background_compaction: true,
        background_flush: true,
        codec_from: None,
    }
}

/// The child role: `WRITERS` threads feed batches (bounded), each announcing a batch before
/// writing it (`T<n> OP` lines then `T<n> END`) and acknowledging it after the write returned
/// (`T<n> ACK`). Threads write disjoint ids, and their concurrent writes share log syncs.
#[test]
fn feeder() {
    let Ok(dir) = std::env::var(DIR_VAR) else { return };
    let seed: u64 = std::env::var(SEED_VAR).unwrap().parse().unwrap();
    let c = Collection::open(Path::new(&dir), Some(DIM), feeder_options()).unwrap();
    // libtest has printed "test feeder ... " without a newline: start the protocol on a fresh line.
    println!("\nSTART");
    std::thread::scope(|scope| {
        for t in 0..WRITERS {
            let c = &c;
            scope.spawn(move || feed(c, seed, t));
        }
    });
}

fn say(lines: &str) {
    let mut out = std::io::stdout().lock();
    out.write_all(lines.as_bytes()).unwrap();
    out.flush().unwrap();
}

fn feed(c: &Collection, seed: u64, t: u64) {
    let mut rng = StdRng::seed_from_u64(seed * 31 + t);
    let start = Instant::now();
    for batch in 0..20_000u64 {
        if start.elapsed() > Duration::from_secs(10) {
            break;
        }
        let version = seed * 1_000_000 + t * 100_000 + batch;
        let key = |rng: &mut StdRng| {
            let g = format!("g{}", rng.gen_range(0..GROUPS));
            (g.clone(), format!("{g}-t{t}-{}", rng.gen_range(0..IDS)))
        };
        if rng.gen_bool(0.15) {
            let (g, id) = key(&mut rng);
            say(&format!("T{t} OP DEL {g} {id}\nT{t} END\n"));
            match c.delete(&g, &id) {
                Ok(_) => say(&format!("T{t} ACK\n")),
                Err(CellarError::NotFound(_)) => say(&format!("T{t} NACK\n")),
                Err(e) => panic!("{e}"),
            }
        } else {
            let keys: BTreeMap<String, String> =
                (0..rng.gen_range(1..6)).map(|_| key(&mut rng)).map(|(g, id)| (id, g)).collect();
            let docs: Vec<_> = keys.iter().map(|(id, g)| doc(g, id, version)).collect();
            let mut announce: String =
                docs.iter().map(|d| format!("T{t} OP PUT {} {} {version}\n", d.group, d.id)).collect();
            announce += &format!("T{t} END\n");
            say(&announce);
            c.put_batch(doc_ins(&docs)).unwrap();
            say(&format!("T{t} ACK\n"));
        }
    }
}

/// What one operation leaves at its key: the version written, or `None` (deleted).
type Op = ((String, String), Option<u64>);

/// One writer's protocol state while parsing.
#[derive(Default)]
struct Writer {
    current: Vec<Op>,
    announced: bool,
}

/// The feeder's output: acknowledged batches (each writer's in order; writers' ids are disjoint)
/// and every writer's batch in flight, if any.
fn parse_log(lines: &[String]) -> (Vec<Vec<Op>>, Vec<Vec<Op>>) {
    let mut writers: BTreeMap<String, Writer> = BTreeMap::new();
    let mut acked = Vec::new();
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let Some((tag, rest)) = parts.split_first().filter(|(tag, _)| tag.starts_with('T')) else {
            assert!(!line.contains("OP ") && !line.contains("ACK"), "unparsed feeder line {line:?}");
            continue;
        };
        let w = writers.entry(tag.to_string()).or_default();
        match rest {
            ["OP", "PUT", g, id, v] => {
                w.current.push(((g.to_string(), id.to_string()), Some(v.parse().unwrap())))
            }
            ["OP", "DEL", g, id] => w.current.push(((g.to_string(), id.to_string()), None)),
            ["END"] => w.announced = true,
            ["ACK"] => {
                acked.push(std::mem::take(&mut w.current));
                w.announced = false;
            }
            ["NACK"] => {
                w.current.clear();
                w.announced = false;
            }
            _ => panic!("unparsed feeder line {line:?}"),
        }
    }
    let in_flight = writers.into_values().filter(|w| w.announced).map(|w| w.current).collect();
    (acked, in_flight)
}

/// What the collection holds at `key`: a version (checked intact) or `None`.
fn stored(c: &Collection, (g, id): &(String, String)) -> Option<u64> {
    match c.get(g, id) {
        Ok(d) => {
            let version: u64 = d.text.split_whitespace().nth(3).unwrap()[1..].parse().unwrap();
            assert_eq!(d.text, doc(g, id, version).text, "text intact");
            assert_eq!(d.tokens, vectors_of(&d.text).0, "vectors intact");
            Some(version)
        }
        Err(CellarError::NotFound(_)) => None,
        Err(e) => panic!("{g}/{id}: {e}"),
    }
}

/// Files a crash left in the collection's `live/` for open to sweep: temporaries, segments cut
/// short (`.writing`) and segments the manifest does not list.
fn strays(dir: &Path) -> usize {
    let live = dir.join("live");
    let manifest = std::fs::read_to_string(live.join("MANIFEST.json")).unwrap_or_default();
    std::fs::read_dir(&live)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
        .unwrap_or_default()
        .iter()
        .filter(|n| {
            n.ends_with(".tmp")
                || n.ends_with(".writing")
                || (n.starts_with("seg-") && !manifest.contains(&format!("\"{n}\"")))
        })
        .count()
}

fn run_feeder(dir: &Path, seed: u64, kill_after: Duration) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "feeder", "--nocapture", "--test-threads=1"])
        .env(DIR_VAR, dir)
        .env(SEED_VAR, seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (started, start) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line == "START" {
                let _ = started.send(());
            }
            lines.push(line);
        }
        lines
    });
    // The kill is timed from the feeder's start, not its spawn: on a loaded machine starting a
    // test binary alone can take longer than the longest kill delay.
    let _ = start.recv_timeout(Duration::from_secs(30));
    std::thread::sleep(kill_after);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap()
}

#[test]
fn sigkill_during_feeds_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut model: HashMap<(String, String), Option<u64>> = HashMap::new();
    let mut rng = StdRng::seed_from_u64(42);
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut acked_total, mut in_flight_applied, mut in_flight_dropped, mut swept) = (0, 0, 0, 0);
    // Kills that found a flush under way (its frozen log not yet replaced by a named segment).
    let mut mid_flush = 0;
    for round in 1..=ROUNDS {
        assert!(Instant::now() < deadline, "the crash test ran out of time at round {round}");
        let lines = run_feeder(dir.path(), round, Duration::from_millis(rng.gen_range(30..400)));
        let (acked, in_flight) = parse_log(&lines);
        assert!(
            lines.iter().any(|l| l.ends_with(" END")),
            "round {round}: the feeder never started: {lines:?}"
        );
        swept += strays(dir.path());
        mid_flush += usize::from(dir.path().join("live").join(cellar_search::live::FROZEN_WAL_FILE).exists());
        for (key, value) in acked.iter().flatten() {
            model.insert(key.clone(), *value);
        }
        acked_total += acked.len();
        let c = Collection::open(dir.path(), None, feeder_options()).unwrap();
        for batch in in_flight {
            let applied: Vec<bool> = batch.iter().map(|(key, value)| stored(&c, key) == *value).collect();
            let before: Vec<bool> =
                batch.iter().map(|(key, _)| stored(&c, key) == model.get(key).copied().flatten()).collect();
            let all_new = applied.iter().all(|&a| a);
            assert!(
                all_new || before.iter().all(|&b| b),
                "round {round}: a batch is half-visible: {batch:?}"
            );
            if all_new {
                in_flight_applied += 1;
                for (key, value) in batch {
                    model.insert(key, value);
                }
            } else {
                in_flight_dropped += 1;
            }
        }
        check_against_model(&c, &model, round);
        assert_eq!(strays(dir.path()), 0, "open swept the strays");
    }
    eprintln!(
        "crash test: {ROUNDS} SIGKILLs, {acked_total} acknowledged batches all present, in-flight batch \
         applied {in_flight_applied} times and absent {in_flight_dropped} times, {swept} stray files swept, \
         {mid_flush} kills during a flush"
    );
}

fn check_against_model(c: &Collection, model: &HashMap<(String, String), Option<u64>>, round: u64) {
    for (key, value) in model {
        assert_eq!(stored(c, key), *value, "round {round}: {key:?}");
    }
    for g in 0..GROUPS {
        let group = format!("g{g}");
        let live: BTreeSet<&str> = model
            .iter()
            .filter(|((kg, _), v)| *kg == group && v.is_some())
            .map(|((_, id), _)| id.as_str())
            .collect();
        let hits = match c.search(&group, &search(query(round, 2), 1000)) {
            Ok(r) => r.hits,
            Err(CellarError::NotFound(_)) => Vec::new(),
            Err(e) => panic!("{e}"),
        };
        let found: BTreeSet<&str> = hits.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(found, live, "round {round}: group {group} holds exactly its live documents");
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// The segments (directories) in the collection's `live/`.
fn segment_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir.join("live"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("seg-") && !n.ends_with(".writing"))
        .collect()
}

fn plain_options() -> Options {
    Options { background_compaction: false, memtable_bytes: 64 << 20, ..feeder_options() }
}

/// Each state a crash can leave inside a flush or a compaction, built on purpose by copying
/// files from before and after the step, then reopened: nothing lost, nothing doubled.
#[test]
fn every_crash_point_of_flush_and_compaction_recovers() {
    let root = tempfile::tempdir().unwrap();
    let live = root.path().join("live");
    let c = Collection::open(&live, Some(DIM), plain_options()).unwrap();
    let mut expected: HashMap<(String, String), Option<u64>> = HashMap::new();
    for v in 0..3u64 {
        let docs: Vec<_> =
            (0..10).map(|i| doc(&format!("g{}", i % 3), &format!("g{}-{i}", i % 3), v)).collect();
        c.put_batch(doc_ins(&docs)).unwrap();
        docs.iter().for_each(|d| {
            expected.insert((d.group.clone(), d.id.clone()), Some(v));
        });
        c.flush().unwrap();
    }
    c.put(&doc("g1", "g1-99", 7).doc_in()).unwrap();
    expected.insert(("g1".into(), "g1-99".into()), Some(7));
    c.delete("g0", "g0-0").unwrap();
    expected.insert(("g0".into(), "g0-0".into()), None);
    let before_flush = root.path().join("before-flush");
    copy_dir(&live, &before_flush);
    c.flush().unwrap();
    let after_flush = root.path().join("after-flush");
    copy_dir(&live, &after_flush);
    c.compact().unwrap();
    drop(c);
    let check = |dir: &Path, what: &str| {
        let c = Collection::open(dir, None, plain_options()).unwrap();
        for (key, value) in &expected {
            assert_eq!(stored(&c, key), *value, "{what}: {key:?}");
        }
        assert_eq!(strays(dir), 0, "{what}: strays swept");
        let hits = c.search("g1", &search(query(1, 1), 1000)).unwrap().hits;
        assert_eq!(hits.len(), 4, "{what}: no doubled documents");
    };
    // Flush: segment written, manifest not committed (the old manifest and log).
    let case = root.path().join("flush-segment-only");
    copy_dir(&before_flush, &case);
    let new_segment =
        segment_files(&after_flush).difference(&segment_files(&before_flush)).next().cloned().unwrap();
    copy_dir(&after_flush.join("live").join(&new_segment), &case.join("live").join(&new_segment));
    check(&case, "segment written, manifest not");
    // Flush: manifest committed, log not emptied yet.
    let case = root.path().join("flush-log-not-reset");
    copy_dir(&after_flush, &case);
    std::fs::copy(before_flush.join("live/wal.log"), case.join("live/wal.log")).unwrap();
    check(&case, "manifest committed, log not emptied");
    // Compaction: merged segment written, manifest not committed.
    let case = root.path().join("compaction-uncommitted");
    copy_dir(&after_flush, &case);
    let merged = segment_files(&live).into_iter().next().unwrap();
    copy_dir(&live.join("live").join(&merged), &case.join("live").join(&merged));
    check(&case, "compaction written, not committed");
    // Compaction: committed, old segments not removed yet.
    let case = root.path().join("compaction-not-cleaned");
    copy_dir(&live, &case);
    for old in segment_files(&after_flush) {
        copy_dir(&after_flush.join("live").join(&old), &case.join("live").join(&old));
    }
    check(&case, "compaction committed, inputs not removed");
    // A temporary from a segment write cut short.
    let case = root.path().join("temporary");
    copy_dir(&live, &case);
    let cut = case.join("live/seg-0000000000000099.writing");
    std::fs::create_dir_all(&cut).unwrap();
    std::fs::write(cut.join("texts.bin"), b"half a segment").unwrap();
    check(&case, "stray temporary");
    check(&live, "after compaction");
}
