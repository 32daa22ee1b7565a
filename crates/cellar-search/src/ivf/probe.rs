//! Searching the IVF: the query's nearest clusters first, each cluster's codes scored with the
//! RaBitQ estimator into an oversampled shortlist, then (optionally) the shortlist rescored with
//! the full-precision vectors — only the candidates whose error bound lets them still reach the
//! top `depth`.
//!
//! A [`Probe`] advances in steps (`scan(n)` reads the next `n` posting blocks in one batch and
//! scores them), so the pipeline can act between steps: the prefetcher reads the current best
//! candidates' token records while the remaining clusters are probed.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::path::Path;
use std::time::Instant;

use cellar_core::format::fsio::{open_checked, read_small_file, verify_body};
use cellar_core::format::FileKind;
use cellar_core::io::{Extent, FileSlice, ReadStats, ReaderKind, ReaderOptions};
use cellar_core::kernels::{dot_f16, Isa};
use cellar_core::stats::ms_since;
use cellar_core::{CellarError, DocId, Result};
use serde::Serialize;

use super::layout::{CentroidsFile, ClusterEntry, PostingView};
use super::rabitq::QueryCode;
use super::rotation::{dot, Rotation};
use super::IvfConfig;
use crate::scored::Scored;

/// An open IVF: centroids, rotation and cluster table in RAM; blocks and vectors on disk.
pub struct Ivf {
    config: IvfConfig,
    rotation: Rotation,
    centroids: Vec<f32>,
    rotated_centroids: Vec<f32>,
    half_norms: Vec<f32>,
    table: Vec<ClusterEntry>,
    words: usize,
    postings: FileSlice,
    vectors: FileSlice,
    isa: Isa,
}

/// A rescored shortlist holds at least this many candidates: with 1-bit codes of 384-d vectors,
/// a shortlist of 2 x 10 finds 0.68 of the true top 10 on the synthetic study's collection, one of
/// 100 finds 0.99, for a few more reads of 768 bytes.
pub const MIN_RESCORED_SHORTLIST: usize = 100;

/// Documents of a living index beyond the IVF's files: written ones joined to the clusters by
/// their nearest centroid (scored exactly as the probe visits their cluster) and deleted ones
/// (skipped wherever the probe meets them).
pub trait LiveMembers: Sync {
    /// Whether the probe must skip document `id` (deleted, or excluded by a filter).
    fn excluded(&self, id: u32) -> bool;
    /// Each written document joined to `cluster`, with its pooled vector (f16 little-endian).
    fn visit(&self, cluster: u32, found: &mut dyn FnMut(DocId, &[u8]));
}

/// What one probe does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbeParams {
    pub nprobe: usize,
    /// Documents wanted from the probe.
    pub depth: usize,
    /// The shortlist holds `ceil(depth * oversample)` candidates (at least
    /// [`MIN_RESCORED_SHORTLIST`] when rescoring).
    pub oversample: f32,
    pub rescore: bool,
}

/// What one probe cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ProbeStats {
    pub clusters: usize,
    pub codes: usize,
    /// Shortlisted candidates rescored with their full vector.
    pub rescored: usize,
    pub read_calls: u64,
    pub bytes_read: u64,
    pub probe_ms: f64,
    pub rescore_ms: f64,
}

impl ProbeStats {
    fn add_io(&mut self, io: ReadStats) {
        self.read_calls += io.read_calls;
        self.bytes_read += io.bytes;
    }
}

