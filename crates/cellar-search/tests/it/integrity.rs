//! Damage to the index's own files — texts, pooled vectors, the IVF, BM25's `meta.json` — and
//! the index directory's lock (issue 21's "also found"): each is a typed error naming the file,
//! at open or at the first read of the damaged part, never a garbled answer, a silently different
//! ranking or a panic.

use std::path::Path;

use cellar_core::format::FileKind;
use cellar_core::io::ReaderKind;
use cellar_core::{CellarError, DocId};
use cellar_search::{Index, Mode, OpenOptions, SearchRequest};

use crate::fixture::copy_index;

fn open(dir: &Path) -> cellar_core::Result<Index> {
    Index::open(dir, OpenOptions { reader: ReaderKind::Mmap, ..Default::default() })
}

fn corrupted(error: CellarError, file: &str) -> (u64, String) {
    match error {
        CellarError::Corrupted { path, offset, detail } => {
            assert!(path.ends_with(file), "{path:?} is not {file}: {detail}");
            (offset, detail)
        }
        other => panic!("expected Corrupted naming {file}, got {other:?}"),
    }
}

/// Position of `needle` in `bytes` at or after `from`.
fn find(bytes: &[u8], needle: &[u8], from: usize) -> usize {
    from + bytes[from..].windows(needle.len()).position(|w| w == needle).expect("needle")
}

#[test]
fn a_flipped_byte_in_a_text_record_is_corrupted_naming_the_document_not_served() {
    let (_tmp, copy) = copy_index();
    let path = copy.join(FileKind::Texts.file_name());
    let mut bytes = std::fs::read(&path).unwrap();
    // Document 7 is volcano-2; 'm' of "magma" becomes 'l': still valid JSON, still UTF-8.
    let record = find(&bytes, br#"{"id":"volcano-2""#, 0);
    let at = find(&bytes, b"magma", record);
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let index = open(&copy).unwrap();
    let (offset, detail) = corrupted(index.texts().get(DocId(7)).unwrap_err(), "texts.bin");
    assert_eq!(offset, record as u64, "the record's offset in texts.bin");
    assert!(detail.contains("document 7") && detail.contains("checksum"), "{detail}");
    assert_eq!(index.texts().get(DocId(6)).unwrap().id, "volcano-1", "the other records still read");
    let request = SearchRequest {
        query: "lava and magma in an eruption".into(),
        k: Some(10),
        mode: Some(Mode::Bm25),
        ..Default::default()
    };
    corrupted(index.search(request.clone()).unwrap_err(), "texts.bin");
    // The hit's collection id lives in the same record: refused without the text too.
    let without_text = SearchRequest { include_text: Some(false), ..request };
    corrupted(index.search(without_text).unwrap_err(), "texts.bin");
}
