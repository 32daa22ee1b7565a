//! `build_tokens`: the token stage of an index from its store, in three streaming steps under
//! the index's exclusive lock, built aside in `tokens.cellar-building/` and swapped in:
//!
//! 1. a sample of whole documents' tokens (evenly spread, at most `MAX_SAMPLE_BYTES` as f32)
//!    trains the quantizer (`quantizer::Quantizer::train`);
//! 2. every document's records are read in batches, decoded, and each token assigned to its
//!    leaf on every core, with its residual's code (`codes`); the postings `(leaf, doc, code)`
//!    are sorted in runs of at most `RUN_BYTES`, spilled to temporary files when the collection
//!    is larger, and merged;
//! 3. each leaf's postings are packed (ids by `lists`, then codes, then factors) into
//!    `token_lists.bin`, then `token_centroids.bin` and `tokens.json`, the commit point, are
//!    written.
//!
//! RAM: the sample (at most 256 MiB, freed before the pass), the leaves as f32 (4·dim bytes
//! each), one run of postings and its sort order (about 1.6 x `RUN_BYTES`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
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
use super::{
    codes, lists, TokenDefaults, TokensBuildReport, TokensConfig, TOKENS_DIR, TOKENS_FORMAT_VERSION,
};
use crate::config::IndexConfig;
use crate::names::VECTORS_DIR;

pub(crate) const BUILDING_DIR: &str = "tokens.cellar-building";
pub(crate) const OLD_DIR: &str = "tokens.cellar-old";
/// Most bytes of sample tokens held as f32 for training.
const MAX_SAMPLE_BYTES: usize = 256 << 20;
/// Sample tokens asked for per leaf (fewer where `MAX_SAMPLE_BYTES` binds).
const SAMPLE_PER_LEAF: usize = 8;
/// Documents read at once.
const READ_BATCH: usize = 256;
/// Decoded tokens assigned at once (at 384 dimensions 48 MiB of f32).
const ASSIGN_TOKENS: usize = 32_768;
/// Bytes of postings sorted in RAM before a run is spilled to a temporary file.
const RUN_BYTES: usize = 192 << 20;

/// What a token-stage build may set.
#[derive(Clone, Debug)]
pub struct TokensBuildOptions {
    /// Leaves of the quantizer; 0: `quantizer::leaves_for` (4·√tokens, a power of two).
    pub leaves: usize,
    pub seed: u64,
    pub defaults: TokenDefaults,
    pub progress: bool,
    /// Bytes of postings sorted in RAM before a run is spilled to a temporary file.
    pub run_bytes: usize,
}

impl Default for TokensBuildOptions {
    fn default() -> Self {
        TokensBuildOptions {
            leaves: 0,
            seed: 42,
            defaults: TokenDefaults::default(),
            progress: false,
            run_bytes: RUN_BYTES,
        }
    }
}

/// Documents a token stage is built over: a store, the records of it to read, and the internal
/// id each has in the index.
pub(crate) struct Source<'a> {
    pub store: &'a VectorStore,
    /// (record in `store`, internal id); internal ids ascend across a build's sources.
    pub docs: Vec<(DocId, u32)>,
}

/// Builds (or rebuilds) `index_dir/tokens/` over the build's documents.
pub fn build_tokens(index_dir: &Path, options: &TokensBuildOptions) -> Result<TokensConfig> {
    let _lock = crate::lock::exclusive(index_dir)?;
    let index = IndexConfig::load(index_dir)?;
    let store = VectorStore::open(&index_dir.join(VECTORS_DIR), &ReaderOptions::new(ReaderKind::Mmap))?;
    let docs = store.len();
    let sources = [Source { store: &store, docs: (0..docs as u32).map(|i| (DocId(i), i)).collect() }];
    let config = build_over(index_dir, &sources, index.build.tokens.max(docs as u64), docs as u32, options)?;
    crate::ivf::build::swap_dir_in(index_dir, TOKENS_DIR, OLD_DIR, &index_dir.join(BUILDING_DIR))?;
    Ok(config)
}