impl Ivf {
    /// Opens `index_dir/ivf/` if it exists, checking it against the index's documents and model
    /// dimension (and that none of its files is missing: [`IvfConfig::load`]). Blocks and vectors are read with `reader`'s kind.
    pub fn open(index_dir: &Path, docs: u64, dim: usize, reader: &ReaderOptions) -> Result<Option<Ivf>> {
        super::build::recover_interrupted_swap(index_dir)?;
        let Some(config) = IvfConfig::load(index_dir)? else {
            return Ok(None);
        };
        config.check_files(index_dir)?;
        let dir = IvfConfig::dir(index_dir);
        let path = dir.join(FileKind::IvfCentroids.file_name());
        let (_, body) = read_small_file(&path, FileKind::IvfCentroids)?;
        let file = CentroidsFile::decode(&path, &body)?;
        if file.dim != dim || config.dim != dim {
            return Err(CellarError::WrongDimension { expected: dim, received: file.dim });
        }
        // A retrained IVF holds the documents alive when it was trained, written ones included.
        let members = match config.covers {
            Some(covers) if u64::from(covers) < docs => {
                let detail =
                    format!("ivf.json says it covers ids below {covers}, fewer than the build's {docs}");
                return Err(CellarError::corrupted(&path, 0, detail));
            }
            Some(_) => config.docs,
            None => docs,
        };
        if file.docs != members || config.docs != members || file.table.len() != config.clusters {
            return Err(CellarError::corrupted(&path, 0, format!(
                    "the IVF holds {} documents in {} clusters; it should hold {members} and ivf.json says {} clusters",
                    file.docs,
                    file.table.len(),
                    config.clusters
                )));
        }
        let rotation = Rotation::from_rows(dim, file.rotation);
        let mut rotated_centroids = vec![0f32; file.centroids.len()];
        for (c, out) in file.centroids.chunks_exact(dim).zip(rotated_centroids.chunks_exact_mut(dim)) {
            rotation.rotate(c, out);
        }
        let half_norms = cellar_core::cluster::half_norms(&file.centroids, dim);
        Ok(Some(Ivf {
            postings: open_body(&dir, FileKind::IvfPostings, &postings_reader(&dir, reader))?,
            vectors: open_body(&dir, FileKind::IvfVectors, reader)?,
            config,
            rotation,
            centroids: file.centroids,
            rotated_centroids,
            half_norms,
            table: file.table,
            words: file.words,
            isa: Isa::detected(),
        }))
    }

    pub fn config(&self) -> &IvfConfig {
        &self.config
    }

    pub fn clusters(&self) -> usize {
        self.table.len()
    }

    /// `Corrupted` unless `bytes`, cluster `cluster`'s posting block, match the table's checksum.
    fn check_block(&self, cluster: usize, bytes: &[u8]) -> Result<()> {
        let entry = &self.table[cluster];
        if crc32c::crc32c(bytes) != entry.block_crc {
            return Err(CellarError::corrupted(
                self.postings.path(),
                entry.postings_offset,
                format!("posting block of cluster {cluster} fails its checksum"),
            ));
        }
        Ok(())
    }

    /// `Corrupted` unless `bytes`, document `id`'s vector read at `offset`, match `crc`.
    fn check_vector(&self, id: u32, crc: u32, offset: u64, bytes: &[u8]) -> Result<()> {
        if crc32c::crc32c(bytes) != crc {
            return Err(CellarError::corrupted(
                self.vectors.path(),
                offset,
                format!("the vector of document {id} fails its checksum"),
            ));
        }
        Ok(())
    }

    /// Reads every posting block against the table's checksum and every vector against its
    /// block's, then both files' bodies against their headers (`cellar inspect --verify`; the
    /// centroids were checked at open). Returns the clusters and the vectors checked.
    pub fn verify(&self) -> Result<(usize, usize)> {
        let row = 2 * self.config.dim;
        let mut vectors = 0;
        for (cluster, entry) in self.table.iter().enumerate() {
            let extent = Extent { offset: entry.postings_offset, len: entry.block_len(self.words) };
            let blocks = self.postings.read_batch(&[extent])?;
            let block = PostingView { bytes: blocks.get(0), n: entry.count as usize, words: self.words };
            self.check_block(cluster, block.bytes)?;
            if block.n == 0 {
                continue;
            }
            let extents: Vec<Extent> = (0..block.n)
                .map(|slot| Extent { offset: entry.vectors_offset + (slot * row) as u64, len: row })
                .collect();
            let rows = self.vectors.read_batch(&extents)?;
            for (slot, extent) in extents.iter().enumerate() {
                self.check_vector(block.id(slot), block.vector_crc(slot), extent.offset, rows.get(slot))?;
            }
            vectors += block.n;
        }
        for (kind, path) in
            [(FileKind::IvfPostings, self.postings.path()), (FileKind::IvfVectors, self.vectors.path())]
        {
            let (file, header) = open_checked(path, kind)?;
            verify_body(&file, path, &header)?;
        }
        Ok((self.table.len(), vectors))
    }

