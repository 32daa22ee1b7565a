//! MaxSim and dot-product kernels, one per codec, and the token stage's sign-code estimates
//! (`signs`), with runtime CPU dispatch.
//!
//! Layout contract shared by every kernel:
//! - a query is `nq * dim` f32 values, row-major (token-major);
//! - an f16 document is `nd * dim` IEEE half values, little-endian, row-major, as raw bytes
//!   (any alignment: records are packed in pages, so kernels use unaligned loads);
//! - an int8 document is `nd * dim` i8 values; the per-dimension scales of the int8 codec are
//!   folded into the query beforehand (see `codec::Int8Codec::prepare_query`), so the kernel
//!   computes a plain `sum_k q[k] * d[k]`;
//! - an f32 document is `nd * dim` f32 values (residual-coded documents are decoded into one,
//!   see [`residual`]).
//!
//! `maxsim = sum over query tokens of max over doc tokens of dot(q_i, d_j)`; over a document
//! with no tokens it is defined as 0.0.
//!
//! `scalar` is the reference every SIMD variant is checked against (see the property tests).

pub mod residual;
mod scalar;
pub mod signs;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::OnceLock;

/// Instruction-set level a kernel runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust: the reference.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW (with F16C conversions).
    Avx512,
}

impl Isa {
    /// Every level this build has a kernel for, from `Scalar` upwards (whether or not this CPU
    /// can run it: see [`Isa::available`]).
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// The best level this CPU supports, detected once.
    pub fn detected() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| *Isa::available().last().unwrap_or(&Isa::Scalar))
    }

    /// Every level this CPU can run, from `Scalar` upwards.
    pub fn available() -> Vec<Isa> {
        let mut levels = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if x86::has_avx2() {
                levels.push(Isa::Avx2);
            }
            if x86::has_avx512() {
                levels.push(Isa::Avx512);
            }
        }
        levels
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

/// The CPU's model name (the first `model name` of /proc/cpuinfo), or "unknown": what every
/// timing record names its machine by.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn check_shapes(query: &[f32], dim: usize, doc_elems: usize) {
    assert!(dim > 0, "kernel called with dim 0");
    assert_eq!(query.len() % dim, 0, "query length is not a multiple of dim");
    assert_eq!(doc_elems % dim, 0, "document length is not a multiple of dim");
}

/// MaxSim of an f32 query against an f16 document (raw little-endian bytes).
pub fn maxsim_f16(isa: Isa, query: &[f32], dim: usize, doc: &[u8]) -> f32 {
    check_shapes(query, dim, doc.len() / 2);
    assert_eq!(doc.len() % 2, 0, "f16 document has an odd byte count");
    match isa {
        Isa::Scalar => scalar::maxsim_f16(query, dim, doc),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => x86::maxsim_f16(isa, query, dim, doc),
        #[cfg(not(target_arch = "x86_64"))]
        _ => scalar::maxsim_f16(query, dim, doc),
    }
}

/// MaxSim of a scale-folded f32 query against an int8 document.
pub fn maxsim_i8(isa: Isa, query: &[f32], dim: usize, doc: &[i8]) -> f32 {
    check_shapes(query, dim, doc.len());
    match isa {
        Isa::Scalar => scalar::maxsim_i8(query, dim, doc),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => x86::maxsim_i8(isa, query, dim, doc),
        #[cfg(not(target_arch = "x86_64"))]
        _ => scalar::maxsim_i8(query, dim, doc),
    }
}

/// Decodes every residual-coded token of `doc` into `out` (`nd * dim` values; layout in
/// [`residual`]).
pub fn decode_residual(isa: Isa, tables: &residual::ResidualTables, doc: &[u8], out: &mut [f32]) {
    let nd = tables.check(doc, out);
    match isa {
        Isa::Scalar => residual::decode_scalar(tables, doc, nd, out),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => x86::decode_residual(isa, tables, doc, nd, out),
        #[cfg(not(target_arch = "x86_64"))]
        _ => residual::decode_scalar(tables, doc, nd, out),
    }
}

/// The token stage's estimates of `n = out.len()` postings (at most [`signs::BLOCK`]): their
/// sign codes (`n · code_bytes` bytes, one after another) and factors (`n` little-endian f16);
/// see [`signs`]. A full block whose codes are a multiple of 16 bytes long runs the SIMD kernel
/// at any level above `Scalar`, the rest the reference.
pub fn estimate_signs(
    isa: Isa,
    tables: &signs::SignTables,
    score: f32,
    codes: &[u8],
    factors: &[u8],
    out: &mut [f32],
) {
    let (n, cb) = (out.len(), tables.code_bytes());
    assert!(n <= signs::BLOCK, "a block holds at most {} postings, not {n}", signs::BLOCK);
    assert!(codes.len() >= n * cb && factors.len() >= 2 * n, "a block's codes or factors are short");
    #[cfg(target_arch = "x86_64")]
    if n == signs::BLOCK && cb.is_multiple_of(16) && cb <= x86::SIGNS_MAX_CODE_BYTES && isa != Isa::Scalar {
        return x86::estimate_signs(isa, tables, score, codes, factors, out);
    }
    let _ = isa;
    signs::estimate_scalar(tables, score, codes, factors, out);
}

/// MaxSim of an f32 query against an f32 document (`nd * dim` values).
pub fn maxsim_f32(isa: Isa, query: &[f32], dim: usize, doc: &[f32]) -> f32 {
    check_shapes(query, dim, doc.len());
    match isa {
        Isa::Scalar => scalar::maxsim_f32(query, dim, doc),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => x86::maxsim_f32(isa, query, dim, doc),
        #[cfg(not(target_arch = "x86_64"))]
        _ => scalar::maxsim_f32(query, dim, doc),
    }
}

/// Dot product of an f32 vector with one f16 vector (raw bytes); used for pooled vectors.
pub fn dot_f16(isa: Isa, a: &[f32], b: &[u8]) -> f32 {
    assert_eq!(a.len() * 2, b.len(), "dot_f16 length mismatch");
    if a.is_empty() {
        return 0.0;
    }
    maxsim_f16(isa, a, a.len(), b)
}

/// Dot product of a scale-folded f32 vector with one int8 vector.
pub fn dot_i8(isa: Isa, a: &[f32], b: &[i8]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot_i8 length mismatch");
    if a.is_empty() {
        return 0.0;
    }
    maxsim_i8(isa, a, a.len(), b)
}
