//! Builds `ivf/` from an index's `pooled.bin` in two streaming passes, so RAM holds only the
//! training sample, the centroids and 8 bytes per document (its cluster and its slot):
//!
//! 1. train: read a sample of rows, balanced hierarchical k-means → leaf centroids;
//! 2. assign: stream every row (checking the body's checksum on the way), nearest centroid;
//! 3. write: cluster by cluster, read the members' rows back, encode their residuals, append
//!    the posting block (page-aligned) and the f16 vectors.
//!
//! Everything is written under `ivf.cellar-building/` and swapped in at the end; `ivf.json` is
//! the commit point, so an interrupted build leaves the previous IVF (or none), never half of one.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use cellar_core::format::fsio::{sync_dir, write_small_file, BodyWriter};
use cellar_core::format::{FileKind, PAGE_BYTES};
use cellar_core::{CellarError, IoContext, Result};
use half::f16;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::layout::{CentroidsFile, ClusterEntry, PostingBlock};
use super::rabitq::{encode, words_for};
use super::rotation::Rotation;
use super::{IvfBuildReport, IvfConfig, IvfDefaults, Refinement, IVF_DIR, IVF_FORMAT_VERSION};
use crate::config::IndexConfig;
use crate::pooled::open_pooled;
use cellar_core::cluster::{half_norms, hierarchical, nearest_blocked, Points};

const BUILDING_DIR: &str = "ivf.cellar-building";
/// Sample rows per leaf the k-means is trained on at least: at 2M documents and 256 per cluster
/// a sample of 32,768 rows would fit each of 7,800 leaves on 4 rows.
const MIN_SAMPLE_PER_LEAF: usize = 16;
/// Most bytes of sample rows held in RAM for training (as f32): 256 MiB, 524,288 rows at 128
/// dims, which is 16 per leaf up to 8.4M documents of 256 per cluster.
const MAX_SAMPLE_BYTES: usize = 256 << 20;
/// Rows read, decoded and assigned at once (2 MiB of f16 at 128 dims).
const CHUNK_ROWS: usize = 8192;
const OLD_DIR: &str = "ivf.cellar-old";

/// What an IVF build may set.
#[derive(Clone, Debug)]
pub struct IvfBuildOptions {
    /// Target documents per cluster ("a few hundred").
    pub cluster_size: usize,
    /// Rows the k-means is trained on (the only vectors held in RAM).
    pub train_sample: usize,
    pub seed: u64,
    /// Stored query defaults; `nprobe: 0` picks one from the cluster count.
    pub defaults: IvfDefaults,
    pub progress: bool,
}

impl Default for IvfBuildOptions {
    fn default() -> Self {
        IvfBuildOptions {
            cluster_size: 256,
            train_sample: 32_768,
            seed: 42,
            defaults: IvfDefaults {
                nprobe: 0,
                oversample: 2.0,
                rescore: true,
                rescore_before_rerank: false,
                prefetch: false,
                prefetch_step: 0.5,
                hybrid_candidates: DEFAULT_HYBRID_CANDIDATES,
            },
            progress: false,
        }
    }
}

/// IVF candidates the hybrid mode joins to BM25's by default: on SciFact, BM25 top-200 joined by
/// the IVF's top 100 lifts nDCG@10 from 0.722 to 0.728 and Recall@100 from 0.927 to 0.952 at the
/// same alpha and rerank_k, for about half a millisecond of probing.
pub const DEFAULT_HYBRID_CANDIDATES: usize = 100;

/// The default probe count for `clusters` clusters: half of them, at least 4 (all when fewer), at
/// most 64. On SciFact (24 clusters) the dense mode's nDCG@10 is 0.645 at a quarter, 0.699 at half
/// and 0.704 at all of them, while the probe costs well under a millisecond either way.
pub fn default_nprobe(clusters: usize) -> usize {
    clusters.div_ceil(2).clamp(4.min(clusters), 64)
}

/// `pooled.bin` opened for reading rows.
struct PooledRows {
    file: File,
    path: std::path::PathBuf,
    body_offset: u64,
    body_len: u64,
    body_crc: u32,
    dim: usize,
    docs: usize,
    /// The internal id of each row; `None`: row `i` is document `i`.
    ids: Option<Vec<u32>>,
}

impl PooledRows {
    fn open(path: &Path, dim: usize, docs: usize) -> Result<PooledRows> {
        let (file, header) = open_pooled(path, dim, docs as u64)?;
        Ok(PooledRows {
            file,
            path: path.to_path_buf(),
            body_offset: header.body_offset,
            body_len: header.body_len,
            body_crc: header.body_crc32c,
            dim,
            docs,
            ids: None,
        })
    }

