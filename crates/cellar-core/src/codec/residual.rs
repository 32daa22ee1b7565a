//! Residual codec in the manner of PLAID / ColBERTv2: each token is stored as the id of its
//! nearest centroid plus a `bits`-bit code per dimension of what the centroid leaves over.
//!
//! Fitting is bounded: at most [`MAX_FIT_TOKENS`] sample tokens, a two-level k-means tree of at
//! most [`MAX_CENTROIDS`] leaves (a token is assigned by descending the tree: about
//! `2 * sqrt(k)` dot products instead of `k`), then per-dimension residual scales (their RMS)
//! and `2^bits` buckets of the scaled residuals placed for the least squared error (Lloyd-Max:
//! each bucket's value the mean of its members, cutoffs halfway between values). A dimension
//! decodes to `centroid + scale * bucket value` (`kernels::residual`), and MaxSim runs on the
//! decoded f32 tokens.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::{check_dim, Codec, CodecKind};
use crate::cluster::{half_norms, kmeans, mean, nearest_each, nearest_in, Points};
use crate::error::{CellarError, Result};
use crate::kernels::residual::ResidualTables;
use crate::kernels::{self, Isa};

/// Most sample tokens the centroids and buckets are fitted on (a larger sample is strided).
pub const MAX_FIT_TOKENS: usize = 65_536;
/// Most centroids (ids are 16-bit; the bound keeps fitting and encoding fast).
pub const MAX_CENTROIDS: usize = 4_096;
/// Scaled residual values kept to place the bucket cutoffs.
const MAX_BUCKET_VALUES: usize = 1 << 20;
const MIN_SCALE: f32 = 1e-12;
/// Most refinement passes of the bucket values (a bound: the loop ends once no value moves).
const LLOYD_MAX_PASSES: usize = 200;
const SEED: u64 = 0x5e51_d0a1;

#[derive(Debug, Clone)]
pub struct ResidualCodec {
    kind: CodecKind,
    dim: usize,
    bits: usize,
    /// The tree's first level: `k1 * dim`.
    top: Vec<f32>,
    top_halves: Vec<f32>,
    /// Leaves of top centroid `t` are `ranges[t]..ranges[t + 1]`.
    ranges: Vec<u32>,
    /// The leaves: `k * dim`.
    centroids: Vec<f32>,
    halves: Vec<f32>,
    scales: Vec<f32>,
    /// `2^bits - 1` ascending cutoffs between buckets, in units of the scale.
    cutoffs: Vec<f32>,
    /// `2^bits` bucket values, in units of the scale.
    weights: Vec<f32>,
}

/// The number of centroids for `n` sample tokens: PLAID's `2^floor(log2(16 sqrt(n)))`, at most
/// [`MAX_CENTROIDS`] and `n`.
pub fn centroid_count(n: usize) -> usize {
    let target = 16.0 * (n as f64).sqrt();
    let pow = 1usize << (target.log2().floor().max(0.0) as u32);
    pow.min(MAX_CENTROIDS).min(n).max(1)
}

fn check_layout(kind: CodecKind, dim: usize) -> Result<usize> {
    check_dim(dim)?;
    let bits = kind
        .residual_bits()
        .ok_or_else(|| CellarError::internal(format!("{} is not a residual codec", kind.name())))?;
    if !dim.is_multiple_of(8) {
        return Err(CellarError::invalid(format!(
            "the {} codec needs a dimension that is a multiple of 8, got {dim} (choose --pca-dim accordingly)",
            kind.name()
        )));
    }
    Ok(bits)
}

