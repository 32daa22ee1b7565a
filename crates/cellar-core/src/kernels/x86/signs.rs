//! AVX2 estimates of 32 sign-coded postings (`kernels::signs`), on both SIMD levels.
//!
//! Per 16 bytes of the codes: sixteen registers are loaded, register `i` holding posting `i`'s
//! bytes in its low lane and posting `16 + i`'s in its high lane; four rounds of unpacking
//! (bytes, words, double words, quad words; lows first) transpose each lane, after which
//! register `k` holds code byte `BIT_REVERSED[k]` of the 16 postings of each lane, in order.
//! Each nibble picks its table entry with a byte shuffle, the two entries of a byte add in a
//! byte (each at most 127), and the bytes are summed in 16-bit lanes, even postings and odd
//! apart. The sums then become the estimate with the reference's multiplies and adds.

use core::arch::x86_64::*;

use super::super::signs::{SignTables, BLOCK};

/// Codes longer than this could overflow a 16-bit sum (254 per byte).
pub const MAX_CODE_BYTES: usize = 256;

/// Which code byte (of 16) the `k`-th register holds after the transpose.
const BIT_REVERSED: [usize; 16] = [0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15];

/// Entry point; the caller checked the level, a full block and a code length that is a
/// multiple of 16 and at most [`MAX_CODE_BYTES`].
pub(super) fn estimate(tables: &SignTables, score: f32, codes: &[u8], factors: &[u8], out: &mut [f32]) {
    let cb = tables.code_bytes;
    assert!(out.len() == BLOCK && cb.is_multiple_of(16) && cb <= MAX_CODE_BYTES);
    assert!(codes.len() >= BLOCK * cb && factors.len() >= 2 * BLOCK && tables.luts.len() == 32 * cb);
    // SAFETY: the caller checked this CPU has AVX2 and F16C; every read is inside the slices
    // whose lengths were checked above.
    unsafe { estimate32(tables, score, codes.as_ptr(), factors.as_ptr(), out.as_mut_ptr()) }
}

/// One round of the transpose: pairs `(2m, 2m + 1)` unpacked with `$lo` and `$hi`, the lows
/// to the first half.
macro_rules! round {
    ($r:ident, $lo:ident, $hi:ident) => {{
        let mut out = $r;
        for m in 0..8 {
            out[m] = $lo($r[2 * m], $r[2 * m + 1]);
            out[8 + m] = $hi($r[2 * m], $r[2 * m + 1]);
        }
        out
    }};
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn estimate32(tables: &SignTables, score: f32, codes: *const u8, factors: *const u8, out: *mut f32) {
    let cb = tables.code_bytes;
    // SAFETY: reads stay inside `codes` (32 · cb bytes), `factors` (64 bytes) and the tables
    // (32 · cb bytes); writes inside `out` (32 floats); AVX2 and F16C are present.
    unsafe {
        let nibble = _mm256_set1_epi8(0x0f);
        let low_byte = _mm256_set1_epi16(0x00ff);
        let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for chunk in 0..cb / 16 {
            let mut r = [_mm256_setzero_si256(); 16];
            for (i, reg) in r.iter_mut().enumerate() {
                let a = _mm_loadu_si128(codes.add(i * cb + chunk * 16).cast());
                let b = _mm_loadu_si128(codes.add((16 + i) * cb + chunk * 16).cast());
                *reg = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b);
            }
            r = round!(r, _mm256_unpacklo_epi8, _mm256_unpackhi_epi8);
            r = round!(r, _mm256_unpacklo_epi16, _mm256_unpackhi_epi16);
            r = round!(r, _mm256_unpacklo_epi32, _mm256_unpackhi_epi32);
            r = round!(r, _mm256_unpacklo_epi64, _mm256_unpackhi_epi64);
            for (k, v) in r.iter().enumerate() {
                let lut = tables.luts.as_ptr().add((chunk * 16 + BIT_REVERSED[k]) * 32);
                let low_table = _mm256_broadcastsi128_si256(_mm_loadu_si128(lut.cast()));
                let high_table = _mm256_broadcastsi128_si256(_mm_loadu_si128(lut.add(16).cast()));
                let low = _mm256_and_si256(*v, nibble);
                let high = _mm256_and_si256(_mm256_srli_epi16::<4>(*v), nibble);
                let s = _mm256_add_epi8(
                    _mm256_shuffle_epi8(low_table, low),
                    _mm256_shuffle_epi8(high_table, high),
                );
                even = _mm256_add_epi16(even, _mm256_and_si256(s, low_byte));
                odd = _mm256_add_epi16(odd, _mm256_srli_epi16::<8>(s));
            }
        }
        // even: postings 0, 2, .., 14 | 16, .., 30; odd: 1, .., 15 | 17, .., 31.
        let lo = _mm256_unpacklo_epi16(even, odd); // 0..8 | 16..24
        let hi = _mm256_unpackhi_epi16(even, odd); // 8..16 | 24..32
        let first = _mm256_permute2x128_si256::<0x20>(lo, hi); // 0..16
        let second = _mm256_permute2x128_si256::<0x31>(lo, hi); // 16..32
        let (step, offset, base) =
            (_mm256_set1_ps(tables.step), _mm256_set1_ps(tables.offset), _mm256_set1_ps(score));
        for (g, half) in [
            _mm256_castsi256_si128(first),
            _mm256_extracti128_si256::<1>(first),
            _mm256_castsi256_si128(second),
            _mm256_extracti128_si256::<1>(second),
        ]
        .into_iter()
        .enumerate()
        {
            let sums = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(half));
            let signed = _mm256_add_ps(_mm256_mul_ps(sums, step), offset);
            let factor = _mm256_cvtph_ps(_mm_loadu_si128(factors.add(16 * g).cast()));
            _mm256_storeu_ps(out.add(8 * g), _mm256_add_ps(base, _mm256_mul_ps(factor, signed)));
        }
    }
}
