//! Scalar and row math of the encoder, written so LLVM can vectorise it: branch-free `exp`,
//! eight-lane reductions (float sums are not reassociated otherwise).

/// Lanes of the partial sums in [`sum`] and [`max`].
const LANES: usize = 8;

/// Sum of `v`, accumulated in `LANES` independent lanes.
pub(crate) fn sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = v.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        acc.iter_mut().zip(c).for_each(|(a, x)| *a += x);
    }
    acc.iter().sum::<f32>() + tail
}

/// Largest value of `v` (`-inf` when empty).
pub(crate) fn max(v: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = v.chunks_exact(LANES);
    let tail = chunks.remainder().iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for c in chunks {
        acc.iter_mut().zip(c).for_each(|(a, &x)| *a = if x > *a { x } else { *a });
    }
    acc.iter().copied().fold(tail, f32::max)
}

/// `e^x` (Cephes `expf` polynomial, about 1 ulp), without branches. Inputs are clamped to
/// [-87.3, 88.7], so the result is never 0 or infinite.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding and subtracting it rounds to an integer
    let x = x.clamp(-87.3, 88.7);
    let k = (x * LOG2E + ROUND) - ROUND;
    let r = x - k * LN2_HI - k * LN2_LO;
    let mut p = 1.987_569_2e-4;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((k as i32 + 127) << 23) as u32)
}

/// Error function, Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7).
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly =
        ((((1.061_405_4 * t - 1.453_152_1) * t + 1.421_413_7) * t - 0.284_496_72) * t + 0.254_829_6) * t;
    (1.0 - poly * exp(-x * x)).copysign(x)
}

/// The exact (erf) GELU used by BERT: `x * Φ(x)`.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// In-place softmax of one row.
pub(crate) fn softmax(row: &mut [f32]) {
    let m = max(row);
    row.iter_mut().for_each(|v| *v = exp(*v - m));
    let inv = 1.0 / sum(row);
    row.iter_mut().for_each(|v| *v *= inv);
}

/// In-place LayerNorm of one row: centre, scale to unit variance (`eps` added), then
/// `* gamma + beta`.
pub(crate) fn layer_norm(row: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = sum(row) / n;
    row.iter_mut().for_each(|v| *v -= mean);
    let mut acc = [0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    for c in chunks {
        acc.iter_mut().zip(c).for_each(|(a, v)| *a += v * v);
    }
    let var = (acc.iter().sum::<f32>() + tail) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
        *v = *v * inv * g + b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate() {
        for i in -800..=800 {
            let x = i as f32 * 0.1;
            let (got, want) = (exp(x), (x as f64).exp());
            assert!(((got as f64 - want) / want).abs() < 3e-7, "exp({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [(0.0, 0.0), (0.5, 0.520_499_9), (1.0, 0.842_700_8), (-2.0, -0.995_322_3)] {
            assert!((erf(x) - want).abs() < 3e-7, "erf({x}) = {} want {want}", erf(x));
        }
    }

    #[test]
    fn reductions() {
        let v: Vec<f32> = (0..21).map(|i| i as f32 - 7.0).collect();
        assert_eq!(sum(&v), v.iter().sum::<f32>());
        assert_eq!(max(&v), 13.0);
        assert_eq!(max(&v[..3]), -5.0);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut r = [1.0, 2.0, 3.0];
        softmax(&mut r);
        assert!((r.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(r[2] > r[1] && r[1] > r[0]);
    }

    #[test]
    fn layer_norm_centres_and_scales() {
        let mut r: Vec<f32> = (0..20).map(|i| i as f32).collect();
        layer_norm(&mut r, &[1.0; 20], &[0.0; 20], 1e-12);
        assert!(r.iter().sum::<f32>().abs() < 1e-4);
        assert!((r.iter().map(|v| v * v).sum::<f32>() / 20.0 - 1.0).abs() < 1e-4);
    }
}
