//! A token's residual from its leaf, in one bit per dimension and one factor (RaBitQ's
//! estimator without the rotation): the sign of each value of `r = t - c`, and
//! `f = |r|^2 / sum |r_i|`, so that `q·r ≈ f · <q, s>` where `s` is the sign vector. A query
//! token's inner product with the token is then estimated as `q·c + f · <q, s>` without
//! decoding anything: `<q, s>` is `2 · (sum of q over the set bits) - sum(q)`, the first term
//! read from a table of 256 partial sums per byte of the code (WARP's "score the residuals
//! without decompressing them").

use half::f16;

/// Bytes of one token's sign bits at `dim` dimensions.
pub fn code_bytes(dim: usize) -> usize {
    dim.div_ceil(8)
}

/// Bytes of one posting's code and factor.
pub fn posting_bytes(dim: usize) -> usize {
    code_bytes(dim) + 2
}

/// Writes the sign bits of `token - centroid` into `bits` (`code_bytes(dim)` bytes, bit `i % 8`
/// of byte `i / 8` set where value `i` is positive) and returns the factor as f16 bits.
pub fn encode(token: &[f32], centroid: &[f32], bits: &mut [u8]) -> u16 {
    bits.fill(0);
    let (mut squares, mut absolute) = (0f32, 0f32);
    for (i, (t, c)) in token.iter().zip(centroid).enumerate() {
        let r = t - c;
        if r > 0.0 {
            bits[i / 8] |= 1 << (i % 8);
        }
        squares += r * r;
        absolute += r.abs();
    }
    let factor = if absolute > 0.0 { squares / absolute } else { 0.0 };
    f16::from_f32(factor).to_bits()
}

/// A query token's tables: per byte of a code, the sum of the query's values over each of the
/// 256 bit patterns; and the sum of all its values.
pub struct QueryTable {
    sums: Vec<f32>,
    total: f32,
}

impl QueryTable {
    pub fn new(query: &[f32]) -> QueryTable {
        let bytes = code_bytes(query.len());
        let mut sums = vec![0f32; bytes * 256];
        for j in 0..bytes {
            let values = &query[j * 8..(j * 8 + 8).min(query.len())];
            let table = &mut sums[j * 256..(j + 1) * 256];
            for (pattern, sum) in table.iter_mut().enumerate() {
                *sum = values.iter().enumerate().filter(|(k, _)| pattern >> k & 1 == 1).map(|(_, v)| v).sum();
            }
        }
        QueryTable { sums, total: query.iter().sum() }
    }

    /// `<q, s>` for the sign vector of `bits`. Four running sums, not one: the table reads are
    /// independent, and one sum would make each wait for the previous addition (16 in a row at
    /// 128 dimensions, the stage's hottest loop).
    #[inline]
    pub fn signed_sum(&self, bits: &[u8]) -> f32 {
        let mut set = [0f32; 4];
        let quads = bits.chunks_exact(4);
        let rest = quads.remainder();
        for (q, quad) in quads.enumerate() {
            // The four tables of these four bytes: every index below is in bounds by its type.
            let t: &[f32; 1024] = self.sums[q * 1024..(q + 1) * 1024].try_into().expect("four tables");
            set[0] += t[quad[0] as usize];
            set[1] += t[256 + quad[1] as usize];
            set[2] += t[512 + quad[2] as usize];
            set[3] += t[768 + quad[3] as usize];
        }
        let first = bits.len() - rest.len();
        for (i, &b) in rest.iter().enumerate() {
            set[i] += self.sums[(first + i) * 256 + b as usize];
        }
        2.0 * ((set[0] + set[1]) + (set[2] + set[3])) - self.total
    }

    /// The estimate of `q·r` of a residual coded as `bits` with `factor` (f16 bits).
    #[inline]
    pub fn residual(&self, bits: &[u8], factor: u16) -> f32 {
        f16::from_bits(factor).to_f32() * self.signed_sum(bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn the_table_sums_what_the_signs_say() {
        let mut rng = StdRng::seed_from_u64(3);
        for dim in [1, 7, 8, 13, 128] {
            let q: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let t: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let c: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let mut bits = vec![0u8; code_bytes(dim)];
            encode(&t, &c, &mut bits);
            let signed: f32 =
                q.iter().zip(t.iter().zip(&c)).map(|(q, (t, c))| if t - c > 0.0 { *q } else { -q }).sum();
            assert!((QueryTable::new(&q).signed_sum(&bits) - signed).abs() < 1e-4, "dim {dim}");
        }
    }

    #[test]
    fn the_estimate_tracks_the_true_residual_product() {
        let mut rng = StdRng::seed_from_u64(5);
        let dim = 128;
        let (mut error, mut spread) = (0f64, 0f64);
        for _ in 0..500 {
            let q: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let r: Vec<f32> = q.iter().map(|x| 0.5 * x + rng.gen_range(-1.0..1.0)).collect();
            let zero = vec![0f32; dim];
            let mut bits = vec![0u8; code_bytes(dim)];
            let factor = encode(&r, &zero, &mut bits);
            let truth: f32 = q.iter().zip(&r).map(|(a, b)| a * b).sum();
            let estimate = QueryTable::new(&q).residual(&bits, factor);
            error += f64::from((estimate - truth).powi(2));
            spread += f64::from(truth.powi(2));
        }
        assert!(error < 0.5 * spread, "the estimate explains over half the variance: {error} of {spread}");
    }
}
