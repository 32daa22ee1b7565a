//! Golden files: a small store of every codec written by format version 1, committed under
//! `testdata/format-v1/`. This build must read them, and must write byte-identical files from
//! the same documents — so a layout change cannot slip in without a format version bump.
//!
//! After an intended format change (with a new `FORMAT_VERSION`), keep the old directory (it
//! tests reading the old version) and write the new one with `CELLAR_BLESS=1 cargo test golden`.

use std::path::{Path, PathBuf};

use cellar_core::codec::CodecKind;
use cellar_core::format::{FileKind, Manifest};
use cellar_core::io::ReaderOptions;
use cellar_core::store::VectorStore;
use cellar_core::DocId;

use super::fixture::{self, DIM};

const GOLDEN_SEED: u64 = 2026;
const GOLDEN_DOCS: usize = 12;

fn golden_dir(codec: CodecKind) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/format-v1").join(codec.name())
}

fn bless_requested() -> bool {
    std::env::var_os("CELLAR_BLESS").is_some_and(|v| v == "1")
}

/// Manifest without `created_by`, which names the crate version rather than the format.
fn manifest_without_writer(dir: &Path) -> Manifest {
    Manifest { created_by: String::new(), ..Manifest::read(dir).unwrap() }
}

#[test]
fn golden_stores_are_read_and_reproduced_byte_for_byte() {
    let docs = fixture::docs(GOLDEN_DOCS, GOLDEN_SEED);
    for codec in [CodecKind::F16, CodecKind::Int8] {
        let golden = golden_dir(codec);
        if bless_requested() {
            let _ = std::fs::remove_dir_all(&golden);
            fixture::write(&golden, codec, &docs);
        }
        let fresh = tempfile::tempdir().unwrap();
        fixture::write(fresh.path(), codec, &docs);
        for kind in FileKind::STORE {
            let name = kind.file_name();
            let old = std::fs::read(golden.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let new = std::fs::read(fresh.path().join(name)).unwrap();
            assert!(old == new, "{codec:?} {name} differs from the golden v1 file: bump FORMAT_VERSION");
        }
        assert_eq!(manifest_without_writer(&golden), manifest_without_writer(fresh.path()));
        for options in fixture::all_reader_options() {
            let store = VectorStore::open(&golden, &options).unwrap();
            read_back_matches(&store, &docs, &options);
        }
    }
}

fn read_back_matches(store: &VectorStore, docs: &[fixture::Doc], options: &ReaderOptions) {
    let ids: Vec<DocId> = (0..docs.len() as u32).map(DocId).collect();
    let batch = store.read_batch(&ids).unwrap();
    for (i, doc) in docs.iter().enumerate() {
        let record = batch.record(i);
        assert_eq!(record.n_tokens * DIM, doc.tokens.len(), "{options:?} doc {i}");
        let mut decoded = Vec::new();
        store.codec().decode(record.tokens, &mut decoded);
        let worst = decoded.iter().zip(&doc.tokens).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 0.01, "{options:?} doc {i}: decoded values off by {worst}");
    }
}
