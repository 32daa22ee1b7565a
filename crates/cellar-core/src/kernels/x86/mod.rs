//! x86_64 SIMD kernels (AVX2 + FMA + F16C, and AVX-512 F/BW), chosen at run time.
//!
//! Two strategies, both exact up to floating-point reordering:
//! - *panel* (enough query tokens): the query is transposed once per call so that SIMD lanes
//!   run over query tokens; each doc token is converted to f32 once, and every dimension
//!   `k` costs one broadcast of `d[j][k]` and one FMA per lane group. Several doc tokens and
//!   query lane groups are register-blocked, running maxima stay in vectors, and no horizontal
//!   reduction is needed until the final sum.
//! - *rows* (few query tokens, e.g. `dot_*`): lanes run over dimensions, a small block of
//!   query rows shares each doc-chunk load and conversion, with one horizontal sum per pair.
//!
//! Asking for a level this CPU lacks (one not in `Isa::available()`) panics rather than
//! executing unsupported instructions. NaN inputs give unspecified (but memory-safe) results.

mod avx2;
mod avx512;
mod driver;
mod residual;
mod signs;

pub use signs::MAX_CODE_BYTES as SIGNS_MAX_CODE_BYTES;

use super::Isa;
use std::cell::Cell;

/// AVX2 level: 256-bit float math, FMA and half-precision conversion.
pub fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

/// AVX-512 level: F and BW (masked byte/word loads); tails and conversions also use AVX2/F16C.
pub fn has_avx512() -> bool {
    has_avx2() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
}

/// Document element kinds, as the const-generic tags of the kernels.
struct Elem;

impl Elem {
    /// Little-endian IEEE half.
    const F16: u8 = 0;
    const I8: u8 = 1;
    const F32: u8 = 2;

    const fn bytes(e: u8) -> usize {
        match e {
            Elem::I8 => 1,
            Elem::F16 => 2,
            _ => 4,
        }
    }
}

pub fn maxsim_f16(isa: Isa, query: &[f32], dim: usize, doc: &[u8]) -> f32 {
    dispatch::<{ Elem::F16 }>(isa, query, dim, doc.as_ptr(), doc.len() / 2 / dim)
}

pub fn maxsim_i8(isa: Isa, query: &[f32], dim: usize, doc: &[i8]) -> f32 {
    dispatch::<{ Elem::I8 }>(isa, query, dim, doc.as_ptr().cast(), doc.len() / dim)
}

pub fn maxsim_f32(isa: Isa, query: &[f32], dim: usize, doc: &[f32]) -> f32 {
    dispatch::<{ Elem::F32 }>(isa, query, dim, doc.as_ptr().cast(), doc.len() / dim)
}

/// Decodes residual-coded tokens (see `kernels::residual`) at level `isa`; panics where this
/// CPU lacks it.
pub fn decode_residual(
    isa: Isa,
    tables: &super::residual::ResidualTables,
    doc: &[u8],
    nd: usize,
    out: &mut [f32],
) {
    match isa {
        Isa::Avx512 if has_avx512() => residual::decode(true, tables, doc, nd, out),
        Isa::Avx2 if has_avx2() => residual::decode(false, tables, doc, nd, out),
        _ => panic!("kernel level {} is not supported by this CPU", isa.name()),
    }
}

/// Estimates of a full block of sign-coded postings (`kernels::signs`): one AVX2 kernel serves
/// both levels; panics where this CPU lacks the level asked for.
pub fn estimate_signs(
    isa: Isa,
    tables: &super::signs::SignTables,
    score: f32,
    codes: &[u8],
    factors: &[u8],
    out: &mut [f32],
) {
    match isa {
        Isa::Avx512 if has_avx512() => signs::estimate(tables, score, codes, factors, out),
        Isa::Avx2 if has_avx2() => signs::estimate(tables, score, codes, factors, out),
        _ => panic!("kernel level {} is not supported by this CPU", isa.name()),
    }
}

/// `doc` holds `nd * dim` elements of kind `E` ([`Elem`]).
fn dispatch<const E: u8>(isa: Isa, query: &[f32], dim: usize, doc: *const u8, nd: usize) -> f32 {
    let nq = query.len() / dim;
    if nq == 0 || nd == 0 {
        return 0.0;
    }
    match isa {
        // SAFETY: the required CPU features were just checked; the caller (`kernels`) checked
        // that `query` holds `nq * dim` values and `doc` holds `nd * dim` elements.
        Isa::Avx512 if has_avx512() => unsafe { avx512::maxsim::<E>(query, dim, doc, nd) },
        // SAFETY: as above, for AVX2.
        Isa::Avx2 if has_avx2() => unsafe { avx2::maxsim::<E>(query, dim, doc, nd) },
        _ => panic!("kernel level {} is not supported by this CPU", isa.name()),
    }
}

/// Reusable per-thread f32 workspace for the panel kernels (transposed query, converted doc
/// tokens, running maxima), so that scoring many documents allocates nothing per call.
struct Workspace {
    buf: Vec<f32>,
}

thread_local! {
    static WORKSPACE: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

impl Workspace {
    fn take() -> Workspace {
        // During thread teardown the slot may be gone: work with a fresh buffer then.
        Workspace { buf: WORKSPACE.try_with(Cell::take).unwrap_or_default() }
    }

    /// A zero-initialised-or-stale slice of `len` floats whose start is 64-byte aligned.
    fn slice(&mut self, len: usize) -> &mut [f32] {
        const ALIGN_FLOATS: usize = 16;
        if self.buf.len() < len + ALIGN_FLOATS {
            self.buf.resize(len + ALIGN_FLOATS, 0.0);
        }
        let off = self.buf.as_ptr().align_offset(64).min(ALIGN_FLOATS);
        &mut self.buf[off..off + len]
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        let _ = WORKSPACE.try_with(|w| w.set(buf));
    }
}

/// Fills doc-token slots `real..` of a converted block with copies of the last real token:
/// a duplicated token cannot change a maximum, so every block can run at full width.
fn pad_block(block: &mut [f32], dim: usize, real: usize) {
    let (head, tail) = block.split_at_mut(real * dim);
    let last = &head[(real - 1) * dim..];
    for slot in tail.chunks_exact_mut(dim) {
        slot.copy_from_slice(last);
    }
}

/// `total` plus the per-row maxima, added in row order like the reference.
fn add_all(total: f32, maxima: &[f32]) -> f32 {
    maxima.iter().fold(total, |t, &m| t + m)
}
