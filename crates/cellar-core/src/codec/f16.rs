//! IEEE half-precision codec: 2 bytes per value, little-endian.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::{check_dim, Codec, CodecKind};
use crate::error::Result;
use crate::kernels::{self, Isa};

/// The least magnitude an f32 rounds to infinity from in half precision (65,504 is its largest
/// value; from halfway to the next power of two, 65,520, rounding goes to infinity).
pub const F16_OVERFLOW: f32 = 65_520.0;

/// The position of the first of `values` that half precision cannot hold (it would become
/// infinity, or is NaN or infinite already): what refuses a vector before it is stored as f16.
pub fn first_beyond_f16(values: &[f32]) -> Option<usize> {
    let bad = |v: &f32| v.is_nan() || v.abs() >= F16_OVERFLOW;
    // Blocks without an early exit inside (the compiler vectorizes them); the value is found in
    // the first block that holds one.
    let block = values.chunks(64).position(|b| b.iter().fold(false, |any, v| any | bad(v)))?;
    values[block * 64..].iter().position(bad).map(|i| block * 64 + i)
}

#[derive(Debug, Clone)]
pub struct F16Codec {
    dim: usize,
}

impl F16Codec {
    pub fn new(dim: usize) -> Result<Self> {
        check_dim(dim)?;
        Ok(F16Codec { dim })
    }
}

impl Codec for F16Codec {
    fn kind(&self) -> CodecKind {
        CodecKind::F16
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn bytes_per_vector(&self) -> usize {
        CodecKind::F16.bytes_per_vector(self.dim)
    }
    fn encode(&self, v: &[f32], out: &mut Vec<u8>) {
        debug_assert_eq!(v.len(), self.dim);
        out.extend(v.iter().flat_map(|x| f16::from_f32(*x).to_bits().to_le_bytes()));
    }
    /// The same bytes as [`Codec::encode`] vector by vector, converted in one pass (the `half`
    /// crate's slice conversion, F16C instructions where the CPU has them).
    fn encode_many(&self, vs: &[f32], out: &mut Vec<u8>) {
        debug_assert!(vs.len().is_multiple_of(self.dim));
        let mut halves = vec![f16::ZERO; vs.len()];
        halves.convert_from_f32_slice(vs);
        out.reserve(2 * halves.len());
        out.extend(halves.iter().flat_map(|h| h.to_bits().to_le_bytes()));
    }
    fn decode(&self, bytes: &[u8], out: &mut Vec<f32>) {
        out.extend(bytes.chunks_exact(2).map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()));
    }
    fn prepare_query(&self, query: &[f32]) -> Vec<f32> {
        query.to_vec()
    }
    fn prepare_query_vec(&self, query: Vec<f32>) -> Vec<f32> {
        query
    }
    fn maxsim(&self, isa: Isa, prepared: &[f32], doc: &[u8]) -> f32 {
        kernels::maxsim_f16(isa, prepared, self.dim, doc)
    }
    fn params(&self) -> Vec<u8> {
        Vec::new()
    }
}
