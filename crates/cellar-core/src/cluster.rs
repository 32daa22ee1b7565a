//! k-means for the IVF's clusters and the residual codec's centroids.
//!
//! - [`hierarchical`]: balanced hierarchical k-means: split the points into at most `MAX_BRANCH`
//!   clusters, then split again every cluster still larger than the target, until every leaf
//!   holds about `target` points (the IVF's clusters: DiskBBQ's partitioning);
//! - [`kmeans`]: one Lloyd run with k-means++ seeding (the residual codec's two-level tree).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Most children one split makes.
const MAX_BRANCH: usize = 64;
/// Lloyd iterations per split.
const ITERATIONS: usize = 12;
/// A cluster up to this many times the target is a leaf.
const LEAF_SLACK: f32 = 1.5;

/// Points, `dim` floats each, row after row.
pub struct Points<'a> {
    pub data: &'a [f32],
    pub dim: usize,
}

impl Points<'_> {
    pub fn row(&self, i: u32) -> &[f32] {
        let start = i as usize * self.dim;
        &self.data[start..start + self.dim]
    }

    pub fn len(&self) -> usize {
        self.data.len() / self.dim
    }

    pub fn is_empty(&self) -> bool {
        self.data.len() < self.dim
    }
}

/// The leaf centroids of a balanced hierarchical k-means over `points`, row after row.
pub fn hierarchical(points: &Points, target: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut leaves = Vec::new();
    let all: Vec<u32> = (0..points.len() as u32).collect();
    split(points, all, target.max(1), &mut rng, &mut leaves);
    leaves
}

fn split(points: &Points, members: Vec<u32>, target: usize, rng: &mut StdRng, leaves: &mut Vec<f32>) {
    if members.len() as f32 <= target as f32 * LEAF_SLACK {
        if !members.is_empty() {
            leaves.extend(mean(points, &members));
        }
        return;
    }
    let k = members.len().div_ceil(target).clamp(2, MAX_BRANCH);
    let groups = kmeans(points, &members, k, rng);
    let stuck = groups.iter().any(|g| g.len() == members.len());
    for group in groups {
        if stuck {
            // Identical points cannot be split: keep them as one leaf.
            leaves.extend(mean(points, &group));
        } else {
            split(points, group, target, rng, leaves);
        }
    }
}

/// The mean of the `members` of `points`.
pub fn mean(points: &Points, members: &[u32]) -> Vec<f32> {
    let mut sum = vec![0f32; points.dim];
    for &i in members {
        sum.iter_mut().zip(points.row(i)).for_each(|(s, v)| *s += v);
    }
    sum.iter_mut().for_each(|s| *s /= members.len() as f32);
    sum
}