impl ResidualCodec {
    /// Fits centroids, scales and buckets on `sample` (`n * dim` values).
    pub fn fit(kind: CodecKind, dim: usize, sample: &[f32]) -> Result<Self> {
        let bits = check_layout(kind, dim)?;
        let n = sample.len() / dim;
        if n == 0 || !sample.len().is_multiple_of(dim) {
            return Err(CellarError::invalid(format!(
                "the {} codec needs whole sample vectors of {dim} values (got {} values)",
                kind.name(),
                sample.len()
            )));
        }
        let stride = n.div_ceil(MAX_FIT_TOKENS);
        let mut data = Vec::with_capacity(n.div_ceil(stride) * dim);
        for (i, v) in sample.chunks_exact(dim).step_by(stride).enumerate() {
            super::validate_vector(v, dim, || format!("{} fit sample vector {}", kind.name(), i * stride))?;
            data.extend_from_slice(v);
        }
        let points = Points { data: &data, dim };
        let tree = two_level(&points, centroid_count(points.len()));
        let mut codec =
            ResidualCodec::assemble(kind, dim, bits, tree, vec![1.0; dim], Vec::new(), Vec::new());
        codec.fit_buckets(&points);
        Ok(codec)
    }

    /// A codec from its parts (the centroids' half norms are derived).
    fn assemble(
        kind: CodecKind,
        dim: usize,
        bits: usize,
        tree: Tree,
        scales: Vec<f32>,
        cutoffs: Vec<f32>,
        weights: Vec<f32>,
    ) -> Self {
        ResidualCodec {
            kind,
            dim,
            bits,
            top_halves: half_norms(&tree.top, dim),
            top: tree.top,
            ranges: tree.ranges,
            halves: half_norms(&tree.leaves, dim),
            centroids: tree.leaves,
            scales,
            cutoffs,
            weights,
        }
    }

    /// Per-dimension RMS of the residuals, then Lloyd-Max buckets of the scaled residuals.
    fn fit_buckets(&mut self, points: &Points) {
        let dim = self.dim;
        let mut residuals = Vec::with_capacity(points.len() * dim);
        for (v, id) in points.data.chunks_exact(dim).zip(self.assign_each(points.data)) {
            residuals.extend(v.iter().zip(self.centroid(id)).map(|(x, c)| x - c));
        }
        let mut squares = vec![0f64; dim];
        for row in residuals.chunks_exact(dim) {
            squares.iter_mut().zip(row).for_each(|(s, r)| *s += f64::from(r * r));
        }
        let n = points.len() as f64;
        self.scales = squares.iter().map(|s| ((s / n).sqrt() as f32).max(MIN_SCALE)).collect();
        let step = residuals.len().div_ceil(MAX_BUCKET_VALUES);
        let mut values: Vec<f32> =
            (0..residuals.len()).step_by(step).map(|i| residuals[i] / self.scales[i % dim]).collect();
        values.sort_by(f32::total_cmp);
        (self.cutoffs, self.weights) = lloyd_max(&values, 1 << self.bits);
    }

    pub fn from_params(kind: CodecKind, dim: usize, params: &[u8], path: &Path) -> Result<Self> {
        let bits = check_layout(kind, dim)?;
        let mut reader = Params { bytes: params, at: 0, path };
        let stored_bits = reader.u32()? as usize;
        if stored_bits != bits {
            return Err(reader
                .corrupted(format!("holds {stored_bits}-bit codes, but the manifest says {}", kind.name())));
        }
        let k1 = reader.u32()? as usize;
        let k = reader.u32()? as usize;
        if k1 == 0 || k == 0 || k > usize::from(u16::MAX) + 1 || k1 > k {
            return Err(reader.corrupted(format!("{k1} top centroids over {k} centroids")));
        }
        let ranges: Vec<u32> = (0..=k1).map(|_| reader.u32()).collect::<Result<_>>()?;
        if ranges[0] != 0 || ranges[k1] as usize != k || ranges.windows(2).any(|w| w[0] >= w[1]) {
            return Err(reader.corrupted("centroid ranges are not increasing from 0 to the centroid count"));
        }
        let scales = reader.floats(dim)?;
        if scales.iter().any(|s| *s <= 0.0) {
            return Err(reader.corrupted("a residual scale is not positive"));
        }
        let cutoffs = reader.floats((1 << bits) - 1)?;
        let weights = reader.floats(1 << bits)?;
        let top = reader.floats(k1 * dim)?;
        let leaves = reader.floats(k * dim)?;
        if reader.at != params.len() {
            return Err(reader.corrupted(format!("{} bytes follow the parameters", params.len() - reader.at)));
        }
        let tree = Tree { top, ranges, leaves };
        Ok(ResidualCodec::assemble(kind, dim, bits, tree, scales, cutoffs, weights))
    }

