//! A token's residual from its leaf, in one bit per dimension and one factor (RaBitQ's
//! estimator without the rotation): the sign of each value of `r = t - c`, and
//! `f = |r|^2 / sum |r_i|`, so that `q·r ≈ f · <q, s>` where `s` is the sign vector. A query
//! token's inner product with the token is then estimated as `q·c + f · <q, s>` without
//! decoding anything: `<q, s>` is `2 · (sum of q over the set bits) - sum(q)`, the first term
//! read from a table of 16 quantised partial sums per half byte of the code, 32 postings at a
//! time (`cellar_core::kernels::signs`: WARP's "score the residuals without decompressing them"
//! as FAISS's fast scan does it).

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

#[cfg(test)]
mod tests {
    use super::*;
    use cellar_core::kernels::signs::SignTables;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

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
            let estimate = SignTables::new(&q).estimate(0.0, &bits, factor);
            error += f64::from((estimate - truth).powi(2));
            spread += f64::from(truth.powi(2));
        }
        assert!(error < 0.5 * spread, "the estimate explains over half the variance: {error} of {spread}");
    }
}
