//! Golden files: a small store of every codec written by format version 1, committed under
//! `testdata/format-v1/`. This build must read them, and must write byte-identical files from
//! the same documents — so a layout change cannot slip in without a format version bump.
//!
//! After an intended format change (with a new `FORMAT_VERSION`), keep the old directory (it
//! tests reading the old version) and write the new one with
//! `CELLAR_BLESS=1 cargo test -p cellar-core --test it golden` (`support/golden.rs`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cellar_core::codec::CodecKind;
use cellar_core::format::{FileKind, Manifest};
use cellar_core::io::ReaderOptions;
use cellar_core::store::VectorStore;
use cellar_core::DocId;

use super::fixture::{self, DIM};
use crate::golden_files;

const GOLDEN_SEED: u64 = 2026;
const GOLDEN_DOCS: usize = 12;

/// `testdata/format-v1`: one store per codec, in a directory named after it.
fn golden_dir() -> &'static Path {
    static GOLDEN: OnceLock<PathBuf> = OnceLock::new();
    golden_files::dir(&GOLDEN, "format-v1", |dir| {
        let docs = fixture::docs(GOLDEN_DOCS, GOLDEN_SEED);
        CodecKind::ALL.into_iter().for_each(|codec| fixture::write(&dir.join(codec.name()), codec, &docs));
    })
}

/// Manifest without `created_by`, which names the crate version rather than the format.
fn manifest_without_writer(dir: &Path) -> Manifest {
    Manifest { created_by: String::new(), ..Manifest::read(dir).unwrap() }
}

#[test]
fn golden_stores_are_read_and_reproduced_byte_for_byte() {
    let docs = fixture::docs(GOLDEN_DOCS, GOLDEN_SEED);
    for codec in CodecKind::ALL {
        let golden = golden_dir().join(codec.name());
        let fresh = tempfile::tempdir().unwrap();
        fixture::write(fresh.path(), codec, &docs);
        let files = FileKind::STORE.map(FileKind::file_name);
        golden_files::assert_same_bytes(&golden, fresh.path(), &files, "FORMAT_VERSION");
        assert_eq!(manifest_without_writer(&golden), manifest_without_writer(fresh.path()));
        for options in fixture::all_reader_options() {
            let store = VectorStore::open(&golden, &options).unwrap();
            read_back_matches(&store, codec, &docs, &options);
        }
    }
}

/// Every value within 0.01 (f16, int8); residual codes, lossy by design, within half the
/// variance of the fixture's uniform values on average (a wrong decoding is off by more).
fn read_back_matches(store: &VectorStore, codec: CodecKind, docs: &[fixture::Doc], options: &ReaderOptions) {
    let ids: Vec<DocId> = (0..docs.len() as u32).map(DocId).collect();
    let batch = store.read_batch(&ids).unwrap();
    let (mut squares, mut values) = (0f64, 0usize);
    for (i, doc) in docs.iter().enumerate() {
        let record = batch.record(i);
        assert_eq!(record.n_tokens * DIM, doc.tokens.len(), "{options:?} doc {i}");
        let mut decoded = Vec::new();
        store.codec().decode(record.tokens, &mut decoded);
        let worst = decoded.iter().zip(&doc.tokens).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        squares += decoded.iter().zip(&doc.tokens).map(|(a, b)| f64::from((a - b) * (a - b))).sum::<f64>();
        values += decoded.len();
        if codec.residual_bits().is_none() {
            assert!(worst < 0.01, "{options:?} doc {i}: decoded values off by {worst}");
        }
    }
    let mse = squares / values as f64;
    assert!(mse < 1.0 / 6.0, "{codec:?} {options:?}: mean squared error {mse}");
}