    /// Bytes the IVF holds in RAM (centroids twice, rotation, table, and the posting blocks and
    /// vectors where they are read from RAM).
    pub fn ram_bytes(&self) -> usize {
        4 * (self.centroids.len() + self.rotated_centroids.len() + self.half_norms.len())
            + 4 * self.rotation.rows().len()
            + self.table.len() * std::mem::size_of::<ClusterEntry>()
            + (self.postings.ram_bytes() + self.vectors.ram_bytes()) as usize
    }

    /// How the posting blocks are read: from RAM when the file is at most
    /// [`POSTINGS_IN_RAM_MAX`] bytes, else with the index's reader.
    pub fn postings_reader(&self) -> ReaderKind {
        self.postings.kind()
    }

    /// The cluster a new document joins: its pooled vector's nearest centroid.
    /// The internal ids below which documents are the IVF's own members (or were deleted
    /// before it was trained); written documents from there on join it by assignment.
    pub fn covers(&self) -> u32 {
        self.config.covers.unwrap_or(self.config.docs as u32)
    }

    pub fn assign(&self, pooled: &[f32]) -> u32 {
        cellar_core::cluster::nearest(pooled, &self.centroids, &self.half_norms) as u32
    }

    /// The squared distance from `pooled` to its nearest centroid: how well the clusters cover
    /// it (the IVF's quantization error).
    pub fn quantization_error(&self, pooled: &[f32]) -> f32 {
        cellar_core::cluster::nearest_and_error(pooled, &self.centroids, &self.half_norms).1
    }

    /// Starts a probe of `query` (a pooled vector of the index's dimension, checked by the
    /// caller): orders the clusters nearest first and keeps the first `params.nprobe`.
    pub fn probe(&self, query: &[f32], params: ProbeParams) -> Probe<'_> {
        self.probe_live(query, params, None)
    }

    /// [`Ivf::probe`] of a living index: `live`'s written documents join the clusters probed and
    /// its deleted ones are skipped.
    pub fn probe_live<'a>(
        &'a self,
        query: &[f32],
        params: ProbeParams,
        live: Option<&'a dyn LiveMembers>,
    ) -> Probe<'a> {
        let dim = self.config.dim;
        let mut order: Vec<(usize, f32, f32)> = self
            .centroids
            .chunks_exact(dim)
            .enumerate()
            .map(|(j, c)| {
                let q_dot_c = dot(query, c);
                (j, q_dot_c, q_dot_c - self.half_norms[j])
            })
            .collect();
        let nprobe = params.nprobe.min(order.len());
        if nprobe < order.len() {
            order.select_nth_unstable_by(nprobe, |a, b| b.2.total_cmp(&a.2));
            order.truncate(nprobe);
        }
        order.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        let mut rotated = vec![0f32; dim];
        self.rotation.rotate(query, &mut rotated);
        let oversampled = (params.depth as f32 * params.oversample).ceil() as usize;
        let floor = if params.rescore { MIN_RESCORED_SHORTLIST } else { 0 };
        let keep = oversampled.max(params.depth).max(floor);
        Probe {
            ivf: self,
            query: query.to_vec(),
            rotated,
            order: order.into_iter().map(|(j, q_dot_c, _)| (j, q_dot_c)).collect(),
            next: 0,
            keep,
            params,
            shortlist: BinaryHeap::with_capacity(keep + 1),
            stats: ProbeStats::default(),
            code_words: Vec::new(),
            live,
            live_hits: Vec::new(),
        }
    }
}

/// Posting files up to this size are held in RAM whatever the reader: every query probes them
/// right after its encoding, and through the direct reader each probe paid a batch of reads
/// (6.7 calls a SciFact query, +0.41 ms unloaded and 1.1-1.7 ms under load;
/// bench/results/first-stage-direct.md). Postings take about 75 bytes a document at 384
/// dimensions (SciFact: 0.38 MiB for 5,183), so 16 MiB covers about 220,000 documents; larger
/// collections keep theirs on disk.
pub const POSTINGS_IN_RAM_MAX: u64 = 16 << 20;

/// The reader the posting blocks in `dir` are read with: RAM for a file of at most
/// [`POSTINGS_IN_RAM_MAX`] bytes, else `reader`.
fn postings_reader(dir: &Path, reader: &ReaderOptions) -> ReaderOptions {
    let len = std::fs::metadata(dir.join(FileKind::IvfPostings.file_name())).map_or(u64::MAX, |m| m.len());
    ReaderOptions { kind: postings_kind(len, reader.kind), ..reader.clone() }
}

