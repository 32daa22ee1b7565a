//! Int8 codec with one f32 scale per dimension: `x[k] ≈ scale[k] * code[k]`, codes in -127..=127.
//!
//! Scales are fitted on a sample (`max |x[k]| / 127`); values outside the fitted range clamp.
//! At query time the scales are folded into the query, so the kernel is a plain i8·f32 dot.

use std::path::Path;

use super::{check_dim, Codec, CodecKind};
use crate::error::{CellarError, Result};
use crate::kernels::{self, Isa};

#[derive(Debug, Clone)]
pub struct Int8Codec {
    scales: Vec<f32>,
}

/// Smallest scale, so an all-zero dimension still decodes to zeros without dividing by zero.
const MIN_SCALE: f32 = 1e-12;

impl Int8Codec {
    /// Fits per-dimension scales on sample vectors (each `dim` long).
    pub fn fit<'a>(dim: usize, sample: impl IntoIterator<Item = &'a [f32]>) -> Result<Self> {
        check_dim(dim)?;
        let mut max_abs = vec![0f32; dim];
        let mut seen = 0usize;
        for v in sample {
            super::validate_vector(v, dim, || format!("int8 fit sample vector {seen}"))?;
            for (m, x) in max_abs.iter_mut().zip(v) {
                *m = m.max(x.abs());
            }
            seen += 1;
        }
        if seen == 0 {
            return Err(CellarError::invalid(
                "int8 codec needs at least one sample vector to fit its scales",
            ));
        }
        Ok(Int8Codec { scales: max_abs.iter().map(|m| (m / 127.0).max(MIN_SCALE)).collect() })
    }

    pub fn from_params(dim: usize, params: &[u8], path: &Path) -> Result<Self> {
        check_dim(dim)?;
        if params.len() != 4 * dim {
            return Err(CellarError::corrupted(
                path,
                0,
                format!(
                    "int8 codec holds {} bytes of scales, expected {} for dim {dim}",
                    params.len(),
                    4 * dim
                ),
            ));
        }
        let scales: Vec<f32> =
            params.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if let Some(k) = scales.iter().position(|s| !s.is_finite() || *s <= 0.0) {
            return Err(CellarError::corrupted(
                path,
                4 * k as u64,
                format!("int8 scale {k} is {}", scales[k]),
            ));
        }
        Ok(Int8Codec { scales })
    }

    pub fn scales(&self) -> &[f32] {
        &self.scales
    }
}

fn as_i8(bytes: &[u8]) -> &[i8] {
    // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<i8>(), bytes.len()) }
}

impl Codec for Int8Codec {
    fn kind(&self) -> CodecKind {
        CodecKind::Int8
    }
    fn dim(&self) -> usize {
        self.scales.len()
    }
    fn bytes_per_vector(&self) -> usize {
        CodecKind::Int8.bytes_per_vector(self.scales.len())
    }
    fn encode(&self, v: &[f32], out: &mut Vec<u8>) {
        debug_assert_eq!(v.len(), self.scales.len());
        out.extend(v.iter().zip(&self.scales).map(|(x, s)| (x / s).round().clamp(-127.0, 127.0) as i8 as u8));
    }
    fn decode(&self, bytes: &[u8], out: &mut Vec<f32>) {
        out.extend(as_i8(bytes).iter().zip(self.scales.iter().cycle()).map(|(c, s)| *c as f32 * s));
    }
    fn prepare_query(&self, query: &[f32]) -> Vec<f32> {
        query.iter().zip(self.scales.iter().cycle()).map(|(q, s)| q * s).collect()
    }
    fn maxsim(&self, isa: Isa, prepared: &[f32], doc: &[u8]) -> f32 {
        kernels::maxsim_i8(isa, prepared, self.scales.len(), as_i8(doc))
    }
    fn params(&self) -> Vec<u8> {
        self.scales.iter().flat_map(|s| s.to_le_bytes()).collect()
    }
}
