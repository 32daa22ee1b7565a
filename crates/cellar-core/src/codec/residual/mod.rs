//! Residual codec in the manner of PLAID / ColBERTv2: each token is stored as the id of its
//! nearest centroid plus a `bits`-bit code per dimension of what the centroid leaves over.
//!
//! Fitting is bounded: at most [`MAX_FIT_TOKENS`] sample tokens, a two-level k-means tree of at
//! most [`MAX_CENTROIDS`] leaves (a token is assigned by descending the tree: about
//! `2 * sqrt(k)` dot products instead of `k`), then per-dimension residual scales (their RMS)
//! and `2^bits` buckets of the scaled residuals placed for the least squared error (Lloyd-Max:
//! each bucket's value the mean of its members, cutoffs halfway between values). A fit may be
//! given its tree instead (`FitOptions::tree`, up to [`MAX_GIVEN_CENTROIDS`] leaves: e.g. the
//! token stage's quantizer, so that one id per token serves both); the rest is fitted alike. A dimension
//! decodes to `centroid + scale * bucket value` (`kernels::residual`), and MaxSim runs on the
//! decoded f32 tokens.
//!
//! Dimensions whose residuals are tiny are not coded at all: the smallest-variance dimensions,
//! in groups of 8, are left to their centroid's value while together they hold at most
//! [`UNCODED_ENERGY_MAX`] of the residual energy. The codec then keeps its values in its own
//! order (coded dimensions first, `order`): centroids are stored permuted, a vector is permuted
//! before it is encoded, a query before it is scored (MaxSim does not depend on the order of
//! dimensions), and a decoded vector is put back in the caller's order.

mod fit;

use std::cell::Cell;
use std::path::Path;

use self::fit::{
    given_tree, lloyd_max, permute_rows, two_level, uncoded_layout, Layout, Tree, TreeFit, LEAF_ITERATIONS,
    TOP_FIT_POINTS,
};
use super::{check_dim, Codec, CodecKind, FitOptions};
use crate::cluster::{half_norms, nearest_each, nearest_in, Points};
use crate::error::{CellarError, Result};
use crate::kernels::residual::ResidualTables;
use crate::kernels::{self, Isa};

/// Most sample tokens the centroids and buckets are fitted on (a larger sample is strided).
pub const MAX_FIT_TOKENS: usize = 65_536;
/// Most centroids a fit places (ids are 16-bit; the bound keeps fitting and encoding fast).
pub const MAX_CENTROIDS: usize = 4_096;
/// Most leaves of a tree given to a fit (`FitOptions::tree`): as many as a 16-bit id names.
pub const MAX_GIVEN_CENTROIDS: usize = 1 << 16;
/// Scaled residual values kept to place the bucket cutoffs.
const MAX_BUCKET_VALUES: usize = 1 << 20;
const MIN_SCALE: f32 = 1e-12;
const SEED: u64 = 0x5e51_d0a1;
/// Share of the residual energy the uncoded dimensions may hold together. MiniLM's tokens on
/// SciFact: its 8 smallest-variance dimensions (3 of them constant) hold 0.74%, so a 2-bit
/// token takes 96 bytes instead of 98; the next 8 would bring it to 2.2%.
pub const UNCODED_ENERGY_MAX: f64 = 0.01;

