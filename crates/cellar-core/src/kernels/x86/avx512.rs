//! AVX-512 F/BW kernels: 16 f32 lanes, masked loads for every tail.

use super::avx2::transpose_query;
use super::{add_all, pad_block, Elem, Workspace};
use core::arch::x86_64::*;

/// f32 lanes per vector.
const W: usize = 16;
/// Query lane groups (vectors) per panel.
const RV: usize = 2;
/// Doc tokens per block: with two lane groups, 6 tokens fill the registers; a lone lane group
/// (few query tokens) needs more tokens in flight to keep the FMA units busy.
const J: usize = 6;
const J_LONE: usize = 12;
/// Below this many query tokens the rows strategy is used.
const PANEL_MIN_NQ: usize = 9;
/// Query rows sharing one doc-chunk load in the rows strategy.
const RB: usize = 4;

/// Loads `n` (1..=16) doc elements starting at element `idx`, converted to f32 (lanes `n..`
/// zero). `E` is the element kind ([`Elem`]); any alignment.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c,avx2,fma")]
unsafe fn load<const E: u8>(doc: *const u8, idx: usize, n: usize) -> __m512 {
    let p = doc.add(Elem::bytes(E) * idx);
    if E == Elem::F32 {
        if n == W {
            _mm512_loadu_ps(p.cast())
        } else {
            _mm512_maskz_loadu_ps((1u16 << n) - 1, p.cast())
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

/// Entry point; see `x86::dispatch`. `nq >= 1`, `nd >= 1`.
#[target_feature(enable = "avx512f,avx512bw,f16c,avx2,fma")]
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
#[target_feature(enable = "avx512f,avx512bw,f16c,avx2,fma")]
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
#[target_feature(enable = "avx512f,avx512bw,f16c,avx2,fma")]
unsafe fn convert<const E: u8>(doc: *const u8, start: usize, count: usize, dst: *mut f32) {
    let mut i = 0;
    while i + W <= count {
        _mm512_storeu_ps(dst.add(i), load::<E>(doc, start + i, W));
        i += W;
    }
    if i < count {
        let n = count - i;
        _mm512_mask_storeu_ps(dst.add(i), (1u16 << n) - 1, load::<E>(doc, start + i, n));
    }
}

/// Scores `JB` converted doc tokens (`block`, row-major, `dim` apart) against `G` lane groups
/// of the transposed query (`qt`, columns `nqp` apart) and folds them into `maxima`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c,avx2,fma")]
unsafe fn panel<const G: usize, const JB: usize>(
    qt: *const f32,
    nqp: usize,
    dim: usize,
    block: *const f32,
    maxima: *mut f32,
) {
    let mut acc = [[_mm512_setzero_ps(); G]; JB];
    for k in 0..dim {
        let col = qt.add(k * nqp);
        let mut q = [_mm512_setzero_ps(); G];
        for (g, qg) in q.iter_mut().enumerate() {
            *qg = _mm512_loadu_ps(col.add(g * W));
        }
        for (j, accj) in acc.iter_mut().enumerate() {
            let d = _mm512_set1_ps(*block.add(j * dim + k));
            for (a, &qg) in accj.iter_mut().zip(&q) {
                *a = _mm512_fmadd_ps(qg, d, *a);
            }
        }
    }
    for g in 0..G {
        let mut m = _mm512_loadu_ps(maxima.add(g * W));
        for accj in &acc {
            m = _mm512_max_ps(m, accj[g]);
        }
        _mm512_storeu_ps(maxima.add(g * W), m);
    }
}

/// Rows strategy: blocks of up to `RB` query rows, lanes over dimensions.
#[target_feature(enable = "avx512f,avx512bw,f16c,avx2,fma")]
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

/// Max over the `nd` doc tokens of the dot product with each of `R` query rows at `q`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c,avx2,fma")]
unsafe fn rows_block<const E: u8, const R: usize>(
    q: *const f32,
    dim: usize,
    doc: *const u8,
    nd: usize,
) -> [f32; R] {
    let mut best = [f32::NEG_INFINITY; R];
    let full = dim / W * W;
    let tail = (1u16 << (dim - full)) - 1;
    for j in 0..nd {
        let base = j * dim;
        let mut acc = [_mm512_setzero_ps(); R];
        let mut k = 0;
        while k < full {
            let d = load::<E>(doc, base + k, W);
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(r * dim + k)), d, *a);
            }
            k += W;
        }
        if full < dim {
            let d = load::<E>(doc, base + full, dim - full);
            for (r, a) in acc.iter_mut().enumerate() {
                let qv = _mm512_maskz_loadu_ps(tail, q.add(r * dim + full));
                *a = _mm512_fmadd_ps(qv, d, *a);
            }
        }
        for (b, &a) in best.iter_mut().zip(&acc) {
            *b = b.max(_mm512_reduce_add_ps(a));
        }
    }
    best
}
