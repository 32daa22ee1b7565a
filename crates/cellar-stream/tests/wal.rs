//! The write-ahead log: round trips, torn tails cut at every byte, damaged records, foreign files.

use std::path::Path;

use cellar_core::CellarError;
use cellar_stream::wal::{MAX_RECORD_BYTES, WAL_HEADER_BYTES};
use cellar_stream::{Durability, Recovery, Wal};

fn payloads() -> Vec<Vec<u8>> {
    vec![b"first".to_vec(), Vec::new(), vec![7u8; 5000], b"{\"group\": \"u1\", \"id\": \"d9\"}".to_vec()]
}

/// Opens `path` and returns what it replays.
fn replay(path: &Path) -> (Wal, Recovery, Vec<Vec<u8>>) {
    let mut seen = Vec::new();
    let (wal, recovery) = Wal::open(path, Durability::Fsync, |p| {
        seen.push(p.to_vec());
        Ok(())
    })
    .unwrap();
    (wal, recovery, seen)
}

/// A log holding `payloads()` written in two batches; returns the file length after each record.
fn write_log(path: &Path) -> Vec<u64> {
    let (mut wal, _, _) = replay(path);
    let all = payloads();
    let mut ends = Vec::new();
    for chunk in [&all[..2], &all[2..]] {
        for payload in chunk {
            ends.push(ends.last().copied().unwrap_or(WAL_HEADER_BYTES) + 8 + payload.len() as u64);
        }
        let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        wal.append(&refs).unwrap();
    }
    assert_eq!(wal.len(), *ends.last().unwrap());
    ends
}

#[test]
fn records_survive_a_reopen_in_order_and_appends_continue() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("wal.log");
    write_log(&path);
    let (mut wal, recovery, seen) = replay(&path);
    assert_eq!(seen, payloads());
    assert_eq!(recovery, Recovery { records: 4, truncated_bytes: 0 });
    wal.append(&[b"fifth"]).unwrap();
    drop(wal);
    let (mut wal, _, seen) = replay(&path);
    assert_eq!(seen.len(), 5);
    assert_eq!(seen[4], b"fifth");
    wal.reset().unwrap();
    assert!(wal.is_empty());
    drop(wal);
    assert_eq!(replay(&path).2, Vec::<Vec<u8>>::new());
}

#[test]
fn a_rotated_log_moves_its_records_whole_and_starts_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, frozen) = (tmp.path().join("wal.log"), tmp.path().join("wal.frozen.log"));
    write_log(&path);
    let (mut wal, _, _) = replay(&path);
    wal.rotate(&frozen).unwrap();
    assert!(wal.is_empty(), "appends start again after the header");
    wal.append(&[b"after"]).unwrap();
    drop(wal);
    // The records are at `to`, byte for byte as they were logged; the log holds only the new one.
    assert_eq!(replay(&frozen).2, payloads());
    assert_eq!(replay(&path).2, vec![b"after".to_vec()]);
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "no temporary file is left: {names:?}");
}

#[test]
fn a_torn_tail_is_cut_at_every_byte_and_the_log_stays_appendable() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full.log");
    let ends = write_log(&full);
    let bytes = std::fs::read(&full).unwrap();
    let last_start = ends[ends.len() - 2];
    for cut in last_start + 1..*ends.last().unwrap() {
        let path = tmp.path().join(format!("torn-{cut}.log"));
        std::fs::write(&path, &bytes[..cut as usize]).unwrap();
        let (mut wal, recovery, seen) = replay(&path);
        assert_eq!(seen, payloads()[..3], "cut at {cut}");
        assert_eq!(recovery.truncated_bytes, cut - last_start, "cut at {cut}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), last_start, "the file is cut back");
        wal.append(&[b"after"]).unwrap();
        drop(wal);
        let (_, _, seen) = replay(&path);
        assert_eq!(seen.last().unwrap(), b"after", "cut at {cut}");
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn a_damaged_record_ends_the_log_there() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full.log");
    let ends = write_log(&full);
    let bytes = std::fs::read(&full).unwrap();
    // One flipped bit in each record's length, checksum or payload, in turn.
    for (i, start) in
        std::iter::once(WAL_HEADER_BYTES).chain(ends[..ends.len() - 1].iter().copied()).enumerate()
    {
        for offset in [start, start + 5, ends[i] - 1] {
            let mut damaged = bytes.clone();
            damaged[offset as usize] ^= 0x10;
            let path = tmp.path().join("damaged.log");
            std::fs::write(&path, &damaged).unwrap();
            let (_, recovery, seen) = replay(&path);
            assert_eq!(seen, payloads()[..i], "flip at {offset} in record {i}");
            assert_eq!(recovery.truncated_bytes, *ends.last().unwrap() - start);
        }
    }
}

#[test]
fn a_missing_or_headerless_log_starts_empty_and_a_foreign_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("new.log");
    let (_, recovery, seen) = replay(&path);
    assert_eq!((recovery.records, seen.len()), (0, 0));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), WAL_HEADER_BYTES);

    std::fs::write(&path, b"CELL").unwrap(); // a header cut short by a crash
    let (_, recovery, _) = replay(&path);
    assert_eq!(recovery.truncated_bytes, 4);

    let foreign = tmp.path().join("foreign.log");
    std::fs::write(&foreign, b"NOT-A-LOG-AT-ALL-0123456789").unwrap();
    let err = Wal::open(&foreign, Durability::Fsync, |_| Ok(())).err().unwrap();
    assert!(matches!(err, CellarError::Corrupted { .. }), "{err}");
    assert_eq!(std::fs::read(&foreign).unwrap(), b"NOT-A-LOG-AT-ALL-0123456789", "left untouched");

    let mut newer = std::fs::read(&path).unwrap();
    newer[8] = 9;
    std::fs::write(&path, &newer).unwrap();
    let err = Wal::open(&path, Durability::Fsync, |_| Ok(())).err().unwrap();
    assert!(matches!(err, CellarError::Incompatible { found: 9, .. }), "{err}");
}

#[test]
fn an_oversized_record_is_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("wal.log");
    let (mut wal, _, _) = replay(&path);
    let big = vec![0u8; MAX_RECORD_BYTES + 1];
    let err = wal.append(&[b"small", &big]).unwrap_err();
    assert!(matches!(err, CellarError::InvalidInput(_)), "{err}");
    assert!(wal.is_empty());
    drop(wal);
    assert_eq!(replay(&path).2.len(), 0);
}

#[test]
fn a_replay_error_stops_the_open() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("wal.log");
    write_log(&path);
    let err = Wal::open(&path, Durability::None, |_| Err(CellarError::InvalidInput("bad op".into())))
        .err()
        .unwrap();
    assert!(err.to_string().contains("bad op"));
    assert_eq!(replay(&path).2.len(), 4, "a failed replay cuts nothing");
}