#[derive(Debug, Clone)]
pub struct ResidualCodec {
    kind: CodecKind,
    dim: usize,
    bits: usize,
    /// Dimensions `0..coded` of the codec's order carry codes (a multiple of 8, at most `dim`).
    coded: usize,
    /// The caller's dimension at each position of the codec's order; empty when the two orders
    /// are the same (nothing is left uncoded). Centroids and scales are in the codec's order.
    order: Vec<u32>,
    /// The tree's first level: `k1 * dim`.
    top: Vec<f32>,
    top_halves: Vec<f32>,
    /// Leaves of top centroid `t` are `ranges[t]..ranges[t + 1]`.
    ranges: Vec<u32>,
    /// The leaves: `k * dim`.
    centroids: Vec<f32>,
    halves: Vec<f32>,
    /// `dim` residual RMS values (those past `coded` are not used to decode).
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

/// `value` unless it is 0: a fit's count of points or passes (`what`) is at least 1.
fn at_least_one(value: Option<usize>, what: &str) -> Result<Option<usize>> {
    match value {
        Some(0) => Err(CellarError::invalid(format!("{what} must be at least 1, got 0"))),
        _ => Ok(value),
    }
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
    /// Fits centroids, scales and buckets on `sample` (`n * dim` values), with the codec's
    /// defaults.
    pub fn fit(kind: CodecKind, dim: usize, sample: &[f32]) -> Result<Self> {
        Self::fit_with(kind, dim, sample, &FitOptions::default())
    }

    /// [`ResidualCodec::fit`] with another seed or bound on uncoded dimensions (benchmarks
    /// compare fits with them), or on a given centroid tree instead of its own k-means.
    pub fn fit_with(kind: CodecKind, dim: usize, sample: &[f32], options: &FitOptions) -> Result<Self> {
        let bits = check_layout(kind, dim)?;
        let uncoded_energy_max = options.uncoded_energy_max.unwrap_or(UNCODED_ENERGY_MAX);
        if !(0.0..1.0).contains(&uncoded_energy_max) {
            return Err(CellarError::invalid(format!(
                "the share of residual energy left uncoded must be in [0, 1), got {uncoded_energy_max}"
            )));
        }
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
        let tree = match &options.tree {
            Some(given) => given_tree(given, dim, options)?,
            None => Self::fit_tree(&points, options)?,
        };
        let layout = Layout::all_coded(dim);
        let mut codec =
            ResidualCodec::assemble(kind, dim, bits, tree, layout, vec![1.0; dim], Vec::new(), Vec::new());
        codec.fit_buckets(&points, uncoded_energy_max);
        Ok(codec)
    }

    /// The two-level k-means tree over `points`, as `options` shape it.
    fn fit_tree(points: &Points, options: &FitOptions) -> Result<Tree> {
        let k = match options.centroids {
            None => centroid_count(points.len()),
            Some(k) if (1..=MAX_CENTROIDS.min(points.len())).contains(&k) => k,
            Some(k) => {
                return Err(CellarError::invalid(format!(
                    "{k} centroids: a fit of {} points takes 1 to {}",
                    points.len(),
                    MAX_CENTROIDS.min(points.len())
                )))
            }
        };
        let shape = TreeFit {
            top_fit_points: at_least_one(options.top_fit_points, "top-level fit points")?
                .unwrap_or(TOP_FIT_POINTS),
            leaf_iterations: at_least_one(options.leaf_iterations, "leaf iterations")?
                .unwrap_or(LEAF_ITERATIONS),
        };
        Ok(two_level(points, k, options.seed.unwrap_or(SEED), &shape))
    }

    /// A codec from its parts (the centroids' half norms are derived).
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        kind: CodecKind,
        dim: usize,
        bits: usize,
        tree: Tree,
        layout: Layout,
        scales: Vec<f32>,
        cutoffs: Vec<f32>,
        weights: Vec<f32>,
    ) -> Self {
        ResidualCodec {
            kind,
            dim,
            bits,
            coded: layout.coded,
            order: layout.order,
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

    /// Per-dimension RMS of the residuals (of the codec as it stands: every dimension coded, in
    /// the caller's order); which dimensions stay uncoded ([`uncoded_layout`]), and the codec's
    /// order that follows; then Lloyd-Max buckets of the coded dimensions' scaled residuals.
    fn fit_buckets(&mut self, points: &Points, uncoded_energy_max: f64) {
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
        let layout = uncoded_layout(&squares, uncoded_energy_max);
        let order = layout.positions(dim);
        self.scales = order.iter().map(|&k| ((squares[k] / n).sqrt() as f32).max(MIN_SCALE)).collect();
        if !layout.order.is_empty() {
            self.top = permute_rows(&self.top, &order);
            self.centroids = permute_rows(&self.centroids, &order);
            self.top_halves = half_norms(&self.top, dim);
            self.halves = half_norms(&self.centroids, dim);
        }
        self.coded = layout.coded;
        self.order = layout.order;
        // Scaled residuals of the coded positions, row after row (every dimension when nothing
        // is left uncoded), strided down to at most MAX_BUCKET_VALUES.
        let coded = self.coded;
        let total = points.len() * coded;
        let step = total.div_ceil(MAX_BUCKET_VALUES);
        let mut values: Vec<f32> = (0..total)
            .step_by(step)
            .map(|i| residuals[i / coded * dim + order[i % coded]] / self.scales[i % coded])
            .collect();
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
        let layout = if reader.at == params.len() { Layout::all_coded(dim) } else { reader.layout(dim)? };
        if reader.at != params.len() {
            return Err(reader.corrupted(format!("{} bytes follow the parameters", params.len() - reader.at)));
        }
        let tree = Tree { top, ranges, leaves };
        Ok(ResidualCodec::assemble(kind, dim, bits, tree, layout, scales, cutoffs, weights))
    }

    /// Dimensions that carry codes (a multiple of 8, at most `dim`).
    pub fn coded_dims(&self) -> usize {
        self.coded
    }

    /// `vs` (whole vectors in the caller's order) in the codec's order; borrowed when the two
    /// are the same.
    fn to_codec_order<'v>(&self, vs: &'v [f32]) -> std::borrow::Cow<'v, [f32]> {
        if self.order.is_empty() {
            return std::borrow::Cow::Borrowed(vs);
        }
        let mut out = vec![0f32; vs.len()];
        for (v, o) in vs.chunks_exact(self.dim).zip(out.chunks_exact_mut(self.dim)) {
            // Written in place (pushing each value was 4% of a residual build's samples).
            o.iter_mut().zip(&self.order).for_each(|(o, &k)| *o = v[k as usize]);
        }
        std::borrow::Cow::Owned(out)
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

    /// Appends the residual codes of `v - centroid` (both in the codec's order) for the coded
    /// dimensions, eight values (`bits` bytes) per group: each
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
        let lanes =
            v.chunks_exact(8).zip(centroid.chunks_exact(8)).zip(self.scales[..self.coded].chunks_exact(8));
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
            coded: self.coded,
            bits: self.bits,
            centroids: &self.centroids,
            scales: &self.scales[..self.coded],
            weights: &self.weights,
        }
    }
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

    /// The layout trailer: `u32 coded` and `dim` u32 values of the codec's order.
    fn layout(&mut self, dim: usize) -> Result<Layout> {
        let coded = self.u32()? as usize;
        if coded == 0 || coded >= dim || !coded.is_multiple_of(8) {
            return Err(self.corrupted(format!("{coded} coded dimensions of {dim}")));
        }
        let order: Vec<u32> = (0..dim).map(|_| self.u32()).collect::<Result<_>>()?;
        let mut seen = vec![false; dim];
        for &k in &order {
            match seen.get_mut(k as usize) {
                Some(s) if !*s => *s = true,
                _ => return Err(self.corrupted("the dimension order is not a permutation")),
            }
        }
        Ok(Layout { coded, order })
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
        self.tables().token_bytes()
    }
    fn encode(&self, v: &[f32], out: &mut Vec<u8>) {
        debug_assert_eq!(v.len(), self.dim);
        let v = self.to_codec_order(v);
        let id = self.assign(&v);
        let centroid = self.centroid(id);
        out.extend_from_slice(&(id as u16).to_le_bytes());
        self.quantize(&v, centroid, out);
    }
    fn encode_many(&self, vs: &[f32], out: &mut Vec<u8>) {
        let vs = self.to_codec_order(vs);
        for (v, id) in vs.chunks_exact(self.dim).zip(self.assign_each(&vs)) {
            out.extend_from_slice(&(id as u16).to_le_bytes());
            self.quantize(v, self.centroid(id), out);
        }
    }
    fn decode(&self, bytes: &[u8], out: &mut Vec<f32>) {
        let start = out.len();
        out.resize(start + bytes.len() / self.bytes_per_vector() * self.dim, 0.0);
        kernels::decode_residual(Isa::Scalar, &self.tables(), bytes, &mut out[start..]);
        if !self.order.is_empty() {
            let mut row = vec![0f32; self.dim];
            for decoded in out[start..].chunks_exact_mut(self.dim) {
                self.order.iter().zip(decoded.iter()).for_each(|(&k, x)| row[k as usize] = *x);
                decoded.copy_from_slice(&row);
            }
        }
    }
    fn prepare_query(&self, query: &[f32]) -> Vec<f32> {
        self.to_codec_order(query).into_owned()
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
        if !self.order.is_empty() {
            out.extend_from_slice(&(self.coded as u32).to_le_bytes());
            out.extend(self.order.iter().flat_map(|k| k.to_le_bytes()));
        }
        out
    }
}

#[cfg(test)]
mod tests;
