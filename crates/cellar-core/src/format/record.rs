//! One document's record and where it goes in the page stream.
//!
//! ```text
//! offset            size                  field
//!      0            4                     n_tokens  u32 LE (>= 1)
//!      4            4                     flags     u32 LE (bit 0: pooled vector present)
//!      8            B (if pooled)         pooled vector, codec-encoded
//!      8 [+ B]      n_tokens * B          token vectors, codec-encoded, token-major
//! ```
//! `B` is the codec's bytes per vector. Placement: a record starts 8-byte aligned; one that fits
//! in what is left of the current 4 KiB page goes there; otherwise it starts on a fresh page (and
//! spans consecutive pages if larger than one). So every record is one contiguous read, and a
//! record no larger than a page never straddles two.

use std::path::Path;

use crate::error::{CellarError, Result};
use crate::format::PAGE_BYTES;

pub const RECORD_HEADER_BYTES: usize = 8;
pub const RECORD_ALIGN: u64 = 8;
pub const FLAG_POOLED: u32 = 1;

/// (name, offset, size) of the fixed record fields; checked against `docs/format/vectors.md`.
pub const RECORD_FIELDS: [(&str, usize, usize); 2] = [("n_tokens", 0, 4), ("flags", 4, 4)];

/// A parsed record, borrowing its bytes.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    pub n_tokens: usize,
    pub pooled: Option<&'a [u8]>,
    pub tokens: &'a [u8],
}

/// Writes the record header for `n_tokens` tokens; the caller appends the encoded vectors.
pub fn encode_header(n_tokens: u32, has_pooled: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(&n_tokens.to_le_bytes());
    let flags = if has_pooled { FLAG_POOLED } else { 0 };
    out.extend_from_slice(&flags.to_le_bytes());
}

/// Parses and checks a record read from `path` at `offset`.
pub fn parse<'a>(
    bytes: &'a [u8],
    bytes_per_vector: usize,
    path: &Path,
    offset: u64,
) -> Result<RecordView<'a>> {
    let corrupted = |detail: String| CellarError::corrupted(path, offset, detail);
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(corrupted(format!("record of {} bytes is shorter than its header", bytes.len())));
    }
    let n_tokens = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let flags = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    let pooled_bytes = if flags & FLAG_POOLED != 0 { bytes_per_vector } else { 0 };
    let expected = RECORD_HEADER_BYTES + pooled_bytes + n_tokens * bytes_per_vector;
    if n_tokens == 0 || flags & !FLAG_POOLED != 0 || expected != bytes.len() {
        return Err(corrupted(format!(
            "record header says {n_tokens} tokens, flags {flags:#x}, but the record is {} bytes",
            bytes.len()
        )));
    }
    let body = &bytes[RECORD_HEADER_BYTES..];
    let (pooled, tokens) = body.split_at(pooled_bytes);
    Ok(RecordView { n_tokens, pooled: (pooled_bytes > 0).then_some(pooled), tokens })
}

/// Absolute offset where a record of `len` bytes goes, given the next free byte `position`.
pub fn place(position: u64, len: u64) -> u64 {
    let page = PAGE_BYTES as u64;
    let aligned = position.next_multiple_of(RECORD_ALIGN);
    let left_in_page = page - aligned % page;
    if len <= left_in_page {
        aligned
    } else {
        aligned.next_multiple_of(page)
    }
}

/// Range of page numbers `[first, last]` a record occupies.
pub fn pages_of(offset: u64, len: u32) -> (u64, u64) {
    let page = PAGE_BYTES as u64;
    (offset / page, (offset + len.max(1) as u64 - 1) / page)
}