    fn id_of(&self, row: u32) -> u32 {
        self.ids.as_ref().map_or(row, |ids| ids[row as usize])
    }

    fn row_bytes(&self) -> usize {
        self.dim * 2
    }

    /// Row `i` as f32, into `out`.
    fn read_row(&self, i: u32, raw: &mut [u8], out: &mut [f32]) -> Result<()> {
        let offset = self.body_offset + i as u64 * self.row_bytes() as u64;
        self.file.read_exact_at(raw, offset).at(&self.path)?;
        decode_f16(raw, out);
        Ok(())
    }
}

fn decode_f16(raw: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(raw.chunks_exact(2)) {
        *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

/// Builds (or rebuilds) the IVF of the index in `index_dir`, holding the index's exclusive lock
/// (`Locked` while the index is open elsewhere).
pub fn build_ivf(index_dir: &Path, options: &IvfBuildOptions) -> Result<IvfConfig> {
    let _lock = crate::lock::exclusive(index_dir)?;
    let index = IndexConfig::load(index_dir)?;
    let (dim, docs) = (index.encoder.model_dim, index.build.docs as usize);
    build_ivf_over(index_dir, &index_dir.join(FileKind::Pooled.file_name()), dim, docs, options)
}

/// Builds `dir/ivf/` over the `docs` rows of `dim` f16 values in the pooled-vectors file `pooled`
/// (a `pooled.bin`, header included): the index's own, or a synthetic one for benchmarks. It
/// takes no lock: an index's IVF is built through [`build_ivf`] or `Index::build`, which hold it.
pub fn build_ivf_over(
    dir: &Path,
    pooled: &Path,
    dim: usize,
    docs: usize,
    options: &IvfBuildOptions,
) -> Result<IvfConfig> {
    build_ivf_rows(dir, PooledRows::open(pooled, dim, docs)?, options, None)
}

/// What a retrain builds: the IVF of the rows of `pooled` (a file in `pooled.bin`'s format), row
/// `i` being document `ids[i]` (ascending), covering ids below `covers`.
pub(crate) fn build_ivf_of(
    dir: &Path,
    pooled: &Path,
    dim: usize,
    ids: Vec<u32>,
    covers: u32,
    options: &IvfBuildOptions,
) -> Result<IvfConfig> {
    let mut rows = PooledRows::open(pooled, dim, ids.len())?;
    rows.ids = Some(ids);
    build_ivf_rows(dir, rows, options, Some(covers))
}

fn build_ivf_rows(
    dir: &Path,
    rows: PooledRows,
    options: &IvfBuildOptions,
    covers: Option<u32>,
) -> Result<IvfConfig> {
    check_options(options)?;
    let (dim, docs) = (rows.dim, rows.docs);
    if docs == 0 {
        return Err(CellarError::InvalidInput("the index holds no documents: nothing to cluster".into()));
    }
    let index_dir = dir;
    let start = Instant::now();
    let mut report = IvfBuildReport::default();
    let rotation = Rotation::random(dim, options.seed);
    let asked = sample_rows(options, docs, dim);
    let sample = asked.min(docs);
    let mut centroids = train(&rows, options, sample)?;
    report.train_secs = start.elapsed().as_secs_f64();
    let assign_start = Instant::now();
    let (mut assignment, mut mean_error) = assign(&rows, &centroids, options.progress)?;
    report.assign_secs = assign_start.elapsed().as_secs_f64();
    if sample < docs {
        // The leaves were fitted on a sample: one Lloyd step over every row moves each to the
        // mean of the rows it holds, then every row is assigned again (two more passes).
        let refine_start = Instant::now();
        let before = mean_error;
        centroids = refine(&rows, centroids, &assignment, options.progress)?;
        (assignment, mean_error) = assign(&rows, &centroids, options.progress)?;
        report.refinement = Some(Refinement {
            secs: refine_start.elapsed().as_secs_f64(),
            mean_error_before: before,
            mean_error_after: mean_error,
        });
    }
    let building = index_dir.join(BUILDING_DIR);
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(&building).at(&building)?;
    let write_start = Instant::now();
    let clusters = centroids.len() / dim;
    let members = group_by_cluster(&assignment, clusters);
    let table = write_clusters(&building, &rows, &centroids, &rotation, &members, options.progress)?;
    let file = CentroidsFile {
        dim,
        docs: docs as u64,
        words: words_for(dim),
        rotation: rotation.rows().to_vec(),
        centroids,
        table,
    };
    write_small_file(
        &building.join(FileKind::IvfCentroids.file_name()),
        FileKind::IvfCentroids,
        &file.encode(),
    )?;
    report.write_secs = write_start.elapsed().as_secs_f64();
    report.total_secs = start.elapsed().as_secs_f64();
    fill_sizes(&mut report, &building, &members);
    let mut defaults = options.defaults;
    if defaults.nprobe == 0 {
        defaults.nprobe = default_nprobe(clusters);
    }
    defaults.nprobe = defaults.nprobe.min(clusters);
    let config = IvfConfig {
        format_version: IVF_FORMAT_VERSION,
        dim,
        docs: docs as u64,
        clusters,
        cluster_size: options.cluster_size,
        train_sample: asked,
        seed: options.seed,
        search: defaults,
        build: report,
        covers,
        drift_baseline: None,
    };
    // A retrained IVF keeps its documents' mean distance to it: the baseline of its drift.
    let config = IvfConfig { drift_baseline: covers.map(|_| mean_error), ..config };
    config.save(&building)?;
    swap_dir_in(index_dir, IVF_DIR, OLD_DIR, &building)?;
    Ok(config)
}

fn check_options(options: &IvfBuildOptions) -> Result<()> {
    if options.cluster_size < 8 || options.cluster_size > 1 << 20 {
        return Err(CellarError::InvalidInput(format!(
            "cluster_size must be between 8 and {}, got {}",
            1 << 20,
            options.cluster_size
        )));
    }
    if options.train_sample < 2 {
        return Err(CellarError::InvalidInput("train_sample must be at least 2".into()));
    }
    super::IvfDefaults::check_prefetch_step(options.defaults.prefetch_step)?;
    if !(options.defaults.oversample >= 1.0 && options.defaults.oversample <= 100.0) {
        return Err(CellarError::InvalidInput(format!(
            "oversample must be within [1, 100], got {}",
            options.defaults.oversample
        )));
    }
    Ok(())
}

/// The sample the k-means asks for (recorded as the IVF's `train_sample`): `train_sample`,
/// raised to `MIN_SAMPLE_PER_LEAF` rows per leaf within `MAX_SAMPLE_BYTES`. It trains on that
/// many rows, or every row of a smaller collection.
fn sample_rows(options: &IvfBuildOptions, docs: usize, dim: usize) -> usize {
    let leaves = docs.div_ceil(options.cluster_size);
    let most = (MAX_SAMPLE_BYTES / (dim.max(1) * 4)).max(options.train_sample);
    options.train_sample.max(leaves * MIN_SAMPLE_PER_LEAF).min(most)
}

/// Reads an evenly spread sample of `sample` rows and clusters it. The target cluster size is
/// scaled to the sample, so the leaves hold about `cluster_size` documents of the whole
/// collection.
fn train(rows: &PooledRows, options: &IvfBuildOptions, sample: usize) -> Result<Vec<f32>> {
    let ids: Vec<u32> = if sample == rows.docs {
        (0..rows.docs as u32).collect()
    } else {
        let mut rng = StdRng::seed_from_u64(options.seed);
        let mut ids: Vec<u32> =
            rand::seq::index::sample(&mut rng, rows.docs, sample).into_iter().map(|i| i as u32).collect();
        ids.sort_unstable();
        ids
    };
    let mut data = vec![0f32; ids.len() * rows.dim];
    let mut raw = vec![0u8; rows.row_bytes()];
    for (row, id) in data.chunks_exact_mut(rows.dim).zip(&ids) {
        rows.read_row(*id, &mut raw, row)?;
    }
    let scaled = (options.cluster_size as f64 * sample as f64 / rows.docs as f64).round().max(1.0) as usize;
    Ok(hierarchical(&Points { data: &data, dim: rows.dim }, scaled, options.seed))
}

/// Streams every row in order, `CHUNK_ROWS` at a time (`f` gets the chunk's first row and its
/// rows as f32), and checks the body's CRC once all are read.
fn stream_rows(rows: &PooledRows, bar: &ProgressBar, mut f: impl FnMut(usize, &[f32])) -> Result<()> {
    let mut file = rows.file.try_clone().at(&rows.path)?;
    file.seek(SeekFrom::Start(rows.body_offset)).at(&rows.path)?;
    let mut reader = BufReader::with_capacity(1 << 20, file.take(rows.body_len));
    let (mut raw, mut values) = (Vec::new(), Vec::new());
    let mut crc = 0u32;
    let mut first = 0;
    while first < rows.docs {
        let n = CHUNK_ROWS.min(rows.docs - first);
        raw.resize(n * rows.row_bytes(), 0);
        reader.read_exact(&mut raw).at(&rows.path)?;
        crc = crc32c::crc32c_append(crc, &raw);
        values.resize(n * rows.dim, 0.0);
        decode_f16(&raw, &mut values);
        f(first, &values);
        first += n;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    if crc != rows.body_crc {
        return Err(CellarError::corrupted(&rows.path, rows.body_offset, "body checksum mismatch"));
    }
    Ok(())
}

/// Each row's nearest centroid and the rows' mean squared distance to theirs; every chunk is
/// split over the cores.
fn assign(rows: &PooledRows, centroids: &[f32], progress: bool) -> Result<(Vec<u32>, f64)> {
    let dim = rows.dim;
    let halves = half_norms(centroids, dim);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut assignment = Vec::with_capacity(rows.docs);
    let mut error_sum = 0f64;
    stream_rows(rows, &bar(rows.docs as u64, "assign", progress), |_, values| {
        let per = (values.len() / dim).div_ceil(threads).max(1) * dim;
        let parts: Vec<(Vec<u32>, f64)> = std::thread::scope(|scope| {
            let handles: Vec<_> = values
                .chunks(per)
                .map(|part| {
                    let halves = &halves;
                    scope.spawn(move || {
                        let mut found = vec![0usize; part.len() / dim];
                        nearest_blocked(part, dim, centroids, halves, &mut found);
                        let mut error = 0f64;
                        let nearest: Vec<u32> = part
                            .chunks_exact(dim)
                            .zip(&found)
                            .map(|(row, &c)| {
                                let centroid = &centroids[c * dim..(c + 1) * dim];
                                error += f64::from(
                                    row.iter().zip(centroid).map(|(a, b)| (a - b) * (a - b)).sum::<f32>(),
                                );
                                c as u32
                            })
                            .collect();
                        (nearest, error)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("an assign thread panicked")).collect()
        });
        for (nearest, error) in parts {
            assignment.extend(nearest);
            error_sum += error;
        }
    })?;
    Ok((assignment, error_sum / rows.docs.max(1) as f64))
}

/// One Lloyd step over every row: each centroid moves to the mean of the rows `assignment`
/// gives it (one that holds none stays where it is).
fn refine(
    rows: &PooledRows,
    mut centroids: Vec<f32>,
    assignment: &[u32],
    progress: bool,
) -> Result<Vec<f32>> {
    let dim = rows.dim;
    let k = centroids.len() / dim;
    let (mut sums, mut counts) = (vec![0f64; k * dim], vec![0u64; k]);
    stream_rows(rows, &bar(rows.docs as u64, "refine", progress), |first, values| {
        for (row, &c) in values.chunks_exact(dim).zip(&assignment[first..]) {
            let c = c as usize;
            counts[c] += 1;
            sums[c * dim..(c + 1) * dim].iter_mut().zip(row).for_each(|(s, v)| *s += f64::from(*v));
        }
    })?;
    for ((centroid, sum), &count) in centroids.chunks_exact_mut(dim).zip(sums.chunks_exact(dim)).zip(&counts)
    {
        if count > 0 {
            centroid.iter_mut().zip(sum).for_each(|(c, s)| *c = (s / count as f64) as f32);
        }
    }
    Ok(centroids)
}

/// Document ids per cluster, ascending (a counting sort: 4 bytes per document).
fn group_by_cluster(assignment: &[u32], clusters: usize) -> Vec<Vec<u32>> {
    let mut members = vec![Vec::new(); clusters];
    for (doc, cluster) in assignment.iter().enumerate() {
        members[*cluster as usize].push(doc as u32);
    }
    members
}

/// Writes every cluster's posting block and vectors; returns the cluster table.
fn write_clusters(
    dir: &Path,
    rows: &PooledRows,
    centroids: &[f32],
    rotation: &Rotation,
    members: &[Vec<u32>],
    progress: bool,
) -> Result<Vec<ClusterEntry>> {
    let dim = rows.dim;
    let words = words_for(dim);
    let page = PAGE_BYTES as u64;
    let mut postings =
        BodyWriter::create(&dir.join(FileKind::IvfPostings.file_name()), FileKind::IvfPostings, page)?;
    let mut vectors =
        BodyWriter::create(&dir.join(FileKind::IvfVectors.file_name()), FileKind::IvfVectors, page)?;
    let bar = bar(rows.docs as u64, "write", progress);
    let (mut raw, mut row, mut scratch) = (vec![0u8; rows.row_bytes()], vec![0f32; dim], Vec::new());
    let mut table = Vec::with_capacity(members.len());
    for (cluster, ids) in members.iter().enumerate() {
        let centroid = &centroids[cluster * dim..(cluster + 1) * dim];
        let mut block = PostingBlock { codes: vec![0; ids.len() * words], ..PostingBlock::default() };
        let vectors_offset = vectors.position();
        for (slot, &id) in ids.iter().enumerate() {
            rows.read_row(id, &mut raw, &mut row)?;
            let code = &mut block.codes[slot * words..(slot + 1) * words];
            let factors = encode(&row, centroid, |v, out| rotation.rotate(v, out), &mut scratch, code);
            block.ids.push(rows.id_of(id));
            block.factors.push(factors);
            block.vector_crcs.push(crc32c::crc32c(&raw));
            vectors.write(&raw)?;
        }
        let postings_offset = postings.position();
        let bytes = block.encode();
        postings.write(&bytes)?;
        pad_to_page(&mut postings)?;
        table.push(ClusterEntry {
            postings_offset,
            vectors_offset,
            count: ids.len() as u32,
            block_crc: crc32c::crc32c(&bytes),
        });
        bar.inc(ids.len() as u64);
    }
    pad_to_page(&mut vectors)?;
    postings.finish()?;
    vectors.finish()?;
    bar.finish_and_clear();
    Ok(table)
}

/// Zero bytes up to the next page boundary (files read with `O_DIRECT` are whole pages).
fn pad_to_page(writer: &mut BodyWriter) -> Result<()> {
    let rem = (writer.position() % PAGE_BYTES as u64) as usize;
    if rem != 0 {
        writer.write(&vec![0u8; PAGE_BYTES - rem])?;
    }
    Ok(())
}

fn fill_sizes(report: &mut IvfBuildReport, dir: &Path, members: &[Vec<u32>]) {
    let size = |kind: FileKind| std::fs::metadata(dir.join(kind.file_name())).map(|m| m.len()).unwrap_or(0);
    report.centroids_bytes = size(FileKind::IvfCentroids);
    report.postings_bytes = size(FileKind::IvfPostings);
    report.vectors_bytes = size(FileKind::IvfVectors);
    report.smallest_cluster = members.iter().map(Vec::len).min().unwrap_or(0);
    report.largest_cluster = members.iter().map(Vec::len).max().unwrap_or(0);
}

/// Completes a swap a crash cut between its two renames (`ivf/` moved aside, the new one not yet
/// in place): the old IVF goes back, so the index is never read as one without an IVF.
pub(crate) fn recover_interrupted_swap(index_dir: &Path) -> Result<()> {
    recover_swap(index_dir, IVF_DIR, OLD_DIR, super::IVF_CONFIG_FILE)
}

/// [`swap_dir_in`]'s recovery for any part: when a crash left `name` moved aside to `old_name`
/// (its commit file `commit` whole) and the new one not yet in place, the old one goes back.
pub(crate) fn recover_swap(index_dir: &Path, name: &str, old_name: &str, commit: &str) -> Result<()> {
    let (live, old) = (index_dir.join(name), index_dir.join(old_name));
    if !live.exists() && old.join(commit).is_file() {
        match std::fs::rename(&old, &live) {
            Ok(()) => sync_dir(index_dir)?,
            // Another opener put it back first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(CellarError::io(&old, e)),
        }
    }
    Ok(())
}

/// Removes what an interrupted IVF build or retrain left beside `ivf/` (its half-built
/// directory); only the index's writer or a build's exclusive lock may call it, since a retrain
/// builds there under the writer.
pub(crate) fn remove_build_leftovers(index_dir: &Path) -> Result<()> {
    let building = index_dir.join(BUILDING_DIR);
    if building.exists() {
        std::fs::remove_dir_all(&building).at(&building)?;
    }
    Ok(())
}

/// Replaces `ivf/` with the finished build: the old one is moved aside first, then removed.
/// Replaces `index_dir/name` (when there is one) by the finished `building` directory: the old
/// one renamed aside to `old_name`, the new one renamed in, the index directory synced, the old
/// one removed. A crash leaves the old part, the new one, or one beside a leftover.
pub(crate) fn swap_dir_in(index_dir: &Path, name: &str, old_name: &str, building: &Path) -> Result<()> {
    let live = index_dir.join(name);
    let old = index_dir.join(old_name);
    let _ = std::fs::remove_dir_all(&old);
    if live.exists() {
        std::fs::rename(&live, &old).at(&live)?;
    }
    std::fs::rename(building, &live).at(&live)?;
    sync_dir(index_dir)?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

fn bar(total: u64, what: &'static str, visible: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(total),
        if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() },
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {bar:40} {pos}/{len} docs ({per_sec}, eta {eta})",
        )
        .expect("valid template"),
    );
    bar.set_prefix(format!("ivf {what}"));
    bar
}
