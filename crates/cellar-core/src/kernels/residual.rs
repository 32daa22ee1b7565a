//! Decoding of residual-coded tokens (the `residual` codec) into f32, for the MaxSim kernels.
//!
//! A token is a little-endian `u16` centroid id followed by `coded * bits / 8` bytes of codes;
//! `coded` (at most `dim`) is a multiple of 8, so each group of 8 dimensions takes exactly
//! `bits` bytes, read as a little-endian integer whose bits `t * bits ..` hold the code of
//! dimension `8 * g + t`. A coded dimension `k` decodes to `centroid[k] + scale[k] *
//! weights[code]`, multiplied and then added (two roundings, no fused multiply-add), so every
//! level gives the same bits as the scalar reference; dimensions `coded..dim` have no codes and
//! decode to the centroid's value. `kernels::decode_residual` picks the level.

/// Centroid-id bytes at the start of every token.
pub const CENTROID_ID_BYTES: usize = 2;

/// What decoding needs besides the codes.
#[derive(Clone, Copy, Debug)]
pub struct ResidualTables<'a> {
    pub dim: usize,
    /// Dimensions `0..coded` carry codes; a multiple of 8 in `8..=dim`.
    pub coded: usize,
    /// 1, 2 or 4.
    pub bits: usize,
    /// `k * dim` centroid values, row after row.
    pub centroids: &'a [f32],
    /// `coded` per-dimension scales.
    pub scales: &'a [f32],
    /// `2^bits` bucket values, in units of the scale.
    pub weights: &'a [f32],
}

impl ResidualTables<'_> {
    /// Bytes one token takes.
    pub fn token_bytes(&self) -> usize {
        CENTROID_ID_BYTES + self.coded * self.bits / 8
    }

    pub(super) fn check(&self, doc: &[u8], out: &[f32]) -> usize {
        assert!(matches!(self.bits, 1 | 2 | 4), "residual bits {} is not 1, 2 or 4", self.bits);
        assert!(
            self.dim > 0 && self.dim.is_multiple_of(8),
            "residual dim {} is not a multiple of 8",
            self.dim
        );
        assert!(
            self.coded > 0 && self.coded <= self.dim && self.coded.is_multiple_of(8),
            "residual coded dimensions {} is not a multiple of 8 in 8..={}",
            self.coded,
            self.dim
        );
        assert_eq!(self.scales.len(), self.coded);
        assert_eq!(self.weights.len(), 1 << self.bits);
        assert!(!self.centroids.is_empty() && self.centroids.len().is_multiple_of(self.dim));
        assert!(doc.len().is_multiple_of(self.token_bytes()), "residual document is not whole tokens");
        let nd = doc.len() / self.token_bytes();
        assert_eq!(out.len(), nd * self.dim, "decode buffer does not fit the document");
        nd
    }

    /// The centroid row of token `j` (panics on an id past the table: records are checksummed,
    /// so only a writer bug can produce one).
    pub(super) fn centroid(&self, token: &[u8]) -> &[f32] {
        let id = u16::from_le_bytes([token[0], token[1]]) as usize;
        let k = self.centroids.len() / self.dim;
        assert!(id < k, "residual token names centroid {id} of {k}");
        &self.centroids[id * self.dim..(id + 1) * self.dim]
    }
}

/// The reference decoder.
pub(super) fn decode_scalar(tables: &ResidualTables, doc: &[u8], nd: usize, out: &mut [f32]) {
    let (dim, bits) = (tables.dim, tables.bits);
    let mask = (1u32 << bits) - 1;
    for (token, row) in doc.chunks_exact(tables.token_bytes()).zip(out.chunks_exact_mut(dim)).take(nd) {
        let centroid = tables.centroid(token);
        let codes = &token[CENTROID_ID_BYTES..];
        for (g, group) in codes.chunks_exact(bits).enumerate() {
            let mut word = [0u8; 4];
            word[..bits].copy_from_slice(group);
            let word = u32::from_le_bytes(word);
            for t in 0..8 {
                let k = 8 * g + t;
                let code = (word >> (t * bits)) & mask;
                row[k] = centroid[k] + tables.scales[k] * tables.weights[code as usize];
            }
        }
        row[tables.coded..].copy_from_slice(&centroid[tables.coded..]);
    }
}
