//! The offsets table: doc id → (byte offset, length, CRC-32C) of its record. 16 bytes per
//! document; the only per-document structure a reader keeps in RAM.
//!
//! ```text
//! entry i at body offset 16*i:
//!      0    8 offset   u64 LE, absolute offset of the record in vectors.bin
//!      8    4 len      u32 LE, record length in bytes
//!     12    4 crc32c   u32 LE, CRC-32C of the record bytes
//! ```

use std::path::Path;

use crate::error::{CellarError, Result};
use crate::format::{FileHeader, HEADER_BYTES};
use crate::ids::DocId;

pub const ENTRY_BYTES: usize = 16;
/// (name, offset, size) of an entry's fields; checked against `docs/format/offsets.md`.
pub const ENTRY_FIELDS: [(&str, usize, usize); 3] = [("offset", 0, 8), ("len", 8, 4), ("crc32c", 12, 4)];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetEntry {
    pub offset: u64,
    pub len: u32,
    pub crc32c: u32,
}

impl OffsetEntry {
    pub fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut out = [0u8; ENTRY_BYTES];
        out[0..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..12].copy_from_slice(&self.len.to_le_bytes());
        out[12..16].copy_from_slice(&self.crc32c.to_le_bytes());
        out
    }

    fn decode(b: &[u8]) -> Self {
        OffsetEntry {
            offset: u64::from_le_bytes(b[0..8].try_into().unwrap()),
            len: u32::from_le_bytes(b[8..12].try_into().unwrap()),
            crc32c: u32::from_le_bytes(b[12..16].try_into().unwrap()),
        }
    }
}

/// All entries, in RAM.
#[derive(Debug)]
pub struct OffsetsTable {
    entries: Vec<OffsetEntry>,
}

impl OffsetsTable {
    /// Decodes the body of `offsets.bin` and checks every entry lies inside the vectors body.
    pub fn decode(body: &[u8], path: &Path, vectors: &FileHeader) -> Result<Self> {
        if !body.len().is_multiple_of(ENTRY_BYTES) {
            return Err(CellarError::corrupted(
                path,
                (HEADER_BYTES + body.len()) as u64,
                format!("body of {} bytes is not a whole number of {ENTRY_BYTES}-byte entries", body.len()),
            ));
        }
        let body_end = vectors.body_offset + vectors.body_len;
        let entries: Vec<OffsetEntry> = body.chunks_exact(ENTRY_BYTES).map(OffsetEntry::decode).collect();
        for (i, e) in entries.iter().enumerate() {
            let end = e.offset.checked_add(e.len as u64);
            if e.offset < vectors.body_offset || end.is_none_or(|end| end > body_end) || e.len < 8 {
                return Err(CellarError::corrupted(
                    path,
                    (HEADER_BYTES + i * ENTRY_BYTES) as u64,
                    format!(
                        "entry for doc {i} points at bytes {}..+{} outside the vectors body {}..{body_end}",
                        e.offset, e.len, vectors.body_offset
                    ),
                ));
            }
        }
        Ok(OffsetsTable { entries })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, id: DocId) -> Result<OffsetEntry> {
        self.entries
            .get(id.index())
            .copied()
            .ok_or(CellarError::DocOutOfRange { id: id.0 as u64, count: self.entries.len() as u64 })
    }

    /// Bytes of pages the mean record spans (0 for an empty table).
    pub fn mean_record_page_bytes(&self) -> u64 {
        if self.entries.is_empty() {
            return 0;
        }
        let pages: u64 = self
            .entries
            .iter()
            .map(|e| {
                let (first, last) = crate::format::record::pages_of(e.offset, e.len);
                last - first + 1
            })
            .sum();
        pages * crate::format::PAGE_BYTES as u64 / self.entries.len() as u64
    }

    /// RAM the table takes.
    pub fn ram_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<OffsetEntry>()
    }
}
