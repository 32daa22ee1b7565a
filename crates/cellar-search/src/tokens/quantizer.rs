//! The token quantizer: a two-level tree of centroids sized to the collection, every centroid
//! of unit length.
//!
//! `tops` (about √K of them, f32) split the token space into groups; each group holds a run of
//! leaves (K in all, f16 in RAM), so routing one vector costs about 2√K dot products, not K:
//! at 131,072 leaves 724 instead of 131,072. Tokens are assigned at build to the nearest leaf
//! of their nearest top (L2, as the tree was trained); a query token is routed by inner product
//! (the score MaxSim sums) to the `route` best groups, whose leaves are all scored.

use std::cmp::Ordering;

use cellar_core::cluster::{half_norms, kmeans_sampled, kmeans_with, mean, nearest, nearest_each, Points};
use cellar_core::kernels::{dot_f16, Isa};
use half::f16;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// Lloyd passes when a group's sample is split into its leaves.
const LEAF_ITERATIONS: usize = 6;
/// Sample points per top centroid the top level is placed on.
const TOP_FIT_PER_CENTROID: usize = 64;

/// The tree, as held in RAM by a search.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantizer {
    pub dim: usize,
    /// Top centroids, row after row.
    pub tops: Vec<f32>,
    /// Group `g`'s leaves are `starts[g]..starts[g + 1]`.
    pub starts: Vec<u32>,
    /// Leaf centroids as little-endian f16, row after row.
    pub leaves: Vec<u8>,
    top_halves: Vec<f32>,
    leaf_halves: Vec<f32>,
}

/// Leaves per square root of the tokens. PLAID's rule is 16 (131,072 leaves at 120M tokens);
/// with each posting's residual code scored, 4 loses nothing at equal postings scanned (on the
/// 200k synthetic collection, 8,192 leaves found 0.61 of the exact top 10 at nprobe 32 where
/// 32,768 found 0.53, `bench/results/tokens-quality.md`) and halves the cost of assigning a
/// token (2·√K dot products).
pub const LEAVES_PER_SQRT_TOKEN: f64 = 4.0;

/// The leaves a build asks for: `LEAVES_PER_SQRT_TOKEN`·√tokens rounded down to a power of two
/// (at least 16), and never more than the sample can place.
pub fn leaves_for(tokens: u64, sample: usize) -> usize {
    let raw = LEAVES_PER_SQRT_TOKEN * (tokens as f64).sqrt();
    let pow = if raw < 16.0 { 16 } else { 1usize << (raw.log2().floor() as u32) };
    pow.min(sample.max(1))
}

impl Quantizer {
    pub fn new(dim: usize, tops: Vec<f32>, starts: Vec<u32>, leaves: Vec<u8>) -> Quantizer {
        let top_halves = half_norms(&tops, dim);
        let as_f32 = leaves_f32(&leaves);
        let leaf_halves = half_norms(&as_f32, dim);
        Quantizer { dim, tops, starts, leaves, top_halves, leaf_halves }
    }

