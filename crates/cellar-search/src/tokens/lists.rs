//! The document ids of a leaf's postings on disk: non-decreasing internal ids (a document once
//! per token it has in the leaf), in blocks of [`BLOCK_IDS`]. Each block is its first id (u32,
//! little-endian), one byte of bit width `w`, then the gaps to each next id packed `w` bits
//! each, least significant bit first, padded to a whole byte. A list's count is in the
//! directory, so its last block's length is implied; the list's CRC (in the directory) is what
//! catches damage, the decoder only refuses what cannot be a list.

use cellar_core::{CellarError, Result};

/// Ids per block.
pub const BLOCK_IDS: usize = 128;

/// Bits of the largest gap in `ids` (0 when every gap is 0 or there is none).
fn width(ids: &[u32]) -> u8 {
    let largest = ids.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    (32 - largest.leading_zeros()) as u8
}

/// Appends the encoding of `ids` (non-decreasing) to `out`.
pub fn encode(ids: &[u32], out: &mut Vec<u8>) {
    debug_assert!(ids.windows(2).all(|w| w[0] <= w[1]), "a list's ids do not descend");
    for block in ids.chunks(BLOCK_IDS) {
        out.extend_from_slice(&block[0].to_le_bytes());
        let w = width(block);
        out.push(w);
        let (mut acc, mut bits) = (0u64, 0u32);
        for pair in block.windows(2) {
            acc |= u64::from(pair[1] - pair[0]) << bits;
            bits += u32::from(w);
            while bits >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                bits -= 8;
            }
        }
        if bits > 0 {
            out.push(acc as u8);
        }
    }
}

/// Bytes [`encode`] writes for a block of `n` ids packed at width `w`.
fn block_bytes(n: usize, w: u8) -> usize {
    5 + ((n.saturating_sub(1)) * w as usize).div_ceil(8)
}

/// Decodes `count` ids from the start of `bytes`, appended to `out`, and returns the bytes
/// they took (a search decodes every list it reads into one buffer). A list whose bytes do not
/// hold `count` ids, or whose ids would pass `u32::MAX`, is `Err(detail)`: the caller names the
/// file and offset.
pub fn decode(bytes: &[u8], count: usize, out: &mut Vec<u32>) -> std::result::Result<usize, String> {
    let start = out.len();
    out.reserve(count);
    let mut at = 0usize;
    while out.len() - start < count {
        let n = (count - (out.len() - start)).min(BLOCK_IDS);
        let head =
            bytes.get(at..at + 5).ok_or_else(|| format!("list ends inside a block head at byte {at}"))?;
        let first = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let w = head[4];
        if w > 32 {
            return Err(format!("bit width {w} above 32 at byte {at}"));
        }
        let len = block_bytes(n, w);
        let body =
            bytes.get(at + 5..at + len).ok_or_else(|| format!("list ends inside a block at byte {at}"))?;
        let mask = if w == 32 { u64::from(u32::MAX) } else { (1u64 << w) - 1 };
        let (mut acc, mut bits, mut next) = (0u64, 0u32, 0usize);
        let mut id = u64::from(first);
        out.push(first);
        for _ in 1..n {
            while bits < u32::from(w) {
                acc |= u64::from(body[next]) << bits;
                next += 1;
                bits += 8;
            }
            id += acc & mask;
            acc >>= w;
            bits -= u32::from(w);
            if id > u64::from(u32::MAX) {
                return Err(format!("ids pass u32::MAX in the block at byte {at}"));
            }
            out.push(id as u32);
        }
        at += len;
    }
    Ok(at)
}

/// [`decode`] with its error as `Corrupted` at `path` and `offset`.
pub fn decode_at(
    bytes: &[u8],
    count: usize,
    out: &mut Vec<u32>,
    path: &std::path::Path,
    offset: u64,
) -> Result<usize> {
    decode(bytes, count, out)
        .map_err(|detail| CellarError::corrupted(path, offset, format!("token list: {detail}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn round_trip(ids: &[u32]) -> Vec<u8> {
        let mut bytes = Vec::new();
        encode(ids, &mut bytes);
        let mut back = Vec::new();
        assert_eq!(decode(&bytes, ids.len(), &mut back).unwrap(), bytes.len());
        assert_eq!(back, ids);
        bytes
    }

    #[test]
    fn lists_of_every_shape_decode_to_their_ids() {
        let mut rng = StdRng::seed_from_u64(7);
        round_trip(&[]);
        round_trip(&[0]);
        round_trip(&[u32::MAX]);
        round_trip(&[0, u32::MAX]);
        round_trip(&(0..1000).collect::<Vec<u32>>());
        for n in [2, 127, 128, 129, 255, 256, 257, 5000] {
            for spread in [1u32, 3, 1000, 1 << 20, u32::MAX / (n as u32 + 1)] {
                let mut ids: Vec<u32> =
                    (0..n).map(|_| rng.gen_range(0..spread.saturating_mul(n as u32).max(1))).collect();
                ids.sort_unstable();
                round_trip(&ids);
                ids.dedup();
                round_trip(&ids);
            }
        }
    }

    #[test]
    fn lists_decoded_one_after_another_share_one_buffer() {
        let (a, b) = ((0..300).map(|i| i * 3).collect::<Vec<u32>>(), vec![7u32, 7, 9]);
        let (mut ea, mut eb) = (Vec::new(), Vec::new());
        encode(&a, &mut ea);
        encode(&b, &mut eb);
        let mut out = Vec::new();
        assert_eq!(decode(&ea, a.len(), &mut out).unwrap(), ea.len());
        assert_eq!(decode(&eb, b.len(), &mut out).unwrap(), eb.len());
        assert_eq!(out, [a, b].concat());
    }

    #[test]
    fn dense_lists_pack_in_few_bits_per_id() {
        let ids: Vec<u32> = (0..12_800).map(|i| i * 1000 + (i % 7)).collect();
        let bytes = round_trip(&ids);
        // Gaps below 1024: 10 bits per id, 5 bytes per block of 128.
        assert_eq!(bytes.len(), 100 * block_bytes(128, 10));
        assert!(bytes.len() * 8 / ids.len() <= 11, "{} bytes", bytes.len());
    }

    #[test]
    fn a_damaged_list_is_refused_not_misread() {
        let ids: Vec<u32> = (0..300).map(|i| i * 5).collect();
        let mut bytes = Vec::new();
        encode(&ids, &mut bytes);
        let mut out = Vec::new();
        assert!(decode(&bytes[..bytes.len() - 1], ids.len(), &mut out).is_err());
        assert!(
            decode(&bytes, ids.len() - 1, &mut out).unwrap() < bytes.len(),
            "a shorter list takes fewer bytes"
        );
        assert!(decode(&bytes, ids.len() + 128, &mut out).is_err());
        let mut wide = bytes.clone();
        wide[4] = 40;
        assert!(decode(&wide, ids.len(), &mut out).is_err());
        let mut high = Vec::new();
        encode(&[u32::MAX - 1, u32::MAX], &mut high);
        high[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&high, 2, &mut out).is_err(), "an id past u32::MAX");
    }
}
