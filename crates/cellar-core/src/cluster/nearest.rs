//! Nearest-centroid search and the dot products under it, shared by k-means, the IVF and the
//! residual codec. Every path (portable, AVX2; one vector, tiles of several) sums each product
//! in the same eight lanes in the same order, so an assignment never depends on the path.

/// Index of the centroid nearest to `v` (L2), with `half_norms[j] = |c_j|^2 / 2`.
pub fn nearest(v: &[f32], centroids: &[f32], half_norms: &[f32]) -> usize {
    nearest_in(v, centroids, half_norms, 0..half_norms.len())
}

/// [`nearest`], and the squared distance from `v` to that centroid (a clustering's quantization
/// error at `v`).
pub fn nearest_and_error(v: &[f32], centroids: &[f32], half_norms: &[f32]) -> (usize, f32) {
    let c = nearest(v, centroids, half_norms);
    let centroid = &centroids[c * v.len()..(c + 1) * v.len()];
    (c, v.iter().zip(centroid).map(|(a, b)| (a - b) * (a - b)).sum())
}

/// [`nearest`] among the centroids `range` (the first of equals wins). Four centroids are
/// scored per pass over `v` (each with [`dot`]'s lanes, so the same bits as four [`dot`]s): the
/// query's values are loaded once for four products, the residual codec's encoding and k-means
/// spent most of their time here.
pub fn nearest_in(v: &[f32], centroids: &[f32], half_norms: &[f32], range: std::ops::Range<usize>) -> usize {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::Isa::detected() >= crate::kernels::Isa::Avx2 {
        // SAFETY: AVX2 and FMA were detected on this CPU.
        return unsafe { nearest_in_avx2(v, centroids, half_norms, range) };
    }
    nearest_in_lanes(v, centroids, half_norms, range)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn nearest_in_avx2(
    v: &[f32],
    centroids: &[f32],
    half_norms: &[f32],
    range: std::ops::Range<usize>,
) -> usize {
    nearest_in_lanes(v, centroids, half_norms, range)
}

#[inline(always)]
fn nearest_in_lanes(
    v: &[f32],
    centroids: &[f32],
    half_norms: &[f32],
    range: std::ops::Range<usize>,
) -> usize {
    let dim = v.len();
    let row = |j: usize| &centroids[j * dim..(j + 1) * dim];
    let mut best = (range.start, f32::NEG_INFINITY);
    let mut consider = |j: usize, product: f32| {
        let score = product - half_norms[j];
        if score > best.1 {
            best = (j, score);
        }
    };
    let mut j = range.start;
    while j + 4 <= range.end {
        let products = dot4(v, [row(j), row(j + 1), row(j + 2), row(j + 3)]);
        for (t, product) in products.into_iter().enumerate() {
            consider(j + t, product);
        }
        j += 4;
    }
    for j in j..range.end {
        consider(j, dot_lanes(v, row(j)));
    }
    best.0
}

/// [`nearest_in`] for `n` vectors at once (`row(i)` is vector `i`), each answer into `out[i]`:
/// the same centroid for every vector (each product is [`dot_lanes`]'s, so the same bits), but
/// four vectors are scored against two centroids per pass (then two against four), so a
/// centroid's values are loaded once for several vectors: a centroid set of tens of KiB is
/// read from L2 a quarter as often.
pub fn nearest_each<'a>(
    row: impl Fn(usize) -> &'a [f32],
    n: usize,
    centroids: &[f32],
    half_norms: &[f32],
    range: std::ops::Range<usize>,
    out: &mut [usize],
) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::Isa::detected() >= crate::kernels::Isa::Avx2 {
        // SAFETY: AVX2 and FMA were detected on this CPU.
        return unsafe { nearest_each_avx2(&row, n, centroids, half_norms, range, out) };
    }
    nearest_each_lanes(&row, n, centroids, half_norms, range, out, false)
}

/// Rows per block and centroids per tile of [`nearest_blocked`]: at 128 dimensions a block's
/// rows and a tile's centroids are 128 KiB each, in L2 together while the tile is scanned.
const BLOCK_ROWS: usize = 256;
const TILE_CENTROIDS: usize = 256;

