//! Byte layouts of the IVF's binary files (drawn in `docs/format/ivf.md`).
//!
//! ```text
//! ivf_centroids.bin body = dim u32 | clusters u32 | docs u64 | words u32 | reserved u32
//!                          | rotation: dim x dim f32 | centroids: clusters x dim f32
//!                          | table: clusters x (postings_offset u64 | vectors_offset u64 | count u32 | block_crc u32)
//! ivf_postings.bin       = one block per cluster, each starting on a 4 KiB page:
//!                          ids n x u32 | norm n x f32 | x_dot_r n x f32 | r_dot_c n x f32
//!                          | vector_crc n x u32 | codes n x words x u64
//! ivf_vectors.bin        = per cluster, its members' vectors as f16 rows, in block order
//! ```
//! All integers and floats little-endian; offsets are absolute file offsets.

use std::path::Path;

use cellar_core::{CellarError, Result};

use super::rabitq::Factors;

pub const CENTROIDS_PREAMBLE_BYTES: usize = 24;
pub const TABLE_ENTRY_BYTES: usize = 24;
/// Bytes per member in a posting block besides its code.
pub const MEMBER_FIXED_BYTES: usize = 20;

/// Where one cluster's data lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterEntry {
    pub postings_offset: u64,
    pub vectors_offset: u64,
    pub count: u32,
    /// CRC-32C of the posting block's bytes.
    pub block_crc: u32,
}

impl ClusterEntry {
    pub fn block_len(&self, words: usize) -> usize {
        self.count as usize * (MEMBER_FIXED_BYTES + 8 * words)
    }
}

/// The decoded body of `ivf_centroids.bin`.
pub struct CentroidsFile {
    pub dim: usize,
    pub docs: u64,
    pub words: usize,
    pub rotation: Vec<f32>,
    pub centroids: Vec<f32>,
    pub table: Vec<ClusterEntry>,
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect()
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

impl CentroidsFile {
    pub fn encode(&self) -> Vec<u8> {
        let clusters = self.table.len();
        let mut out = Vec::new();
        out.extend_from_slice(&(self.dim as u32).to_le_bytes());
        out.extend_from_slice(&(clusters as u32).to_le_bytes());
        out.extend_from_slice(&self.docs.to_le_bytes());
        out.extend_from_slice(&(self.words as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for v in self.rotation.iter().chain(&self.centroids) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for e in &self.table {
            out.extend_from_slice(&e.postings_offset.to_le_bytes());
            out.extend_from_slice(&e.vectors_offset.to_le_bytes());
            out.extend_from_slice(&e.count.to_le_bytes());
            out.extend_from_slice(&e.block_crc.to_le_bytes());
        }
        out
    }

    /// Decodes a body whose checksum was verified; checks that its sizes add up.
    pub fn decode(path: &Path, body: &[u8]) -> Result<CentroidsFile> {
        let corrupt = |detail: String| CellarError::corrupted(path, 0, detail);
        if body.len() < CENTROIDS_PREAMBLE_BYTES {
            return Err(corrupt(format!("{} bytes, shorter than the preamble", body.len())));
        }
        let dim = u32_at(body, 0) as usize;
        let clusters = u32_at(body, 4) as usize;
        let docs = u64_at(body, 8);
        let words = u32_at(body, 16) as usize;
        // Sizes from the file itself: checked, so a crafted header is an error, not an overflow.
        let expected = dim
            .checked_mul(dim)
            .and_then(|rotation| clusters.checked_mul(dim)?.checked_add(rotation))
            .and_then(|floats| floats.checked_mul(4))
            .and_then(|bytes| clusters.checked_mul(TABLE_ENTRY_BYTES)?.checked_add(bytes))
            .and_then(|bytes| bytes.checked_add(CENTROIDS_PREAMBLE_BYTES))
            .unwrap_or(usize::MAX);
        if body.len() != expected || dim == 0 || clusters == 0 || words != super::rabitq::words_for(dim) {
            return Err(corrupt(format!(
                "{} bytes for dim {dim}, {clusters} clusters, {words} code words: expected {expected}",
                body.len()
            )));
        }
        let rotation_end = CENTROIDS_PREAMBLE_BYTES + 4 * dim * dim;
        let centroids_end = rotation_end + 4 * clusters * dim;
        let table = body[centroids_end..]
            .chunks_exact(TABLE_ENTRY_BYTES)
            .map(|e| ClusterEntry {
                postings_offset: u64_at(e, 0),
                vectors_offset: u64_at(e, 8),
                count: u32_at(e, 16),
                block_crc: u32_at(e, 20),
            })
            .collect::<Vec<_>>();
        let members: u64 = table.iter().map(|e| e.count as u64).sum();
        if members != docs {
            return Err(corrupt(format!("the clusters hold {members} documents, the header says {docs}")));
        }
        Ok(CentroidsFile {
            dim,
            docs,
            words,
            rotation: f32s(&body[CENTROIDS_PREAMBLE_BYTES..rotation_end]),
            centroids: f32s(&body[rotation_end..centroids_end]),
            table,
        })
    }
}

/// One cluster's members: ids, estimator factors, vector checksums and codes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PostingBlock {
    pub ids: Vec<u32>,
    pub factors: Vec<Factors>,
    pub vector_crcs: Vec<u32>,
    /// `ids.len() x words` words.
    pub codes: Vec<u64>,
}

impl PostingBlock {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.ids.len() * MEMBER_FIXED_BYTES + self.codes.len() * 8);
        self.ids.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        self.factors.iter().for_each(|f| out.extend_from_slice(&f.norm.to_le_bytes()));
        self.factors.iter().for_each(|f| out.extend_from_slice(&f.x_dot_r.to_le_bytes()));
        self.factors.iter().for_each(|f| out.extend_from_slice(&f.r_dot_c.to_le_bytes()));
        self.vector_crcs.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        self.codes.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out
    }