    pub fn centroid_count(&self) -> usize {
        self.centroids.len() / self.dim
    }

    fn centroid(&self, id: usize) -> &[f32] {
        &self.centroids[id * self.dim..(id + 1) * self.dim]
    }

    /// The leaf nearest to `v` under its nearest top centroid.
    fn assign(&self, v: &[f32]) -> usize {
        let top = nearest_in(v, &self.top, &self.top_halves, 0..self.top_halves.len());
        let range = self.ranges[top] as usize..self.ranges[top + 1] as usize;
        nearest_in(v, &self.centroids, &self.halves, range)
    }

    /// [`Self::assign`] for every vector of `vs`: the top level for all of them together, then
    /// each top cluster's leaves for the vectors under it ([`nearest_each`]: the same answers,
    /// several vectors per pass over the centroids).
    fn assign_each(&self, vs: &[f32]) -> Vec<usize> {
        let dim = self.dim;
        let n = vs.len() / dim;
        let row = |i: usize| &vs[i * dim..(i + 1) * dim];
        let mut top = vec![0usize; n];
        nearest_each(row, n, &self.top, &self.top_halves, 0..self.top_halves.len(), &mut top);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| top[i]);
        let (mut leaves, mut found) = (vec![0usize; n], Vec::new());
        for group in order.chunk_by(|a, b| top[*a] == top[*b]) {
            let t = top[group[0]];
            let range = self.ranges[t] as usize..self.ranges[t + 1] as usize;
            found.resize(group.len(), 0);
            nearest_each(|g| row(group[g]), group.len(), &self.centroids, &self.halves, range, &mut found);
            group.iter().zip(&found).for_each(|(&i, &leaf)| leaves[i] = leaf);
        }
        leaves
    }

    /// Appends the residual codes of `v - centroid`, eight values (`bits` bytes) per group: each
    /// value's bucket is how many cutoffs lie at or below its scaled residual. Eight lanes at a
    /// time, so it vectorises (the same arithmetic per value as one at a time).
    fn quantize(&self, v: &[f32], centroid: &[f32], out: &mut Vec<u8>) {
        #[cfg(target_arch = "x86_64")]
        if Isa::detected() >= Isa::Avx2 {
            // SAFETY: AVX2 was detected on this CPU.
            return unsafe { self.quantize_avx2(v, centroid, out) };
        }
        self.quantize_lanes(v, centroid, out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn quantize_avx2(&self, v: &[f32], centroid: &[f32], out: &mut Vec<u8>) {
        self.quantize_lanes(v, centroid, out)
    }

    #[inline(always)]
    fn quantize_lanes(&self, v: &[f32], centroid: &[f32], out: &mut Vec<u8>) {
        let lanes = v.chunks_exact(8).zip(centroid.chunks_exact(8)).zip(self.scales.chunks_exact(8));
        for ((v, c), s) in lanes {
            let mut codes = [0u32; 8];
            for cut in &self.cutoffs {
                for t in 0..8 {
                    codes[t] += u32::from((v[t] - c[t]) / s[t] >= *cut);
                }
            }
            let word = (0..8).fold(0u32, |word, t| word | codes[t] << (t * self.bits));
            out.extend_from_slice(&word.to_le_bytes()[..self.bits]);
        }
    }

    fn tables(&self) -> ResidualTables<'_> {
        ResidualTables {
            dim: self.dim,
            bits: self.bits,
            centroids: &self.centroids,
            scales: &self.scales,
            weights: &self.weights,
        }
    }
}