/// [`nearest`] of each of the `rows.len() / dim` rows, into `out`: the same answers (ties to
/// the first centroid), but the centroids are scanned a tile at a time over a block of rows, so
/// a centroid set larger than the caches (an IVF of thousands of clusters is megabytes) is read
/// from memory once per block of rows instead of once per row or four.
pub fn nearest_blocked(rows: &[f32], dim: usize, centroids: &[f32], half_norms: &[f32], out: &mut [usize]) {
    let k = half_norms.len();
    let mut found = [0usize; BLOCK_ROWS];
    let mut best = [(0usize, f32::NEG_INFINITY); BLOCK_ROWS];
    for (block, out) in rows.chunks(BLOCK_ROWS * dim).zip(out.chunks_mut(BLOCK_ROWS)) {
        let n = block.len() / dim;
        let row = |i: usize| &block[i * dim..(i + 1) * dim];
        best[..n].fill((0, f32::NEG_INFINITY));
        for start in (0..k).step_by(TILE_CENTROIDS) {
            nearest_each(
                row,
                n,
                centroids,
                half_norms,
                start..(start + TILE_CENTROIDS).min(k),
                &mut found[..n],
            );
            for (i, &j) in found[..n].iter().enumerate() {
                // The tile's winner scored again: the same bits as inside the scan.
                let score = dot(row(i), &centroids[j * dim..(j + 1) * dim]) - half_norms[j];
                if score > best[i].1 {
                    best[i] = (j, score);
                }
            }
        }
        out[..n].iter_mut().zip(&best[..n]).for_each(|(o, (j, _))| *o = *j);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn nearest_each_avx2<'a>(
    row: &impl Fn(usize) -> &'a [f32],
    n: usize,
    centroids: &[f32],
    half_norms: &[f32],
    range: std::ops::Range<usize>,
    out: &mut [usize],
) {
    nearest_each_lanes(row, n, centroids, half_norms, range, out, true)
}

#[inline(always)]
fn nearest_each_lanes<'a>(
    row: &impl Fn(usize) -> &'a [f32],
    n: usize,
    centroids: &[f32],
    half_norms: &[f32],
    range: std::ops::Range<usize>,
    out: &mut [usize],
    avx2: bool,
) {
    let mut i = 0;
    while i + 4 <= n {
        let best = scan::<4, 2>(std::array::from_fn(|t| row(i + t)), centroids, half_norms, &range, avx2);
        out[i..i + 4].copy_from_slice(&best);
        i += 4;
    }
    if i + 2 <= n {
        let best = scan::<2, 4>(std::array::from_fn(|t| row(i + t)), centroids, half_norms, &range, avx2);
        out[i..i + 2].copy_from_slice(&best);
        i += 2;
    }
    if i < n {
        out[i] = nearest_in_lanes(row(i), centroids, half_norms, range);
    }
}

/// The nearest centroid in `range` of each of `N` vectors, `C` centroids per pass.
#[inline(always)]
fn scan<const N: usize, const C: usize>(
    vs: [&[f32]; N],
    centroids: &[f32],
    half_norms: &[f32],
    range: &std::ops::Range<usize>,
    avx2: bool,
) -> [usize; N] {
    let dim = vs[0].len();
    let centroid = |j: usize| &centroids[j * dim..(j + 1) * dim];
    let mut best = [(range.start, f32::NEG_INFINITY); N];
    let mut consider = |t: usize, j: usize, product: f32| {
        let score = product - half_norms[j];
        if score > best[t].1 {
            best[t] = (j, score);
        }
    };
    let mut j = range.start;
    while j + C <= range.end {
        let products = tile::<N, C>(vs, std::array::from_fn(|u| centroid(j + u)), avx2);
        for (t, products) in products.into_iter().enumerate() {
            for (u, product) in products.into_iter().enumerate() {
                consider(t, j + u, product);
            }
        }
        j += C;
    }
    for j in j..range.end {
        for (t, v) in vs.iter().enumerate() {
            consider(t, j, dot_lanes(v, centroid(j)));
        }
    }
    best.map(|(j, _)| j)
}

/// The `N x C` [`dot_lanes`] of `N` vectors with `C` centroids in one pass over them.
#[inline(always)]
fn tile<const N: usize, const C: usize>(v: [&[f32]; N], c: [&[f32]; C], avx2: bool) -> [[f32; C]; N] {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is true only on the AVX2 path, where the CPU was found to have it.
        return unsafe { tile_avx2(v, c) };
    }
    let _ = avx2;
    tile_lanes(v, c)
}

