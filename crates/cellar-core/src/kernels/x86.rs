//! PLACEHOLDER until the SIMD kernels land: delegates to scalar. Replaced by the kernels work.
use super::{scalar, Isa};

pub fn has_avx2() -> bool {
    false
}
pub fn has_avx512() -> bool {
    false
}
pub fn maxsim_f16(_isa: Isa, query: &[f32], dim: usize, doc: &[u8]) -> f32 {
    scalar::maxsim_f16(query, dim, doc)
}
pub fn maxsim_i8(_isa: Isa, query: &[f32], dim: usize, doc: &[i8]) -> f32 {
    scalar::maxsim_i8(query, dim, doc)
}
