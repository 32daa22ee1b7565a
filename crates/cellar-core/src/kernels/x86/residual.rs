//! AVX2 and AVX-512 decoders of residual-coded tokens (layout: `kernels::residual`): per group
//! of 8 dimensions, the `bits`-byte word is broadcast, shifted per lane and masked into bucket
//! indices, which pick the bucket values with a lane permute (AVX2: two permutes and a blend
//! for the 16 buckets of 4 bits; AVX-512: two groups per register and one permute for any
//! width); then `centroid + scale * weight`, a multiply then an add, exactly as the scalar
//! reference. The uncoded dimensions past `coded` are the centroid's, copied.

use core::arch::x86_64::*;

use super::super::residual::{ResidualTables, CENTROID_ID_BYTES};

/// A decoder of `B`-bit codes at one level.
type Decoder = unsafe fn(&ResidualTables, &[u8], usize, &mut [f32]);

/// Entry point: the AVX-512 decoder where `avx512`, else the AVX2 one; `tables.check` has run
/// and this CPU has the level asked for.
pub(super) fn decode(avx512: bool, tables: &ResidualTables, doc: &[u8], nd: usize, out: &mut [f32]) {
    fn pick<const B: usize>(avx512: bool) -> Decoder {
        if avx512 {
            decode_bits_avx512::<B>
        } else {
            decode_bits::<B>
        }
    }
    let decoder = match tables.bits {
        1 => pick::<1>(avx512),
        2 => pick::<2>(avx512),
        _ => pick::<4>(avx512),
    };
    // SAFETY: the level was detected by the caller (`x86::decode_residual`); the shapes were
    // checked.
    unsafe { decoder(tables, doc, nd, out) }
}

/// The `B`-bit word of group `g` of a token's codes.
#[inline]
unsafe fn word<const B: usize>(codes: *const u8, g: usize) -> i32 {
    // SAFETY: the caller passes the codes of a token, which hold `(g + 1) * B` bytes.
    unsafe {
        let p = codes.add(g * B);
        match B {
            1 => i32::from(*p),
            2 => i32::from(p.cast::<u16>().read_unaligned()),
            _ => p.cast::<u32>().read_unaligned() as i32,
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_bits<const B: usize>(tables: &ResidualTables, doc: &[u8], nd: usize, out: &mut [f32]) {
    // SAFETY: this CPU has AVX2 (`decode`'s caller checked); `tables.check` ran, so `doc` holds `nd` tokens
    // of `token_bytes`, `out` `nd` rows of `dim`, `scales` and every centroid `coded` floats.
    unsafe {
        let dim = tables.dim;
        let b = B as i32;
        let shifts = _mm256_setr_epi32(0, b, 2 * b, 3 * b, 4 * b, 5 * b, 6 * b, 7 * b);
        let mask = _mm256_set1_epi32((1 << B) - 1);
        let mut padded = [0f32; 16];
        padded[..1 << B].copy_from_slice(tables.weights);
        let low = _mm256_loadu_ps(padded.as_ptr());
        let high = _mm256_loadu_ps(padded.as_ptr().add(8));
        let token_bytes = tables.token_bytes();
        let scales = tables.scales.as_ptr();
        for j in 0..nd {
            let token = &doc[j * token_bytes..(j + 1) * token_bytes];
            let centroid = tables.centroid(token).as_ptr();
            let codes = token.as_ptr().add(CENTROID_ID_BYTES);
            let row = out.as_mut_ptr().add(j * dim);
            for g in 0..tables.coded / 8 {
                let idx =
                    _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word::<B>(codes, g)), shifts), mask);
                let mut w = _mm256_permutevar8x32_ps(low, idx);
                if B == 4 {
                    // Bit 3 of the index, moved to the sign bit, picks the upper eight buckets.
                    let upper = _mm256_permutevar8x32_ps(high, idx);
                    w = _mm256_blendv_ps(w, upper, _mm256_castsi256_ps(_mm256_slli_epi32::<28>(idx)));
                }
                let scaled = _mm256_mul_ps(_mm256_loadu_ps(scales.add(8 * g)), w);
                _mm256_storeu_ps(row.add(8 * g), _mm256_add_ps(_mm256_loadu_ps(centroid.add(8 * g)), scaled));
            }
            copy_tail(tables, centroid, row);
        }
    }
}

/// Two groups of 8 dimensions per step: lanes 0..8 take group `2h`'s word, lanes 8..16 group
/// `2h + 1`'s, each shifted per lane and masked into a bucket index; all 16 buckets (4 bits)
/// sit in one register, so a single permute picks every weight. An odd last group runs with
/// the upper half masked off.
#[target_feature(enable = "avx512f,avx2")]
unsafe fn decode_bits_avx512<const B: usize>(
    tables: &ResidualTables,
    doc: &[u8],
    nd: usize,
    out: &mut [f32],
) {
    // SAFETY: this CPU has AVX-512 (`decode`'s caller checked); `tables.check` ran, so `doc` holds `nd`
    // tokens of `token_bytes`, `out` `nd` rows of `dim`, `scales` and every centroid `coded`
    // floats; the masked loads and stores touch only the lanes of real groups.
    unsafe {
        let dim = tables.dim;
        let b = B as i32;
        // Lane t of either half shifts its group's word by (t mod 8) * B bits.
        let lanes: [i32; 16] = core::array::from_fn(|t| (t % 8) as i32 * b);
        let shifts = _mm512_loadu_si512(lanes.as_ptr().cast());
        let mask = _mm512_set1_epi32((1 << B) - 1);
        let mut padded = [0f32; 16];
        padded[..1 << B].copy_from_slice(tables.weights);
        let buckets = _mm512_loadu_ps(padded.as_ptr());
        let token_bytes = tables.token_bytes();
        let scales = tables.scales.as_ptr();
        let groups = tables.coded / 8;
        for j in 0..nd {
            let token = &doc[j * token_bytes..(j + 1) * token_bytes];
            let centroid = tables.centroid(token).as_ptr();
            let codes = token.as_ptr().add(CENTROID_ID_BYTES);
            let row = out.as_mut_ptr().add(j * dim);
            let mut g = 0;
            while g < groups {
                let (lanes, upper) =
                    if g + 1 < groups { (0xFFFF_u16, word::<B>(codes, g + 1)) } else { (0x00FF, 0) };
                let words = _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(_mm256_set1_epi32(word::<B>(codes, g))),
                    _mm256_set1_epi32(upper),
                );
                let idx = _mm512_and_si512(_mm512_srlv_epi32(words, shifts), mask);
                let w = _mm512_permutexvar_ps(idx, buckets);
                let at = 8 * g;
                let scaled = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, scales.add(at)), w);
                let value = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, centroid.add(at)), scaled);
                _mm512_mask_storeu_ps(row.add(at), lanes, value);
                g += 2;
            }
            copy_tail(tables, centroid, row);
        }
    }
}

/// Dimensions `coded..dim` of a decoded row: the centroid's own values.
#[inline]
unsafe fn copy_tail(tables: &ResidualTables, centroid: *const f32, row: *mut f32) {
    // SAFETY: `centroid` and `row` hold `tables.dim` floats each (a centroid, a decoded row).
    unsafe {
        let coded = tables.coded;
        core::ptr::copy_nonoverlapping(centroid.add(coded), row.add(coded), tables.dim - coded);
    }
}
