//! Damaged index files: every kind of damage is a typed error naming the file and, where there
//! is one, the offset; nothing panics.

use std::path::{Path, PathBuf};

use cellar_core::codec::CodecKind;
use cellar_core::format::header::HEADER_FIELDS;
use cellar_core::format::{FileHeader, FileKind, FORMAT_VERSION, HEADER_BYTES, OLDEST_READABLE_VERSION};
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::store::VectorStore;
use cellar_core::{CellarError, DocId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::fixture;

fn store_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fixture::write(dir.path(), CodecKind::Int8, &fixture::docs(30, 11));
    dir
}

fn open(dir: &Path, kind: ReaderKind) -> cellar_core::Result<VectorStore> {
    VectorStore::open(dir, &ReaderOptions::new(kind))
}

fn flip_bit(path: &Path, offset: u64, bit: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 1 << bit;
    std::fs::write(path, bytes).unwrap();
}

fn corrupted_at(err: &CellarError) -> (PathBuf, u64) {
    match err {
        CellarError::Corrupted { path, offset, .. } => (path.clone(), *offset),
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

#[test]
fn a_missing_file_names_its_path() {
    let dir = store_dir();
    std::fs::remove_file(dir.path().join("codec.bin")).unwrap();
    let err = open(dir.path(), ReaderKind::Mmap).err().unwrap();
    match err {
        CellarError::Io { path, source } => {
            assert!(path.ends_with("codec.bin"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn a_truncated_vectors_file_is_reported() {
    let dir = store_dir();
    let path = dir.path().join("vectors.bin");
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 4096).unwrap();
    for kind in ReaderKind::ALL {
        let err = open(dir.path(), kind).err().unwrap();
        let (p, _) = corrupted_at(&err);
        assert!(p.ends_with("vectors.bin") && err.to_string().contains("truncated"), "{err}");
    }
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(10).unwrap();
    let err = open(dir.path(), ReaderKind::Mmap).err().unwrap();
    assert!(err.to_string().contains("shorter than the 64-byte header"), "{err}");
}

#[test]
fn a_flipped_bit_in_a_record_is_caught_at_its_offset() {
    let dir = store_dir();
    let path = dir.path().join("vectors.bin");
    let entry = open(dir.path(), ReaderKind::Mmap).unwrap().offsets().get(DocId(12)).unwrap();
    flip_bit(&path, entry.offset + entry.len as u64 / 2, 3);
    for kind in [ReaderKind::Mmap, ReaderKind::Direct] {
        let store = open(dir.path(), kind).unwrap();
        store.read_batch(&[DocId(11), DocId(13)]).unwrap();
        let err = store.read_batch(&[DocId(11), DocId(12)]).err().unwrap();
        let (p, offset) = corrupted_at(&err);
        assert!(p.ends_with("vectors.bin"));
        assert_eq!(offset, entry.offset, "{err}");
        assert!(err.to_string().contains("doc 12"), "{err}");
        assert!(store.verify().is_err(), "full verification catches it too");
    }
    // The RAM reader checks the whole body when it loads it.
    let err = open(dir.path(), ReaderKind::Ram).err().unwrap();
    assert!(err.to_string().contains("body checksum mismatch"), "{err}");
}

#[test]
fn every_single_bit_flip_in_the_small_files_is_detected() {
    let dir = store_dir();
    for name in ["offsets.bin", "codec.bin"] {
        let path = dir.path().join(name);
        let len = std::fs::metadata(&path).unwrap().len();
        let mut rng = StdRng::seed_from_u64(7);
        for offset in 0..len {
            let bit = rng.gen_range(0..8);
            flip_bit(&path, offset, bit);
            let result = open(dir.path(), ReaderKind::Mmap);
            flip_bit(&path, offset, bit);
            let err = result.err().unwrap_or_else(|| panic!("{name}: flip at byte {offset} went unnoticed"));
            assert!(matches!(err, CellarError::Corrupted { .. } | CellarError::Incompatible { .. }), "{err}");
        }
        open(dir.path(), ReaderKind::Mmap).unwrap();
    }
}

#[test]
fn random_bit_flips_in_vectors_never_panic_and_never_pass_verification() {
    let dir = store_dir();
    let path = dir.path().join("vectors.bin");
    let len = std::fs::metadata(&path).unwrap().len();
    let all: Vec<DocId> = (0..30).map(DocId).collect();
    let mut rng = StdRng::seed_from_u64(8);
    for _ in 0..60 {
        let (offset, bit) = (rng.gen_range(0..len), rng.gen_range(0..8));
        flip_bit(&path, offset, bit);
        match open(dir.path(), ReaderKind::Direct) {
            Err(e) => {
                assert!(matches!(e, CellarError::Corrupted { .. } | CellarError::Incompatible { .. }), "{e}")
            }
            Ok(store) => {
                assert!(store.verify().is_err(), "flip at {offset} passed verification");
                // Reading may succeed only if the flip fell into padding between records.
                let _ = store.read_batch(&all);
            }
        }
        flip_bit(&path, offset, bit);
    }
}

#[test]
fn a_newer_format_version_is_refused_with_the_supported_range() {
    let dir = store_dir();
    let path = dir.path().join("offsets.bin");
    let mut bytes = std::fs::read(&path).unwrap();
    let len = bytes.len() as u64;
    let mut header = FileHeader::decode(&bytes[..HEADER_BYTES], &path, FileKind::Offsets, len).unwrap();
    header.format_version = FORMAT_VERSION + 1;
    bytes[..HEADER_BYTES].copy_from_slice(&header.encode());
    std::fs::write(&path, bytes).unwrap();
    let newer_incompatible = |dir: &Path| match open(dir, ReaderKind::Mmap).err().unwrap() {
        CellarError::Incompatible { path, found, oldest, newest } => {
            assert!(path.ends_with("offsets.bin"));
            assert_eq!(
                (found, oldest, newest),
                (FORMAT_VERSION + 1, OLDEST_READABLE_VERSION, FORMAT_VERSION)
            );
        }
        other => panic!("expected Incompatible, got {other:?}"),
    };
    newer_incompatible(dir.path());
    // A newer header laid out otherwise: every field after the version changed, checksum included.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[field_range("file_kind").start..HEADER_BYTES].iter_mut().for_each(|b| *b = !*b);
    std::fs::write(&path, bytes).unwrap();
    newer_incompatible(dir.path());
}

fn field_range(name: &str) -> std::ops::Range<usize> {
    let (_, offset, size) = HEADER_FIELDS.iter().find(|f| f.0 == name).unwrap();
    *offset..offset + size
}

#[test]
fn a_newer_or_garbled_manifest_is_refused() {
    let dir = store_dir();
    let path = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let newer = text.replacen(&format!("\"format_version\": {FORMAT_VERSION}"), "\"format_version\": 99", 1);
    std::fs::write(&path, &newer).unwrap();
    let err = open(dir.path(), ReaderKind::Mmap).err().unwrap();
    assert!(matches!(err, CellarError::Incompatible { found: 99, .. }), "{err}");
    // A newer manifest whose other fields changed shape is still a version error, naming both.
    let reshaped = newer.replacen("\"dim\": ", "\"dim\": {\"tokens\": [1]}, \"old_dim\": ", 1);
    assert_ne!(reshaped, newer);
    std::fs::write(&path, &reshaped).unwrap();
    let err = open(dir.path(), ReaderKind::Mmap).err().unwrap();
    assert!(
        matches!(
            err,
            CellarError::Incompatible {
                found: 99,
                oldest: OLDEST_READABLE_VERSION,
                newest: FORMAT_VERSION,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("99") && err.to_string().contains(&format!("..={FORMAT_VERSION}")));
    // The same reshaping at the current version is corruption.
    let current = text.replacen("\"dim\": ", "\"dim\": {\"tokens\": [1]}, \"old_dim\": ", 1);
    std::fs::write(&path, &current).unwrap();
    let (p, _) = corrupted_at(&open(dir.path(), ReaderKind::Mmap).err().unwrap());
    assert!(p.ends_with("manifest.json"));
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    let (p, _) = corrupted_at(&open(dir.path(), ReaderKind::Mmap).err().unwrap());
    assert!(p.ends_with("manifest.json"));
}

#[test]
fn a_file_of_the_wrong_kind_is_refused() {
    let dir = store_dir();
    std::fs::copy(dir.path().join("codec.bin"), dir.path().join("offsets.bin")).unwrap();
    let err = open(dir.path(), ReaderKind::Mmap).err().unwrap();
    let (p, offset) = corrupted_at(&err);
    assert!(p.ends_with("offsets.bin"), "{err}");
    let kind_offset = field_range("file_kind").start as u64;
    assert_eq!(offset, kind_offset, "{err}");
}

#[test]
fn a_manifest_that_contradicts_itself_is_corruption() {
    let dir = store_dir();
    let path = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap();
    for (from, to, needle) in [
        ("\"dim\": 24", "\"dim\": 0", "dim 0"),
        ("\"bytes_per_token\": 24", "\"bytes_per_token\": 48", "bytes_per_token 48"),
        ("\"page_bytes\": 4096", "\"page_bytes\": 512", "page_bytes 512"),
    ] {
        assert!(text.contains(from), "fixture manifest lacks {from}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
        let err = open(dir.path(), ReaderKind::Mmap).err().unwrap();
        let (p, _) = corrupted_at(&err);
        assert!(p.ends_with("manifest.json") && err.to_string().contains(needle), "{err}");
    }
}

#[test]
fn a_file_truncated_after_open_gives_short_read_errors_and_the_reader_keeps_working() {
    let dir = store_dir();
    let path = dir.path().join("vectors.bin");
    let engines = fixture::all_reader_options().into_iter().filter(|o| o.kind == ReaderKind::Direct);
    for options in engines {
        let store = VectorStore::open(dir.path(), &options).unwrap();
        let last = DocId(store.len() as u32 - 1);
        let entry = store.offsets().get(last).unwrap();
        let full = std::fs::read(&path).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(entry.offset / 4096 * 4096)
            .unwrap();
        let err = store.read_batch(&[DocId(0), last]).err().unwrap();
        assert!(matches!(err, CellarError::Corrupted { .. } | CellarError::Io { .. }), "{options:?}: {err}");
        assert!(err.to_string().contains("vectors.bin"), "{err}");
        store.read_batch(&[DocId(0), DocId(1)]).unwrap();
        std::fs::write(&path, full).unwrap();
        store.read_batch(&[DocId(0), last]).unwrap();
    }
}
