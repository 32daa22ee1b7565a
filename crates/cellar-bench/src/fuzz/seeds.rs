//! Seed files for the fuzzers, written by Cellar's own writers into a scratch directory: a
//! small index built from vectors (f16, with an IVF and metadata), written to (puts, an update,
//! a delete: its log) and flushed (a live segment, its manifest); a streaming collection of two
//! groups, written and flushed (log, segment, manifest, settings); and the inputs `cellar index`
//! and `cellar feed` read (BEIR JSONL, qrels, `.npy`, doclens, feed lines).

use std::collections::BTreeMap;
use std::path::Path;

use cellar_core::codec::CodecKind;
use cellar_core::format::header::FileHeader;
use cellar_core::format::parsers::wal;
use cellar_core::format::{FileKind, HEADER_BYTES};
use cellar_core::{CellarError, IoContext, Result};
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::{
    BuildOptions, DocIn, EmbeddedDoc, Index, Metadata, OpenOptions, QueryVectorsIn, WriteOp, WriteRequest,
};

const DIM: usize = 8;

/// Seed inputs by the name of the target they feed.
pub type Seeds = BTreeMap<&'static str, Vec<Vec<u8>>>;

fn unit(i: usize, token: usize) -> Vec<f32> {
    let row: Vec<f32> = (0..DIM).map(|d| ((i * 7 + token * 3 + d * 5) % 11) as f32 - 5.0).collect();
    let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-3);
    row.iter().map(|v| v / norm).collect()
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).at(path)
}

/// The body of a header-led file.
fn body(bytes: &[u8], path: &Path, kind: FileKind) -> Result<Vec<u8>> {
    let header = FileHeader::decode(&bytes[..HEADER_BYTES.min(bytes.len())], path, kind, bytes.len() as u64)?;
    Ok(bytes[header.body_offset as usize..].to_vec())
}

/// The payloads of a log's records.
fn payloads(scratch: &Path, log: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    wal(scratch, log, |p| {
        out.push(p.to_vec());
        Ok(())
    })?;
    Ok(out)
}

fn index_seeds(dir: &Path, seeds: &mut Seeds) -> Result<()> {
    let index_dir = dir.join("index");
    let docs: Vec<EmbeddedDoc> = (0..64)
        .map(|i| {
            let metadata = Metadata::from_json(
                serde_json::json!({"year": 1990 + i % 30, "lang": (["en", "fr"][i % 2])})
                    .as_object()
                    .cloned()
                    .expect("an object"),
            )
            .map_err(CellarError::invalid)?;
            Ok(EmbeddedDoc {
                id: format!("d{i}"),
                title: format!("title {i}"),
                text: format!("text of document {i} about \"seeds\" — ünïcode"),
                metadata,
                tokens: (0..1 + i % 5).flat_map(|t| unit(i, t)).collect(),
                pooled: None,
            })
        })
        .collect::<Result<_>>()?;
    let mut options = BuildOptions::new("", &index_dir);
    options.codec = CodecKind::F16;
    options.ivf = Some(IvfBuildOptions { cluster_size: 16, ..IvfBuildOptions::default() });
    Index::build_from_embeddings(&options, DIM, None, docs.into_iter().map(Ok))?;
    let index = Index::open(&index_dir, OpenOptions::default())?;
    let doc = |id: &str, i: usize| DocIn {
        id: id.into(),
        text: format!("written {id}"),
        vectors: Some(QueryVectorsIn { tokens: vec![unit(i, 0), unit(i, 1)], ..Default::default() }),
        ..DocIn::default()
    };
    index.write(WriteRequest { ops: vec![WriteOp::Add(doc("w1", 1)), WriteOp::Add(doc("w2", 2))] })?;
    let ops = vec![WriteOp::Delete("d3".into()), WriteOp::Update(doc("d4", 9))];
    index.write(WriteRequest { ops })?;
    let log = read(&index_dir.join("live/wal.log"))?;
    seeds.entry("log-batch").or_default().extend(payloads(dir, &log)?);
    seeds.entry("index-log").or_default().push(log);
    index.flush()?;
    drop(index);
    // The SPLADE stage of the build's documents (SPLADE-tiny, which the set-up installs).
    let splade = cellar_search::splade::SpladeBuildOptions { threads: 1, ..Default::default() };
    cellar_search::splade::build_splade(&index_dir, &splade)?;
    let splade_dir = index_dir.join(cellar_search::splade::SPLADE_DIR);
    let splade_json = read(&splade_dir.join(cellar_search::splade::SPLADE_CONFIG))?;
    seeds.entry("splade-config").or_default().push(splade_json);
    let terms_path = splade_dir.join(FileKind::SpladeTerms.file_name());
    let mut terms = body(&read(&terms_path)?, &terms_path, FileKind::SpladeTerms)?;
    let postings_path = splade_dir.join(FileKind::SpladePostings.file_name());
    terms.extend_from_slice(&(read(&postings_path)?.len() as u64).to_le_bytes());
    seeds.entry("splade-terms").or_default().push(terms);

    for (name, target) in [
        ("vectors/manifest.json", "manifest"),
        ("index.json", "index-config"),
        ("ivf/ivf.json", "ivf-config"),
        ("live/MANIFEST.json", "live-manifest"),
    ] {
        seeds.entry(target).or_default().push(read(&index_dir.join(name))?);
    }
    let store = index_dir.join("vectors");
    let offsets_path = store.join(FileKind::Offsets.file_name());
    let offsets = body(&read(&offsets_path)?, &offsets_path, FileKind::Offsets)?;
    let vectors = read(&store.join(FileKind::Vectors.file_name()))?;
    for entry in offsets.chunks_exact(16).take(16) {
        let offset = u64::from_le_bytes(entry[..8].try_into().expect("8 bytes")) as usize;
        let len = u32::from_le_bytes(entry[8..12].try_into().expect("4 bytes")) as usize;
        // Byte 0 picks the bytes per vector: index 3 of the record target's table is 16 (f16 x 8).
        let mut record = vec![3u8];
        record.extend_from_slice(&vectors[offset..offset + len]);
        seeds.entry("record").or_default().push(record);
    }
    seeds.entry("offsets").or_default().push(offsets);
    let ivf = index_dir.join("ivf");
    let centroids_path = ivf.join(FileKind::IvfCentroids.file_name());
    let centroids = body(&read(&centroids_path)?, &centroids_path, FileKind::IvfCentroids)?;
    seeds.entry("ivf-centroids").or_default().push(centroids);
    let postings_path = ivf.join(FileKind::IvfPostings.file_name());
    let postings = body(&read(&postings_path)?, &postings_path, FileKind::IvfPostings)?;
    // Byte 0 is the code words per member less one: 8 dimensions take one 64-bit word.
    seeds
        .entry("ivf-postings")
        .or_default()
        .push([&[0u8][..], &postings[..postings.len().min(8192)]].concat());
    for entry in walk(&index_dir)? {
        let bytes = read(&entry)?;
        if bytes.starts_with(&cellar_core::format::header::MAGIC) && bytes.len() <= 64 << 10 {
            seeds.entry("file-header").or_default().push(bytes.clone());
            seeds.entry("small-file").or_default().push(bytes);
        }
    }
    Ok(())
}

