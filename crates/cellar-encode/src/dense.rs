//! A linear layer's weight matrix, held as f32 or as f16.
//!
//! A BERT layer's four weight matrices are most of a server's fixed memory once the word
//! embeddings stay on disk (all-MiniLM-L6-v2: 42 MiB of f32 over six layers). Held as f16 they
//! take half; a product converts a block of rows at a time to f32 in a per-thread buffer small
//! enough to stay in L2, and multiplies it with gemm, so the arithmetic is f32's and the only
//! difference from f32 weights is the weights' rounding to f16 (11-bit mantissas).

use std::cell::RefCell;
use std::str::FromStr;

use candle_core::{bail, CpuStorage, CustomOp1, Layout, Shape, Tensor};
use cellar_core::CellarError;
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

type CResult<T> = candle_core::Result<T>;

/// How a model's layer weights are held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightPrecision {
    /// As the checkpoint's library computes (f32): the default.
    #[default]
    F32,
    /// Rounded to f16, half the memory; products still in f32.
    F16,
}

impl WeightPrecision {
    /// The name used on the command line and in the API.
    pub fn name(self) -> &'static str {
        match self {
            WeightPrecision::F32 => "f32",
            WeightPrecision::F16 => "f16",
        }
    }
}

impl std::fmt::Display for WeightPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for WeightPrecision {
    type Err = CellarError;

    fn from_str(s: &str) -> cellar_core::Result<Self> {
        match s {
            "f32" => Ok(WeightPrecision::F32),
            "f16" => Ok(WeightPrecision::F16),
            other => Err(CellarError::invalid(format!("model weights are f32 or f16, not {other:?}"))),
        }
    }
}

/// A weight matrix `(out, inp)` for `x @ w^T`.
pub(crate) enum Dense {
    /// Transposed to `(inp, out)` for candle's matmul.
    F32(Tensor),
    /// `(out, inp)` row after row, rounded to f16.
    F16(HalfMatrix),
}

impl Dense {
    /// The matrix `w`, `(out, inp)` f32, held at `precision`.
    pub fn new(w: &Tensor, precision: WeightPrecision) -> CResult<Dense> {
        let (out, inp) = w.dims2()?;
        Ok(match precision {
            WeightPrecision::F32 => Dense::F32(w.t()?.contiguous()?),
            WeightPrecision::F16 => {
                let values = w.flatten_all()?.to_vec1::<f32>()?;
                let mut half = vec![f16::ZERO; values.len()];
                half.convert_from_f32_slice(&values);
                Dense::F16(HalfMatrix { w: half, out, inp })
            }
        })
    }

    /// `x @ w^T`: `x` is `(rows, inp)` f32, the result `(rows, out)`.
    pub fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        match self {
            Dense::F32(t) => x.matmul(t),
            Dense::F16(m) => x.apply_op1_no_bwd(m),
        }
    }
}

/// Values of the f32 block a product converts at a time (128 KiB: in L2 with the rows it
/// multiplies).
const BLOCK_VALUES: usize = 32 * 1024;
/// Rows of `x` below which a product runs on one thread (each thread converts every block).
const MIN_ROWS_PER_THREAD: usize = 64;