/// Builds a token stage over `sources` in `index_dir/tokens.cellar-building/`, covering the
/// internal ids below `covers` (those the sources leave out were deleted); `tokens_total` (the
/// tokens the sources hold, or a bound) sizes the quantizer. The caller swaps it in.
pub(crate) fn build_over(
    index_dir: &Path,
    sources: &[Source<'_>],
    tokens_total: u64,
    covers: u32,
    options: &TokensBuildOptions,
) -> Result<TokensConfig> {
    let docs: usize = sources.iter().map(|s| s.docs.len()).sum();
    if docs == 0 {
        return Err(CellarError::InvalidInput("the index holds no documents: nothing to quantize".into()));
    }
    if options.defaults.nprobe == 0 || options.defaults.route == 0 || options.defaults.impute == Some(0) {
        return Err(CellarError::InvalidInput(
            "the token stage's nprobe, route and impute must be at least 1".into(),
        ));
    }
    let most = crate::request::MAX_CANDIDATES;
    if let Some(depth) = options.defaults.depth.filter(|d| *d == 0 || *d > most) {
        return Err(CellarError::InvalidInput(format!(
            "the token stage's depth must be between 1 and {most}, got {depth}"
        )));
    }
    let dim = sources[0].store.dim();
    let start = Instant::now();
    let mut report = TokensBuildReport::default();
    let tokens_total = tokens_total.max(docs as u64);
    let most = MAX_SAMPLE_BYTES / (4 * dim);
    let wanted_leaves =
        if options.leaves > 0 { options.leaves } else { leaves_for(tokens_total, usize::MAX) };
    let sample = read_sample(sources, tokens_total, (wanted_leaves * SAMPLE_PER_LEAF).min(most))?;
    let points = Points { data: &sample, dim };
    let k = wanted_leaves.min(points.len());
    let quantizer = Quantizer::train(&points, k, options.seed);
    report.sample_tokens = points.len();
    report.mean_error = mean_error(&quantizer, &sample);
    drop(sample);
    report.train_secs = start.elapsed().as_secs_f64();

    let assign_start = Instant::now();
    let building = index_dir.join(BUILDING_DIR);
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(&building).at(&building)?;
    let mut runs = Runs::new(&building, dim, options.run_bytes.max(1));
    let tokens = assign_all(sources, docs, &quantizer, &mut runs, options.progress)?;
    report.assign_secs = assign_start.elapsed().as_secs_f64();

    let write_start = Instant::now();
    let (entries, postings) = write_lists(&building, runs, quantizer.leaves(), dim)?;
    let file = CentroidsFile { quantizer, docs: covers, tokens, lists: entries };
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
        docs: u64::from(covers),
        tokens,
        groups: file.quantizer.groups(),
        leaves,
        seed: options.seed,
        search: TokenDefaults { nprobe: options.defaults.nprobe.min(leaves), ..options.defaults },
        build: report,
    };
    config.save(&building)?;
    Ok(config)
}

