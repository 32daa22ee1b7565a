//! Damage to the index's own files — texts, pooled vectors, the IVF, BM25's `meta.json` — and
//! the index directory's lock (issue 21's "also found"): each is a typed error naming the file,
//! at open or at the first read of the damaged part, never a garbled answer, a silently different
//! ranking or a panic.

use std::path::Path;

use cellar_core::format::fsio::DirLock;
use cellar_core::format::FileKind;
use cellar_core::io::ReaderKind;
use cellar_core::{CellarError, DocId};
use cellar_search::bm25::{Bm25Index, META_FILE};
use cellar_search::index::BM25_DIR;
use cellar_search::ivf::{build_ivf, IvfConfig, IVF_CONFIG_FILE};
use cellar_search::pooled::PooledWriter;
use cellar_search::{Index, Mode, OpenOptions, SearchRequest};

use crate::fixture::{copy_index, ivf_options, options as build_options, write_collection};

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

#[test]
fn a_missing_or_mismatched_pooled_bin_is_refused_at_open() {
    let (_tmp, copy) = copy_index();
    let path = copy.join(FileKind::Pooled.file_name());
    let original = std::fs::read(&path).unwrap();
    let dim = open(&copy).unwrap().config().encoder.model_dim;
    std::fs::remove_file(&path).unwrap();
    match open(&copy).err().expect("refused") {
        CellarError::Io { path: p, source } => {
            assert!(p.ends_with("pooled.bin") && source.kind() == std::io::ErrorKind::NotFound)
        }
        other => panic!("expected Io naming pooled.bin, got {other:?}"),
    }
    // A well-formed pooled.bin of 29 rows: its header is sound, its size is not the index's.
    let mut short = PooledWriter::create(&copy, dim).unwrap();
    for _ in 0..29 {
        short.add(&vec![0.1; dim]).unwrap();
    }
    short.finish().unwrap();
    let (_, detail) = corrupted(open(&copy).err().expect("refused"), "pooled.bin");
    assert!(detail.contains("expected 30 rows"), "{detail}");
    std::fs::write(&path, &original[..original.len() - 2]).unwrap();
    let (_, detail) = corrupted(open(&copy).err().expect("refused"), "pooled.bin");
    assert!(detail.contains("truncated"), "{detail}");
    std::fs::write(&path, &original).unwrap();
    assert_eq!(open(&copy).unwrap().len(), 30);
}

#[test]
fn an_ivf_without_its_ivf_json_or_a_data_file_is_refused_at_open() {
    let (_tmp, copy) = copy_index();
    let ivf = IvfConfig::dir(&copy);
    let json = std::fs::read(ivf.join(IVF_CONFIG_FILE)).unwrap();
    std::fs::remove_file(ivf.join(IVF_CONFIG_FILE)).unwrap();
    let (_, detail) = corrupted(open(&copy).err().expect("refused"), IVF_CONFIG_FILE);
    assert!(detail.contains("missing") && detail.contains("cellar ivf build"), "{detail}");
    std::fs::write(ivf.join(IVF_CONFIG_FILE), json).unwrap();
    for kind in [FileKind::IvfCentroids, FileKind::IvfPostings, FileKind::IvfVectors] {
        let path = ivf.join(kind.file_name());
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let (_, detail) = corrupted(open(&copy).err().expect("refused"), kind.file_name());
        assert!(detail.contains("missing"), "{detail}");
        std::fs::write(&path, bytes).unwrap();
    }
    assert!(open(&copy).unwrap().ivf_config().is_some());
    std::fs::remove_dir_all(&ivf).unwrap();
    assert!(open(&copy).unwrap().ivf_config().is_none(), "no ivf/ at all is an index without an IVF");
}

/// The hits of a few BM25 queries: what a damaged `meta.json` must either keep or refuse.
fn bm25_answers(bm25: &Bm25Index) -> cellar_core::Result<Vec<Vec<(u32, u32)>>> {
    ["lava and magma", "coffee beans", "string instrument bow", "bread"]
        .iter()
        .map(|q| Ok(bm25.search(q, 30)?.into_iter().map(|s| (s.id.0, s.score.to_bits())).collect()))
        .collect()
}

#[test]
fn every_bit_flip_in_bm25_meta_json_is_refused_as_corrupted_or_changes_nothing() {
    let (_tmp, copy) = copy_index();
    let dir = copy.join(BM25_DIR);
    let path = dir.join(META_FILE);
    let original = std::fs::read(&path).unwrap();
    let expected = bm25_answers(&Bm25Index::open(&dir, false).unwrap()).unwrap();
    let mut refused = 0;
    for at in 0..original.len() {
        for bit in [0, 3] {
            let mut bytes = original.clone();
            bytes[at] ^= 1 << bit;
            std::fs::write(&path, &bytes).unwrap();
            let outcome =
                Bm25Index::open(&dir, false).and_then(|bm25| Ok((bm25.num_docs(), bm25_answers(&bm25)?)));
            match outcome {
                Ok((docs, answers)) => {
                    let change =
                        String::from_utf8_lossy(&bytes[at.saturating_sub(20)..(at + 20).min(bytes.len())])
                            .into_owned();
                    assert_eq!((docs, &answers), (30, &expected), "flip of bit {bit} at {at} ({change:?})");
                }
                Err(CellarError::Corrupted { path, .. }) => {
                    assert!(path.starts_with(&dir), "{path:?}");
                    refused += 1;
                }
                Err(other) => panic!("flip of bit {bit} at {at}: expected Corrupted, got {other:?}"),
            }
        }
    }
    assert!(refused > original.len(), "{refused} of {} flips refused", 2 * original.len());
    std::fs::remove_file(&path).unwrap();
    let (_, detail) = corrupted(Bm25Index::open(&dir, false).err().expect("refused"), BM25_DIR);
    assert!(detail.contains("missing meta.json"), "{detail}");
}

fn locked(result: cellar_core::Result<impl Sized>, needle: &str) {
    match result {
        Err(CellarError::Locked { detail, .. }) => assert!(detail.contains(needle), "{detail}"),
        Err(other) => panic!("expected Locked ({needle}), got {other:?}"),
        Ok(_) => panic!("expected Locked ({needle}), got through"),
    }
}

#[test]
fn builds_and_readers_exclude_each_other_through_the_index_lock() {
    let (tmp, copy) = copy_index();
    let reader = open(&copy).unwrap();
    let second = open(&copy).expect("readers share the lock");
    locked(build_ivf(&copy, &ivf_options()), "open for reading elsewhere");
    let data = tmp.path().join("data");
    write_collection(&data);
    locked(Index::build(&build_options(&data, &copy)), "open for reading elsewhere");
    assert_eq!(reader.len(), 30, "the refused builds touched nothing");
    drop((reader, second));
    build_ivf(&copy, &ivf_options()).expect("nobody reads it any more");
    // What a build holds while it runs.
    let building = DirLock::exclusive(&copy, "index").unwrap();
    locked(open(&copy), &format!("being written elsewhere (held by pid {})", std::process::id()));
    locked(build_ivf(&copy, &ivf_options()), "open elsewhere");
    drop(building);
    assert_eq!(open(&copy).unwrap().len(), 30);
}

#[test]
fn a_wrong_directory_gets_no_lock_file() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
    let error = open(tmp.path()).err().expect("refused");
    assert!(matches!(&error, CellarError::InvalidInput(m) if m.contains("not a Cellar index")), "{error:?}");
    assert!(matches!(build_ivf(tmp.path(), &ivf_options()), Err(CellarError::InvalidInput(_))));
    let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["notes.txt"]);
}
