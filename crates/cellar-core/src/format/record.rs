//! One document's record and where it goes in the page stream.
//!
//! ```text
//! offset            size                  field
//!      0            4                     n_tokens  u32 LE (>= 1)
//!      4            4                     flags     u32 LE (bit 0: pooled vector present,
//!                                                   bit 1: passage table present)
//!      8            B (if pooled)         pooled vector, codec-encoded
//!      ..           4 + 4 * P (if table)  P u32 LE (>= 2), then P u32 LE passage ends: the
//!                                         token count up to the end of each passage,
//!                                         increasing, the last n_tokens
//!      ..           n_tokens * B          token vectors, codec-encoded, token-major
//! ```
//! A document split into passages at build time (MaxP) keeps them in one record: its score is
//! its best passage's ([`RecordView::passages`]), and one read still fetches the document.
//! `B` is the codec's bytes per vector. Placement: a record starts 8-byte aligned; one that fits
//! in what is left of the current 4 KiB page goes there; otherwise it starts on a fresh page (and
//! spans consecutive pages if larger than one). So every record is one contiguous read, and a
//! record no larger than a page never straddles two. A packed store ([`place_packed`]: a
//! grouped index's segments, read a group's run at a time) places records back to back instead.

use std::path::Path;

use crate::codec::Codec;
use crate::error::{CellarError, Result};
use crate::format::PAGE_BYTES;
use crate::kernels::Isa;

pub const RECORD_HEADER_BYTES: usize = 8;
pub const RECORD_ALIGN: u64 = 8;
pub const FLAG_POOLED: u32 = 1;
pub const FLAG_PASSAGES: u32 = 2;
/// Most passages one record may hold.
pub const MAX_PASSAGES: usize = 1 << 16;

/// (name, offset, size) of the fixed record fields; checked against `docs/format/vectors.md`.
pub const RECORD_FIELDS: [(&str, usize, usize); 2] = [("n_tokens", 0, 4), ("flags", 4, 4)];

/// A parsed record, borrowing its bytes.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    pub n_tokens: usize,
    pub pooled: Option<&'a [u8]>,
    pub tokens: &'a [u8],
    /// The passage table's ends (u32 LE each), checked; `None`: the record is one passage.
    pub passage_ends: Option<&'a [u8]>,
}

impl<'a> RecordView<'a> {
    /// The token ranges of the record's passages, in order (one range when it has no table).
    pub fn passages(&self) -> Passages<'a> {
        Passages { ends: self.passage_ends, n_tokens: self.n_tokens, start: 0, next: 0 }
    }

    /// The record's score for a query `prepared` by `codec`: MaxSim of its tokens, or, for a
    /// record of passages, its best passage's (MaxP).
    pub fn score(&self, codec: &dyn Codec, isa: Isa, prepared: &[f32]) -> f32 {
        if self.passage_ends.is_none() {
            return codec.maxsim(isa, prepared, self.tokens);
        }
        let b = codec.bytes_per_vector();
        self.passages()
            .map(|p| codec.maxsim(isa, prepared, &self.tokens[p.start * b..p.end * b]))
            .fold(f32::NEG_INFINITY, f32::max)
    }
}

/// The token ranges of a record's passages ([`RecordView::passages`]).
pub struct Passages<'a> {
    ends: Option<&'a [u8]>,
    n_tokens: usize,
    start: usize,
    next: usize,
}

impl Iterator for Passages<'_> {
    type Item = std::ops::Range<usize>;

    fn next(&mut self) -> Option<Self::Item> {
        let end = match self.ends {
            Some(ends) => {
                let at = self.next * 4;
                u32::from_le_bytes(ends.get(at..at + 4)?.try_into().unwrap()) as usize
            }
            None if self.next == 0 => self.n_tokens,
            None => return None,
        };
        self.next += 1;
        let range = self.start..end;
        self.start = end;
        Some(range)
    }
}

/// Writes the record header for `n_tokens` tokens; the caller appends the pooled vector (when
/// `has_pooled`), then the passage table (when `passages`, with [`encode_passages`]), then the
/// encoded vectors.
pub fn encode_header(n_tokens: u32, has_pooled: bool, passages: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(&n_tokens.to_le_bytes());
    let flags = if has_pooled { FLAG_POOLED } else { 0 } | if passages { FLAG_PASSAGES } else { 0 };
    out.extend_from_slice(&flags.to_le_bytes());
}