/// [`postings_reader`]'s choice for a posting file of `len` bytes and an index read with `kind`.
fn postings_kind(len: u64, kind: ReaderKind) -> ReaderKind {
    if len <= POSTINGS_IN_RAM_MAX {
        ReaderKind::Ram
    } else {
        kind
    }
}

/// `kind`'s file in `dir`, its header checked (magic, version, kind, length) before its body is
/// opened for block reads; each block's own checksum is checked when it is read.
fn open_body(dir: &Path, kind: FileKind, reader: &ReaderOptions) -> Result<FileSlice> {
    let path = dir.join(kind.file_name());
    open_checked(&path, kind)?;
    FileSlice::open(&path, reader)
}

/// A shortlisted document: its estimate, error bound and where its full vector lies.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    estimate: f32,
    bound: f32,
    id: u32,
    cluster: u32,
    slot: u32,
    vector_crc: u32,
}

/// Heap order: the worst estimate on top (then the highest id), so it is the one evicted.
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        other.estimate.total_cmp(&self.estimate).then(self.id.cmp(&other.id))
    }
}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}

/// One query's walk through its nearest clusters.
pub struct Probe<'a> {
    ivf: &'a Ivf,
    query: Vec<f32>,
    rotated: Vec<f32>,
    /// (cluster, <q, c>), nearest first.
    order: Vec<(usize, f32)>,
    next: usize,
    keep: usize,
    params: ProbeParams,
    shortlist: BinaryHeap<Candidate>,
    stats: ProbeStats,
    /// One member's code words, reused across members and blocks.
    code_words: Vec<u64>,
    live: Option<&'a dyn LiveMembers>,
    /// Written documents of the clusters probed, scored exactly.
    live_hits: Vec<Scored>,
}

