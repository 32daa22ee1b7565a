//! AVX2 decoder of residual-coded tokens (layout: `kernels::residual`): per group of 8
//! dimensions, the `bits`-byte word is broadcast, shifted per lane and masked into bucket
//! indices, which pick the bucket values with a lane permute (two permutes and a blend for the
//! 16 buckets of 4 bits); then `centroid + scale * weight`, exactly as the scalar reference.

use core::arch::x86_64::*;

use super::super::residual::{ResidualTables, CENTROID_ID_BYTES};

/// Entry point; `tables.check` has run and this CPU has AVX2.
pub(super) fn decode(tables: &ResidualTables, doc: &[u8], nd: usize, out: &mut [f32]) {
    // SAFETY: AVX2 was detected by the caller (`x86::decode_residual`); the shapes were checked.
    unsafe {
        match tables.bits {
            1 => decode_bits::<1>(tables, doc, nd, out),
            2 => decode_bits::<2>(tables, doc, nd, out),
            _ => decode_bits::<4>(tables, doc, nd, out),
        }
    }
}

/// The `B`-bit word of group `g` of a token's codes.
#[inline]
unsafe fn word<const B: usize>(codes: *const u8, g: usize) -> i32 {
    let p = codes.add(g * B);
    match B {
        1 => i32::from(*p),
        2 => i32::from(p.cast::<u16>().read_unaligned()),
        _ => p.cast::<u32>().read_unaligned() as i32,
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_bits<const B: usize>(tables: &ResidualTables, doc: &[u8], nd: usize, out: &mut [f32]) {
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
        for g in 0..dim / 8 {
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
    }
}
