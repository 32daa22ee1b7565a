//! How a residual codec is learned from sample tokens: the two-level centroid tree (or the check
//! of one given instead), which dimensions stay uncoded, and the Lloyd-Max buckets. The codec
//! itself, its bytes and its scoring are in the parent module.

use std::sync::atomic::{AtomicUsize, Ordering};

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::MAX_GIVEN_CENTROIDS;
use crate::cluster::{kmeans_sampled, kmeans_with, mean, Points};
use crate::codec::{CentroidTree, FitOptions};
use crate::error::{CellarError, Result};

/// Most points the tree's top level is placed on (more are evenly spread over; every point then
/// goes to its nearest top centroid). Its few dozen centroids only route a token to its leaves:
/// placed on 16,384 points instead of a build's ~50,000, they cost a quarter as much and the
/// codec loses 0.1-0.2% more of the tokens (`bench/results/codecs-cheap-fit.md`).
pub(super) const TOP_FIT_POINTS: usize = 16_384;
/// Most Lloyd passes of each top cluster's split into leaves (a split that stops moving ends
/// sooner). With six instead of twelve, and [`TOP_FIT_POINTS`], a SciFact build's fit takes
/// 1.0 s instead of 1.4, the token error is 0.3% higher, and nDCG@10 does not move beyond the
/// fits' noise (same file).
pub(super) const LEAF_ITERATIONS: usize = 6;
/// Most refinement passes of the bucket values (a bound: the loop ends once no value moves).
const LLOYD_MAX_PASSES: usize = 200;