/// About `wanted` tokens: every token of documents taken at an even stride over the sources'
/// documents, in order.
fn read_sample(sources: &[Source<'_>], tokens_total: u64, wanted: usize) -> Result<Vec<f32>> {
    let docs: usize = sources.iter().map(|s| s.docs.len()).sum();
    let dim = sources[0].store.dim();
    let stride = (tokens_total as usize).div_ceil(wanted.max(1)).clamp(1, docs);
    let mut out = Vec::with_capacity(wanted.max(1) * dim);
    let mut first = 0;
    'sources: for source in sources {
        // The stride runs on across sources: the next pick's position in this one.
        let skip = (first as usize).next_multiple_of(stride) - first as usize;
        let ids: Vec<DocId> = source.docs.iter().skip(skip).step_by(stride).map(|d| d.0).collect();
        first += source.docs.len() as u64;
        let codec = source.store.codec();
        for chunk in ids.chunks(READ_BATCH) {
            let batch = source.store.read_batch(chunk)?;
            for i in 0..chunk.len() {
                codec.decode(batch.record(i).tokens, &mut out);
            }
            if out.len() >= wanted * dim {
                break 'sources;
            }
        }
    }
    out.truncate(wanted.max(1) * dim);
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

/// Every token's posting `(leaf, doc, residual code)`, made as the store is read and kept in
/// sorted runs: in RAM up to `RUN_BYTES`, spilled to temporary files in `dir` beyond that and
/// merged at the end, so the build's RAM does not grow with the collection.
struct Runs {
    dir: PathBuf,
    /// Bytes of one record: leaf u32, doc u32, the code and its factor.
    record: usize,
    buf: Vec<u8>,
    files: Vec<PathBuf>,
    limit: usize,
}

impl Runs {
    fn new(dir: &Path, dim: usize, limit: usize) -> Runs {
        let record = 8 + codes::posting_bytes(dim);
        Runs { dir: dir.to_path_buf(), record, buf: Vec::new(), files: Vec::new(), limit }
    }

    fn push(&mut self, leaf: u32, doc: u32, code: &[u8], factor: u16) -> Result<()> {
        self.buf.extend_from_slice(&leaf.to_le_bytes());
        self.buf.extend_from_slice(&doc.to_le_bytes());
        self.buf.extend_from_slice(code);
        self.buf.extend_from_slice(&factor.to_le_bytes());
        if self.buf.len() >= self.limit {
            self.spill()?;
        }
        Ok(())
    }

    /// The buffer's records in (leaf, doc, arrival) order.
    fn sorted(&self) -> Vec<u32> {
        let n = self.buf.len() / self.record;
        let key = |i: u32| {
            let at = i as usize * self.record;
            let leaf = u32::from_le_bytes(self.buf[at..at + 4].try_into().expect("4 bytes"));
            let doc = u32::from_le_bytes(self.buf[at + 4..at + 8].try_into().expect("4 bytes"));
            (u64::from(leaf) << 32 | u64::from(doc), i)
        };
        let mut order: Vec<(u64, u32)> = (0..n as u32).map(key).collect();
        order.sort_unstable();
        order.into_iter().map(|(_, i)| i).collect()
    }

    fn spill(&mut self) -> Result<()> {
        let path = self.dir.join(format!("run-{}.tmp", self.files.len()));
        let file = std::fs::File::create(&path).at(&path)?;
        let mut out = BufWriter::new(file);
        for i in self.sorted() {
            let at = i as usize * self.record;
            out.write_all(&self.buf[at..at + self.record]).at(&path)?;
        }
        out.flush().at(&path)?;
        self.files.push(path);
        self.buf.clear();
        Ok(())
    }

    /// Calls `each(record)` for every record in (leaf, doc) order, then removes the runs.
    fn drain(mut self, mut each: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        if self.files.is_empty() {
            for i in self.sorted() {
                let at = i as usize * self.record;
                each(&self.buf[at..at + self.record])?;
            }
            return Ok(());
        }
        if !self.buf.is_empty() {
            self.spill()?;
        }
        self.buf = Vec::new();
        let mut readers = Vec::with_capacity(self.files.len());
        for path in &self.files {
            readers.push(BufReader::with_capacity(1 << 16, std::fs::File::open(path).at(path)?));
        }
        let mut heads: Vec<Vec<u8>> = vec![vec![0u8; self.record]; readers.len()];
        let mut heap = BinaryHeap::new();
        let key = |r: &[u8]| {
            u64::from(u32::from_le_bytes(r[..4].try_into().expect("4"))) << 32
                | u64::from(u32::from_le_bytes(r[4..8].try_into().expect("4")))
        };
        for (run, reader) in readers.iter_mut().enumerate() {
            if read_record(reader, &mut heads[run], &self.files[run])? {
                heap.push(Reverse((key(&heads[run]), run)));
            }
        }
        while let Some(Reverse((_, run))) = heap.pop() {
            each(&heads[run])?;
            if read_record(&mut readers[run], &mut heads[run], &self.files[run])? {
                heap.push(Reverse((key(&heads[run]), run)));
            }
        }
        for path in &self.files {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }
}

/// Reads one record into `out`; false at the end of the run.
fn read_record(reader: &mut BufReader<std::fs::File>, out: &mut [u8], path: &Path) -> Result<bool> {
    match reader.read_exact(out) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(CellarError::io(path, e)),
    }
}

/// Every token's leaf and residual code, into `runs`; the token count. Records are read
/// `READ_BATCH` documents at a time and assigned once `ASSIGN_TOKENS` tokens wait (split over
/// the cores), so RAM holds at most about `ASSIGN_TOKENS` decoded tokens.
fn assign_all(
    sources: &[Source<'_>],
    docs: usize,
    q: &Quantizer,
    runs: &mut Runs,
    progress: bool,
) -> Result<u64> {
    let dim = q.dim;
    let leaves = q.leaves_f32();
    let bar = if progress { crate::progress::bar(docs as u64, "token lists") } else { ProgressBar::hidden() };
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get()).max(1);
    let mut tokens = 0u64;
    let mut pending = Pending::default();
    for source in sources {
        let codec = source.store.codec();
        for chunk in source.docs.chunks(READ_BATCH) {
            let locals: Vec<DocId> = chunk.iter().map(|d| d.0).collect();
            let batch = source.store.read_batch(&locals)?;
            for (i, (_, id)) in chunk.iter().enumerate() {
                codec.decode(batch.record(i).tokens, &mut pending.rows);
                pending.docs.push((*id, pending.rows.len() / dim));
            }
            if pending.rows.len() >= ASSIGN_TOKENS * dim {
                tokens += (pending.rows.len() / dim) as u64;
                pending.assign(q, &leaves, threads, runs)?;
            }
            bar.inc(chunk.len() as u64);
        }
    }
    tokens += (pending.rows.len() / dim) as u64;
    pending.assign(q, &leaves, threads, runs)?;
    bar.finish_and_clear();
    Ok(tokens)
}

/// Decoded documents waiting for their assignment: their rows, and each one's id and end row.
#[derive(Default)]
struct Pending {
    rows: Vec<f32>,
    docs: Vec<(u32, usize)>,
    assigned: Vec<u32>,
    codes: Vec<u8>,
    factors: Vec<u16>,
}

impl Pending {
    fn assign(&mut self, q: &Quantizer, leaves: &[f32], threads: usize, runs: &mut Runs) -> Result<()> {
        let dim = q.dim;
        let bytes = codes::code_bytes(dim);
        let n = self.rows.len() / dim;
        let per = n.div_ceil(threads).max(1);
        self.assigned.resize(n, 0);
        self.codes.resize(n * bytes, 0);
        self.factors.resize(n, 0);
        std::thread::scope(|scope| {
            let parts = self.rows.chunks(per * dim).zip(self.assigned.chunks_mut(per));
            let outs = self.codes.chunks_mut(per * bytes).zip(self.factors.chunks_mut(per));
            for ((part, out), (codes_out, factors_out)) in parts.zip(outs) {
                scope.spawn(move || {
                    let mut found = Vec::new();
                    q.assign_rows(part, leaves, &mut found);
                    out.copy_from_slice(&found);
                    for (t, token) in part.chunks_exact(dim).enumerate() {
                        let leaf = found[t] as usize;
                        factors_out[t] = codes::encode(
                            token,
                            &leaves[leaf * dim..(leaf + 1) * dim],
                            &mut codes_out[t * bytes..(t + 1) * bytes],
                        );
                    }
                });
            }
        });
        let mut begin = 0;
        for &(id, end) in &self.docs {
            for t in begin..end {
                runs.push(self.assigned[t], id, &self.codes[t * bytes..(t + 1) * bytes], self.factors[t])?;
            }
            begin = end;
        }
        self.rows.clear();
        self.docs.clear();
        Ok(())
    }
}

/// Packs every leaf's postings into `token_lists.bin` (body page-aligned and padded to whole
/// pages, for the direct reader): per leaf its document ids (`lists`), then its codes, then its
/// factors. Returns the directory and the postings count.
fn write_lists(dir: &Path, runs: Runs, leaves: usize, dim: usize) -> Result<(Vec<ListEntry>, u64)> {
    let path = dir.join(FileKind::TokenLists.file_name());
    let mut out = BodyWriter::create(&path, FileKind::TokenLists, PAGE_BYTES as u64)?;
    let mut entries: Vec<ListEntry> = Vec::with_capacity(leaves);
    let bytes = codes::code_bytes(dim);
    let mut list = ListBuf::default();
    let mut current = 0u32;
    let mut postings = 0u64;
    runs.drain(|record| {
        let leaf = u32::from_le_bytes(record[..4].try_into().expect("4 bytes"));
        while current < leaf {
            entries.push(list.write(&mut out)?);
            current += 1;
        }
        list.ids.push(u32::from_le_bytes(record[4..8].try_into().expect("4 bytes")));
        list.codes.extend_from_slice(&record[8..8 + bytes]);
        list.factors.extend_from_slice(&record[8 + bytes..8 + bytes + 2]);
        postings += 1;
        Ok(())
    })?;
    while entries.len() < leaves {
        entries.push(list.write(&mut out)?);
    }
    let tail = out.position() % PAGE_BYTES as u64;
    if tail != 0 {
        out.write(&vec![0u8; (PAGE_BYTES as u64 - tail) as usize])?;
    }
    out.finish()?;
    Ok((entries, postings))
}

/// One leaf's postings while they are gathered.
#[derive(Default)]
struct ListBuf {
    ids: Vec<u32>,
    codes: Vec<u8>,
    factors: Vec<u8>,
    bytes: Vec<u8>,
}

impl ListBuf {
    /// Writes the list, empties it and returns its directory entry.
    fn write(&mut self, out: &mut BodyWriter) -> Result<ListEntry> {
        self.bytes.clear();
        lists::encode(&self.ids, &mut self.bytes);
        self.bytes.extend_from_slice(&self.codes);
        self.bytes.extend_from_slice(&self.factors);
        let entry = ListEntry {
            offset: out.position(),
            bytes: self.bytes.len() as u32,
            count: self.ids.len() as u32,
            crc: crc32c::crc32c(&self.bytes),
        };
        out.write(&self.bytes)?;
        self.ids.clear();
        self.codes.clear();
        self.factors.clear();
        Ok(entry)
    }
}