/// [`tile`] as plain lane sums (each product's sums in the same order as alone).
#[inline(always)]
fn tile_lanes<const N: usize, const C: usize>(v: [&[f32]; N], c: [&[f32]; C]) -> [[f32; C]; N] {
    let mut sums = [[[0f32; 8]; C]; N];
    let chunks = c[0].len() / 8;
    for k in 0..chunks {
        for (t, sums) in sums.iter_mut().enumerate() {
            for (u, sums) in sums.iter_mut().enumerate() {
                for i in 0..8 {
                    sums[i] += v[t][8 * k + i] * c[u][8 * k + i];
                }
            }
        }
    }
    finish_tile(v, c, 8 * chunks, sums)
}

/// [`tile_lanes`] in AVX2 registers: a multiply then an add per lane, as the portable sums do
/// (no fused multiply-add, which would round once instead of twice), so the same bits; written
/// with intrinsics because the compiler left the portable loop scalar for some tile shapes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const N: usize, const C: usize>(v: [&[f32]; N], c: [&[f32]; C]) -> [[f32; C]; N] {
    use std::arch::x86_64::*;
    let dim = c[0].len();
    assert!(v.iter().chain(&c).all(|s| s.len() == dim), "vectors of one dimension");
    let chunks = dim / 8;
    let mut acc = [[_mm256_setzero_ps(); C]; N];
    for k in 0..chunks {
        // SAFETY: every slice holds `dim >= 8 * (k + 1)` values.
        let y = c.map(|c| unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * k)) });
        for (t, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let x = unsafe { _mm256_loadu_ps(v[t].as_ptr().add(8 * k)) };
            for (u, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(x, y[u]));
            }
        }
    }
    if N * C == 8 {
        // Eight pairs: their lane sums, in lane order, as one transpose and seven adds.
        let flat: [__m256; 8] = std::array::from_fn(|p| acc[p / C][p % C]);
        let mut sums = [0f32; 8];
        // SAFETY: eight values are stored into eight.
        unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), sum_lanes_in_order(flat)) };
        return std::array::from_fn(|t| {
            std::array::from_fn(|u| sums[t * C + u] + tail(v[t], c[u], 8 * chunks))
        });
    }
    let mut sums = [[[0f32; 8]; C]; N];
    for (sums, acc) in sums.iter_mut().zip(acc) {
        for (sums, acc) in sums.iter_mut().zip(acc) {
            // SAFETY: eight values are stored into eight.
            unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), acc) };
        }
    }
    finish_tile(v, c, 8 * chunks, sums)
}

/// Lane `p` of the result is `((r[p][0] + r[p][1]) + r[p][2]) + ... + r[p][7]`: an 8 x 8
/// transpose, then the rows added in order (the order `Iterator::sum` adds one vector's lanes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn sum_lanes_in_order(r: [std::arch::x86_64::__m256; 8]) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let t: [__m256; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // t[0] = r0r1 low pairs, t[1] = r0r1 high pairs, t[2], t[3] for r2r3, and so on.
    let q: [__m256; 8] = std::array::from_fn(|i| {
        let base = 4 * (i / 4);
        let (a, b) = (t[base + (i % 4) / 2], t[base + 2 + (i % 4) / 2]);
        if i % 2 == 0 {
            _mm256_shuffle_ps::<0x44>(a, b)
        } else {
            _mm256_shuffle_ps::<0xEE>(a, b)
        }
    });
    // q[0..4] hold columns 0, 1, 2, 3 (and 4..8 in their high halves) of rows 0..4; q[4..8]
    // the same of rows 4..8.
    let column = |i: usize| {
        let (a, b) = (q[i % 4], q[4 + i % 4]);
        if i < 4 {
            _mm256_permute2f128_ps::<0x20>(a, b)
        } else {
            _mm256_permute2f128_ps::<0x31>(a, b)
        }
    };
    let mut sum = column(0);
    for i in 1..8 {
        sum = _mm256_add_ps(sum, column(i));
    }
    sum
}

/// The products of `v[start..]` and `c[start..]` summed in order ([`lanes`]' tail).
#[inline(always)]
fn tail(v: &[f32], c: &[f32], start: usize) -> f32 {
    v[start..].iter().zip(&c[start..]).map(|(x, y)| x * y).sum()
}

