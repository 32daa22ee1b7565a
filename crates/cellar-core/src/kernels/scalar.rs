//! Scalar reference kernels: the definition every SIMD kernel must agree with.

use half::f16;

fn f16_at(doc: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([doc[2 * i], doc[2 * i + 1]])).to_f32()
}

fn maxsim_with(query: &[f32], dim: usize, nd: usize, doc_at: impl Fn(usize) -> f32) -> f32 {
    if nd == 0 {
        return 0.0;
    }
    query
        .chunks_exact(dim)
        .map(|q| {
            (0..nd)
                .map(|j| (0..dim).map(|k| q[k] * doc_at(j * dim + k)).sum::<f32>())
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .sum()
}

pub fn maxsim_f16(query: &[f32], dim: usize, doc: &[u8]) -> f32 {
    maxsim_with(query, dim, doc.len() / 2 / dim, |i| f16_at(doc, i))
}

pub fn maxsim_i8(query: &[f32], dim: usize, doc: &[i8]) -> f32 {
    maxsim_with(query, dim, doc.len() / dim, |i| doc[i] as f32)
}

pub fn maxsim_f32(query: &[f32], dim: usize, doc: &[f32]) -> f32 {
    maxsim_with(query, dim, doc.len() / dim, |i| doc[i])
}