    /// Trains the tree on `sample` with about `k` leaves: the tops by k-means on part of the
    /// sample, then each top's members split into leaves in proportion to their count (two
    /// threads, one group each at a time; every group's split seeded by its number, so the tree
    /// does not depend on the threads).
    pub fn train(sample: &Points, k: usize, seed: u64) -> Quantizer {
        let n = sample.len();
        let k = k.clamp(1, n.max(1));
        let t = ((k as f64).sqrt().ceil() as usize).clamp(1, k);
        let all: Vec<u32> = (0..n as u32).collect();
        let mut rng = StdRng::seed_from_u64(seed);
        let groups = kmeans_sampled(sample, &all, t, (t * TOP_FIT_PER_CENTROID).max(t), &mut rng);
        let dim = sample.dim;
        let wanted: Vec<usize> = groups
            .iter()
            .map(|g| ((k as f64 * g.len() as f64 / n as f64).round() as usize).clamp(1, g.len()))
            .collect();
        let split = |g: usize| -> Vec<f32> {
            let mut rng = StdRng::seed_from_u64(seed ^ (g as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            kmeans_with(sample, &groups[g], wanted[g], LEAF_ITERATIONS, &mut rng)
                .iter()
                .flat_map(|members| unit(mean(sample, members)))
                .collect()
        };
        let threads = std::thread::available_parallelism().map_or(1, |p| p.get()).min(groups.len()).max(1);
        let mut parts: Vec<Vec<f32>> = vec![Vec::new(); groups.len()];
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|w| {
                    let (split, groups) = (&split, &groups);
                    scope.spawn(move || {
                        (w..groups.len()).step_by(threads).map(|g| (g, split(g))).collect::<Vec<_>>()
                    })
                })
                .collect();
            for handle in handles {
                for (g, leaves) in handle.join().expect("a leaf split panicked") {
                    parts[g] = leaves;
                }
            }
        });
        let tops: Vec<f32> = groups.iter().flat_map(|g| unit(mean(sample, g))).collect();
        let mut starts = vec![0u32];
        let mut leaves = Vec::new();
        for part in parts {
            leaves.extend(part.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()));
            starts.push((leaves.len() / (2 * dim)) as u32);
        }
        Quantizer::new(dim, tops, starts, leaves)
    }

    pub fn leaves(&self) -> usize {
        self.leaf_halves.len()
    }

    pub fn groups(&self) -> usize {
        self.top_halves.len()
    }

    fn leaf(&self, j: usize) -> &[u8] {
        &self.leaves[j * 2 * self.dim..(j + 1) * 2 * self.dim]
    }

    /// Leaf `j`'s values as f32.
    pub fn leaf_values(&self, j: usize) -> Vec<f32> {
        leaves_f32(self.leaf(j))
    }

    /// The leaves as f32 (their f16 values), for a build's assignment.
    pub fn leaves_f32(&self) -> Vec<f32> {
        leaves_f32(&self.leaves)
    }

    /// The leaf of one vector: the nearest leaf (L2) of its nearest top.
    pub fn assign(&self, isa: Isa, v: &[f32]) -> u32 {
        let g = nearest(v, &self.tops, &self.top_halves);
        let range = self.starts[g] as usize..self.starts[g + 1] as usize;
        let mut best = (range.start, f32::NEG_INFINITY);
        for j in range {
            let score = dot_f16(isa, v, self.leaf(j)) - self.leaf_halves[j];
            if score > best.1 {
                best = (j, score);
            }
        }
        best.0 as u32
    }

    /// The leaves of `rows` (row after row), for a build: the same rule as [`Quantizer::assign`]
    /// on `leaves` (the leaves as f32), a block of rows against the tops at once.
    pub fn assign_rows(&self, rows: &[f32], leaves: &[f32], out: &mut Vec<u32>) {
        let dim = self.dim;
        let n = rows.len() / dim;
        let mut tops = vec![0usize; n];
        nearest_each(
            |i| &rows[i * dim..(i + 1) * dim],
            n,
            &self.tops,
            &self.top_halves,
            0..self.groups(),
            &mut tops,
        );
        // Rows grouped by their top, then each group's rows against its leaves at once (a
        // group's leaves stay in the caches while its rows are scored).
        let mut by_group: Vec<Vec<u32>> = vec![Vec::new(); self.groups()];
        for (i, &g) in tops.iter().enumerate() {
            by_group[g].push(i as u32);
        }
        out.clear();
        out.resize(n, 0);
        let mut found = Vec::new();
        for (g, members) in by_group.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
            let range = self.starts[g] as usize..self.starts[g + 1] as usize;
            found.clear();
            found.resize(members.len(), 0);
            let row = |i: usize| {
                let r = members[i] as usize;
                &rows[r * dim..(r + 1) * dim]
            };
            nearest_each(row, members.len(), leaves, &self.leaf_halves, range, &mut found);
            for (&r, &leaf) in members.iter().zip(&found) {
                out[r as usize] = leaf as u32;
            }
        }
    }

    /// Each query token's `nprobe` best leaves by inner product, best first, among the leaves of
    /// its `route` best groups: `(leaf, score)`.
    pub fn probe(&self, isa: Isa, tokens: &[f32], nprobe: usize, route: usize) -> Vec<Vec<(u32, f32)>> {
        let dim = self.dim;
        let route = route.clamp(1, self.groups());
        let mut groups: Vec<(usize, f32)> = Vec::with_capacity(self.groups());
        tokens
            .chunks_exact(dim)
            .map(|q| {
                groups.clear();
                groups
                    .extend(self.tops.chunks_exact(dim).map(|c| cellar_core::cluster::dot(q, c)).enumerate());
                if route < groups.len() {
                    groups.select_nth_unstable_by(route - 1, by_score);
                    groups.truncate(route);
                }
                let mut leaves: Vec<(u32, f32)> = groups
                    .iter()
                    .flat_map(|&(g, _)| self.starts[g]..self.starts[g + 1])
                    .map(|j| (j, dot_f16(isa, q, self.leaf(j as usize))))
                    .collect();
                let keep = nprobe.min(leaves.len());
                if keep > 0 && keep < leaves.len() {
                    leaves.select_nth_unstable_by(keep - 1, by_score);
                    leaves.truncate(keep);
                }
                leaves.sort_by(by_score);
                leaves
            })
            .collect()
    }
}

