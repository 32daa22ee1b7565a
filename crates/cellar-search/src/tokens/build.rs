//! `build_tokens`: the token stage of an index from its store, in three streaming steps under
//! the index's exclusive lock, built aside in `tokens.cellar-building/` and swapped in:
//!
//! 1. a sample of whole documents' tokens (evenly spread, at most `MAX_SAMPLE_BYTES` as f32)
//!    trains the quantizer (`quantizer::Quantizer::train`);
//! 2. every document's records are read in batches, decoded, and each token assigned to its
//!    leaf on every core; a document joins the list of each distinct leaf of its tokens (lists
//!    held as varint gaps while the pass runs: about 2 bytes per posting);
//! 3. the lists are packed (`lists`) into `token_lists.bin`, then `token_centroids.bin` and
//!    `tokens.json`, the commit point, are written.
//!
//! RAM: the sample (at most 256 MiB), the leaves as f32 (4·dim bytes each) and the lists' gaps.

use std::path::Path;
use std::time::Instant;

use cellar_core::cluster::Points;
use cellar_core::format::fsio::{write_small_file, BodyWriter};
use cellar_core::format::{FileKind, PAGE_BYTES};
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::store::VectorStore;
use cellar_core::{CellarError, DocId, IoContext, Result};
use indicatif::ProgressBar;

use super::layout::{CentroidsFile, ListEntry};
use super::quantizer::{leaves_for, Quantizer};
use super::{lists, TokenDefaults, TokensBuildReport, TokensConfig, TOKENS_DIR, TOKENS_FORMAT_VERSION};
use crate::config::IndexConfig;
use crate::names::VECTORS_DIR;

const BUILDING_DIR: &str = "tokens.cellar-building";
const OLD_DIR: &str = "tokens.cellar-old";
/// Most bytes of sample tokens held as f32 for training.
const MAX_SAMPLE_BYTES: usize = 256 << 20;
/// Sample tokens asked for per leaf (fewer where `MAX_SAMPLE_BYTES` binds).
const SAMPLE_PER_LEAF: usize = 8;
/// Documents read at once.
const READ_BATCH: usize = 256;
/// Decoded tokens assigned at once (at 384 dimensions 48 MiB of f32).
const ASSIGN_TOKENS: usize = 32_768;

/// What a token-stage build may set.
#[derive(Clone, Debug)]
pub struct TokensBuildOptions {
    /// Leaves of the quantizer; 0: PLAID's 16·√tokens, rounded down to a power of two.
    pub leaves: usize,
    pub seed: u64,
    pub defaults: TokenDefaults,
    pub progress: bool,
}

impl Default for TokensBuildOptions {
    fn default() -> Self {
        TokensBuildOptions { leaves: 0, seed: 42, defaults: TokenDefaults::default(), progress: false }
    }
}

