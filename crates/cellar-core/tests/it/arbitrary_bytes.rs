//! Every byte parser, fed arbitrary bytes, returns a value or a typed error and never panics.
//! (A stand-in for fuzz targets: seeded, bounded, and run with the ordinary test suite.)

use std::path::Path;

use cellar_core::format::header::{HEADER_FIELDS, MAGIC};
use cellar_core::format::record;
use cellar_core::format::{FileHeader, FileKind, Manifest, HEADER_BYTES};
use cellar_core::store::OffsetsTable;
use cellar_core::CellarError;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

const CASES: usize = 5_000;

fn random_bytes(rng: &mut StdRng, max_len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; rng.gen_range(0..=max_len)];
    rng.fill_bytes(&mut bytes);
    bytes
}

/// A header with the right magic and a valid header CRC but random fields, so decoding gets
/// past the first two checks and exercises the rest.
fn plausible_header(rng: &mut StdRng) -> Vec<u8> {
    let mut bytes = random_bytes(rng, 0);
    bytes.resize(HEADER_BYTES, 0);
    rng.fill_bytes(&mut bytes);
    bytes[..8].copy_from_slice(&MAGIC);
    if rng.gen_bool(0.5) {
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    }
    let crc_at = HEADER_FIELDS.last().unwrap().1;
    let crc = crc32c::crc32c(&bytes[..crc_at]);
    bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn header_decoding_never_panics() {
    let mut rng = StdRng::seed_from_u64(21);
    let path = Path::new("arbitrary.bin");
    for i in 0..CASES {
        let bytes = if i % 2 == 0 { random_bytes(&mut rng, 80) } else { plausible_header(&mut rng) };
        let file_len = rng.gen_range(0..100_000u64);
        let kind = FileKind::ALL[i % FileKind::ALL.len()];
        match FileHeader::decode(&bytes, path, kind, file_len) {
            Ok(h) => assert_eq!(h.body_offset + h.body_len, file_len),
            Err(e) => {
                assert!(matches!(e, CellarError::Corrupted { .. } | CellarError::Incompatible { .. }), "{e}")
            }
        }
    }
}

#[test]
fn record_parsing_never_panics() {
    let mut rng = StdRng::seed_from_u64(22);
    let path = Path::new("vectors.bin");
    for _ in 0..CASES {
        let mut bytes = random_bytes(&mut rng, 600);
        let bytes_per_vector = rng.gen_range(1..64);
        if bytes.len() >= 8 && rng.gen_bool(0.5) {
            // Small token counts and flags, so lengths sometimes almost match.
            bytes[..4].copy_from_slice(&rng.gen_range(0u32..20).to_le_bytes());
            bytes[4..8].copy_from_slice(&rng.gen_range(0u32..3).to_le_bytes());
        }
        match record::parse(&bytes, bytes_per_vector, path, 0) {
            Ok(r) => assert_eq!(r.tokens.len(), r.n_tokens * bytes_per_vector),
            Err(e) => assert!(matches!(e, CellarError::Corrupted { .. }), "{e}"),
        }
    }
}

#[test]
fn offsets_decoding_never_panics() {
    let mut rng = StdRng::seed_from_u64(23);
    let path = Path::new("offsets.bin");
    for _ in 0..CASES {
        let body = random_bytes(&mut rng, 200);
        let vectors = FileHeader::new(FileKind::Vectors, 4096, rng.gen_range(0..1u64 << 40), 0);
        match OffsetsTable::decode(&body, path, &vectors) {
            Ok(table) => assert_eq!(table.len(), body.len() / 16),
            Err(e) => assert!(matches!(e, CellarError::Corrupted { .. }), "{e}"),
        }
    }
}

#[test]
fn manifest_parsing_never_panics() {
    let mut rng = StdRng::seed_from_u64(24);
    let dir = tempfile::tempdir().unwrap();
    let valid = r#"{"format_version":1,"dim":8,"codec":"f16","bytes_per_token":16,"has_pooled":true,
        "page_bytes":4096,"counts":{"docs":1,"tokens":1,"pages":1},"files":[],"created_by":"x"}"#;
    for i in 0..500 {
        let mut bytes = valid.as_bytes().to_vec();
        if i % 2 == 0 {
            bytes = random_bytes(&mut rng, 300);
        } else {
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(0..bytes.len());
                bytes[at] = rng.gen();
            }
        }
        std::fs::write(dir.path().join("manifest.json"), &bytes).unwrap();
        if let Err(e) = Manifest::read(dir.path()) {
            assert!(matches!(e, CellarError::Corrupted { .. } | CellarError::Incompatible { .. }), "{e}");
        }
    }
}