/// Cutoffs and values of `buckets` buckets for `sorted` values that minimise the squared error
/// (Lloyd-Max): start from equal quantiles, each bucket's value the mean of its members, then
/// alternate cutoffs halfway between neighbouring values and values at their members' means
/// until nothing moves. Token residuals have heavier tails than a normal distribution, which
/// equal-quantile buckets cut too coarsely (SciFact's MiniLM residuals: 23% less squared error at
/// 2 bits, 70% at 4).
fn lloyd_max(sorted: &[f32], buckets: usize) -> (Vec<f32>, Vec<f32>) {
    let mut prefix = Vec::with_capacity(sorted.len() + 1);
    prefix.push(0f64);
    for v in sorted {
        prefix.push(prefix[prefix.len() - 1] + f64::from(*v));
    }
    // A bucket left empty keeps the value it had (at the start: the value at its start).
    let mean_of = |lo: usize, hi: usize, old: f32| {
        if hi > lo {
            ((prefix[hi] - prefix[lo]) / (hi - lo) as f64) as f32
        } else {
            old
        }
    };
    let n = sorted.len();
    let mut bounds: Vec<usize> = (0..=buckets).map(|b| b * n / buckets).collect();
    let mut weights: Vec<f32> =
        bounds.windows(2).map(|w| mean_of(w[0], w[1], sorted[w[0].min(n - 1)])).collect();
    let midpoints = |w: &[f32]| -> Vec<f32> { w.windows(2).map(|p| (p[0] + p[1]) / 2.0).collect() };
    for _ in 0..LLOYD_MAX_PASSES {
        // A value at or above a cutoff is in the bucket above it, as `quantize` counts.
        for (b, cut) in midpoints(&weights).iter().enumerate() {
            bounds[b + 1] = sorted.partition_point(|v| v < cut);
        }
        let next: Vec<f32> =
            bounds.windows(2).zip(&weights).map(|(w, old)| mean_of(w[0], w[1], *old)).collect();
        if next == weights {
            break;
        }
        weights = next;
    }
    (midpoints(&weights), weights)
}

/// The centroid tree: top centroids, each one's range of leaves, the leaves.
struct Tree {
    top: Vec<f32>,
    ranges: Vec<u32>,
    leaves: Vec<f32>,
}

