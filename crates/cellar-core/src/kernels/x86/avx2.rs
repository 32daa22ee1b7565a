//! AVX2 + FMA + F16C kernels: 8 f32 lanes; tails go through small zero-padded stack buffers.

use super::{add_all, pad_block, Elem, Workspace};
use core::arch::x86_64::*;

/// f32 lanes per vector.
const W: usize = 8;
/// Query lane groups (vectors) per panel.
const RV: usize = 2;
/// Doc tokens per block: with two lane groups, 6 tokens fill the registers; a lone lane group
/// (few query tokens) needs more tokens in flight to keep the FMA units busy.
const J: usize = 6;
const J_LONE: usize = 12;
/// Below this many query tokens the rows strategy is used.
const PANEL_MIN_NQ: usize = 7;
/// Query rows sharing one doc-chunk load in the rows strategy.
const RB: usize = 4;

/// Loads `n` (1..=8) doc elements starting at element `idx`, converted to f32 (lanes `n..`
/// zero). `E` is the element kind ([`Elem`]); any alignment.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load<const E: u8>(doc: *const u8, idx: usize, n: usize) -> __m256 {
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

/// Loads `n` (1..=8) query values at `q`, lanes `n..` zero.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_query_tail(q: *const f32, n: usize) -> __m256 {
    let mut tmp = [0f32; W];
    core::ptr::copy_nonoverlapping(q, tmp.as_mut_ptr(), n);
    _mm256_loadu_ps(tmp.as_ptr())
}

/// Entry point; see `x86::dispatch`. `nq >= 1`, `nd >= 1`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn maxsim<const E: u8>(query: &[f32], dim: usize, doc: *const u8, nd: usize) -> f32 {
    let nq = query.len() / dim;
    if nq < PANEL_MIN_NQ {
        return rows::<E>(query, dim, doc, nd);
    }
    let nqp = nq.div_ceil(W) * W;
    if nqp == W {
        panels::<E, J_LONE>(query, dim, doc, nd, nqp)
    } else {
        panels::<E, J>(query, dim, doc, nd, nqp)
    }
}

/// Panel strategy with blocks of `JB` doc tokens; `nqp` is `nq` rounded up to `W`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panels<const E: u8, const JB: usize>(
    query: &[f32],
    dim: usize,
    doc: *const u8,
    nd: usize,
    nqp: usize,
) -> f32 {
    let nq = query.len() / dim;
    let mut ws = Workspace::take();
    let buf = ws.slice(nqp * dim + nqp + JB * dim);
    let (qt, rest) = buf.split_at_mut(nqp * dim);
    let (maxima, block) = rest.split_at_mut(nqp);
    transpose_query(query, dim, qt, nqp);
    maxima.fill(f32::NEG_INFINITY);
    let (qt, maxima_ptr) = (qt.as_ptr(), maxima.as_mut_ptr());
    for j0 in (0..nd).step_by(JB) {
        let real = JB.min(nd - j0);
        convert::<E>(doc, j0 * dim, real * dim, block.as_mut_ptr());
        pad_block(block, dim, real);
        let mut p = 0;
        while p + RV * W <= nqp {
            panel::<RV, JB>(qt.add(p), nqp, dim, block.as_ptr(), maxima_ptr.add(p));
            p += RV * W;
        }
        if p < nqp {
            // RV == 2, so at most one lane group is left.
            panel::<1, JB>(qt.add(p), nqp, dim, block.as_ptr(), maxima_ptr.add(p));
        }
    }
    add_all(0.0, &maxima[..nq])
}

/// Converts `count` doc elements starting at element `start` to f32 at `dst`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn convert<const E: u8>(doc: *const u8, start: usize, count: usize, dst: *mut f32) {
    let mut i = 0;
    while i + W <= count {
        _mm256_storeu_ps(dst.add(i), load::<E>(doc, start + i, W));
        i += W;
    }
    if i < count {
        let mut tmp = [0f32; W];
        _mm256_storeu_ps(tmp.as_mut_ptr(), load::<E>(doc, start + i, count - i));
        core::ptr::copy_nonoverlapping(tmp.as_ptr(), dst.add(i), count - i);
    }
}

/// Scores `JB` converted doc tokens (`block`, row-major, `dim` apart) against `G` lane groups
/// of the transposed query (`qt`, columns `nqp` apart) and folds them into `maxima`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel<const G: usize, const JB: usize>(
    qt: *const f32,
    nqp: usize,
    dim: usize,
    block: *const f32,
    maxima: *mut f32,
) {
    let mut acc = [[_mm256_setzero_ps(); G]; JB];
    for k in 0..dim {
        let col = qt.add(k * nqp);
        let mut q = [_mm256_setzero_ps(); G];
        for (g, qg) in q.iter_mut().enumerate() {
            *qg = _mm256_loadu_ps(col.add(g * W));
        }
        for (j, accj) in acc.iter_mut().enumerate() {
            let d = _mm256_broadcast_ss(&*block.add(j * dim + k));
            for (a, &qg) in accj.iter_mut().zip(&q) {
                *a = _mm256_fmadd_ps(qg, d, *a);
            }
        }
    }
    for g in 0..G {
        let mut m = _mm256_loadu_ps(maxima.add(g * W));
        for accj in &acc {
            m = _mm256_max_ps(m, accj[g]);
        }
        _mm256_storeu_ps(maxima.add(g * W), m);
    }
}

/// Rows strategy: blocks of up to `RB` query rows, lanes over dimensions.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows<const E: u8>(query: &[f32], dim: usize, doc: *const u8, nd: usize) -> f32 {
    let mut total = 0.0f32;
    for block in query.chunks(RB * dim) {
        let q = block.as_ptr();
        total = match block.len() / dim {
            4 => add_all(total, &rows_block::<E, 4>(q, dim, doc, nd)),
            3 => add_all(total, &rows_block::<E, 3>(q, dim, doc, nd)),
            2 => add_all(total, &rows_block::<E, 2>(q, dim, doc, nd)),
            _ => add_all(total, &rows_block::<E, 1>(q, dim, doc, nd)),
        };
    }
    total
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

/// Max over the `nd` doc tokens of the dot product with each of `R` query rows at `q`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_block<const E: u8, const R: usize>(
    q: *const f32,
    dim: usize,
    doc: *const u8,
    nd: usize,
) -> [f32; R] {
    let mut best = [f32::NEG_INFINITY; R];
    let full = dim / W * W;
    let mut qtail = [_mm256_setzero_ps(); R];
    if full < dim {
        for (r, t) in qtail.iter_mut().enumerate() {
            *t = load_query_tail(q.add(r * dim + full), dim - full);
        }
    }
    for j in 0..nd {
        let base = j * dim;
        let mut acc = [_mm256_setzero_ps(); R];
        let mut k = 0;
        while k < full {
            let d = load::<E>(doc, base + k, W);
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(r * dim + k)), d, *a);
            }
            k += W;
        }
        if full < dim {
            let d = load::<E>(doc, base + full, dim - full);
            for (a, &t) in acc.iter_mut().zip(&qtail) {
                *a = _mm256_fmadd_ps(t, d, *a);
            }
        }
        for (b, &a) in best.iter_mut().zip(&acc) {
            *b = b.max(hsum(a));
        }
    }
    best
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
