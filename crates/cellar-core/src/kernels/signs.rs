//! Estimates of a query token's inner product with sign-coded residuals, 32 postings at a time
//! (FAISS's and Quick ADC's "fast scan", applied to one bit per dimension).
//!
//! A code is `code_bytes` bytes of sign bits (bit `i % 8` of byte `i / 8` for value `i`). The
//! query's sum over a code's set bits is read from one 16-entry table per half byte (a nibble:
//! four dimensions), each entry quantised to 7 bits with one scale for the whole query token, so
//! that two tables' entries add in a byte and 32 codes are looked up at once with a byte shuffle.
//! For a posting with `factor` (f16) and leaf score `score`:
//!
//! `estimate = score + factor · (sum · step + offset)`
//!
//! where `sum` is the integer total of its nibbles' entries, `sum · step + offset` the
//! quantised `<q, s>` (the query signed by the code). The SIMD kernel transposes 32 codes in
//! registers (no layout of its own on disk), so any list of codes is scanned as stored.
//! `kernels::estimate_signs` runs the SIMD kernel for a full block of 32 codes whose length is
//! a multiple of 16 bytes, and the scalar reference ([`estimate_scalar`]) otherwise; both
//! compute `sum` exactly and then the same multiplies and adds in the same order, so they agree
//! to the bit (`tests/kernels.rs`).

use half::f16;

/// Postings one call of the SIMD kernel estimates.
pub const BLOCK: usize = 32;

/// The largest table entry: two add in a byte.
const ENTRY_MAX: f32 = 127.0;

/// A query token's quantised nibble tables.
#[derive(Clone, Debug)]
pub struct SignTables {
    /// Per code byte, 32 entries: the low nibble's table (dimensions `8j..8j+4`), then the
    /// high nibble's (`8j+4..8j+8`).
    pub(crate) luts: Vec<u8>,
    pub(crate) code_bytes: usize,
    pub(crate) step: f32,
    pub(crate) offset: f32,
}

impl SignTables {
    /// The tables of `query` (one token, `dim` values) for codes of `⌈dim/8⌉` bytes.
    pub fn new(query: &[f32]) -> SignTables {
        let code_bytes = query.len().div_ceil(8);
        let nibbles = 2 * code_bytes;
        // Each nibble's four values (zero past the end), their lowest sum and their range.
        let value = |n: usize, k: usize| query.get(4 * n + k).copied().unwrap_or(0.0);
        let low: Vec<f32> = (0..nibbles).map(|n| (0..4).map(|k| value(n, k).min(0.0)).sum()).collect();
        let range = (0..nibbles).map(|n| (0..4).map(|k| value(n, k).abs()).sum::<f32>()).fold(0f32, f32::max);
        let scale = if range > 0.0 && range.is_finite() { ENTRY_MAX / range } else { 0.0 };
        let mut luts = vec![0u8; code_bytes * 32];
        for (n, table) in luts.chunks_exact_mut(16).enumerate() {
            for (pattern, entry) in table.iter_mut().enumerate() {
                let sum: f32 = (0..4).filter(|k| pattern >> k & 1 == 1).map(|k| value(n, k)).sum();
                *entry = ((sum - low[n]) * scale).round().clamp(0.0, ENTRY_MAX) as u8;
            }
        }
        let total: f32 = query.iter().sum();
        let low_total: f32 = low.iter().sum();
        let step = if scale > 0.0 { 2.0 / scale } else { 0.0 };
        SignTables { luts, code_bytes, step, offset: 2.0 * low_total - total }
    }

    pub fn code_bytes(&self) -> usize {
        self.code_bytes
    }

    /// The integer sum of `code`'s nibble entries.
    #[inline]
    pub fn sum(&self, code: &[u8]) -> u32 {
        code.iter()
            .zip(self.luts.chunks_exact(32))
            .map(|(&b, t)| u32::from(t[usize::from(b & 15)]) + u32::from(t[16 + usize::from(b >> 4)]))
            .sum()
    }

    /// The quantised `<q, s>`: the query's values summed with the signs `code` gives them.
    #[inline]
    pub fn signed_sum(&self, code: &[u8]) -> f32 {
        self.sum(code) as f32 * self.step + self.offset
    }

    /// One posting's estimate: `score + factor · signed_sum`, as every kernel computes it.
    #[inline]
    pub fn estimate(&self, score: f32, code: &[u8], factor: u16) -> f32 {
        let signed = self.sum(code) as f32 * self.step;
        score + f16::from_bits(factor).to_f32() * (signed + self.offset)
    }
}

/// The reference: one posting at a time.
pub fn estimate_scalar(tables: &SignTables, score: f32, codes: &[u8], factors: &[u8], out: &mut [f32]) {
    let cb = tables.code_bytes;
    for (i, e) in out.iter_mut().enumerate() {
        let factor = u16::from_le_bytes([factors[2 * i], factors[2 * i + 1]]);
        *e = tables.estimate(score, &codes[i * cb..(i + 1) * cb], factor);
    }
}
