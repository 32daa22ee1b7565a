//! The 64-byte header at offset 0 of every binary file.
//!
//! ```text
//! offset size field
//!      0    8 magic            "\x89CELLAR\n"
//!      8    4 format_version   u32 LE
//!     12    4 file_kind        u32 LE (FileKind)
//!     16    8 body_offset      u64 LE, where the body starts (64, or 4096 for page-aligned bodies)
//!     24    8 body_len         u64 LE, bytes of body; the file is exactly body_offset + body_len
//!     32    4 body_crc32c      u32 LE, CRC-32C of the body
//!     36   24 reserved         zero
//!     60    4 header_crc32c    u32 LE, CRC-32C of bytes 0..60
//! ```
//! The field table [`HEADER_FIELDS`] is what encoding and decoding use, and what the
//! documentation test compares with `docs/format/header.md`.

use std::path::Path;

use super::{FileKind, PAGE_BYTES};
use crate::error::{CellarError, Result};

pub const HEADER_BYTES: usize = 64;
pub const MAGIC: [u8; 8] = *b"\x89CELLAR\n";

/// (name, offset, size) of every header field, in order.
pub const HEADER_FIELDS: [(&str, usize, usize); 8] = [
    ("magic", 0, 8),
    ("format_version", 8, 4),
    ("file_kind", 12, 4),
    ("body_offset", 16, 8),
    ("body_len", 24, 8),
    ("body_crc32c", 32, 4),
    ("reserved", 36, 24),
    ("header_crc32c", 60, 4),
];

pub(crate) fn field(name: &str) -> std::ops::Range<usize> {
    let (_, offset, size) = HEADER_FIELDS.iter().find(|(n, _, _)| *n == name).expect("header field name");
    *offset..offset + size
}

/// Decoded header of one binary file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub format_version: u32,
    pub kind: FileKind,
    pub body_offset: u64,
    pub body_len: u64,
    pub body_crc32c: u32,
}

impl FileHeader {
    /// A header of the version this build writes for `kind` ([`FileKind::version`]).
    pub fn new(kind: FileKind, body_offset: u64, body_len: u64, body_crc32c: u32) -> Self {
        FileHeader { format_version: kind.version(), kind, body_offset, body_len, body_crc32c }
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[field("magic")].copy_from_slice(&MAGIC);
        out[field("format_version")].copy_from_slice(&self.format_version.to_le_bytes());
        out[field("file_kind")].copy_from_slice(&(self.kind as u32).to_le_bytes());
        out[field("body_offset")].copy_from_slice(&self.body_offset.to_le_bytes());
        out[field("body_len")].copy_from_slice(&self.body_len.to_le_bytes());
        out[field("body_crc32c")].copy_from_slice(&self.body_crc32c.to_le_bytes());
        let crc = crc32c::crc32c(&out[..field("header_crc32c").start]);
        out[field("header_crc32c")].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and validates a header read from `path`. Checks magic, version range, header
    /// checksum and that the file is the `expected` kind; `file_len` must equal offset + body.
    /// The version is checked before anything else it could have changed, against the range
    /// this build reads for the `expected` kind ([`FileKind::readable_versions`]), so a file from
    /// a newer Cellar is `Incompatible` whatever the rest of its header looks like.
    pub fn decode(bytes: &[u8], path: &Path, expected: FileKind, file_len: u64) -> Result<Self> {
        if bytes.len() < HEADER_BYTES {
            return Err(CellarError::corrupted(
                path,
                bytes.len() as u64,
                format!("file is {} bytes, shorter than the {HEADER_BYTES}-byte header", bytes.len()),
            ));
        }
        if bytes[field("magic")] != MAGIC {
            return Err(CellarError::corrupted(path, 0, "bad magic: not a cellar file"));
        }
        // Before the checksum: only the magic and the version keep their place in every version.
        let format_version = u32_at(bytes, field("format_version"));
        expected.readable_versions().check(path, format_version)?;
        let crc_range = field("header_crc32c");
        let stored_crc = u32_at(bytes, crc_range.clone());
        if crc32c::crc32c(&bytes[..crc_range.start]) != stored_crc {
            return Err(CellarError::corrupted(path, crc_range.start as u64, "header checksum mismatch"));
        }
        let kind_range = field("file_kind");
        let kind_value = u32_at(bytes, kind_range.clone());
        let kind = FileKind::from_u32(kind_value).filter(|k| *k == expected).ok_or_else(|| {
            CellarError::corrupted(
                path,
                kind_range.start as u64,
                format!("file kind {kind_value}, expected {} ({})", expected as u32, expected.name()),
            )
        })?;
        let header = FileHeader {
            format_version,
            kind,
            body_offset: u64_at(bytes, field("body_offset")),
            body_len: u64_at(bytes, field("body_len")),
            body_crc32c: u32_at(bytes, field("body_crc32c")),
        };
        header.check_length(path, file_len)?;
        Ok(header)
    }

    fn check_length(&self, path: &Path, file_len: u64) -> Result<()> {
        let expected = self.body_offset.checked_add(self.body_len);
        let offset_ok = (HEADER_BYTES as u64..=PAGE_BYTES as u64).contains(&self.body_offset);
        if !offset_ok || expected != Some(file_len) {
            return Err(CellarError::corrupted(
                path,
                file_len.min(self.body_offset),
                format!(
                    "file is {file_len} bytes but its header declares body offset {} + length {} (truncated or extended)",
                    self.body_offset, self.body_len
                ),
            ));
        }
        Ok(())
    }

    /// Verifies a body checksum computed by the caller.
    pub fn check_body_crc(&self, path: &Path, actual_crc32c: u32) -> Result<()> {
        if actual_crc32c != self.body_crc32c {
            return Err(CellarError::corrupted(
                path,
                self.body_offset,
                format!(
                    "body checksum mismatch over bytes {}..{} (stored {:08x}, computed {actual_crc32c:08x})",
                    self.body_offset,
                    self.body_offset + self.body_len,
                    self.body_crc32c
                ),
            ));
        }
        Ok(())
    }
}

fn u32_at(bytes: &[u8], range: std::ops::Range<usize>) -> u32 {
    u32::from_le_bytes(bytes[range].try_into().expect("4-byte field"))
}

fn u64_at(bytes: &[u8], range: std::ops::Range<usize>) -> u64 {
    u64::from_le_bytes(bytes[range].try_into().expect("8-byte field"))
}