/// Index of the centroid nearest to `v` (L2), with `half_norms[j] = |c_j|^2 / 2`.
pub fn nearest(v: &[f32], centroids: &[f32], half_norms: &[f32]) -> usize {
    nearest_in(v, centroids, half_norms, 0..half_norms.len())
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

/// Lloyd's k-means with k-means++ seeding over `members`; returns the non-empty groups.
pub fn kmeans(points: &Points, members: &[u32], k: usize, rng: &mut StdRng) -> Vec<Vec<u32>> {
    let dim = points.dim;
    let mut centroids = seed_plus_plus(points, members, k, rng);
    let mut assignment = vec![0usize; members.len()];
    for _ in 0..ITERATIONS {
        let halves = half_norms(&centroids, dim);
        assign_all(points, members, &centroids, &halves, &mut assignment);
        let mut sums = vec![0f32; k * dim];
        let mut counts = vec![0usize; k];
        for (&j, &i) in assignment.iter().zip(members) {
            counts[j] += 1;
            sums[j * dim..(j + 1) * dim].iter_mut().zip(points.row(i)).for_each(|(s, v)| *s += v);
        }
        for j in 0..k {
            let c = &mut centroids[j * dim..(j + 1) * dim];
            if counts[j] == 0 {
                // An empty cluster takes a random member as its new centroid.
                c.copy_from_slice(points.row(members[rng.gen_range(0..members.len())]));
            } else {
                c.iter_mut().zip(&sums[j * dim..]).for_each(|(c, s)| *c = s / counts[j] as f32);
            }
        }
    }
    let mut groups = vec![Vec::new(); k];
    for (&j, &i) in assignment.iter().zip(members) {
        groups[j].push(i);
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// Members per thread below which the assignment step runs on one thread.
const MIN_MEMBERS_PER_THREAD: usize = 4096;

/// Each member's nearest centroid, split over the cores for large sets (each member's answer
/// is the same whichever thread computes it).
fn assign_all(points: &Points, members: &[u32], centroids: &[f32], halves: &[f32], out: &mut [usize]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(members.len() / MIN_MEMBERS_PER_THREAD).max(1);
    let per = members.len().div_ceil(threads);
    let assign = |members: &[u32], out: &mut [usize]| {
        for (slot, &i) in out.iter_mut().zip(members) {
            *slot = nearest(points.row(i), centroids, halves);
        }
    };
    if threads == 1 {
        return assign(members, out);
    }
    std::thread::scope(|scope| {
        for (members, out) in members.chunks(per).zip(out.chunks_mut(per)) {
            scope.spawn(move || assign(members, out));
        }
    });
}

/// k-means++: each next seed drawn with probability proportional to its squared distance to the
/// nearest seed so far.
fn seed_plus_plus(points: &Points, members: &[u32], k: usize, rng: &mut StdRng) -> Vec<f32> {
    let dim = points.dim;
    let mut centroids = Vec::with_capacity(k * dim);
    centroids.extend_from_slice(points.row(members[rng.gen_range(0..members.len())]));
    let mut dist: Vec<f32> = members.iter().map(|&i| sq_dist(points.row(i), &centroids[..dim])).collect();
    while centroids.len() < k * dim {
        let total: f64 = dist.iter().map(|d| *d as f64).sum();
        let pick = if total <= 0.0 {
            rng.gen_range(0..members.len())
        } else {
            let mut target = rng.gen_range(0.0..total);
            dist.iter()
                .position(|d| {
                    target -= *d as f64;
                    target <= 0.0
                })
                .unwrap_or(members.len() - 1)
        };
        let start = centroids.len();
        centroids.extend_from_slice(points.row(members[pick]));
        let seed = centroids[start..].to_vec();
        for (d, &i) in dist.iter_mut().zip(members) {
            *d = d.min(sq_dist(points.row(i), &seed));
        }
    }
    centroids
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

    #[test]
    fn leaves_are_near_the_target_size_and_cover_every_point() {
        let dim = 8;
        let mut rng = StdRng::seed_from_u64(5);
        let data: Vec<f32> = (0..3000 * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let points = Points { data: &data, dim };
        let centroids = hierarchical(&points, 100, 9);
        let n = centroids.len() / dim;
        assert!((15..=60).contains(&n), "{n} leaves for 3000 points at target 100");
        let halves = half_norms(&centroids, dim);
        let mut sizes = vec![0usize; n];
        for i in 0..3000 {
            sizes[nearest(points.row(i), &centroids, &halves)] += 1;
        }
        assert_eq!(sizes.iter().sum::<usize>(), 3000);
        assert!(*sizes.iter().max().unwrap() <= 400, "largest cluster {:?}", sizes.iter().max());
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
    fn the_threaded_assignment_is_the_one_threaded_one() {
        let dim = 16;
        let mut rng = StdRng::seed_from_u64(4);
        let data: Vec<f32> =
            (0..3 * MIN_MEMBERS_PER_THREAD * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let points = Points { data: &data, dim };
        let members: Vec<u32> = (0..points.len() as u32).collect();
        let centroids: Vec<f32> = data[..40 * dim].to_vec();
        let halves = half_norms(&centroids, dim);
        let mut threaded = vec![0; members.len()];
        assign_all(&points, &members, &centroids, &halves, &mut threaded);
        let one: Vec<usize> = members.iter().map(|&i| nearest(points.row(i), &centroids, &halves)).collect();
        assert_eq!(threaded, one);
    }

    #[test]
    fn identical_points_make_one_leaf_instead_of_recursing_forever() {
        let data = vec![0.5f32; 4 * 500];
        let centroids = hierarchical(&Points { data: &data, dim: 4 }, 10, 1);
        assert!(!centroids.is_empty() && centroids.len().is_multiple_of(4));
    }
}