impl Probe<'_> {
    /// Clusters this probe visits in all.
    pub fn total(&self) -> usize {
        self.order.len()
    }

    /// Clusters visited so far.
    pub fn probed(&self) -> usize {
        self.next
    }

    /// Reads the next `n` clusters' posting blocks in one batch and scores their codes.
    pub fn scan(&mut self, n: usize) -> Result<()> {
        let start = Instant::now();
        let end = (self.next + n).min(self.order.len());
        let clusters: Vec<(usize, f32)> = self.order[self.next..end].to_vec();
        let words = self.ivf.words;
        let extents: Vec<Extent> = clusters
            .iter()
            .map(|(j, _)| {
                let e = &self.ivf.table[*j];
                Extent { offset: e.postings_offset, len: e.block_len(words) }
            })
            .collect();
        let batch = self.ivf.postings.read_batch(&extents)?;
        self.stats.add_io(batch.stats());
        for (i, (cluster, q_dot_c)) in clusters.iter().enumerate() {
            self.score_block(*cluster, *q_dot_c, batch.get(i))?;
        }
        self.next = end;
        self.stats.clusters = end;
        self.stats.probe_ms += ms_since(start);
        Ok(())
    }

    fn score_block(&mut self, cluster: usize, q_dot_c: f32, bytes: &[u8]) -> Result<()> {
        let entry = self.ivf.table[cluster];
        self.ivf.check_block(cluster, bytes)?;
        let dim = self.ivf.config.dim;
        let words = self.ivf.words;
        let block = PostingView { bytes, n: entry.count as usize, words };
        let code = QueryCode::new(
            &self.rotated,
            &self.ivf.rotated_centroids[cluster * dim..(cluster + 1) * dim],
            q_dot_c,
        );
        let mut words_buf = std::mem::take(&mut self.code_words);
        words_buf.resize(words, 0);
        for slot in 0..block.n {
            if self.live.is_some_and(|live| live.excluded(block.id(slot))) {
                continue;
            }
            block.code_into(slot, &mut words_buf);
            let (estimate, bound) = code.estimate(&words_buf, &block.factors(slot));
            let candidate = Candidate {
                estimate,
                bound,
                id: block.id(slot),
                cluster: cluster as u32,
                slot: slot as u32,
                vector_crc: block.vector_crc(slot),
            };
            if self.shortlist.len() < self.keep {
                self.shortlist.push(candidate);
            } else if self.shortlist.peek().is_some_and(|worst| candidate < *worst) {
                self.shortlist.pop();
                self.shortlist.push(candidate);
            }
        }
        self.code_words = words_buf;
        self.stats.codes += block.n;
        if let Some(live) = self.live {
            let (isa, query, hits) = (self.ivf.isa, &self.query, &mut self.live_hits);
            // A retrained IVF holds the written documents it covers among its own members.
            let covers = self.ivf.covers();
            live.visit(cluster as u32, &mut |id, row| {
                if id.0 >= covers {
                    hits.push(Scored { id, score: dot_f16(isa, query, row) })
                }
            });
        }
        Ok(())
    }

    /// The best `n` documents so far, by estimate.
    pub fn current(&self, n: usize) -> Vec<Scored> {
        let mut sorted: Vec<Candidate> = self.shortlist.iter().copied().collect();
        sorted.sort();
        let base = sorted.iter().take(n).map(|c| Scored { id: DocId(c.id), score: c.estimate }).collect();
        self.with_live(base, n)
    }

    /// `hits` joined by the written documents scored so far: the best `n`.
    fn with_live(&self, mut hits: Vec<Scored>, n: usize) -> Vec<Scored> {
        if self.live_hits.is_empty() {
            return hits;
        }
        hits.extend_from_slice(&self.live_hits);
        hits.sort_by(crate::topk::better);
        hits.truncate(n);
        hits
    }

    /// Scans what is left, then returns the top `depth` documents: rescored with their full
    /// vectors when asked (exact scores), otherwise by estimate.
    pub fn finish(mut self) -> Result<(Vec<Scored>, ProbeStats)> {
        let left = self.order.len() - self.next;
        if left > 0 {
            self.scan(left)?;
        }
        let depth = self.params.depth;
        let mut sorted: Vec<Candidate> = std::mem::take(&mut self.shortlist).into_vec();
        sorted.sort();
        if !self.params.rescore {
            let hits =
                sorted.iter().take(depth).map(|c| Scored { id: DocId(c.id), score: c.estimate }).collect();
            return Ok((self.with_live(hits, depth), self.stats));
        }
        let start = Instant::now();
        let hits = self.rescore(&sorted)?;
        self.stats.rescore_ms = ms_since(start);
        Ok((self.with_live(hits, depth), self.stats))
    }

    /// Exact scores for the candidates that can still reach the top `depth`: those whose upper
    /// bound reaches the `depth`-th best lower bound.
    fn rescore(&mut self, sorted: &[Candidate]) -> Result<Vec<Scored>> {
        let depth = self.params.depth;
        let mut lower: Vec<f32> = sorted.iter().map(|c| c.estimate - c.bound).collect();
        let threshold = if lower.len() > depth {
            let (_, nth, _) = lower.select_nth_unstable_by(depth - 1, |a, b| b.total_cmp(a));
            *nth
        } else {
            f32::NEG_INFINITY
        };
        let chosen: Vec<&Candidate> = sorted.iter().filter(|c| c.estimate + c.bound >= threshold).collect();
        let dim = self.ivf.config.dim;
        let row = dim * 2;
        let extents: Vec<Extent> = chosen
            .iter()
            .map(|c| Extent {
                offset: self.ivf.table[c.cluster as usize].vectors_offset + c.slot as u64 * row as u64,
                len: row,
            })
            .collect();
        let batch = self.ivf.vectors.read_batch(&extents)?;
        self.stats.add_io(batch.stats());
        self.stats.rescored = chosen.len();
        let mut hits = Vec::with_capacity(chosen.len());
        for (i, c) in chosen.iter().enumerate() {
            let bytes = batch.get(i);
            self.ivf.check_vector(c.id, c.vector_crc, extents[i].offset, bytes)?;
            hits.push(Scored { id: DocId(c.id), score: dot_f16(self.ivf.isa, &self.query, bytes) });
        }
        hits.sort_by(crate::topk::better);
        hits.truncate(depth);
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posting_files_up_to_the_limit_are_read_from_ram_and_larger_ones_with_the_index_reader() {
        for kind in [ReaderKind::Mmap, ReaderKind::Direct, ReaderKind::Ram] {
            assert_eq!(postings_kind(0, kind), ReaderKind::Ram);
            assert_eq!(postings_kind(POSTINGS_IN_RAM_MAX, kind), ReaderKind::Ram);
            assert_eq!(postings_kind(POSTINGS_IN_RAM_MAX + 1, kind), kind);
        }
    }
}
