//! Byte layout of `tokens/token_centroids.bin` (drawn in `docs/format/tokens.md`): the
//! quantizer and the directory of the lists in `token_lists.bin`, read whole at open.

use std::path::Path;

use cellar_core::{CellarError, Result};

use super::quantizer::Quantizer;

/// Bytes of the body's head: dim, groups, leaves, docs (u32 each), tokens (u64).
pub const HEAD_BYTES: usize = 24;
/// Bytes of one list's directory entry: offset u64, bytes u32, count u32, CRC-32C u32.
pub const ENTRY_BYTES: usize = 20;

/// Where one leaf's list lies in `token_lists.bin`, how many documents it holds and its checksum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListEntry {
    pub offset: u64,
    pub bytes: u32,
    pub count: u32,
    pub crc: u32,
}

/// The whole centroids file's body.
#[derive(Clone, Debug, PartialEq)]
pub struct CentroidsFile {
    pub quantizer: Quantizer,
    pub docs: u32,
    pub tokens: u64,
    pub lists: Vec<ListEntry>,
}

impl CentroidsFile {
    pub fn encode(&self) -> Vec<u8> {
        let q = &self.quantizer;
        let mut out = Vec::with_capacity(
            HEAD_BYTES + q.tops.len() * 4 + q.leaves.len() + self.lists.len() * ENTRY_BYTES,
        );
        for v in [q.dim as u32, q.groups() as u32, q.leaves() as u32, self.docs] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.tokens.to_le_bytes());
        out.extend(q.tops.iter().flat_map(|v| v.to_le_bytes()));
        out.extend(q.starts.iter().flat_map(|v| v.to_le_bytes()));
        out.extend_from_slice(&q.leaves);
        for e in &self.lists {
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.bytes.to_le_bytes());
            out.extend_from_slice(&e.count.to_le_bytes());
            out.extend_from_slice(&e.crc.to_le_bytes());
        }
        out
    }

    /// Parses a body whose checksum was checked; every count and range is checked too, so a
    /// file of a readable version that does not parse is `Corrupted` at the offending offset.
    pub fn decode(body: &[u8], path: &Path, body_offset: u64) -> Result<CentroidsFile> {
        let bad = |at: usize, detail: String| CellarError::corrupted(path, body_offset + at as u64, detail);
        let u32_at = |at: usize| -> Result<u32> {
            body.get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
                .ok_or_else(|| bad(at, "the body ends early".into()))
        };
        let (dim, groups, leaves, docs) =
            (u32_at(0)? as usize, u32_at(4)? as usize, u32_at(8)? as usize, u32_at(12)?);
        let tokens = u64::from(u32_at(16)?) | u64::from(u32_at(20)?) << 32;
        if dim == 0 || groups == 0 || leaves < groups {
            return Err(bad(0, format!("dim {dim}, {groups} groups, {leaves} leaves: not a quantizer")));
        }
        let sizes = [
            groups as u64 * dim as u64 * 4,
            (groups as u64 + 1) * 4,
            leaves as u64 * dim as u64 * 2,
            leaves as u64 * ENTRY_BYTES as u64,
        ];
        let expected = HEAD_BYTES as u64 + sizes.iter().sum::<u64>();
        if body.len() as u64 != expected {
            return Err(bad(
                0,
                format!(
                    "{} bytes of body, {expected} expected for {groups} groups and {leaves} leaves of {dim}",
                    body.len()
                ),
            ));
        }
        let mut at = HEAD_BYTES;
        let tops: Vec<f32> = body[at..at + sizes[0] as usize]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4")))
            .collect();
        if let Some(i) = tops.iter().position(|v| !v.is_finite()) {
            return Err(bad(at + 4 * i, "a top centroid value is not finite".into()));
        }
        at += sizes[0] as usize;
        let starts: Vec<u32> = (0..=groups).map(|g| u32_at(at + 4 * g)).collect::<Result<_>>()?;
        if starts[0] != 0 || starts[groups] as usize != leaves || starts.windows(2).any(|w| w[0] >= w[1]) {
            return Err(bad(at, "the groups' leaf ranges do not ascend from 0 to the leaf count".into()));
        }
        at += sizes[1] as usize;
        let leaf_bytes = body[at..at + sizes[2] as usize].to_vec();
        at += sizes[2] as usize;
        let mut lists = Vec::with_capacity(leaves);
        for j in 0..leaves {
            let e = at + j * ENTRY_BYTES;
            let offset = u64::from(u32_at(e)?) | u64::from(u32_at(e + 4)?) << 32;
            lists.push(ListEntry {
                offset,
                bytes: u32_at(e + 8)?,
                count: u32_at(e + 12)?,
                crc: u32_at(e + 16)?,
            });
        }
        Ok(CentroidsFile { quantizer: Quantizer::new(dim, tops, starts, leaf_bytes), docs, tokens, lists })
    }
}