    /// Decodes `n` members of `words`-word codes from `bytes` (exactly the block's length).
    pub fn decode(bytes: &[u8], n: usize, words: usize) -> PostingBlock {
        let view = PostingView { bytes, n, words };
        let mut codes = vec![0u64; n * words];
        for (i, code) in codes.chunks_exact_mut(words.max(1)).enumerate().take(n) {
            view.code_into(i, code);
        }
        PostingBlock {
            ids: (0..n).map(|i| view.id(i)).collect(),
            factors: (0..n).map(|i| view.factors(i)).collect(),
            vector_crcs: (0..n).map(|i| view.vector_crc(i)).collect(),
            codes,
        }
    }
}

/// A posting block read in place: the query path scores members straight from the bytes it
/// read, without copying the block into owned columns.
#[derive(Clone, Copy)]
pub struct PostingView<'a> {
    pub bytes: &'a [u8],
    pub n: usize,
    pub words: usize,
}

impl PostingView<'_> {
    fn column_u32(&self, column: usize, i: usize) -> u32 {
        u32_at(self.bytes, (column * self.n + i) * 4)
    }

    pub fn id(&self, i: usize) -> u32 {
        self.column_u32(0, i)
    }

    pub fn factors(&self, i: usize) -> Factors {
        let f = |column| f32::from_bits(self.column_u32(column, i));
        Factors { norm: f(1), x_dot_r: f(2), r_dot_c: f(3) }
    }

    pub fn vector_crc(&self, i: usize) -> u32 {
        self.column_u32(4, i)
    }

    /// Member `i`'s code words, into `out` (`words` long).
    pub fn code_into(&self, i: usize, out: &mut [u64]) {
        let start = MEMBER_FIXED_BYTES * self.n + 8 * self.words * i;
        for (w, word) in out.iter_mut().enumerate() {
            *word = u64_at(self.bytes, start + 8 * w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_centroids_round_trip() {
        let block = PostingBlock {
            ids: vec![3, 9],
            factors: vec![
                Factors { norm: 0.5, x_dot_r: 0.8, r_dot_c: -0.1 },
                Factors { norm: 0.25, x_dot_r: 0.7, r_dot_c: 0.2 },
            ],
            vector_crcs: vec![11, 12],
            codes: vec![1, 2, 3, 4],
        };
        let bytes = block.encode();
        assert_eq!(
            bytes.len(),
            ClusterEntry { postings_offset: 0, vectors_offset: 0, count: 2, block_crc: 0 }.block_len(2)
        );
        assert_eq!(PostingBlock::decode(&bytes, 2, 2), block);
        let file = CentroidsFile {
            dim: 2,
            docs: 2,
            words: 1,
            rotation: vec![1.0, 0.0, 0.0, 1.0],
            centroids: vec![0.5, 0.5],
            table: vec![ClusterEntry { postings_offset: 4096, vectors_offset: 4096, count: 2, block_crc: 7 }],
        };
        let body = file.encode();
        let back = CentroidsFile::decode(Path::new("x"), &body).unwrap();
        assert_eq!(
            (back.dim, back.docs, back.table.clone(), back.centroids.clone()),
            (2, 2, file.table.clone(), file.centroids.clone())
        );
        assert!(CentroidsFile::decode(Path::new("x"), &body[..body.len() - 1]).is_err());
    }

    /// Issue 16.3, a short pass: random mutations of a valid body (bytes changed, cut, added,
    /// and the header's counts set to extremes) are decoded or refused, never a panic. Found: a
    /// crafted `dim` overflowed the size arithmetic (a panic in debug builds).
    #[test]
    fn mutated_centroid_files_are_refused_or_read_never_a_panic() {
        use rand::{Rng, SeedableRng};
        let file = CentroidsFile {
            dim: 3,
            docs: 5,
            words: 1,
            rotation: vec![0.5; 9],
            centroids: vec![0.25; 6],
            table: vec![
                ClusterEntry { postings_offset: 0, vectors_offset: 0, count: 2, block_crc: 1 },
                ClusterEntry { postings_offset: 4096, vectors_offset: 4096, count: 3, block_crc: 2 },
            ],
        };
        let body = file.encode();
        let mut rng = rand::rngs::StdRng::seed_from_u64(163);
        let extremes = [0u32, 1, u32::MAX, u32::MAX / 2, 1 << 16, 1 << 31];
        for round in 0..20_000 {
            let mut bytes = body.clone();
            match round % 4 {
                0 => (0..rng.gen_range(1..4)).for_each(|_| {
                    let at = rng.gen_range(0..bytes.len());
                    bytes[at] = rng.gen();
                }),
                1 => bytes.truncate(rng.gen_range(0..bytes.len())),
                2 => bytes.extend((0..rng.gen_range(1..64)).map(|_| rng.gen::<u8>())),
                _ => {
                    let field = [0usize, 4, 16][rng.gen_range(0..3)];
                    let value = extremes[rng.gen_range(0..extremes.len())];
                    bytes[field..field + 4].copy_from_slice(&value.to_le_bytes());
                }
            }
            let _ = CentroidsFile::decode(Path::new("x"), &bytes);
        }
    }
}