/// Appends the passage table of passages ending at `ends` (increasing token counts, the last
/// the record's; at least two).
pub fn encode_passages(ends: &[u32], out: &mut Vec<u8>) {
    out.extend_from_slice(&(ends.len() as u32).to_le_bytes());
    ends.iter().for_each(|e| out.extend_from_slice(&e.to_le_bytes()));
}

/// Checks passage ends given for a document of `n_tokens` tokens; `None` when there is one
/// passage (no table is written).
pub fn check_passages(ends: &[u32], n_tokens: usize) -> std::result::Result<Option<&[u32]>, String> {
    if ends.len() <= 1 {
        return match ends.first() {
            Some(&e) if e as usize != n_tokens => {
                Err(format!("one passage ending at {e} of {n_tokens} tokens"))
            }
            _ => Ok(None),
        };
    }
    check_table(ends.iter().copied(), ends.len(), n_tokens)?;
    Ok(Some(ends))
}

/// Checks a table of `count` passage ends: at most [`MAX_PASSAGES`], each above the one before
/// (the first above 0), the last `n_tokens`.
fn check_table(
    ends: impl Iterator<Item = u32>,
    count: usize,
    n_tokens: usize,
) -> std::result::Result<(), String> {
    if count > MAX_PASSAGES {
        return Err(format!("{count} passages (at most {MAX_PASSAGES})"));
    }
    let mut last = 0u32;
    for (i, end) in ends.enumerate() {
        if end <= last {
            return Err(format!("passage {i} ends at {end}, not after {last}"));
        }
        last = end;
    }
    if last as usize != n_tokens {
        return Err(format!("the last passage ends at {last}, not at the {n_tokens} tokens"));
    }
    Ok(())
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
    let table_at = RECORD_HEADER_BYTES + pooled_bytes;
    let table_bytes = if flags & FLAG_PASSAGES == 0 {
        0
    } else {
        let count = bytes
            .get(table_at..table_at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
            .ok_or_else(|| {
                corrupted(format!("record of {} bytes ends before its passage table", bytes.len()))
            })?;
        if !(2..=MAX_PASSAGES).contains(&count) {
            return Err(corrupted(format!(
                "passage table of {count} passages (2 to {MAX_PASSAGES} allowed)"
            )));
        }
        4 + 4 * count
    };
    let expected = (table_at + table_bytes).checked_add(n_tokens.saturating_mul(bytes_per_vector));
    if n_tokens == 0 || flags & !(FLAG_POOLED | FLAG_PASSAGES) != 0 || expected != Some(bytes.len()) {
        return Err(corrupted(format!(
            "record header says {n_tokens} tokens, flags {flags:#x}, but the record is {} bytes",
            bytes.len()
        )));
    }
    let passage_ends = (table_bytes > 0).then(|| &bytes[table_at + 4..table_at + table_bytes]);
    if let Some(ends) = passage_ends {
        let values = ends.chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
        check_table(values, ends.len() / 4, n_tokens)
            .map_err(|detail| corrupted(format!("passage table: {detail}")))?;
    }
    let pooled = &bytes[RECORD_HEADER_BYTES..table_at];
    let tokens = &bytes[table_at + table_bytes..];
    Ok(RecordView { n_tokens, pooled: (pooled_bytes > 0).then_some(pooled), tokens, passage_ends })
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

/// Where a record goes in a packed store (`StoreWriter::packed`): the next 8-byte aligned byte,
/// whatever pages it then spans. Readers need no flag: every record's offset and length are in
/// the offsets table, and a read covers the pages a record spans.
pub fn place_packed(position: u64) -> u64 {
    position.next_multiple_of(RECORD_ALIGN)
}

/// Range of page numbers `[first, last]` a record occupies.
pub fn pages_of(offset: u64, len: u32) -> (u64, u64) {
    let page = PAGE_BYTES as u64;
    (offset / page, (offset + len.max(1) as u64 - 1) / page)
}