/// Cutoffs and values of `buckets` buckets for `sorted` values that minimise the squared error
/// (Lloyd-Max): start from equal quantiles, each bucket's value the mean of its members, then
/// alternate cutoffs halfway between neighbouring values and values at their members' means
/// until nothing moves. Token residuals have heavier tails than a normal distribution, which
/// equal-quantile buckets cut too coarsely (SciFact's MiniLM residuals: 23% less squared error at
/// 2 bits, 70% at 4).
pub(super) fn lloyd_max(sorted: &[f32], buckets: usize) -> (Vec<f32>, Vec<f32>) {
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

/// Which dimensions carry codes: the first `coded` of the codec's order, where position `p`
/// holds the caller's dimension `order[p]` (empty `order`: the caller's own order).
pub(super) struct Layout {
    pub(super) coded: usize,
    pub(super) order: Vec<u32>,
}

impl Layout {
    /// Every dimension coded, in the caller's order.
    pub(super) fn all_coded(dim: usize) -> Layout {
        Layout { coded: dim, order: Vec::new() }
    }

    /// The caller's dimension at each position of the codec's order.
    pub(super) fn positions(&self, dim: usize) -> Vec<usize> {
        if self.order.is_empty() {
            (0..dim).collect()
        } else {
            self.order.iter().map(|&k| k as usize).collect()
        }
    }
}

/// The layout for residual energies `squares` (one per dimension): the smallest-energy
/// dimensions (ties by index) are left uncoded, 8 at a time, while together they hold at most
/// `energy_max` of the total (by default [`super::UNCODED_ENERGY_MAX`]) and at least 8 dimensions stay
/// coded. The codec's order is the coded dimensions, then the uncoded ones, each ascending.
pub(super) fn uncoded_layout(squares: &[f64], energy_max: f64) -> Layout {
    let dim = squares.len();
    let mut by_energy: Vec<usize> = (0..dim).collect();
    by_energy.sort_by(|a, b| squares[*a].total_cmp(&squares[*b]).then(a.cmp(b)));
    let total: f64 = squares.iter().sum();
    let (mut uncoded, mut held) = (0, 0.0);
    while uncoded + 16 <= dim {
        let group: f64 = by_energy[uncoded..uncoded + 8].iter().map(|&k| squares[k]).sum();
        if held + group > energy_max * total {
            break;
        }
        held += group;
        uncoded += 8;
    }
    if uncoded == 0 {
        return Layout::all_coded(dim);
    }
    let mut skipped = vec![false; dim];
    by_energy[..uncoded].iter().for_each(|&k| skipped[k] = true);
    let order = (0..dim).filter(|&k| !skipped[k]).chain((0..dim).filter(|&k| skipped[k])).map(|k| k as u32);
    Layout { coded: dim - uncoded, order: order.collect() }
}

/// Each `rows.len() / order.len()` row with its values taken in `order`.
pub(super) fn permute_rows(rows: &[f32], order: &[usize]) -> Vec<f32> {
    rows.chunks_exact(order.len()).flat_map(|row| order.iter().map(move |&k| row[k])).collect()
}

/// The centroid tree: top centroids, each one's range of leaves, the leaves.
pub(super) struct Tree {
    pub(super) top: Vec<f32>,
    pub(super) ranges: Vec<u32>,
    pub(super) leaves: Vec<f32>,
}

/// How much work a tree's k-means does ([`TOP_FIT_POINTS`] and [`LEAF_ITERATIONS`] unless a
/// benchmark compares others).
pub(super) struct TreeFit {
    pub(super) top_fit_points: usize,
    pub(super) leaf_iterations: usize,
}

/// A two-level tree over `points`: `ceil(sqrt(k))` top clusters, each split into leaves in
/// proportion to its size.
pub(super) fn two_level(points: &Points, k: usize, seed: u64, shape: &TreeFit) -> Tree {
    let mut rng = StdRng::seed_from_u64(seed);
    let all: Vec<u32> = (0..points.len() as u32).collect();
    let k1 = ((k as f64).sqrt().ceil() as usize).clamp(1, points.len());
    let groups = kmeans_sampled(points, &all, k1, shape.top_fit_points, &mut rng);
    // Each top cluster is split on its own (seeded by its position), on as many threads as
    // there are cores: the same tree whichever thread splits which cluster.
    let split = |g: usize| -> Vec<Vec<u32>> {
        let group = &groups[g];
        let share = (k * group.len()).div_ceil(points.len()).clamp(1, group.len());
        if share == 1 {
            return vec![group.clone()];
        }
        let mut rng = StdRng::seed_from_u64(seed ^ (g as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        kmeans_with(points, group, share, shape.leaf_iterations, &mut rng)
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

/// The codec's tree from a given one (`FitOptions::tree`), refused unless its shape fits a
/// codec of `dim` values: `dim` columns, 1 to [`MAX_GIVEN_CENTROIDS`] leaves, every top
/// centroid with at least one leaf, finite values, and no k-means option beside it.
pub(super) fn given_tree(given: &CentroidTree, dim: usize, options: &FitOptions) -> Result<Tree> {
    let bad = |detail: String| Err(CellarError::invalid(format!("the given centroid tree: {detail}")));
    let kmeans = [
        ("a seed", options.seed.is_some()),
        ("a centroid count", options.centroids.is_some()),
        ("top-level fit points", options.top_fit_points.is_some()),
        ("leaf iterations", options.leaf_iterations.is_some()),
    ];
    if let Some((what, _)) = kmeans.iter().find(|(_, set)| *set) {
        return bad(format!("replaces the k-means, which {what} would shape"));
    }
    if given.dim != dim {
        return bad(format!("has {} dimensions, the codec {dim}", given.dim));
    }
    let groups = given.ranges.len().saturating_sub(1);
    if groups == 0 || given.leaves.is_empty() {
        return bad("is empty".into());
    }
    if !given.leaves.len().is_multiple_of(dim) || given.top.len() != groups * dim {
        return bad(format!(
            "{} top values for {groups} top centroids and {} leaf values are not whole rows of {dim}",
            given.top.len(),
            given.leaves.len()
        ));
    }
    let leaves = given.leaves.len() / dim;
    if leaves > MAX_GIVEN_CENTROIDS {
        return bad(format!("has {leaves} leaves; 16-bit ids name at most {MAX_GIVEN_CENTROIDS}"));
    }
    let r = &given.ranges;
    if r[0] != 0 || r[groups] as usize != leaves || r.windows(2).any(|w| w[0] >= w[1]) {
        return bad(format!("its ranges do not increase from 0 to the {leaves} leaves"));
    }
    if given.top.iter().chain(&given.leaves).any(|v| !v.is_finite()) {
        return bad("a centroid value is not finite".into());
    }
    Ok(Tree { top: given.top.clone(), ranges: given.ranges.clone(), leaves: given.leaves.clone() })
}

#[cfg(test)]
mod tests {
    use super::super::UNCODED_ENERGY_MAX;
    use super::*;
    use rand::Rng;

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
    fn uncoded_groups_stay_under_the_energy_bound_and_leave_8_coded() {
        // 24 dimensions of energy 1, then 3 constant ones and 5 of 0.001 (0.02% of the total).
        let mut squares = vec![1.0; 32];
        squares[24..27].fill(0.0);
        squares[27..].fill(0.001);
        squares.swap(3, 30);
        let layout = uncoded_layout(&squares, UNCODED_ENERGY_MAX);
        assert_eq!(layout.coded, 24);
        let skipped: Vec<u32> = layout.order[24..].to_vec();
        assert_eq!(skipped, [3, 24, 25, 26, 27, 28, 29, 31], "the uncoded dimensions, ascending");
        assert!(layout.order[..24].windows(2).all(|w| w[0] < w[1]), "the coded ones, ascending");
        // Even energies: a group of 8 holds 25%, more than the bound; nothing is left uncoded.
        let even = uncoded_layout(&[1.0; 32], UNCODED_ENERGY_MAX);
        assert_eq!((even.coded, even.order.len()), (32, 0));
        // All but one group negligible: 8 dimensions stay coded all the same.
        let mut one = vec![0.0; 32];
        one[..8].fill(1.0);
        assert_eq!(uncoded_layout(&one, UNCODED_ENERGY_MAX).coded, 8);
    }
}
