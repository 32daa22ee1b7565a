//! AVX-512 F/BW kernels: 16 f32 lanes, masked loads for every tail. The panel and rows drivers
//! are `driver`'s, compiled here with these features.

use super::driver::{self, Lanes};
use super::Elem;
use core::arch::x86_64::*;

/// f32 lanes per vector.
const W: usize = 16;

/// Entry point; see `x86::dispatch`. `nq >= 1`, `nd >= 1`.
#[target_feature(enable = "avx512f,avx512bw,f16c,avx2,fma")]
pub(super) unsafe fn maxsim<const E: u8>(query: &[f32], dim: usize, doc: *const u8, nd: usize) -> f32 {
    // SAFETY: this function enables the features `Avx512`'s methods use; `dispatch` checked the
    // CPU has them and the shapes.
    unsafe { driver::maxsim::<Avx512, E>(query, dim, doc, nd) }
}

/// The AVX-512 level's lanes for `driver`.
pub(super) struct Avx512;

/// The lanes `0..n` (`n` in 1..=16).
#[inline(always)]
fn mask(n: usize) -> __mmask16 {
    (1u16 << n) - 1
}

// SAFETY (every method, hence the allow): `Lanes`' contract; each body is one step of `driver`,
// inlined into `maxsim` above, which enables these instructions.
#[allow(unsafe_op_in_unsafe_fn)]
impl Lanes for Avx512 {
    type V = __m512;
    const W: usize = W;
    const PANEL_MIN_NQ: usize = 9;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, n: usize) -> __m512 {
        _mm512_maskz_loadu_ps(mask(n), p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn store_part(p: *mut f32, v: __m512, n: usize) {
        _mm512_mask_storeu_ps(p, mask(n), v)
    }
    #[inline(always)]
    unsafe fn splat(p: *const f32) -> __m512 {
        _mm512_set1_ps(*p)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        _mm512_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sum(v: __m512) -> f32 {
        _mm512_reduce_add_ps(v)
    }
    #[inline(always)]
    unsafe fn sums4(v: [__m512; 4]) -> __m128 {
        let [a0, a1, a2, a3] = v;
        // 128-bit lanes of t01: a0's lanes 0+2 and 1+3, then a1's (t23 likewise).
        let t01 = _mm512_add_ps(_mm512_shuffle_f32x4::<0x44>(a0, a1), _mm512_shuffle_f32x4::<0xEE>(a0, a1));
        let t23 = _mm512_add_ps(_mm512_shuffle_f32x4::<0x44>(a2, a3), _mm512_shuffle_f32x4::<0xEE>(a2, a3));
        // Lane k: four partial sums of a_k.
        let u = _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(t01, t23), _mm512_shuffle_f32x4::<0xDD>(t01, t23));
        // Inside each lane: pairs swapped, then halves: every element of lane k is a_k's sum.
        let u = _mm512_add_ps(u, _mm512_permute_ps::<0b10_11_00_01>(u));
        let u = _mm512_add_ps(u, _mm512_permute_ps::<0b01_00_11_10>(u));
        let firsts = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        _mm512_castps512_ps128(_mm512_permutexvar_ps(firsts, u))
    }
    #[inline(always)]
    unsafe fn load_doc<const E: u8>(doc: *const u8, idx: usize, n: usize) -> __m512 {
        load::<E>(doc, idx, n)
    }
    #[inline(always)]
    unsafe fn transpose_query(query: &[f32], dim: usize, qt: &mut [f32], nqp: usize) {
        // Written for 8 lanes; `nqp` is a multiple of 16, so of 8 too.
        super::avx2::transpose_query(query, dim, qt, nqp)
    }
}

/// Loads `n` (1..=16) doc elements starting at element `idx`, converted to f32 (lanes `n..`
/// zero). `E` is the element kind ([`Elem`]); any alignment.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c,avx2,fma")]
unsafe fn load<const E: u8>(doc: *const u8, idx: usize, n: usize) -> __m512 {
    // SAFETY: the caller passes `doc` holding elements `idx..idx + n` of kind `E`; the masked loads read
    // only those.
    unsafe {
        let p = doc.add(Elem::bytes(E) * idx);
        if E == Elem::F32 {
            if n == W {
                _mm512_loadu_ps(p.cast())
            } else {
                _mm512_maskz_loadu_ps(mask(n), p.cast())
            }
        } else if E == Elem::I8 {
            let v = if n == W {
                _mm_loadu_si128(p.cast())
            } else {
                _mm512_castsi512_si128(_mm512_maskz_loadu_epi8((1u64 << n) - 1, p.cast()))
            };
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v))
        } else {
            let v = if n == W {
                _mm256_loadu_si256(p.cast())
            } else {
                _mm512_castsi512_si256(_mm512_maskz_loadu_epi16((1u32 << n) - 1, p.cast()))
            };
            _mm512_cvtph_ps(v)
        }
    }
}
