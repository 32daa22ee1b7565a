//! The panel and rows drivers of the x86 kernels (see `x86`), written once over an ISA's lanes
//! ([`Lanes`]). `avx2.rs` and `avx512.rs` give the vector type, its loads and its few operations;
//! their `#[target_feature]` entry points call [`maxsim`], and every function here and every
//! [`Lanes`] method is `#[inline(always)]`, so the whole driver is compiled inside each entry
//! point with that ISA's instructions. The operations run in the same order at every level, so
//! a level's scores depend only on its lane width.

use core::arch::x86_64::{__m128, _mm_max_ps, _mm_set1_ps, _mm_storeu_ps};

use super::{add_all, pad_block, Workspace};

/// Query lane groups (vectors) per panel.
const RV: usize = 2;
/// Doc tokens per block: with two lane groups, 6 tokens fill the registers; a lone lane group
/// (few query tokens) needs more tokens in flight to keep the FMA units busy.
const J: usize = 6;
const J_LONE: usize = 12;
/// Query rows sharing one doc-chunk load in the rows strategy.
const RB: usize = 4;

/// One ISA's vector of f32 lanes and what the drivers do with it. Pointers need no alignment.
///
/// Every method executes the ISA's instructions: it is called only from code inlined into a
/// function whose `#[target_feature]` enables them (the ISA's entry point), which runs only on a
/// CPU that has them (`x86::dispatch`).
pub(super) trait Lanes {
    /// A vector of `W` f32 lanes.
    type V: Copy;
    /// f32 lanes per vector.
    const W: usize;
    /// Below this many query tokens the rows strategy is used.
    const PANEL_MIN_NQ: usize;

    unsafe fn zero() -> Self::V;
    /// `W` floats at `p`.
    unsafe fn load(p: *const f32) -> Self::V;
    /// `n` (1..=W) floats at `p`, lanes `n..` zero.
    unsafe fn load_part(p: *const f32, n: usize) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// The first `n` (1..=W) lanes of `v` to `p`.
    unsafe fn store_part(p: *mut f32, v: Self::V, n: usize);
    /// The float at `p` in every lane.
    unsafe fn splat(p: *const f32) -> Self::V;
    /// `a * b + c`, fused.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// Sum of the lanes.
    unsafe fn sum(v: Self::V) -> f32;
    /// The lane sums of the four vectors, in their order: one joint reduction, a fraction of
    /// the shuffles of four [`Lanes::sum`]s.
    unsafe fn sums4(v: [Self::V; 4]) -> __m128;
    /// `n` (1..=W) doc elements of kind `E` (`x86::Elem`) starting at element `idx` of `doc`,
    /// converted to f32, lanes `n..` zero.
    unsafe fn load_doc<const E: u8>(doc: *const u8, idx: usize, n: usize) -> Self::V;
    /// `query` (`nq` rows of `dim`) column-major into `qt`: `qt[k * nqp + i] = q[i][k]`, lanes
    /// `nq..nqp` of every column zero (`nqp` a multiple of `W`).
    unsafe fn transpose_query(query: &[f32], dim: usize, qt: &mut [f32], nqp: usize);
}

/// MaxSim of `query` (`nq >= 1` rows of `dim`) against `nd >= 1` doc tokens of kind `E` at
/// `doc`: the rows strategy below `L::PANEL_MIN_NQ` query tokens, else the panel strategy.
///
/// # Safety
/// Inlined only into `L`'s `#[target_feature]` entry point, on a CPU with `L`'s features;
/// `doc` holds `nd * dim` elements of kind `E`.
#[inline(always)]
pub(super) unsafe fn maxsim<L: Lanes, const E: u8>(
    query: &[f32],
    dim: usize,
    doc: *const u8,
    nd: usize,
) -> f32 {
    let nq = query.len() / dim;
    // SAFETY: the caller's contract, passed on.
    unsafe {
        if nq < L::PANEL_MIN_NQ {
            return rows::<L, E>(query, dim, doc, nd);
        }
        let nqp = nq.div_ceil(L::W) * L::W;
        if nqp == L::W {
            panels::<L, E, J_LONE>(query, dim, doc, nd, nqp)
        } else {
            panels::<L, E, J>(query, dim, doc, nd, nqp)
        }
    }
}

/// Panel strategy with blocks of `JB` doc tokens; `nqp` is `nq` rounded up to `W`.
#[inline(always)]
unsafe fn panels<L: Lanes, const E: u8, const JB: usize>(
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
    // SAFETY: `qt`, `maxima` and `block` hold what the calls below index (`nqp` lanes per
    // column, `JB` tokens of `dim`); `doc` holds `nd * dim` elements (the caller's contract).
    unsafe {
        L::transpose_query(query, dim, qt, nqp);
        maxima.fill(f32::NEG_INFINITY);
        let (qt, maxima_ptr) = (qt.as_ptr(), maxima.as_mut_ptr());
        for j0 in (0..nd).step_by(JB) {
            let real = JB.min(nd - j0);
            convert::<L, E>(doc, j0 * dim, real * dim, block.as_mut_ptr());
            pad_block(block, dim, real);
            let mut p = 0;
            while p + RV * L::W <= nqp {
                panel::<L, RV, JB>(qt.add(p), nqp, dim, block.as_ptr(), maxima_ptr.add(p));
                p += RV * L::W;
            }
            if p < nqp {
                // RV == 2, so at most one lane group is left.
                panel::<L, 1, JB>(qt.add(p), nqp, dim, block.as_ptr(), maxima_ptr.add(p));
            }
        }
    }
    add_all(0.0, &maxima[..nq])
}

