//! The byte parsers of streaming collections behind `bytes -> Result<()>`, for the fuzzers
//! (issue 16.3; the shape and the rules are those of `cellar_core::format::parsers`): the first
//! format's segments with their group directory and entries, log records, manifests and
//! settings (a migration reads them), and the JSON lines `cellar feed` reads.

use std::path::Path;

use cellar_core::format::parsers::wal;
use cellar_core::{CellarError, IoContext, Result};

use cellar_search::QueryVectorsIn;

use crate::input::StreamDocJson;
use crate::legacy::{
    header_field, split_record, EntryView, ManifestV1, SegmentV1, Settings, MANIFEST_FILE,
    SEGMENT_HEADER_FIELDS, SETTINGS_FILE,
};

/// A first-format segment file read as a migration reads it: header, directory, every group's
/// extent against its checksum, every entry parsed.
pub fn segment(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let path = scratch.join("segment.seg");
    std::fs::write(&path, bytes).at(&path)?;
    SegmentV1::read(&path).map(drop)
}

/// One entry (a put or a delete) as stored in segments and log records.
pub fn entry(bytes: &[u8]) -> Result<()> {
    EntryView::parse_at(Path::new("fuzz-input"), bytes).map(drop)
}

/// A collection's log, each record split into entries as a reopen replays it.
pub fn log(scratch: &Path, bytes: &[u8]) -> Result<()> {
    wal(scratch, bytes, |payload| {
        split_record(payload).map(drop).map_err(|d| CellarError::corrupted(Path::new("wal.log"), 0, d))
    })
}

/// `MANIFEST.json` (its segments) or `stream.json` (its settings), as the parity of the
/// input's first byte chooses; the rest is the file.
pub fn manifest(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let (name, body) = match bytes.split_first() {
        Some((b, rest)) if b % 2 == 1 => (SETTINGS_FILE, rest),
        Some((_, rest)) => (MANIFEST_FILE, rest),
        None => (MANIFEST_FILE, bytes),
    };
    let path = scratch.join(name);
    std::fs::write(&path, body).at(&path)?;
    if name == SETTINGS_FILE {
        Settings::load(scratch).map(drop)
    } else {
        ManifestV1::load(scratch).map(drop)
    }
}

/// One line of a `cellar feed` file, as the feed turns it into a document of 4 dimensions (a
/// line without vectors gets one token from a stand-in for the model).
pub fn feed_line(bytes: &[u8]) -> Result<()> {
    let doc: StreamDocJson =
        serde_json::from_slice(bytes).map_err(|e| CellarError::invalid(format!("not a document: {e}")))?;
    let mut doc = doc.into_doc(None, None)?;
    doc.check("document")?;
    if crate::encoding::needs_tokens(&doc) {
        let pooled = doc.vectors.take().and_then(|v| v.pooled).or(Some(vec![0.5; 4]));
        doc.vectors =
            Some(QueryVectorsIn { tokens: vec![vec![0.5; 4]], pooled, ..QueryVectorsIn::default() });
    }
    crate::doc::check_doc(&doc, 4, "document")
}

/// Makes a segment's directory checksum and header checksum match its bytes (the directory
/// where the header places it, clamped to the input).
pub fn fixup_segment(bytes: &mut [u8]) {
    let (_, last_at, last_len) = SEGMENT_HEADER_FIELDS[SEGMENT_HEADER_FIELDS.len() - 1];
    if bytes.len() < last_at + last_len {
        return;
    }
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let start = u64_at(bytes, header_field("dir_offset")).min(bytes.len() as u64) as usize;
    let end = start.saturating_add(u64_at(bytes, header_field("dir_len")) as usize).min(bytes.len());
    let dir_crc = crc32c::crc32c(&bytes[start..end]);
    let at = header_field("dir_crc32c");
    bytes[at..at + 4].copy_from_slice(&dir_crc.to_le_bytes());
    let at = header_field("header_crc32c");
    let header_crc = crc32c::crc32c(&bytes[..at]);
    bytes[at..at + 4].copy_from_slice(&header_crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::{Durability, Wal};

    /// Found by `cellar-bench fuzz` (target stream-log): a log record whose checksum matches
    /// but whose entry count says 2^32 - 1 made the replay reserve room for that many entries
    /// first, and the process aborted ("memory allocation of 20369653776 bytes failed"). It is
    /// refused as corrupted, with nothing reserved.
    #[test]
    fn a_log_record_counting_billions_of_entries_is_refused_without_reserving_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("written.log");
        let (mut log_file, _) = Wal::open(&path, Durability::None, |_| Ok(())).unwrap();
        log_file.append(&[&u32::MAX.to_le_bytes()[..]]).unwrap();
        drop(log_file);
        let bytes = std::fs::read(&path).unwrap();
        let err = log(dir.path(), &bytes).unwrap_err();
        assert_eq!(err.code(), "corrupted", "{err}");
    }
}
