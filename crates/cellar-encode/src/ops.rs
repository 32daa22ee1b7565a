//! Fused row kernels run as candle custom ops: bias (+ GELU), residual + LayerNorm, masked softmax.
//!
//! They replace candle's own element-wise ops on purpose: in candle 0.11 any unary or binary op on
//! 64 Ki elements or more runs on a process-wide "barrier pool" (sized by `CANDLE_NUM_THREADS`, one
//! mutex for all callers), which neither honours a per-call thread budget nor lets concurrent
//! encode calls overlap. These kernels split rows with rayon, so they run on whatever rayon pool
//! the caller installed (see `crate::threads`), and fuse what would otherwise be 2-4 passes.

use candle_core::{bail, CpuStorage, CustomOp1, CustomOp2, Layout, Shape};
use rayon::prelude::*;

/// Rows per rayon task: enough work to amortise the task, small enough to balance.
const MIN_ROWS: usize = 16;

/// The contiguous f32 data a tensor views.
fn rows<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => bail!("cellar-encode kernels need contiguous f32 input"),
    }
}

/// The size of the last dimension.
fn last_dim(l: &Layout) -> candle_core::Result<usize> {
    match l.dims().last() {
        Some(&d) if d > 0 => Ok(d),
        _ => bail!("cellar-encode kernels need a non-empty last dimension"),
    }
}

/// LayerNorm parameters of one block.
pub(crate) struct LayerNorm {
    /// Scale, one per feature.
    pub gamma: Vec<f32>,
    /// Shift, one per feature.
    pub beta: Vec<f32>,
    /// Added to the variance.
    pub eps: f32,
}

impl LayerNorm {
    /// Normalises `row` in place, then scales and shifts it.
    fn apply(&self, row: &mut [f32]) {
        let n = row.len() as f32;
        let mean = row.iter().sum::<f32>() / n;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let inv = 1.0 / (var + self.eps).sqrt();
        for ((v, g), b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
            *v = (*v - mean) * inv * g + b;
        }
    }
}

/// `LN(x + bias + residual)`, row by row. `residual` may have fewer rows than `x`: row `i` of `x`
/// takes row `i % residual_rows` (used to add position embeddings to every sequence of a batch).
pub(crate) struct AddNorm<'a> {
    /// Added to every row before the residual; `None` for no bias.
    pub bias: Option<&'a [f32]>,
    /// The normalisation applied after the sum.
    pub norm: &'a LayerNorm,
}

impl CustomOp2 for AddNorm<'_> {
    fn name(&self) -> &'static str {
        "cellar-add-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, res, width) = (rows(s1, l1)?, rows(s2, l2)?, last_dim(l1)?);
        if last_dim(l2)? != width || res.is_empty() || width != self.norm.gamma.len() {
            bail!("add-norm: widths disagree");
        }
        let res_rows = res.len() / width;
        let mut out = x.to_vec();
        out.par_chunks_mut(width).with_min_len(MIN_ROWS).enumerate().for_each(|(i, row)| {
            let r = &res[(i % res_rows) * width..][..width];
            match self.bias {
                Some(b) => row.iter_mut().zip(r).zip(b).for_each(|((v, r), b)| *v += r + b),
                None => row.iter_mut().zip(r).for_each(|(v, r)| *v += r),
            }
            self.norm.apply(row);
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// An activation applied element-wise after a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    /// None: the identity.
    Identity,
    /// The exact (erf) GELU of BERT's feed-forward block.
    Gelu,
    /// tanh, the default activation of a sentence-transformers `Dense` module.
    Tanh,
}

impl Act {
    /// Applies the activation to one value.
    pub fn apply(self, v: f32) -> f32 {
        match self {
            Act::Identity => v,
            Act::Gelu => gelu(v),
            Act::Tanh => v.tanh(),
        }
    }
}

/// `act(x + bias)` row by row.
pub(crate) struct BiasAct<'a> {
    /// One value per column of `x`; `None` for no bias.
    pub bias: Option<&'a [f32]>,
    /// Applied after the bias.
    pub act: Act,
}

impl CustomOp1 for BiasAct<'_> {
    fn name(&self) -> &'static str {
        "cellar-bias-act"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, width) = (rows(s, l)?, last_dim(l)?);
        if self.bias.is_some_and(|b| b.len() != width) {
            bail!("bias-act: width {width} but a bias of another length");
        }
        let mut out = x.to_vec();
        out.par_chunks_mut(width).with_min_len(MIN_ROWS).for_each(|row| {
            if let Some(bias) = self.bias {
                row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
            }
            if self.act != Act::Identity {
                row.iter_mut().for_each(|v| *v = self.act.apply(*v));
            }
        });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

/// Softmax over the last dimension of `(batch, heads, seq, seq)` attention scores, where only the
/// first `lens[b]` keys of sequence `b` are real: padding keys get probability 0.
pub(crate) struct MaskedSoftmax<'a> {
    /// Real (non-padding) length of each sequence in the batch.
    pub lens: &'a [usize],
}

impl CustomOp1 for MaskedSoftmax<'_> {
    fn name(&self) -> &'static str {
        "cellar-masked-softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, seq) = (rows(s, l)?, last_dim(l)?);
        let per_seq = x.len() / self.lens.len().max(1);
        if l.dims().len() != 4 || l.dims()[0] != self.lens.len() || self.lens.iter().any(|&n| n > seq) {
            bail!("masked softmax: scores {:?} do not match {} lengths", l.dims(), self.lens.len());
        }
        let mut out = x.to_vec();
        out.par_chunks_mut(seq).with_min_len(MIN_ROWS).enumerate().for_each(|(i, row)| {
            let len = self.lens[i * seq / per_seq];
            let (real, pad) = row.split_at_mut(len);
            softmax(real);
            pad.fill(0.0);
        });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

/// In-place softmax of one row.
fn softmax(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|v| *v *= inv);
}

/// The exact (erf) GELU used by BERT: `x * Φ(x)`.
pub(crate) fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Error function, Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7).
pub(crate) fn erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly =
        ((((1.061_405_4 * t - 1.453_152_1) * t + 1.421_413_7) * t - 0.284_496_72) * t + 0.254_829_6) * t;
    let y = 1.0 - poly * (-x * x).exp();
    if x < 0.0 {
        -y
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [(0.0, 0.0), (0.5, 0.520_499_9), (1.0, 0.842_700_8), (-2.0, -0.995_322_3)] {
            assert!((erf(x) - want).abs() < 3e-7, "erf({x}) = {} want {want}", erf(x));
        }
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
        let ln = LayerNorm { gamma: vec![1.0; 4], beta: vec![0.0; 4], eps: 1e-12 };
        let mut r = [1.0, 2.0, 3.0, 4.0];
        ln.apply(&mut r);
        assert!(r.iter().sum::<f32>().abs() < 1e-5);
        assert!((r.iter().map(|v| v * v).sum::<f32>() / 4.0 - 1.0).abs() < 1e-4);
    }
}
