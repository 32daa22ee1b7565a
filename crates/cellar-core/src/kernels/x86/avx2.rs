//! AVX2 + FMA + F16C kernels: 8 f32 lanes; tails go through small zero-padded stack buffers.
//! The panel and rows drivers are `driver`'s, compiled here with these features.

use super::driver::{self, Lanes};
use super::Elem;
use core::arch::x86_64::*;

/// f32 lanes per vector.
const W: usize = 8;

/// Entry point; see `x86::dispatch`. `nq >= 1`, `nd >= 1`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn maxsim<const E: u8>(query: &[f32], dim: usize, doc: *const u8, nd: usize) -> f32 {
    // SAFETY: this function enables the features `Avx2`'s methods use; `dispatch` checked the
    // CPU has them and the shapes.
    unsafe { driver::maxsim::<Avx2, E>(query, dim, doc, nd) }
}

/// The AVX2 level's lanes for `driver`.
pub(super) struct Avx2;

// SAFETY (every method, hence the allow): `Lanes`' contract; each body is one step of `driver`,
// inlined into `maxsim` above, which enables these instructions.
#[allow(unsafe_op_in_unsafe_fn)]
impl Lanes for Avx2 {
    type V = __m256;
    const W: usize = W;
    const PANEL_MIN_NQ: usize = 7;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, n: usize) -> __m256 {
        let mut tmp = [0f32; W];
        core::ptr::copy_nonoverlapping(p, tmp.as_mut_ptr(), n);
        _mm256_loadu_ps(tmp.as_ptr())
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        _mm256_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn store_part(p: *mut f32, v: __m256, n: usize) {
        let mut tmp = [0f32; W];
        _mm256_storeu_ps(tmp.as_mut_ptr(), v);
        core::ptr::copy_nonoverlapping(tmp.as_ptr(), p, n);
    }
    #[inline(always)]
    unsafe fn splat(p: *const f32) -> __m256 {
        _mm256_broadcast_ss(&*p)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn max(a: __m256, b: __m256) -> __m256 {
        _mm256_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sum(v: __m256) -> f32 {
        hsum(v)
    }
    #[inline(always)]
    unsafe fn sums4(v: [__m256; 4]) -> __m128 {
        let [a0, a1, a2, a3] = v;
        // Lanes 0..4: the sums of a0..a3's first halves; lanes 4..8: of their second halves.
        let t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
        _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps::<1>(t))
    }
    #[inline(always)]
    unsafe fn load_doc<const E: u8>(doc: *const u8, idx: usize, n: usize) -> __m256 {
        load::<E>(doc, idx, n)
    }
    #[inline(always)]
    unsafe fn transpose_query(query: &[f32], dim: usize, qt: &mut [f32], nqp: usize) {
        transpose_query(query, dim, qt, nqp)
    }
}

/// Loads `n` (1..=8) doc elements starting at element `idx`, converted to f32 (lanes `n..`
/// zero). `E` is the element kind ([`Elem`]); any alignment.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load<const E: u8>(doc: *const u8, idx: usize, n: usize) -> __m256 {
    // SAFETY: the caller passes `doc` holding elements `idx..idx + n` of kind `E`; the partial loads go
    // through zero-padded stack buffers.
    unsafe {
        let size = Elem::bytes(E);
        let p = doc.add(size * idx);
        if E == Elem::F32 {
            if n == W {
                return _mm256_loadu_ps(p.cast());
            }
            let mut tmp = [0f32; W];
            core::ptr::copy_nonoverlapping(p.cast::<f32>(), tmp.as_mut_ptr(), n);
            return _mm256_loadu_ps(tmp.as_ptr());
        }
        let v = if n == W {
            if E == Elem::I8 {
                _mm_loadl_epi64(p.cast())
            } else {
                _mm_loadu_si128(p.cast())
            }
        } else {
            let mut tmp = [0u8; 16];
            core::ptr::copy_nonoverlapping(p, tmp.as_mut_ptr(), size * n);
            _mm_loadu_si128(tmp.as_ptr().cast())
        };
        if E == Elem::I8 {
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
        } else {
            _mm256_cvtph_ps(v)
        }
    }
}

/// Horizontal sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Writes `query` (`nq` rows of `dim`) column-major into `qt`: `qt[k * nqp + i] = q[i][k]`,
/// with lanes `nq..nqp` of every column zeroed (`nqp` a multiple of 8). 8x8 tiles are
/// transposed in registers; leftover columns are copied one by one.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn transpose_query(query: &[f32], dim: usize, qt: &mut [f32], nqp: usize) {
    let nq = query.len() / dim;
    assert!(nq <= nqp && nqp.is_multiple_of(W) && qt.len() == nqp * dim);
    let (q, t) = (query.as_ptr(), qt.as_mut_ptr());
    let full = dim / W * W;
    // SAFETY: by the assert, `qt` holds `nqp * dim` floats and `query` `nq * dim`: every access
    // below stays inside them.
    unsafe {
        for i0 in (0..nqp).step_by(W) {
            let rows = nq.saturating_sub(i0).min(W);
            for k0 in (0..full).step_by(W) {
                let mut r = [_mm256_setzero_ps(); W];
                for (a, row) in r.iter_mut().enumerate().take(rows) {
                    *row = _mm256_loadu_ps(q.add((i0 + a) * dim + k0));
                }
                for (b, col) in transpose8(r).iter().enumerate() {
                    _mm256_storeu_ps(t.add((k0 + b) * nqp + i0), *col);
                }
            }
            for k in full..dim {
                for a in 0..W {
                    *t.add(k * nqp + i0 + a) = if a < rows { *q.add((i0 + a) * dim + k) } else { 0.0 };
                }
            }
        }
    }
}

/// 8x8 transpose: `out[c][r] = m[r][c]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn transpose8(m: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(m[0], m[1]);
    let t1 = _mm256_unpackhi_ps(m[0], m[1]);
    let t2 = _mm256_unpacklo_ps(m[2], m[3]);
    let t3 = _mm256_unpackhi_ps(m[2], m[3]);
    let t4 = _mm256_unpacklo_ps(m[4], m[5]);
    let t5 = _mm256_unpackhi_ps(m[4], m[5]);
    let t6 = _mm256_unpacklo_ps(m[6], m[7]);
    let t7 = _mm256_unpackhi_ps(m[6], m[7]);
    // Each s holds two columns of 4 rows: s0 = cols 0 and 4, s1 = 1 and 5, s2 = 2 and 6, ...
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}
