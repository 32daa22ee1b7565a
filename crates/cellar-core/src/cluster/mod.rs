//! k-means for the IVF's clusters and the residual codec's centroids.
//!
//! - [`hierarchical`]: balanced hierarchical k-means: split the points into at most `MAX_BRANCH`
//!   clusters, then split again every cluster still larger than the target, until every leaf
//!   holds about `target` points (the IVF's clusters: DiskBBQ's partitioning);
//! - [`kmeans`]: one Lloyd run with k-means++ seeding, ending early at a fixed point;
//!   [`kmeans_with`] bounds its passes and [`kmeans_sampled`] places the centroids on an even
//!   sample of the points (the residual codec's two-level tree uses both);
//! - `nearest.rs`: the nearest-centroid search and dot products all of these (and the IVF's
//!   probe and the codec's encoding) run on, re-exported here.

mod nearest;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use self::nearest::sq_dist;
pub use self::nearest::{
    dot, half_norms, nearest, nearest_and_error, nearest_blocked, nearest_each, nearest_in,
};

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

/// Lloyd's k-means with k-means++ seeding over `members`; returns the non-empty groups.
pub fn kmeans(points: &Points, members: &[u32], k: usize, rng: &mut StdRng) -> Vec<Vec<u32>> {
    kmeans_with(points, members, k, ITERATIONS, rng)
}

/// [`kmeans`] with at most `iterations` Lloyd passes.
pub fn kmeans_with(
    points: &Points,
    members: &[u32],
    k: usize,
    iterations: usize,
    rng: &mut StdRng,
) -> Vec<Vec<u32>> {
    let dim = points.dim;
    let mut centroids = seed_plus_plus(points, members, k, rng);
    let mut assignment = vec![0usize; members.len()];
    let mut previous = Vec::new();
    let mut reseeded = true;
    for _ in 0..iterations {
        let halves = half_norms(&centroids, dim);
        std::mem::swap(&mut previous, &mut assignment);
        assignment.resize(members.len(), 0);
        assign_all(points, members, &centroids, &halves, &mut assignment);
        if !reseeded && assignment == previous {
            // A fixed point: the centroids are the means of this very assignment, so every
            // later pass would repeat it (the same result as running them all).
            break;
        }
        let mut sums = vec![0f32; k * dim];
        let mut counts = vec![0usize; k];
        reseeded = false;
        for (&j, &i) in assignment.iter().zip(members) {
            counts[j] += 1;
            sums[j * dim..(j + 1) * dim].iter_mut().zip(points.row(i)).for_each(|(s, v)| *s += v);
        }
        for j in 0..k {
            let c = &mut centroids[j * dim..(j + 1) * dim];
            if counts[j] == 0 {
                // An empty cluster takes a random member as its new centroid.
                reseeded = true;
                c.copy_from_slice(points.row(members[rng.gen_range(0..members.len())]));
            } else {
                c.iter_mut().zip(&sums[j * dim..]).for_each(|(c, s)| *c = s / counts[j] as f32);
            }
        }
    }
    groups_of(&assignment, members, k)
}

/// [`kmeans`] of `members` with the centroids placed on at most `fit_points` of them (evenly
/// spread), then every member assigned to the nearest of their means: for a few centroids,
/// which a sample places about as well as the whole set, at a fraction of the cost.
pub fn kmeans_sampled(
    points: &Points,
    members: &[u32],
    k: usize,
    fit_points: usize,
    rng: &mut StdRng,
) -> Vec<Vec<u32>> {
    let n = members.len();
    if n <= fit_points.max(k) {
        return kmeans(points, members, k, rng);
    }
    let sample: Vec<u32> = (0..fit_points).map(|j| members[j * n / fit_points]).collect();
    let fitted = kmeans(points, &sample, k, rng);
    let centroids: Vec<f32> = fitted.iter().flat_map(|g| mean(points, g)).collect();
    let halves = half_norms(&centroids, points.dim);
    let mut nearest = vec![0usize; n];
    assign_all(points, members, &centroids, &halves, &mut nearest);
    groups_of(&nearest, members, fitted.len())
}