thread_local! {
    /// The converted block, one buffer per thread.
    static BLOCK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `(out, inp)` weights as f16.
pub(crate) struct HalfMatrix {
    w: Vec<f16>,
    out: usize,
    inp: usize,
}

impl HalfMatrix {
    /// Weight rows converted per block: a power of two, 8 to `out`.
    fn block_rows(&self) -> usize {
        let rows = (BLOCK_VALUES / self.inp.max(1)).max(8);
        (1usize << rows.ilog2()).min(self.out.max(1))
    }

    /// `dst (rows, out) = x (rows, inp) @ w^T`, one block of weight rows at a time.
    fn product(&self, x: &[f32], dst: &mut [f32]) {
        if x.is_empty() {
            // No row to write a block's columns into.
            return;
        }
        let block_rows = self.block_rows();
        BLOCK.with(|block| {
            let mut block = block.borrow_mut();
            for start in (0..self.out).step_by(block_rows) {
                let n = block_rows.min(self.out - start);
                block.resize(n * self.inp, 0.0);
                self.w[start * self.inp..(start + n) * self.inp].convert_to_f32_slice(&mut block);
                // dst[:, start..start + n] = x (rows x inp) * block^T (inp x n).
                product_transposed(x, &block, self.inp, &mut dst[start..], self.out);
            }
        });
    }
}

/// `a (m x k) * b^T`, `b` being `(n x k)`, both row after row, into the first `n` values of
/// each of `m` rows of `dst` that start `dst_stride` apart: one gemm on the calling thread.
pub(crate) fn product_transposed(a: &[f32], b: &[f32], k: usize, dst: &mut [f32], dst_stride: usize) {
    let (m, n) = (a.len() / k.max(1), b.len() / k.max(1));
    if m == 0 || n == 0 {
        return;
    }
    assert!(n <= dst_stride && dst.len() >= (m - 1) * dst_stride + n, "product_transposed: dst too small");
    // gemm's operands are (pointer, column stride, row stride): row j of `b` is column j of the
    // right operand.
    // SAFETY: checked above: dst holds every (row * dst_stride + column) written for row < m,
    // column < n; a and b are read only at row * k + column within their m * k and n * k values.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_stride as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    };
}

impl CustomOp1 for HalfMatrix {
    fn name(&self) -> &'static str {
        "cellar-f16-dense"
    }

    /// Splits the rows of `x` over the current rayon pool (the encode call's thread budget, see
    /// [`crate::threads`]); each part converts the weights for itself.
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> CResult<(CpuStorage, Shape)> {
        let dims = l.dims();
        let Some((&inp, lead)) = dims.split_last() else { bail!("f16 dense: a scalar input") };
        if inp != self.inp {
            bail!("f16 dense: input width {inp}, weights take {}", self.inp);
        }
        let x = crate::ops::rows(s, l)?;
        let rows = x.len() / inp.max(1);
        let mut dst = vec![0f32; rows * self.out];
        let parts = rayon::current_num_threads().min(rows / MIN_ROWS_PER_THREAD).max(1);
        let per = rows.div_ceil(parts).max(1);
        if parts == 1 {
            self.product(x, &mut dst);
        } else {
            x.par_chunks(per * inp)
                .zip(dst.par_chunks_mut(per * self.out))
                .for_each(|(x, dst)| self.product(x, dst));
        }
        let mut shape = lead.to_vec();
        shape.push(self.out);
        Ok((CpuStorage::F32(dst), Shape::from(shape)))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device};
    use rand::{Rng, SeedableRng};

    use super::*;

    fn random(rows: usize, cols: usize, seed: u64) -> Tensor {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let v: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
        Tensor::from_vec(v, (rows, cols), &Device::Cpu).unwrap()
    }

    /// The f16 product is the f32 product of the f16-rounded weights, for shapes with and
    /// without a partial block, one row and many (split over threads), and a 3-d input.
    #[test]
    fn the_f16_product_is_the_product_of_the_rounded_weights() {
        for (rows, inp, out) in [(1, 384, 1536), (37, 1536, 384), (300, 24, 1000), (5, 3, 7)] {
            let w = random(out, inp, 1);
            let x = random(rows, inp, 2);
            let rounded = w.to_dtype(DType::F16).unwrap().to_dtype(DType::F32).unwrap();
            let want = x.matmul(&rounded.t().unwrap()).unwrap().to_vec2::<f32>().unwrap();
            let half = Dense::new(&w, WeightPrecision::F16).unwrap();
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            let got = pool.install(|| half.forward(&x)).unwrap().to_vec2::<f32>().unwrap();
            for (r, (g, w)) in got.iter().zip(&want).enumerate() {
                for (c, (g, w)) in g.iter().zip(w).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "({r}, {c}) of {rows}x{inp}x{out}: {g} vs {w}"
                    );
                }
            }
            let full = Dense::new(&w, WeightPrecision::F32).unwrap().forward(&x).unwrap();
            let exact = x.matmul(&w.t().unwrap()).unwrap();
            let diff = (full - exact).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(diff <= 1e-6 * inp as f32, "f32 weights are the plain product: {diff}");
        }
        let w = random(16, 8, 3);
        let x3 = random(6, 8, 4).reshape((2, 3, 8)).unwrap();
        let y = Dense::new(&w, WeightPrecision::F16).unwrap().forward(&x3).unwrap();
        assert_eq!(y.dims(), [2, 3, 16]);
        let none = Tensor::zeros((0, 8), DType::F32, &Device::Cpu).unwrap();
        assert_eq!(Dense::new(&w, WeightPrecision::F16).unwrap().forward(&none).unwrap().dims(), [0, 16]);
        let err = Dense::new(&w, WeightPrecision::F16).unwrap().forward(&random(2, 5, 5)).unwrap_err();
        assert!(err.to_string().contains("input width 5, weights take 8"), "{err}");
    }

    #[test]
    fn precisions_parse_from_their_names() {
        for p in [WeightPrecision::F32, WeightPrecision::F16] {
            assert_eq!(p.name().parse::<WeightPrecision>().unwrap(), p);
        }
        let err = "bf16".parse::<WeightPrecision>().unwrap_err();
        assert!(
            matches!(err, CellarError::InvalidInput(_)) && err.to_string().contains("f32 or f16"),
            "{err}"
        );
    }
}
