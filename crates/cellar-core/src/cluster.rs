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
    let dim = v.len();
    let mut best = (0, f32::NEG_INFINITY);
    for (j, c) in centroids.chunks_exact(dim).enumerate() {
        let score = dot(v, c) - half_norms[j];
        if score > best.1 {
            best = (j, score);
        }
    }
    best.0
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
        for (slot, &i) in assignment.iter_mut().zip(members) {
            *slot = nearest(points.row(i), &centroids, &halves);
        }
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

pub(crate) fn sq_dist(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
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
    let mut sums = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            sums[i] += x[i] * y[i];
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
    fn identical_points_make_one_leaf_instead_of_recursing_forever() {
        let data = vec![0.5f32; 4 * 500];
        let centroids = hierarchical(&Points { data: &data, dim: 4 }, 10, 1);
        assert!(!centroids.is_empty() && centroids.len().is_multiple_of(4));
    }
}
