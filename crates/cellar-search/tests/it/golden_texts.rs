//! Golden files of the text store: `testdata/texts-v2/` holds `texts.bin` and a
//! `text_offsets.bin` of version 2 (an offset and a CRC-32C per record) written from fixed
//! documents; this build must write them byte for byte and read them back. `testdata/texts-v1/`
//! holds the same texts with a version-1 `text_offsets.bin` (offsets only), the layout before
//! the record checksums: this build no longer writes it and must still read it.
//!
//! After an intended change of the layout (with a new `TEXT_OFFSETS_VERSION`), keep the old
//! directory for the reading test and write the new one with
//! `CELLAR_BLESS=1 cargo test -p cellar-search --test it golden`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cellar_core::format::{FileKind, HEADER_BYTES, TEXT_OFFSETS_VERSION};
use cellar_core::DocId;
use cellar_search::corpus::Document;
use cellar_search::texts::{TextsReader, TextsWriter, TEXT_END_BYTES, TEXT_ENTRY_BYTES};

use crate::golden_files;

/// Five documents with what JSON must escape: quotes, a backslash, newlines, non-ASCII.
fn documents() -> Vec<Document> {
    (0..5)
        .map(|i| Document {
            id: format!("doc-{i}"),
            title: if i == 3 { String::new() } else { format!("Title \"{i}\"") },
            text: format!("Line one of {i}\nline two \\ ünïcode — {}", "x".repeat(i * 7)),
            metadata: Default::default(),
            group: None,
        })
        .collect()
}

fn write(dir: &Path) {
    let mut writer = TextsWriter::create(dir).unwrap();
    documents().iter().for_each(|doc| writer.add(doc).unwrap());
    writer.finish().unwrap();
}

fn golden_v2() -> &'static Path {
    static GOLDEN: OnceLock<PathBuf> = OnceLock::new();
    golden_files::dir(&GOLDEN, "texts-v2", write)
}

fn golden_v1() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/texts-v1")
}

const FILES: [FileKind; 2] = [FileKind::Texts, FileKind::TextOffsets];

#[test]
fn golden_texts_are_reproduced_byte_for_byte() {
    let fresh = tempfile::tempdir().unwrap();
    write(fresh.path());
    let files = FILES.map(|k| k.file_name());
    golden_files::assert_same_bytes(golden_v2(), fresh.path(), &files, "TEXT_OFFSETS_VERSION");
}

#[test]
fn golden_texts_of_both_versions_are_read_by_this_build() {
    for (dir, version, checked) in [(golden_v1(), 1, 0), (golden_v2().to_path_buf(), TEXT_OFFSETS_VERSION, 5)]
    {
        let reader = TextsReader::open(&dir).unwrap();
        assert_eq!(reader.offsets_version(), version, "{}", dir.display());
        let read: Vec<Document> = (0..reader.len()).map(|i| reader.get(DocId(i as u32)).unwrap()).collect();
        assert_eq!(read, documents(), "{}", dir.display());
        assert_eq!(reader.verify().unwrap().record_crcs, checked, "{}", dir.display());
    }
}

/// Version 1 is version 2 without the record checksums: the same `texts.bin`, and offsets that
/// are version 2's offsets column followed by the same end.
#[test]
fn golden_texts_v1_holds_the_offsets_of_v2() {
    let name = FileKind::Texts.file_name();
    assert_eq!(
        std::fs::read(golden_v1().join(name)).unwrap(),
        std::fs::read(golden_v2().join(name)).unwrap()
    );
    let body = |dir: &Path| {
        std::fs::read(dir.join(FileKind::TextOffsets.file_name())).unwrap()[HEADER_BYTES..].to_vec()
    };
    let (v1, v2) = (body(&golden_v1()), body(golden_v2()));
    let (entries, end) = v2.split_at(v2.len() - TEXT_END_BYTES);
    let mut offsets: Vec<u8> = entries.chunks_exact(TEXT_ENTRY_BYTES).flat_map(|e| e[..8].to_vec()).collect();
    offsets.extend_from_slice(end);
    assert_eq!(v1, offsets);
}