/// Builds (or rebuilds) `index_dir/tokens/` over the build's documents.
pub fn build_tokens(index_dir: &Path, options: &TokensBuildOptions) -> Result<TokensConfig> {
    let _lock = crate::lock::exclusive(index_dir)?;
    let index = IndexConfig::load(index_dir)?;
    let store = VectorStore::open(&index_dir.join(VECTORS_DIR), &ReaderOptions::new(ReaderKind::Mmap))?;
    let docs = store.len();
    if docs == 0 {
        return Err(CellarError::InvalidInput("the index holds no documents: nothing to quantize".into()));
    }
    if options.defaults.nprobe == 0 || options.defaults.route == 0 {
        return Err(CellarError::InvalidInput(
            "the token stage's nprobe and route must be at least 1".into(),
        ));
    }
    let dim = store.dim();
    let start = Instant::now();
    let mut report = TokensBuildReport::default();
    let tokens_total = index.build.tokens.max(docs as u64);
    let most = MAX_SAMPLE_BYTES / (4 * dim);
    let wanted_leaves =
        if options.leaves > 0 { options.leaves } else { leaves_for(tokens_total, usize::MAX) };
    let sample = read_sample(&store, tokens_total, (wanted_leaves * SAMPLE_PER_LEAF).min(most))?;
    let points = Points { data: &sample, dim };
    let k = wanted_leaves.min(points.len());
    let quantizer = Quantizer::train(&points, k, options.seed);
    report.sample_tokens = points.len();
    report.mean_error = mean_error(&quantizer, &sample);
    drop(sample);
    report.train_secs = start.elapsed().as_secs_f64();

    let assign_start = Instant::now();
    let (gaps, tokens) = assign_all(&store, &quantizer, options.progress)?;
    report.assign_secs = assign_start.elapsed().as_secs_f64();

    let write_start = Instant::now();
    let building = index_dir.join(BUILDING_DIR);
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(&building).at(&building)?;
    let (entries, postings) = write_lists(&building, gaps)?;
    let file = CentroidsFile { quantizer, docs: docs as u32, tokens, lists: entries };
    write_small_file(
        &building.join(FileKind::TokenCentroids.file_name()),
        FileKind::TokenCentroids,
        &file.encode(),
    )?;
    report.write_secs = write_start.elapsed().as_secs_f64();
    report.total_secs = start.elapsed().as_secs_f64();
    let size = |kind: FileKind| std::fs::metadata(building.join(kind.file_name())).map_or(0, |m| m.len());
    report.postings = postings;
    report.centroids_bytes = size(FileKind::TokenCentroids);
    report.lists_bytes = size(FileKind::TokenLists);
    report.disk_bytes_per_doc = report.lists_bytes as f64 / docs as f64;
    let leaves = file.quantizer.leaves();
    report.ram_bytes_per_leaf = report.centroids_bytes as f64 / leaves as f64;
    let config = TokensConfig {
        format_version: TOKENS_FORMAT_VERSION,
        dim,
        docs: docs as u64,
        tokens,
        groups: file.quantizer.groups(),
        leaves,
        seed: options.seed,
        search: TokenDefaults { nprobe: options.defaults.nprobe.min(leaves), ..options.defaults },
        build: report,
    };
    config.save(&building)?;
    crate::ivf::build::swap_dir_in(index_dir, TOKENS_DIR, OLD_DIR, &building)?;
    Ok(config)
}

/// About `wanted` tokens: every token of documents taken at an even stride.
fn read_sample(store: &VectorStore, tokens_total: u64, wanted: usize) -> Result<Vec<f32>> {
    let docs = store.len();
    let stride = (tokens_total as usize).div_ceil(wanted.max(1)).clamp(1, docs);
    let ids: Vec<DocId> = (0..docs as u32).step_by(stride).map(DocId).collect();
    let mut out = Vec::new();
    let codec = store.codec();
    out.reserve(wanted.max(1) * store.dim());
    for chunk in ids.chunks(READ_BATCH) {
        let batch = store.read_batch(chunk)?;
        for i in 0..chunk.len() {
            codec.decode(batch.record(i).tokens, &mut out);
        }
        if out.len() >= wanted * store.dim() {
            break;
        }
    }
    out.truncate(wanted.max(1) * store.dim());
    Ok(out)
}

/// Mean squared distance of the sample's tokens to their leaves.
fn mean_error(q: &Quantizer, sample: &[f32]) -> f64 {
    let dim = q.dim;
    let leaves = q.leaves_f32();
    let mut assigned = Vec::new();
    q.assign_rows(sample, &leaves, &mut assigned);
    let total: f64 = sample
        .chunks_exact(dim)
        .zip(&assigned)
        .map(|(v, &j)| {
            v.iter().zip(&leaves[j as usize * dim..]).map(|(a, b)| f64::from((a - b) * (a - b))).sum::<f64>()
        })
        .sum();
    total / assigned.len().max(1) as f64
}

/// One leaf's list while the pass runs: varint gaps from its last document.
#[derive(Default)]
struct Gaps {
    last: Option<u32>,
    count: u32,
    bytes: Vec<u8>,
}

impl Gaps {
    fn push(&mut self, id: u32) {
        let mut gap = match self.last {
            None => id,
            Some(last) => id - last,
        };
        while gap >= 0x80 {
            self.bytes.push(gap as u8 | 0x80);
            gap >>= 7;
        }
        self.bytes.push(gap as u8);
        self.last = Some(id);
        self.count += 1;
    }

    fn ids(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.count as usize);
        let (mut value, mut shift, mut last) = (0u32, 0u32, 0u32);
        for &b in &self.bytes {
            value |= u32::from(b & 0x7f) << shift;
            shift += 7;
            if b < 0x80 {
                last = if out.is_empty() { value } else { last + value };
                out.push(last);
                (value, shift) = (0, 0);
            }
        }
        out
    }
}