/// The non-empty groups of `members` by their cluster in `assignment` (one of `k`), in cluster
/// order, each in member order.
fn groups_of(assignment: &[usize], members: &[u32], k: usize) -> Vec<Vec<u32>> {
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
    split_over_cores(members, out, |members, out| {
        nearest_each(|i| points.row(members[i]), members.len(), centroids, halves, 0..halves.len(), out)
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
        split_over_cores(members, &mut dist, |members, dist| {
            for (d, &i) in dist.iter_mut().zip(members) {
                *d = d.min(sq_dist(points.row(i), &seed));
            }
        });
    }
    centroids
}

/// Runs `work` on matching parts of `members` and `out`, split over the cores for large sets
/// (each member's result is the same whichever thread computes it).
fn split_over_cores<T: Send>(members: &[u32], out: &mut [T], work: impl Fn(&[u32], &mut [T]) + Sync) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(members.len() / MIN_MEMBERS_PER_THREAD).max(1);
    if threads == 1 {
        return work(members, out);
    }
    let per = members.len().div_ceil(threads);
    std::thread::scope(|scope| {
        for (members, out) in members.chunks(per).zip(out.chunks_mut(per)) {
            let work = &work;
            scope.spawn(move || work(members, out));
        }
    });
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

    /// Every tile shape, portable and (where the CPU has it) AVX2, gives [`dot_lanes`]' bits.

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

    /// `per` points around each of `blobs` centres 10 apart (each centre one axis, spread 0.1),
    /// blob after blob: point `i` is of blob `i / per`.
    fn blobs(blobs: usize, per: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..blobs * per)
            .flat_map(|i| {
                let centre = i / per;
                (0..dim)
                    .map(|d| if d == centre { 10.0 } else { 0.0 } + rng.gen_range(-0.1..0.1))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Each group as the sorted set of blobs its members come from.
    fn blobs_of(groups: &[Vec<u32>], per: usize) -> Vec<Vec<u32>> {
        groups
            .iter()
            .map(|g| {
                let mut b: Vec<u32> = g.iter().map(|&i| i / per as u32).collect();
                b.sort_unstable();
                b.dedup();
                b
            })
            .collect()
    }

    #[test]
    fn a_sampled_fit_finds_the_clusters_and_places_every_member_once() {
        // Six blobs of 3,000 points; the centroids are placed on 600 of the 18,000, then every
        // point is assigned: each group is one whole blob.
        let (dim, n_blobs) = (8, 6);
        let data = blobs(n_blobs, 3000, dim, 3);
        let points = Points { data: &data, dim };
        let members: Vec<u32> = (0..points.len() as u32).collect();
        let groups = kmeans_sampled(&points, &members, n_blobs, 600, &mut StdRng::seed_from_u64(1));
        assert_eq!(groups.len(), n_blobs);
        assert!(
            groups.iter().all(|g| g.len() == 3000),
            "{:?}",
            groups.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert!(blobs_of(&groups, 3000).iter().all(|b| b.len() == 1));
        let mut seen: Vec<u32> = groups.concat();
        seen.sort_unstable();
        assert_eq!(seen, members);
        // A set no larger than the sample is fitted whole: plain k-means, same draws.
        let few = &members[..500];
        assert_eq!(
            kmeans_sampled(&points, few, 4, 600, &mut StdRng::seed_from_u64(9)),
            kmeans(&points, few, 4, &mut StdRng::seed_from_u64(9))
        );
    }

    #[test]
    fn lloyd_returns_a_fixed_point_whether_it_stops_early_or_not() {
        // Five blobs into three clusters: no pass count splits them by blob, but k-means
        // settles within a few passes. The groups of a stopped run are a fixed point (each
        // member's nearest group mean is its own group's), the same groups as with more passes.
        let (dim, n_blobs) = (8, 5);
        let data = blobs(n_blobs, 400, dim, 7);
        let points = Points { data: &data, dim };
        let members: Vec<u32> = (0..points.len() as u32).collect();
        let settled = kmeans_with(&points, &members, 3, 50, &mut StdRng::seed_from_u64(2));
        assert_eq!(settled, kmeans_with(&points, &members, 3, 500, &mut StdRng::seed_from_u64(2)));
        let means: Vec<f32> = settled.iter().flat_map(|g| mean(&points, g)).collect();
        let halves = half_norms(&means, dim);
        for (j, group) in settled.iter().enumerate() {
            for &i in group {
                assert_eq!(nearest(points.row(i), &means, &halves), j, "member {i}");
            }
        }
    }

    #[test]
    fn identical_points_make_one_leaf_instead_of_recursing_forever() {
        let data = vec![0.5f32; 4 * 500];
        let centroids = hierarchical(&Points { data: &data, dim: 4 }, 10, 1);
        assert!(!centroids.is_empty() && centroids.len().is_multiple_of(4));
    }
}