/// Each pair's eight lane sums added in order, then its tail from `start` ([`lanes`]' order).
#[inline(always)]
fn finish_tile<const N: usize, const C: usize>(
    v: [&[f32]; N],
    c: [&[f32]; C],
    start: usize,
    sums: [[[f32; 8]; C]; N],
) -> [[f32; C]; N] {
    std::array::from_fn(|t| std::array::from_fn(|u| sums[t][u].iter().sum::<f32>() + tail(v[t], c[u], start)))
}

/// Four [`dot_lanes`] of `v` in one pass (the same sums in the same order as each alone).
#[inline(always)]
fn dot4(v: &[f32], c: [&[f32]; 4]) -> [f32; 4] {
    let mut sums = [[0f32; 8]; 4];
    let chunks = v.len() / 8;
    for k in 0..chunks {
        let x = &v[8 * k..8 * k + 8];
        for (t, sums) in sums.iter_mut().enumerate() {
            let y = &c[t][8 * k..8 * k + 8];
            for i in 0..8 {
                sums[i] += x[i] * y[i];
            }
        }
    }
    let start = 8 * chunks;
    std::array::from_fn(|t| {
        let tail: f32 = v[start..].iter().zip(&c[t][start..]).map(|(x, y)| x * y).sum();
        sums[t].iter().sum::<f32>() + tail
    })
}

pub fn half_norms(centroids: &[f32], dim: usize) -> Vec<f32> {
    centroids.chunks_exact(dim).map(|c| dot(c, c) / 2.0).collect()
}

/// Squared L2 distance, in eight lanes like [`dot`] (k-means++ seeding spent a third of a
/// residual codec's fit in the sequential sum this replaced).
pub(crate) fn sq_dist(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::Isa::detected() >= crate::kernels::Isa::Avx2 {
        // SAFETY: AVX2 and FMA were detected on this CPU.
        return unsafe { sq_dist_avx2(a, b) };
    }
    lanes(a, b, |x, y| (x - y) * (x - y))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sq_dist_avx2(a: &[f32], b: &[f32]) -> f32 {
    lanes(a, b, |x, y| (x - y) * (x - y))
}

/// Dot product written so the compiler vectorises it (eight independent sums, one per lane of
/// an AVX2 vector): compiled for AVX2 where the CPU has it (the same sums in the same order, so
/// the same bits as the portable build), for SSE2 otherwise.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::Isa::detected() >= crate::kernels::Isa::Avx2 {
        // SAFETY: AVX2 and FMA were detected on this CPU.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    lanes(a, b, |x, y| x * y)
}