/// Converts `count` doc elements starting at element `start` to f32 at `dst`.
#[inline(always)]
unsafe fn convert<L: Lanes, const E: u8>(doc: *const u8, start: usize, count: usize, dst: *mut f32) {
    // SAFETY: `doc` holds `start + count` elements and `dst` room for `count` floats (the
    // caller's contract); every access stays below them.
    unsafe {
        let mut i = 0;
        while i + L::W <= count {
            L::store(dst.add(i), L::load_doc::<E>(doc, start + i, L::W));
            i += L::W;
        }
        if i < count {
            let n = count - i;
            L::store_part(dst.add(i), L::load_doc::<E>(doc, start + i, n), n);
        }
    }
}

/// Scores `JB` converted doc tokens (`block`, row-major, `dim` apart) against `G` lane groups
/// of the transposed query (`qt`, columns `nqp` apart) and folds them into `maxima`.
#[inline(always)]
unsafe fn panel<L: Lanes, const G: usize, const JB: usize>(
    qt: *const f32,
    nqp: usize,
    dim: usize,
    block: *const f32,
    maxima: *mut f32,
) {
    // SAFETY: `qt` holds `dim` columns of `G * W` lanes `nqp` apart, `block` `JB` tokens of
    // `dim`, `maxima` `G * W` floats (the caller's contract).
    unsafe {
        let mut acc = [[L::zero(); G]; JB];
        for k in 0..dim {
            let col = qt.add(k * nqp);
            let mut q = [L::zero(); G];
            for (g, qg) in q.iter_mut().enumerate() {
                *qg = L::load(col.add(g * L::W));
            }
            for (j, accj) in acc.iter_mut().enumerate() {
                let d = L::splat(block.add(j * dim + k));
                for (a, &qg) in accj.iter_mut().zip(&q) {
                    *a = L::fmadd(qg, d, *a);
                }
            }
        }
        for g in 0..G {
            let mut m = L::load(maxima.add(g * L::W));
            for accj in &acc {
                m = L::max(m, accj[g]);
            }
            L::store(maxima.add(g * L::W), m);
        }
    }
}

/// Rows strategy: blocks of up to `RB` query rows, lanes over dimensions.
#[inline(always)]
unsafe fn rows<L: Lanes, const E: u8>(query: &[f32], dim: usize, doc: *const u8, nd: usize) -> f32 {
    let mut total = 0.0f32;
    for block in query.chunks(RB * dim) {
        let q = block.as_ptr();
        // SAFETY: `q` holds the block's rows of `dim`; `doc` the caller's `nd * dim` elements.
        total = unsafe {
            match block.len() / dim {
                4 => add_all(total, &rows_block::<L, E, 4>(q, dim, doc, nd)),
                3 => add_all(total, &rows_block::<L, E, 3>(q, dim, doc, nd)),
                2 => add_all(total, &rows_block::<L, E, 2>(q, dim, doc, nd)),
                _ => add_all(total, &rows_block::<L, E, 1>(q, dim, doc, nd)),
            }
        };
    }
    total
}

/// Max over the `nd` doc tokens of the dot product with each of `R` query rows at `q` (`R` in
/// 1..=4; two or more rows are reduced together, [`Lanes::sums4`]).
#[inline(always)]
unsafe fn rows_block<L: Lanes, const E: u8, const R: usize>(
    q: *const f32,
    dim: usize,
    doc: *const u8,
    nd: usize,
) -> [f32; R] {
    let mut best = [f32::NEG_INFINITY; R];
    let full = dim / L::W * L::W;
    // SAFETY: `q` holds `R` rows of `dim`, `doc` `nd` tokens of `dim` (the caller's contract);
    // every access stays inside a row or a token. SSE (`_mm_*`) is part of x86-64.
    unsafe {
        let mut qtail = [L::zero(); R];
        if full < dim {
            for (r, t) in qtail.iter_mut().enumerate() {
                *t = L::load_part(q.add(r * dim + full), dim - full);
            }
        }
        let mut best4 = _mm_set1_ps(f32::NEG_INFINITY);
        for j in 0..nd {
            let base = j * dim;
            let mut acc = [L::zero(); 4];
            let mut k = 0;
            while k < full {
                let d = L::load_doc::<E>(doc, base + k, L::W);
                for (r, a) in acc[..R].iter_mut().enumerate() {
                    *a = L::fmadd(L::load(q.add(r * dim + k)), d, *a);
                }
                k += L::W;
            }
            if full < dim {
                let d = L::load_doc::<E>(doc, base + full, dim - full);
                for (a, &t) in acc[..R].iter_mut().zip(&qtail) {
                    *a = L::fmadd(t, d, *a);
                }
            }
            if R == 1 {
                best[0] = best[0].max(L::sum(acc[0]));
            } else {
                // A NaN sum keeps the best so far, as `f32::max` does.
                best4 = _mm_max_ps(L::sums4(acc), best4);
            }
        }
        if R > 1 {
            let mut four = [0f32; 4];
            _mm_storeu_ps(four.as_mut_ptr(), best4);
            best.copy_from_slice(&four[..R]);
        }
    }
    best
}