/// A two-level tree over `points`: `ceil(sqrt(k))` top clusters, each split into leaves in
/// proportion to its size.
fn two_level(points: &Points, k: usize) -> Tree {
    let mut rng = StdRng::seed_from_u64(SEED);
    let all: Vec<u32> = (0..points.len() as u32).collect();
    let k1 = ((k as f64).sqrt().ceil() as usize).clamp(1, points.len());
    let groups = kmeans(points, &all, k1, &mut rng);
    // Each top cluster is split on its own (seeded by its position), on as many threads as
    // there are cores: the same tree whichever thread splits which cluster.
    let split = |g: usize| -> Vec<Vec<u32>> {
        let group = &groups[g];
        let share = (k * group.len()).div_ceil(points.len()).clamp(1, group.len());
        if share == 1 {
            return vec![group.clone()];
        }
        let mut rng = StdRng::seed_from_u64(SEED ^ (g as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        kmeans(points, group, share, &mut rng)
    };
    let next = AtomicUsize::new(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(groups.len());
    let mut children: Vec<(usize, Vec<Vec<u32>>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..cores)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let g = next.fetch_add(1, Ordering::Relaxed);
                        if g >= groups.len() {
                            return done;
                        }
                        done.push((g, split(g)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a k-means thread panicked")).collect()
    });
    children.sort_by_key(|(g, _)| *g);
    let (mut top, mut ranges, mut leaves) = (Vec::new(), vec![0u32], Vec::new());
    for (group, (_, children)) in groups.iter().zip(&children) {
        top.extend(mean(points, group));
        for child in children {
            leaves.extend(mean(points, child));
        }
        ranges.push(ranges.last().copied().unwrap_or(0) + children.len() as u32);
    }
    Tree { top, ranges, leaves }
}

/// Little-endian reader of `codec.bin`'s body.
struct Params<'a> {
    bytes: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl Params<'_> {
    fn corrupted(&self, detail: impl Into<String>) -> CellarError {
        CellarError::corrupted(
            self.path,
            self.at as u64,
            format!("residual codec parameters: {}", detail.into()),
        )
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return Err(self.corrupted(format!("end of data where {n} more bytes were expected")));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn floats(&mut self, n: usize) -> Result<Vec<f32>> {
        let len = n.checked_mul(4).ok_or_else(|| self.corrupted("size overflows"))?;
        let values: Vec<f32> =
            self.take(len)?.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if values.iter().any(|v| !v.is_finite()) {
            return Err(self.corrupted("a value is not finite"));
        }
        Ok(values)
    }
}

thread_local! {
    /// Decoded tokens of the document being scored, reused across calls.
    static DECODED: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

impl Codec for ResidualCodec {
    fn kind(&self) -> CodecKind {
        self.kind
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn bytes_per_vector(&self) -> usize {
        self.kind.bytes_per_vector(self.dim)
    }
    fn encode(&self, v: &[f32], out: &mut Vec<u8>) {
        debug_assert_eq!(v.len(), self.dim);
        let id = self.assign(v);
        let centroid = self.centroid(id);
        out.extend_from_slice(&(id as u16).to_le_bytes());
        self.quantize(v, centroid, out);
    }
    fn encode_many(&self, vs: &[f32], out: &mut Vec<u8>) {
        for (v, id) in vs.chunks_exact(self.dim).zip(self.assign_each(vs)) {
            out.extend_from_slice(&(id as u16).to_le_bytes());
            self.quantize(v, self.centroid(id), out);
        }
    }
    fn decode(&self, bytes: &[u8], out: &mut Vec<f32>) {
        let start = out.len();
        out.resize(start + bytes.len() / self.bytes_per_vector() * self.dim, 0.0);
        kernels::decode_residual(Isa::Scalar, &self.tables(), bytes, &mut out[start..]);
    }
    fn prepare_query(&self, query: &[f32]) -> Vec<f32> {
        query.to_vec()
    }
    fn maxsim(&self, isa: Isa, prepared: &[f32], doc: &[u8]) -> f32 {
        let nd = doc.len() / self.bytes_per_vector();
        let mut decoded = DECODED.try_with(Cell::take).unwrap_or_default();
        let len = nd * self.dim;
        if decoded.len() < len {
            // Grown once to the longest document seen; every value is decoded over before use.
            decoded.resize(len, 0.0);
        }
        kernels::decode_residual(isa, &self.tables(), doc, &mut decoded[..len]);
        let score = kernels::maxsim_f32(isa, prepared, self.dim, &decoded[..len]);
        let _ = DECODED.try_with(|d| d.set(decoded));
        score
    }
    fn costly_encode(&self) -> bool {
        true
    }
    fn params(&self) -> Vec<u8> {
        let k1 = self.top_halves.len() as u32;
        let mut out = Vec::new();
        for v in [self.bits as u32, k1, self.centroid_count() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for r in &self.ranges {
            out.extend_from_slice(&r.to_le_bytes());
        }
        for values in [&self.scales, &self.cutoffs, &self.weights, &self.top, &self.centroids] {
            out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    fn sample(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        let centers: Vec<f32> = (0..16 * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        (0..n)
            .flat_map(|_| {
                let c = rng.gen_range(0..16);
                let base = centers[c * dim..(c + 1) * dim].to_vec();
                base.into_iter().map(|x| x + rng.gen_range(-0.2..0.2)).collect::<Vec<f32>>()
            })
            .collect()
    }

    #[test]
    fn centroid_count_follows_plaid_within_its_bounds() {
        assert_eq!(centroid_count(1), 1);
        assert_eq!(
            centroid_count(100),
            100,
            "16 sqrt(100) = 160: 128 centroids, but no more than the tokens"
        );
        assert_eq!(centroid_count(10_000), 1024);
        assert_eq!(centroid_count(10_000_000), MAX_CENTROIDS);
    }

    #[test]
    fn buckets_reach_the_lloyd_max_quantizer_of_a_normal_distribution() {
        // Normal values by Box-Muller, sorted as `fit_buckets` hands them over.
        let mut rng = StdRng::seed_from_u64(5);
        let mut values: Vec<f32> = (0..200_000)
            .map(|_| {
                let (u, v): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
            })
            .collect();
        values.sort_by(f32::total_cmp);
        // Max (1960): the 2-bit quantizer of N(0, 1) has values ±0.4528, ±1.510, cutoffs 0, ±0.9816.
        let (cutoffs, weights) = lloyd_max(&values, 4);
        for (got, want) in weights.iter().zip([-1.510, -0.4528, 0.4528, 1.510]) {
            assert!((got - want).abs() < 0.02, "values {weights:?}");
        }
        for (got, want) in cutoffs.iter().zip([-0.9816, 0.0, 0.9816]) {
            assert!((got - want).abs() < 0.02, "cutoffs {cutoffs:?}");
        }
        // Fewer values than buckets: ascending cutoffs, every value finite.
        for tiny in [&[0.5f32][..], &[-1.0, 2.0]] {
            let (cutoffs, weights) = lloyd_max(tiny, 16);
            assert_eq!((cutoffs.len(), weights.len()), (15, 16));
            assert!(cutoffs.windows(2).all(|w| w[0] <= w[1]), "{cutoffs:?}");
            assert!(weights.iter().all(|w| w.is_finite()), "{weights:?}");
        }
    }

    #[test]
    fn the_dispatched_quantizer_writes_the_portable_ones_bytes() {
        let dim = 384;
        let data = sample(600, dim, 21);
        for kind in [CodecKind::Residual1, CodecKind::Residual2, CodecKind::Residual4] {
            let codec = ResidualCodec::fit(kind, dim, &data).unwrap();
            let centroid = codec.centroid(codec.assign(&data[..dim])).to_vec();
            for v in data.chunks_exact(dim).take(20) {
                let (mut dispatched, mut portable) = (Vec::new(), Vec::new());
                codec.quantize(v, &centroid, &mut dispatched);
                codec.quantize_lanes(v, &centroid, &mut portable);
                assert_eq!(dispatched, portable, "{}", kind.name());
                assert_eq!(portable.len(), dim / 8 * codec.bits);
            }
        }
    }

    #[test]
    fn more_bits_reconstruct_closer_and_params_round_trip() {
        let dim = 32;
        let data = sample(3000, dim, 1);
        let mut errors = Vec::new();
        for kind in [CodecKind::Residual1, CodecKind::Residual2, CodecKind::Residual4] {
            let codec = ResidualCodec::fit(kind, dim, &data).unwrap();
            let again =
                ResidualCodec::from_params(kind, dim, &codec.params(), Path::new("codec.bin")).unwrap();
            let mut bytes = Vec::new();
            for v in data.chunks_exact(dim).take(200) {
                codec.encode(v, &mut bytes);
            }
            assert_eq!(bytes.len(), 200 * kind.bytes_per_vector(dim));
            let (mut out, mut out_again) = (Vec::new(), Vec::new());
            codec.decode(&bytes, &mut out);
            again.decode(&bytes, &mut out_again);
            assert_eq!(out, out_again, "{kind:?}: decoding differs after the params round trip");
            let err: f32 =
                out.iter().zip(&data).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / out.len() as f32;
            errors.push(err);
        }
        assert!(errors[0] > errors[1] && errors[1] > errors[2], "mean squared errors {errors:?}");
        assert!(errors[2] < 0.01, "4-bit error {errors:?} against a residual spread of 0.2");
    }

    #[test]
    fn a_dimension_not_a_multiple_of_8_and_damaged_params_are_refused() {
        let err = ResidualCodec::fit(CodecKind::Residual2, 12, &vec![0.5; 120]).unwrap_err();
        assert!(err.to_string().contains("multiple of 8"), "{err}");
        let codec = ResidualCodec::fit(CodecKind::Residual2, 8, &sample(500, 8, 2)).unwrap();
        let params = codec.params();
        let path = Path::new("codec.bin");
        for bad in [&params[..params.len() - 1], &params[..8]] {
            let err = ResidualCodec::from_params(CodecKind::Residual2, 8, bad, path).unwrap_err();
            assert!(matches!(err, CellarError::Corrupted { .. }), "{err}");
        }
        let err = ResidualCodec::from_params(CodecKind::Residual4, 8, &params, path).unwrap_err();
        assert!(err.to_string().contains("2-bit"), "{err}");
    }
}