/// The sum of `term(a[i], b[i])` in eight independent lanes (so it vectorises), then the tail.
#[inline(always)]
fn lanes(a: &[f32], b: &[f32], term: impl Fn(f32, f32) -> f32) -> f32 {
    let mut sums = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| term(*x, *y)).sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            sums[i] += term(x[i], y[i]);
        }
    }
    sums.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn blocked_nearest_answers_as_nearest_for_every_row() {
        // 24 dims (a tail past the 8 lanes), 700 rows (blocks of 256 and a rest), 600
        // centroids (tiles of 256 and a rest), and a duplicate centroid: the first one wins.
        let dim = 24;
        let mut rng = StdRng::seed_from_u64(11);
        let rows: Vec<f32> = (0..700 * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let mut centroids: Vec<f32> = (0..600 * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let copy = centroids[10 * dim..11 * dim].to_vec();
        centroids[300 * dim..301 * dim].copy_from_slice(&copy);
        let mut rows = rows;
        rows[5 * dim..6 * dim].copy_from_slice(&copy);
        let halves = half_norms(&centroids, dim);
        let mut out = vec![usize::MAX; 700];
        nearest_blocked(&rows, dim, &centroids, &halves, &mut out);
        for (i, row) in rows.chunks_exact(dim).enumerate() {
            assert_eq!(out[i], nearest(row, &centroids, &halves), "row {i}");
        }
        assert_eq!(out[5], 10);
    }

    #[test]
    fn the_lane_sums_match_the_plain_ones() {
        let mut rng = StdRng::seed_from_u64(3);
        for dim in [1, 7, 8, 13, 384] {
            let a: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let b: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let plain_dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            let plain_sq: f32 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
            assert!((dot(&a, &b) - plain_dot).abs() <= 1e-4 * (1.0 + plain_dot.abs()), "dot at {dim}");
            assert!((sq_dist(&a, &b) - plain_sq).abs() <= 1e-4 * (1.0 + plain_sq), "sq_dist at {dim}");
            assert_eq!(sq_dist(&a, &b).to_bits(), lanes(&a, &b, |x, y| (x - y) * (x - y)).to_bits());
        }
    }

    #[test]
    fn four_at_a_time_finds_the_centroid_one_at_a_time_finds() {
        let mut rng = StdRng::seed_from_u64(6);
        for (dim, k) in [(8, 5), (13, 9), (384, 67), (3, 4)] {
            let centroids: Vec<f32> = (0..k * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let halves = half_norms(&centroids, dim);
            for _ in 0..50 {
                let v: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
                for range in [0..k, 1..k, 2..3, 0..0] {
                    let mut best = (range.start, f32::NEG_INFINITY);
                    for j in range.clone() {
                        let score = dot(&v, &centroids[j * dim..(j + 1) * dim]) - halves[j];
                        if score > best.1 {
                            best = (j, score);
                        }
                    }
                    assert_eq!(nearest_in(&v, &centroids, &halves, range.clone()), best.0, "{dim} {range:?}");
                    assert_eq!(nearest_in_lanes(&v, &centroids, &halves, range), best.0);
                }
            }
            let products =
                dot4(&centroids[..dim], std::array::from_fn(|t| &centroids[t * dim..(t + 1) * dim]));
            for (t, product) in products.into_iter().enumerate().take(k.min(4)) {
                let one = dot_lanes(&centroids[..dim], &centroids[t * dim..(t + 1) * dim]);
                assert_eq!(product.to_bits(), one.to_bits(), "dot4 lane {t} at dim {dim}");
            }
        }
    }

    #[test]
    fn several_vectors_at_a_time_find_the_centroids_one_at_a_time_finds() {
        let mut rng = StdRng::seed_from_u64(8);
        for (dim, k) in [(8, 5), (13, 9), (384, 67), (3, 4), (16, 1)] {
            let centroids: Vec<f32> = (0..k * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let halves = half_norms(&centroids, dim);
            for n in [0, 1, 2, 3, 4, 5, 6, 7, 13] {
                let mut vs: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
                if n > 1 {
                    // A tie: the first of equal centroids must win, as one at a time.
                    vs[dim..2 * dim].copy_from_slice(&centroids[..dim]);
                }
                let row = |i: usize| &vs[i * dim..(i + 1) * dim];
                for range in [0..k, 1..k, k - 1..k, 0..0] {
                    let mut each = vec![usize::MAX; n];
                    nearest_each(row, n, &centroids, &halves, range.clone(), &mut each);
                    let one: Vec<usize> =
                        (0..n).map(|i| nearest_in(row(i), &centroids, &halves, range.clone())).collect();
                    assert_eq!(each, one, "dim {dim}, {n} vectors, centroids {range:?}");
                    let mut portable = vec![usize::MAX; n];
                    nearest_each_lanes(&row, n, &centroids, &halves, range, &mut portable, false);
                    assert_eq!(portable, one);
                }
            }
        }
    }

    #[test]
    fn the_tiles_give_the_bits_of_single_products() {
        fn check<const N: usize, const C: usize>(rng: &mut StdRng, dim: usize) {
            let data: Vec<f32> = (0..(N + C) * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let v: [&[f32]; N] = std::array::from_fn(|t| &data[t * dim..(t + 1) * dim]);
            let c: [&[f32]; C] = std::array::from_fn(|u| &data[(N + u) * dim..(N + u + 1) * dim]);
            let mut tiles = vec![tile_lanes(v, c)];
            #[cfg(target_arch = "x86_64")]
            if crate::kernels::Isa::detected() >= crate::kernels::Isa::Avx2 {
                // SAFETY: AVX2 and FMA were detected on this CPU.
                tiles.push(unsafe { tile_avx2(v, c) });
            }
            for products in tiles {
                for t in 0..N {
                    for u in 0..C {
                        let one = dot_lanes(v[t], c[u]);
                        assert_eq!(
                            products[t][u].to_bits(),
                            one.to_bits(),
                            "{N}x{C} ({t}, {u}) at dim {dim}"
                        );
                    }
                }
            }
        }
        let mut rng = StdRng::seed_from_u64(9);
        for dim in [1, 3, 8, 13, 64, 384] {
            check::<4, 2>(&mut rng, dim);
            check::<2, 4>(&mut rng, dim);
            check::<1, 4>(&mut rng, dim);
            check::<3, 3>(&mut rng, dim);
        }
    }
}