fn walk(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).at(dir)? {
        let path = entry.at(dir)?.path();
        if path.is_dir() {
            out.extend(walk(&path)?);
        } else {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// The first stream format's files (a migration reads them): the golden collection's
/// (`testdata/stream-v1`), its log split into entries.
fn stream_seeds(dir: &Path, seeds: &mut Seeds) -> Result<()> {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/stream-v1");
    let log = read(&golden.join(cellar_stream::legacy::WAL_FILE))?;
    for payload in payloads(dir, &log)? {
        // A record is a count and its entries, each led by its length.
        let mut rest = &payload[4..];
        while let Some(len) = cellar_stream::legacy::entry_len(rest).filter(|l| *l >= 4 && *l <= rest.len()) {
            seeds.entry("stream-entry").or_default().push(rest[..len].to_vec());
            rest = &rest[len..];
        }
    }
    seeds.entry("stream-log").or_default().push(log);
    for path in walk(&golden)? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let bytes = read(&path)?;
        if name.ends_with(".seg") {
            seeds.entry("stream-segment").or_default().push(bytes);
        } else if name == cellar_stream::legacy::MANIFEST_FILE {
            seeds.entry("stream-manifest").or_default().push([&[0u8][..], &bytes].concat());
        } else if name == cellar_stream::legacy::SETTINGS_FILE {
            seeds.entry("stream-manifest").or_default().push([&[1u8][..], &bytes].concat());
        }
    }
    Ok(())
}

fn input_seeds(seeds: &mut Seeds) {
    let corpus = concat!(
        r#"{"_id": "d1", "title": "Coffee", "text": "Beans are roasted.", "metadata": {"year": 2001, "lang": "en"}}"#,
        "\n",
        r#"{"_id": 7, "text": "An id that is a number, and \"quotes\"\nand a newline."}"#,
        "\n\n",
        r#"{"_id": "q1", "text": "how is espresso made"}"#,
        "\n"
    );
    seeds.entry("corpus").or_default().push(corpus.as_bytes().to_vec());
    let qrels = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td7\t2\n";
    seeds.entry("qrels").or_default().push(qrels.as_bytes().to_vec());
    let feed = [
        r#"{"group": "alice", "id": "m1", "text": "lunch on friday", "metadata": {"folder": "inbox", "year": 2026}}"#,
        r#"{"group": "bob", "id": "m2", "text": "", "tokens": [[0.1, 0.2, 0.3, 0.4], [0.0, 1.0, 0.0, 0.0]], "pooled": [0.5, 0.5, 0.5, 0.5]}"#,
    ];
    seeds.entry("feed-line").or_default().extend(feed.iter().map(|l| l.as_bytes().to_vec()));
    let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }";
    // The magic, version and length (10 bytes), the dict and its newline fill whole 64-byte lines.
    let pad = (64 - (10 + dict.len() + 1) % 64) % 64;
    let mut header = format!("{dict}{}", " ".repeat(pad)).into_bytes();
    header.push(b'\n');
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(&header);
    npy.extend((0..8).flat_map(|i| (i as f32 * 0.25).to_le_bytes()));
    // Byte 0 picks the file: even a `.npy`, odd a `doclens.json`.
    seeds.entry("embeddings").or_default().extend([[&[0u8][..], &npy].concat(), b"\x01[3, 4, 1]".to_vec()]);
}

/// Every target's seeds, written under `dir`.
pub fn build(dir: &Path) -> Result<Seeds> {
    let mut seeds = Seeds::new();
    index_seeds(dir, &mut seeds)?;
    stream_seeds(dir, &mut seeds)?;
    input_seeds(&mut seeds);
    Ok(seeds)
}
