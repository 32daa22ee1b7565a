//! 1-bit codes with an error-bounded inner-product estimator (RaBitQ; Gao & Long, SIGMOD 2024).
//!
//! A document vector `o` in a cluster with centroid `c` is stored as its residual `r = o - c`:
//! the norm `|r|`, the sign bits of the rotated unit residual `r' = R r / |r|`, and two scalars:
//! `x_dot_r = <x, r'>` where `x = sign bits / sqrt(d)` is the code as a unit vector, and
//! `r_dot_c = <r / |r|, c>`. For a query `q`:
//!
//! ```text
//! <o, q> = <c, q> + |r| (<r/|r|, q - c> + r_dot_c)
//! <r/|r|, q - c> = <r', q'>   with q' = R (q - c)
//!               ~ <x, q'> / x_dot_r                 (unbiased)
//! error <= |q'| sqrt(1 - x_dot_r^2) / x_dot_r * EPSILON0 / sqrt(d - 1)   (with high probability)
//! ```
//!
//! `<x, q'>` is computed with the query quantised to 4 bits per coordinate and stored as four
//! bit planes, so one code costs 4 x `words` AND + popcount (BBQ's int4 x 1-bit).

use super::rotation::dot;

/// The confidence constant of the bound, in standard deviations of the estimator's error (which
/// is close to normal with variance `(1 - x_dot_r^2) / x_dot_r^2 / (d - 1)`). RaBitQ's 1.9 covers
/// ~94% of pairs (measured here too); 3 covers ~99.7%, so a rescoring pruned by this bound
/// rarely drops a true top document.
pub const EPSILON0: f32 = 3.0;
/// Bits of the query's quantised coordinates.
const QUERY_BITS: usize = 4;

/// u64 words of one code.
pub fn words_for(dim: usize) -> usize {
    dim.div_ceil(64)
}

/// The scalars stored beside each code.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Factors {
    /// `|o - c|`.
    pub norm: f32,
    /// `<x, r'>`, in (0, 1]; 1 for a zero residual.
    pub x_dot_r: f32,
    /// `<(o - c) / |o - c|, c>`.
    pub r_dot_c: f32,
}

/// Encodes `o` against centroid `c` (both `dim` long) into `code` (`words_for(dim)` words), with
/// `rotated_centroid = R c` precomputed and `scratch` of `dim` floats.
pub fn encode(
    o: &[f32],
    c: &[f32],
    rotate: impl Fn(&[f32], &mut [f32]),
    scratch: &mut Vec<f32>,
    code: &mut [u64],
) -> Factors {
    let dim = o.len();
    code.iter_mut().for_each(|w| *w = 0);
    let residual: Vec<f32> = o.iter().zip(c).map(|(a, b)| a - b).collect();
    let norm = dot(&residual, &residual).sqrt();
    if norm <= f32::EPSILON {
        return Factors { norm: 0.0, x_dot_r: 1.0, r_dot_c: 0.0 };
    }
    let unit: Vec<f32> = residual.iter().map(|v| v / norm).collect();
    scratch.resize(dim, 0.0);
    rotate(&unit, scratch);
    let mut abs_sum = 0f32;
    for (i, v) in scratch.iter().enumerate() {
        if *v > 0.0 {
            code[i / 64] |= 1 << (i % 64);
        }
        abs_sum += v.abs();
    }
    let x_dot_r = (abs_sum / (dim as f32).sqrt()).clamp(1e-6, 1.0);
    Factors { norm, x_dot_r, r_dot_c: dot(&unit, c) }
}

/// The query rotated and quantised against one cluster's centroid.
pub struct QueryCode {
    dim: usize,
    /// Four bit planes of `words` words each (plane j holds bit j of every quantised coordinate).
    planes: Vec<u64>,
    lo: f32,
    delta: f32,
    /// Sum of `q'`'s coordinates (exact).
    sum: f32,
    /// `|q'|`.
    norm: f32,
    /// `<c, q>`.
    q_dot_c: f32,
}

impl QueryCode {
    /// `rotated_query = R q`, `rotated_centroid = R c`, `q_dot_c = <q, c>`.
    pub fn new(rotated_query: &[f32], rotated_centroid: &[f32], q_dot_c: f32) -> QueryCode {
        let dim = rotated_query.len();
        let q: Vec<f32> = rotated_query.iter().zip(rotated_centroid).map(|(a, b)| a - b).collect();
        let lo = q.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = q.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let levels = ((1 << QUERY_BITS) - 1) as f32;
        let delta = if hi > lo { (hi - lo) / levels } else { 1.0 };
        let words = words_for(dim);
        let mut planes = vec![0u64; QUERY_BITS * words];
        for (i, v) in q.iter().enumerate() {
            let level = ((v - lo) / delta).round().clamp(0.0, levels) as u32;
            for (j, plane) in planes.chunks_exact_mut(words).enumerate() {
                if level >> j & 1 == 1 {
                    plane[i / 64] |= 1 << (i % 64);
                }
            }
        }
        QueryCode { dim, planes, lo, delta, sum: q.iter().sum(), norm: dot(&q, &q).sqrt(), q_dot_c }
    }

