//! Writes the seed corpus of the libFuzzer targets, `<dir>/<target>/seed-<n>`, from Cellar's own
//! writers (the idea of `cellar-bench fuzz`'s seeds, without cellar-search and its tantivy
//! build): a small f16 store (its files, offsets body, records and manifest) and a streaming
//! collection of two groups, written and flushed (log, entries, segment, manifest, settings).
//! Real files reach deep into the parsers from the first execution; coverage grows from there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cellar_core::codec::{fit_codec, CodecKind};
use cellar_core::format::header::{FileHeader, MAGIC};
use cellar_core::format::parsers::wal;
use cellar_core::format::{FileKind, HEADER_BYTES};
use cellar_core::store::StoreWriter;
use cellar_core::{IoContext, Result};
use cellar_stream::{Collection, Durability, Options, StreamDoc};
// Links libFuzzer's coverage callbacks, which the instrumented code of this binary calls.
use libfuzzer_sys as _;

const DIM: usize = 8;

type Seeds = BTreeMap<&'static str, Vec<Vec<u8>>>;

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).at(path)
}

fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).at(dir)? {
        let path = entry.at(dir)?.path();
        if path.is_dir() {
            out.extend(files(&path)?);
        } else {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

fn vector(i: usize, token: usize) -> Vec<f32> {
    (0..DIM).map(|d| (((i * 7 + token * 3 + d * 5) % 11) as f32 - 5.0) / 8.0).collect()
}

fn store_seeds(dir: &Path, seeds: &mut Seeds) -> Result<()> {
    let store = dir.join("store");
    let mut writer = StoreWriter::create(&store, fit_codec(CodecKind::F16, DIM, &[])?, true)?;
    for i in 0..32 {
        let tokens: Vec<f32> = (0..1 + i % 5).flat_map(|t| vector(i, t)).collect();
        writer.add(&tokens, Some(&vector(i, 9)))?;
    }
    writer.finish()?;
    let offsets_path = store.join(FileKind::Offsets.file_name());
    let offsets = read(&offsets_path)?;
    let header =
        FileHeader::decode(&offsets[..HEADER_BYTES], &offsets_path, FileKind::Offsets, offsets.len() as u64)?;
    let body = &offsets[header.body_offset as usize..];
    let vectors = read(&store.join(FileKind::Vectors.file_name()))?;
    for entry in body.chunks_exact(16).take(8) {
        let offset = u64::from_le_bytes(entry[..8].try_into().expect("8 bytes")) as usize;
        let len = u32::from_le_bytes(entry[8..12].try_into().expect("4 bytes")) as usize;
        // Byte 0 picks the bytes per vector: index 3 of the record target's table is 16 (f16 x 8).
        seeds.entry("record").or_default().push([&[3u8][..], &vectors[offset..offset + len]].concat());
    }
    seeds.entry("offsets").or_default().push(body.to_vec());
    for path in files(&store)? {
        let bytes = read(&path)?;
        if path.file_name().is_some_and(|n| n == "manifest.json") {
            seeds.entry("manifest").or_default().push(bytes);
        } else if bytes.starts_with(&MAGIC) && bytes.len() <= 64 << 10 {
            seeds.entry("file-header").or_default().push(bytes.clone());
            seeds.entry("small-file").or_default().push(bytes);
        }
    }
    Ok(())
}

fn stream_seeds(dir: &Path, seeds: &mut Seeds) -> Result<()> {
    let coll_dir = dir.join("stream");
    let options =
        Options { durability: Durability::None, background_compaction: false, ..Options::default() };
    let collection = Collection::open(&coll_dir, Some(4), options)?;
    let docs: Vec<StreamDoc> = (0..6)
        .map(|i| StreamDoc {
            group: ["alice", "bob"][i % 2].into(),
            id: format!("m{i}"),
            text: format!("mail {i} — ünïcode"),
            tokens: (0..8).map(|v| ((v + i) % 5) as f32 * 0.1 + 0.05).collect(),
            n_tokens: 2,
            pooled: None,
            metadata: BTreeMap::new(),
        })
        .collect();
    collection.put_batch(&docs)?;
    collection.delete("bob", "m1")?;
    let log = read(&coll_dir.join(cellar_stream::manifest::WAL_FILE))?;
    let mut payloads = Vec::new();
    wal(dir, &log, |p| {
        payloads.push(p.to_vec());
        Ok(())
    })?;
    for payload in payloads {
        // A record is a count and its entries, each led by its length.
        let mut rest = &payload[4..];
        while let Some(len) = cellar_stream::doc::entry_len(rest).filter(|l| *l >= 4 && *l <= rest.len()) {
            seeds.entry("stream-entry").or_default().push(rest[..len].to_vec());
            rest = &rest[len..];
        }
    }
    seeds.entry("wal").or_default().push(log.clone());
    seeds.entry("stream-log").or_default().push(log);
    collection.flush()?;
    drop(collection);
    for path in files(&coll_dir)? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let bytes = read(&path)?;
        if name.ends_with(".seg") {
            seeds.entry("stream-segment").or_default().push(bytes);
        } else if name == cellar_stream::manifest::MANIFEST_FILE {
            seeds.entry("stream-manifest").or_default().push([&[0u8][..], &bytes].concat());
        } else if name == cellar_stream::manifest::SETTINGS_FILE {
            seeds.entry("stream-manifest").or_default().push([&[1u8][..], &bytes].concat());
        }
    }
    let feed = [
        r#"{"group": "alice", "id": "m1", "text": "lunch on friday", "metadata": {"folder": "inbox", "year": 2026}}"#,
        r#"{"group": "bob", "id": "m2", "text": "", "tokens": [[0.1, 0.2, 0.3, 0.4], [0.0, 1.0, 0.0, 0.0]], "pooled": [0.5, 0.5, 0.5, 0.5]}"#,
    ];
    seeds.entry("feed-line").or_default().extend(feed.iter().map(|l| l.as_bytes().to_vec()));
    Ok(())
}

fn main() -> Result<()> {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "corpus".into()));
    let work = tempdir_in(&std::env::temp_dir())?;
    let mut seeds = Seeds::new();
    store_seeds(&work, &mut seeds)?;
    stream_seeds(&work, &mut seeds)?;
    std::fs::remove_dir_all(&work).at(&work)?;
    for (target, inputs) in &seeds {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir).at(&dir)?;
        for (n, bytes) in inputs.iter().enumerate() {
            let path = dir.join(format!("seed-{n}"));
            std::fs::write(&path, bytes).at(&path)?;
        }
        println!("{target}: {} seeds", inputs.len());
    }
    Ok(())
}

/// A fresh directory for the writers (no tempfile dependency for one directory).
fn tempdir_in(base: &Path) -> Result<PathBuf> {
    let dir = base.join(format!("cellar-fuzz-seeds-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).at(&dir)?;
    }
    std::fs::create_dir_all(&dir).at(&dir)?;
    Ok(dir)
}