/// Every document's distinct leaves, appended to the leaves' lists in id order; the token count.
/// Records are read `READ_BATCH` documents at a time and assigned once `ASSIGN_TOKENS` tokens
/// wait (split over the cores), so RAM holds at most about `ASSIGN_TOKENS` decoded tokens.
fn assign_all(store: &VectorStore, q: &Quantizer, progress: bool) -> Result<(Vec<Gaps>, u64)> {
    let docs = store.len() as u32;
    let dim = q.dim;
    let leaves = q.leaves_f32();
    let mut gaps: Vec<Gaps> = (0..q.leaves()).map(|_| Gaps::default()).collect();
    let bar =
        if progress { crate::progress::bar(u64::from(docs), "token lists") } else { ProgressBar::hidden() };
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get()).max(1);
    let codec = store.codec();
    let mut tokens = 0u64;
    let mut pending = Pending::default();
    for first in (0..docs).step_by(READ_BATCH) {
        let ids: Vec<DocId> = (first..(first + READ_BATCH as u32).min(docs)).map(DocId).collect();
        let batch = store.read_batch(&ids)?;
        for (i, id) in ids.iter().enumerate() {
            codec.decode(batch.record(i).tokens, &mut pending.rows);
            pending.docs.push((id.0, pending.rows.len() / dim));
        }
        if pending.rows.len() >= ASSIGN_TOKENS * dim || ids.last().is_some_and(|l| l.0 + 1 == docs) {
            tokens += (pending.rows.len() / dim) as u64;
            pending.assign(q, &leaves, threads, &mut gaps);
        }
        bar.inc(ids.len() as u64);
    }
    bar.finish_and_clear();
    Ok((gaps, tokens))
}

/// Decoded documents waiting for their assignment: their rows, and each one's id and end row.
#[derive(Default)]
struct Pending {
    rows: Vec<f32>,
    docs: Vec<(u32, usize)>,
    assigned: Vec<u32>,
    distinct: Vec<u32>,
}

impl Pending {
    fn assign(&mut self, q: &Quantizer, leaves: &[f32], threads: usize, gaps: &mut [Gaps]) {
        let dim = q.dim;
        let n = self.rows.len() / dim;
        let per = n.div_ceil(threads).max(1);
        self.assigned.resize(n, 0);
        std::thread::scope(|scope| {
            for (part, out) in self.rows.chunks(per * dim).zip(self.assigned.chunks_mut(per)) {
                scope.spawn(move || {
                    let mut found = Vec::new();
                    q.assign_rows(part, leaves, &mut found);
                    out.copy_from_slice(&found);
                });
            }
        });
        let mut begin = 0;
        for &(id, end) in &self.docs {
            self.distinct.clear();
            self.distinct.extend_from_slice(&self.assigned[begin..end]);
            self.distinct.sort_unstable();
            self.distinct.dedup();
            for &leaf in &self.distinct {
                gaps[leaf as usize].push(id);
            }
            begin = end;
        }
        self.rows.clear();
        self.docs.clear();
    }
}

/// Packs every leaf's list into `token_lists.bin` (body page-aligned and padded to whole pages,
/// for the direct reader); the directory and the postings count.
fn write_lists(dir: &Path, gaps: Vec<Gaps>) -> Result<(Vec<ListEntry>, u64)> {
    let path = dir.join(FileKind::TokenLists.file_name());
    let mut out = BodyWriter::create(&path, FileKind::TokenLists, PAGE_BYTES as u64)?;
    let mut entries = Vec::with_capacity(gaps.len());
    let mut postings = 0u64;
    let mut bytes = Vec::new();
    for list in gaps {
        let ids = list.ids();
        bytes.clear();
        lists::encode(&ids, &mut bytes);
        let offset = out.position();
        out.write(&bytes)?;
        postings += ids.len() as u64;
        entries.push(ListEntry {
            offset,
            bytes: bytes.len() as u32,
            count: ids.len() as u32,
            crc: crc32c::crc32c(&bytes),
        });
    }
    let tail = out.position() % PAGE_BYTES as u64;
    if tail != 0 {
        out.write(&vec![0u8; (PAGE_BYTES as u64 - tail) as usize])?;
    }
    out.finish()?;
    Ok((entries, postings))
}
