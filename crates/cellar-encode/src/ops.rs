//! Fused in-place row kernels run as candle custom ops: bias (+ activation), residual + LayerNorm,
//! masked softmax.
//!
//! They replace candle's own element-wise ops on purpose: in candle 0.11 any unary or binary op on
//! 64 Ki elements or more runs on a process-wide "barrier pool" (sized by `CANDLE_NUM_THREADS`, one
//! mutex for all callers), which neither honours a per-call thread budget nor lets concurrent
//! encode calls overlap. These kernels split rows with rayon, so they run on whatever rayon pool
//! the caller installed (see `crate::threads`); they fuse what would otherwise be 2-4 passes and
//! write into the matmul output instead of allocating.

use candle_core::{bail, CpuStorage, InplaceOp1, InplaceOp2, Layout};
use rayon::prelude::*;

use crate::math::{gelu, layer_norm, softmax};

/// Rows per rayon task: enough work to amortise the task, small enough to balance.
const MIN_ROWS: usize = 16;

/// The contiguous f32 data a tensor views.
pub(crate) fn rows<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => bail!("cellar-encode kernels need contiguous f32 input"),
    }
}

/// The contiguous f32 data a tensor views, writable.
fn rows_mut<'a>(s: &'a mut CpuStorage, l: &Layout) -> candle_core::Result<&'a mut [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(data), Some((start, end))) => Ok(&mut data[start..end]),
        _ => bail!("cellar-encode kernels need contiguous f32 output"),
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

/// `x <- LN(x + bias + residual)`, row by row. `residual` may have fewer rows than `x`: row `i`
/// of `x` takes row `i % residual_rows` (used to add position embeddings to every sequence).
pub(crate) struct AddNorm<'a> {
    /// Added to every row before the residual; `None` for no bias.
    pub bias: Option<&'a [f32]>,
    /// The normalisation applied after the sum.
    pub norm: &'a LayerNorm,
}

impl InplaceOp2 for AddNorm<'_> {
    fn name(&self) -> &'static str {
        "cellar-add-norm"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dst_l: &Layout,
        src: &CpuStorage,
        src_l: &Layout,
    ) -> candle_core::Result<()> {
        let (res, width) = (rows(src, src_l)?, last_dim(dst_l)?);
        if last_dim(src_l)? != width || res.is_empty() || width != self.norm.gamma.len() {
            bail!("add-norm: widths disagree");
        }
        let res_rows = res.len() / width;
        let x = rows_mut(dst, dst_l)?;
        x.par_chunks_mut(width).with_min_len(MIN_ROWS).enumerate().for_each(|(i, row)| {
            let r = &res[(i % res_rows) * width..][..width];
            match self.bias {
                Some(b) => row.iter_mut().zip(r).zip(b).for_each(|((v, r), b)| *v += r + b),
                None => row.iter_mut().zip(r).for_each(|(v, r)| *v += r),
            }
            layer_norm(row, &self.norm.gamma, &self.norm.beta, self.norm.eps);
        });
        Ok(())
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

/// `x <- act(x + bias)`, row by row.
pub(crate) struct BiasAct<'a> {
    /// One value per column of `x`; `None` for no bias.
    pub bias: Option<&'a [f32]>,
    /// Applied after the bias.
    pub act: Act,
}

impl InplaceOp1 for BiasAct<'_> {
    fn name(&self) -> &'static str {
        "cellar-bias-act"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> candle_core::Result<()> {
        let width = last_dim(l)?;
        if self.bias.is_some_and(|b| b.len() != width) {
            bail!("bias-act: width {width} but a bias of another length");
        }
        rows_mut(s, l)?.par_chunks_mut(width).with_min_len(MIN_ROWS).for_each(|row| {
            if let Some(bias) = self.bias {
                row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
            }
            match self.act {
                Act::Identity => {}
                Act::Gelu => row.iter_mut().for_each(|v| *v = gelu(*v)),
                Act::Tanh => row.iter_mut().for_each(|v| *v = v.tanh()),
            }
        });
        Ok(())
    }
}

/// Softmax over the last dimension of `(batch, heads, seq, seq)` attention scores, in place,
/// where only the first `lens[b]` keys of sequence `b` are real: padding keys get probability 0.
pub(crate) struct MaskedSoftmax<'a> {
    /// Real (non-padding) length of each sequence in the batch.
    pub lens: &'a [usize],
}

impl InplaceOp1 for MaskedSoftmax<'_> {
    fn name(&self) -> &'static str {
        "cellar-masked-softmax"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> candle_core::Result<()> {
        let seq = last_dim(l)?;
        if l.dims().len() != 4 || l.dims()[0] != self.lens.len() || self.lens.iter().any(|&n| n > seq) {
            bail!("masked softmax: scores {:?} do not match {} lengths", l.dims(), self.lens.len());
        }
        let x = rows_mut(s, l)?;
        let per_seq = x.len() / self.lens.len().max(1);
        x.par_chunks_mut(seq).with_min_len(MIN_ROWS).enumerate().for_each(|(i, row)| {
            let (real, pad) = row.split_at_mut(self.lens[i * seq / per_seq]);
            softmax(real);
            pad.fill(0.0);
        });
        Ok(())
    }
}