/// `v` scaled to unit length (as PLAID normalises its centroids): a query token's inner product
/// with a centroid is then its cosine with the cluster's direction, not biased towards tight
/// clusters, whose means are longer than those of loose ones.
fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

fn leaves_f32(leaves: &[u8]) -> Vec<f32> {
    leaves.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
}

/// Higher score first, then the lower id.
fn by_score<T: Ord + Copy>(a: &(T, f32), b: &(T, f32)) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    fn points(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        let centres: Vec<f32> = (0..16 * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        (0..n)
            .flat_map(|_| {
                let c = rng.gen_range(0..16);
                let centre = centres[c * dim..(c + 1) * dim].to_vec();
                centre.into_iter().map(|x| x + rng.gen_range(-0.2f32..0.2)).collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn leaves_grow_with_the_square_root_of_the_tokens() {
        assert_eq!(leaves_for(120_000_000, usize::MAX), 32_768);
        assert_eq!(leaves_for(11_973_264, usize::MAX), 8_192);
        assert_eq!(leaves_for(1_083_919, usize::MAX), 4_096);
        assert_eq!(leaves_for(1, usize::MAX), 16);
        assert_eq!(leaves_for(100, usize::MAX), 32);
        assert_eq!(leaves_for(1_000_000, 1000), 1000, "no more leaves than sample points");
    }

    #[test]
    fn the_tree_places_every_leaf_and_build_and_search_assign_alike() {
        let dim = 16;
        let data = points(4000, dim, 1);
        let sample = Points { data: &data, dim };
        let q = Quantizer::train(&sample, 256, 3);
        assert_eq!(q.starts.len(), q.groups() + 1);
        assert_eq!(*q.starts.last().unwrap() as usize, q.leaves());
        assert!(q.leaves() >= 200 && q.leaves() <= 300, "{} leaves", q.leaves());
        assert!(q.starts.windows(2).all(|w| w[0] < w[1]), "every group has a leaf");
        assert_eq!(q, Quantizer::train(&sample, 256, 3), "the same seed, the same tree");
        let isa = Isa::detected();
        let leaves = q.leaves_f32();
        let mut built = Vec::new();
        q.assign_rows(&data, &leaves, &mut built);
        let searched: Vec<u32> = data.chunks_exact(dim).map(|v| q.assign(isa, v)).collect();
        let same = built.iter().zip(&searched).filter(|(a, b)| a == b).count();
        assert!(same * 1000 >= built.len() * 995, "{same} of {} alike", built.len());
        // Every leaf is the nearest within its vector's group (brute force over that group).
        for (i, v) in data.chunks_exact(dim).enumerate().step_by(37) {
            let g = nearest(v, &q.tops, &half_norms(&q.tops, dim));
            let dist =
                |j: usize| v.iter().zip(&leaves[j * dim..]).map(|(a, b)| (a - b) * (a - b)).sum::<f32>();
            let best =
                (q.starts[g] as usize..q.starts[g + 1] as usize).map(dist).fold(f32::INFINITY, f32::min);
            assert!(dist(built[i] as usize) <= best + 1e-4, "row {i}");
        }
    }

    #[test]
    fn a_probe_of_every_group_finds_the_best_leaves_by_inner_product() {
        let dim = 8;
        let data = points(2000, dim, 5);
        let q = Quantizer::train(&Points { data: &data, dim }, 64, 9);
        let isa = Isa::detected();
        let query = &data[..3 * dim];
        let probed = q.probe(isa, query, 5, q.groups());
        for (t, found) in probed.iter().enumerate() {
            let token = &query[t * dim..(t + 1) * dim];
            let mut all: Vec<(u32, f32)> =
                (0..q.leaves()).map(|j| (j as u32, dot_f16(isa, token, q.leaf(j)))).collect();
            all.sort_by(by_score);
            assert_eq!(found, &all[..5].to_vec(), "token {t}");
        }
        let narrow = q.probe(isa, query, 5, 1);
        assert!(narrow.iter().all(|l| l.len() <= 5 && l.windows(2).all(|w| w[0].1 >= w[1].1)));
    }
}
