//! The byte parsers of an index behind `bytes -> Result<()>`, for the fuzzers (issue 16.3; the
//! shape and the rules are those of `cellar_core::format::parsers`): the living index's log
//! batches, the IVF's centroids file, posting blocks and `ivf.json`, `index.json`, the live
//! manifest, and the inputs `cellar index` reads (BEIR JSONL, qrels, `.npy` headers, doclens).

use std::path::Path;

use cellar_core::format::parsers::wal;
use cellar_core::{IoContext, Result};

use crate::config::{IndexConfig, CONFIG_FILE};
use crate::corpus::{read_qrels, CorpusReader};
use crate::embeddings::{read_doclens, read_npy_header};
use crate::ivf::layout::{CentroidsFile, PostingBlock, MEMBER_FIXED_BYTES};
use crate::ivf::{IvfConfig, IVF_CONFIG_FILE};
use crate::written::batch::LogBatch;
use crate::written::state::{LiveManifest, LIVE_MANIFEST};

const FUZZ_PATH: &str = "fuzz-input";

/// One record of the living index's log: a batch of puts, deletes and metadata changes.
pub fn log_batch(bytes: &[u8]) -> Result<()> {
    LogBatch::decode(bytes, Path::new(FUZZ_PATH)).map(drop)
}

/// The living index's log file, every record decoded as a batch, as a reopen replays it.
pub fn log(scratch: &Path, bytes: &[u8]) -> Result<()> {
    wal(scratch, bytes, |payload| LogBatch::decode(payload, Path::new("wal.log")).map(drop))
}

/// The body of `ivf_centroids.bin` (dimensions, rotation, centroids, cluster table).
pub fn ivf_centroids(bytes: &[u8]) -> Result<()> {
    CentroidsFile::decode(Path::new(FUZZ_PATH), bytes).map(drop)
}

/// A posting block as the probe decodes it once its checksum matched: its first byte gives
/// the code words per member, the rest is the block, of as many members as fit.
pub fn ivf_postings(bytes: &[u8]) -> Result<()> {
    let Some((words, block)) = bytes.split_first() else { return Ok(()) };
    let words = *words as usize % 16 + 1;
    let members = block.len() / (MEMBER_FIXED_BYTES + 8 * words);
    let block = &block[..members * (MEMBER_FIXED_BYTES + 8 * words)];
    PostingBlock::decode(block, members, words);
    Ok(())
}

/// `ivf/ivf.json`, the IVF's commit point (its files are not there: the check that they are
/// comes after the parse and refuses).
pub fn ivf_config(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let dir = IvfConfig::dir(scratch);
    std::fs::create_dir_all(&dir).at(&dir)?;
    let path = dir.join(IVF_CONFIG_FILE);
    std::fs::write(&path, bytes).at(&path)?;
    IvfConfig::load(scratch).map(drop)
}

/// `splade/splade.json`, the SPLADE stage's commit point.
pub fn splade_config(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let path = scratch.join(crate::splade::SPLADE_CONFIG);
    std::fs::write(&path, bytes).at(&path)?;
    crate::splade::SpladeConfig::load(scratch).map(drop)
}

/// The body of `splade_terms.bin` (head and term directory), held to a `splade.json` that
/// agrees with its head and its counts, as the open holds it, and to a postings file of the
/// length the input's last 8 bytes give.
pub fn splade_terms(bytes: &[u8]) -> Result<()> {
    let Some(at) = bytes.len().checked_sub(8) else { return Ok(()) };
    let (body, len) = bytes.split_at(at);
    let postings_len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
    let word = |i: usize| body.get(i..i + 4).map_or([0; 4], |b| b.try_into().expect("4 bytes"));
    let postings = body
        .get(16..)
        .unwrap_or_default()
        .chunks_exact(16)
        .map(|e| u64::from(u32::from_le_bytes(e[8..12].try_into().expect("4 bytes"))))
        .sum();
    let config = crate::splade::SpladeConfig {
        format_version: crate::splade::SPLADE_FORMAT_VERSION,
        model_dir: Default::default(),
        window: 256,
        doc_overflow: Default::default(),
        docs: u32::from_le_bytes(word(4)).into(),
        vocab: u32::from_le_bytes(word(0)) as usize,
        scale: f32::from_le_bytes(word(8)),
        postings,
        dropped: 0,
        encode_secs: 0.0,
        total_secs: 0.0,
        terms_bytes: 0,
        postings_bytes: 0,
    };
    crate::splade::parse_terms(Path::new(FUZZ_PATH), body, &config, postings_len).map(drop)
}

/// `index.json`, an index's settings.
pub fn index_config(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let path = scratch.join(CONFIG_FILE);
    std::fs::write(&path, bytes).at(&path)?;
    IndexConfig::load(scratch).map(drop)
}

/// `live/MANIFEST.json`, the living index's segments and tombstones.
pub fn live_manifest(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let path = scratch.join(LIVE_MANIFEST);
    std::fs::write(&path, bytes).at(&path)?;
    LiveManifest::load(scratch).map(drop)
}

/// A BEIR `corpus.jsonl` (or `queries.jsonl`), every line read as a document.
pub fn corpus(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let path = scratch.join("corpus.jsonl");
    std::fs::write(&path, bytes).at(&path)?;
    for doc in CorpusReader::open(&path)? {
        doc?;
    }
    Ok(())
}

/// A qrels TSV.
pub fn qrels(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let path = scratch.join("qrels.tsv");
    std::fs::write(&path, bytes).at(&path)?;
    read_qrels(&path).map(drop)
}

/// The header of a `.npy` file of embeddings, or a `doclens.json`, as the parity of the
/// input's first byte chooses; the rest is the file.
pub fn embeddings(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let Some((choice, file)) = bytes.split_first() else { return Ok(()) };
    let path = scratch.join(if choice % 2 == 0 { "embeddings.npy" } else { "doclens.json" });
    std::fs::write(&path, file).at(&path)?;
    if choice % 2 == 0 {
        read_npy_header(&path).map(drop)
    } else {
        read_doclens(&path).map(drop)
    }
}