    /// `<x, q'>` from the code's bits and the query's planes.
    fn code_dot_query(&self, code: &[u64]) -> f32 {
        let words = code.len();
        let ones: u32 = code.iter().map(|w| w.count_ones()).sum();
        let mut weighted = 0u32;
        for (j, plane) in self.planes.chunks_exact(words).enumerate() {
            let hits: u32 = code.iter().zip(plane).map(|(a, b)| (a & b).count_ones()).sum();
            weighted += hits << j;
        }
        let selected = self.lo * ones as f32 + self.delta * weighted as f32;
        (2.0 * selected - self.sum) / (self.dim as f32).sqrt()
    }

    /// The estimated `<o, q>` and its error bound (the bound leaves out the 4-bit rounding of the
    /// query, which RaBitQ shows to be negligible next to the code's own error at 4 bits).
    pub fn estimate(&self, code: &[u64], f: &Factors) -> (f32, f32) {
        if f.norm == 0.0 {
            return (self.q_dot_c, 0.0);
        }
        let residual_ip = self.code_dot_query(code) / f.x_dot_r;
        let estimate = self.q_dot_c + f.norm * (residual_ip + f.r_dot_c);
        let spread = (1.0 - f.x_dot_r * f.x_dot_r).max(0.0).sqrt() / f.x_dot_r;
        let bound = f.norm * self.norm * spread * EPSILON0 / ((self.dim as f32 - 1.0).max(1.0)).sqrt();
        (estimate, bound)
    }
}

#[cfg(test)]
mod tests {
    use super::super::rotation::Rotation;
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn unit(rng: &mut StdRng, dim: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let n = dot(&v, &v).sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    #[test]
    fn estimates_fall_within_their_bound_and_are_close_on_average() {
        let dim = 128;
        let rotation = Rotation::random(dim, 1);
        let mut rng = StdRng::seed_from_u64(2);
        let centroid: Vec<f32> = unit(&mut rng, dim).into_iter().map(|x| x * 0.5).collect();
        let mut rotated_c = vec![0.0; dim];
        rotation.rotate(&centroid, &mut rotated_c);
        let (mut within, mut total, mut abs_err) = (0, 0, 0f64);
        for _ in 0..50 {
            let q = unit(&mut rng, dim);
            let mut rq = vec![0.0; dim];
            rotation.rotate(&q, &mut rq);
            let qc = QueryCode::new(&rq, &rotated_c, dot(&q, &centroid));
            for _ in 0..40 {
                let o = unit(&mut rng, dim);
                let mut code = vec![0u64; words_for(dim)];
                let f = encode(&o, &centroid, |v, out| rotation.rotate(v, out), &mut Vec::new(), &mut code);
                let (est, bound) = qc.estimate(&code, &f);
                let truth = dot(&o, &q);
                within += ((est - truth).abs() <= bound) as usize;
                total += 1;
                abs_err += (est - truth).abs() as f64;
            }
        }
        assert!(within as f64 >= 0.985 * total as f64, "{within} of {total} within the bound");
        assert!(abs_err / (total as f64) < 0.1, "mean error {}", abs_err / total as f64);
    }

    #[test]
    fn bit_plane_product_matches_the_float_product_up_to_quantisation() {
        let dim = 70;
        let mut rng = StdRng::seed_from_u64(3);
        let q = unit(&mut rng, dim);
        let zero = vec![0.0; dim];
        let qc = QueryCode::new(&q, &zero, 0.0);
        let mut code = vec![0u64; words_for(dim)];
        for (i, w) in (0..dim).zip((0..dim).map(|_| rng.gen_bool(0.5))) {
            if w {
                code[i / 64] |= 1 << (i % 64);
            }
        }
        let exact: f32 =
            (0..dim).map(|i| if code[i / 64] >> (i % 64) & 1 == 1 { q[i] } else { -q[i] }).sum::<f32>()
                / (dim as f32).sqrt();
        let got = qc.code_dot_query(&code);
        assert!((got - exact).abs() <= qc.delta * (dim as f32).sqrt(), "{got} vs {exact}");
    }

    #[test]
    fn a_vector_equal_to_its_centroid_is_exact() {
        let dim = 16;
        let c: Vec<f32> = (0..dim).map(|i| i as f32 / 10.0).collect();
        let mut code = vec![0u64; 1];
        let f = encode(&c, &c, |v, out| out.copy_from_slice(v), &mut Vec::new(), &mut code);
        assert_eq!(f.norm, 0.0);
        let qc = QueryCode::new(&c, &c, 0.7);
        assert_eq!(qc.estimate(&code, &f), (0.7, 0.0));
    }
}
