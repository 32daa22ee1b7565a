//! Every byte parser of this crate behind one shape, `bytes -> Result<()>`, for the fuzzers
//! (`cellar-bench fuzz` and the coverage-guided harness in `fuzz/`, issue 16.3). Each runs the
//! same code an open does on a file of those bytes, and goes on into what it returned as far as
//! a reader would (a record's vectors, an offsets table's entries). A parser may accept or
//! refuse its input; it must never panic, hang, or allocate what a length field asks for.
//! Parsers that read a path write the bytes into `scratch` first (a directory the caller owns).

use std::path::Path;

use super::fsio::read_small_file;
use super::header::{field, FileHeader, HEADER_BYTES};
use super::manifest::{Manifest, MANIFEST_FILE};
use super::offsets::OffsetsTable;
use super::record;
use super::wal::Wal;
use super::FileKind;
use crate::{IoContext, Result};

/// The path every parser reports its errors against.
const FUZZ_PATH: &str = "fuzz-input";

/// The 64-byte file header at the start of a file's bytes, decoded as each kind (its lengths
/// checked against the input's); accepted if one kind accepts it.
pub fn file_header(bytes: &[u8]) -> Result<()> {
    let head = &bytes[..bytes.len().min(HEADER_BYTES)];
    let mut results = FileKind::ALL
        .map(|kind| FileHeader::decode(head, Path::new(FUZZ_PATH), kind, bytes.len() as u64).map(drop));
    match results.iter().position(Result::is_ok) {
        Some(_) => Ok(()),
        None => std::mem::replace(&mut results[0], Ok(())),
    }
}

/// A whole small file (header, zero gap, body checksum) read as the kind its header's kind
/// field names, or as `Offsets` when that is no kind.
pub fn small_file(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let kind = bytes
        .get(field("file_kind"))
        .and_then(|b| FileKind::from_u32(u32::from_le_bytes(b.try_into().expect("4 bytes"))))
        .unwrap_or(FileKind::Offsets);
    let path = scratch.join(kind.file_name());
    std::fs::write(&path, bytes).at(&path)?;
    read_small_file(&path, kind).map(drop)
}

/// An `offsets.bin` body checked against a vectors file of 1 MiB, then every entry's record
/// parsed as a reader would from a vectors body that is the input itself.
pub fn offsets(bytes: &[u8]) -> Result<()> {
    let vectors = FileHeader::new(FileKind::Vectors, crate::format::PAGE_BYTES as u64, 1 << 20, 0);
    let table = OffsetsTable::decode(bytes, Path::new(FUZZ_PATH), &vectors)?;
    for id in 0..table.len() as u32 {
        let entry = table.get(crate::DocId(id))?;
        let start = (entry.offset - vectors.body_offset) as usize;
        if let Some(slice) = bytes.get(start..start + entry.len as usize) {
            let _ = record::parse(slice, 4, Path::new(FUZZ_PATH), entry.offset);
        }
    }
    Ok(())
}

/// One vector record; its first byte picks the bytes per vector (as a codec would).
pub fn record(bytes: &[u8]) -> Result<()> {
    let Some((choice, rest)) = bytes.split_first() else {
        return record::parse(bytes, 2, Path::new(FUZZ_PATH), 0).map(drop);
    };
    let bytes_per_vector = [2, 4, 8, 16, 64, 128, 256, 768][*choice as usize % 8];
    let view = record::parse(rest, bytes_per_vector, Path::new(FUZZ_PATH), 0)?;
    let checked: usize = view.tokens.chunks_exact(bytes_per_vector).map(<[u8]>::len).sum();
    debug_assert_eq!(checked, view.n_tokens * bytes_per_vector);
    Ok(())
}

/// An index's `manifest.json`, read and checked for consistency.
pub fn manifest(scratch: &Path, bytes: &[u8]) -> Result<()> {
    let path = scratch.join(MANIFEST_FILE);
    std::fs::write(&path, bytes).at(&path)?;
    Manifest::read(scratch).map(drop)
}

/// A write-ahead log file read record by record (framing, checksums, torn tails); each intact
/// record's payload goes to `replay`, the decoder of the log's owner.
pub fn wal(scratch: &Path, bytes: &[u8], replay: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let path = scratch.join("wal.log");
    std::fs::write(&path, bytes).at(&path)?;
    Wal::read(&path, replay).map(drop)
}

/// Structure-aware help for mutators: after random changes, these recompute what a checksum
/// covers so the mutated bytes reach the decoding past it.
pub mod fixup {
    use super::*;
    use crate::format::wal::{frame_record, WAL_HEADER_BYTES};

    /// Makes a header-led file's header checksum and body checksum match its bytes (body from
    /// the header's body offset, clamped to the input).
    pub fn header_led(bytes: &mut [u8]) {
        if bytes.len() < HEADER_BYTES {
            return;
        }
        let offset = u64::from_le_bytes(bytes[field("body_offset")].try_into().expect("8 bytes"));
        let body = offset.clamp(HEADER_BYTES as u64, bytes.len() as u64) as usize;
        let body_crc = crc32c::crc32c(&bytes[body..]);
        bytes[field("body_crc32c")].copy_from_slice(&body_crc.to_le_bytes());
        let crc_at = field("header_crc32c");
        let header_crc = crc32c::crc32c(&bytes[..crc_at.start]);
        bytes[crc_at].copy_from_slice(&header_crc.to_le_bytes());
    }

    /// Re-frames a log's records so each one's checksum matches its payload, walking the
    /// length fields as a reader does; the bytes past the last whole record are kept as they are.
    pub fn wal_records(bytes: &mut Vec<u8>) {
        let mut at = WAL_HEADER_BYTES as usize;
        let mut out = bytes[..at.min(bytes.len())].to_vec();
        while let Some(len_field) = bytes.get(at..at + 4) {
            let len = u32::from_le_bytes(len_field.try_into().expect("4 bytes")) as usize;
            let Some(payload) = bytes.get(at + 8..at + 8 + len) else { break };
            frame_record(payload, &mut out);
            at += 8 + len;
        }
        out.extend_from_slice(bytes.get(at..).unwrap_or_default());
        *bytes = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixups_make_checksums_match_so_valid_files_stay_valid() {
        let dir = tempfile::tempdir().unwrap();
        let body = [7u8; 40];
        let header = FileHeader::new(FileKind::Offsets, HEADER_BYTES as u64, 40, 0);
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(&body);
        assert!(small_file(dir.path(), &bytes).is_err(), "a body checksum of 0 is wrong");
        fixup::header_led(&mut bytes);
        small_file(dir.path(), &bytes).unwrap();

        let path = dir.path().join("w.log");
        let (mut log, _) = Wal::open(&path, crate::format::wal::Durability::None, |_| Ok(())).unwrap();
        log.append(&[b"one", b"two"]).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] = b'X';
        let count = |bytes: &[u8]| {
            let mut n = 0;
            wal(dir.path(), bytes, |_| {
                n += 1;
                Ok(())
            })
            .unwrap();
            n
        };
        assert_eq!(count(&bytes), 1, "the changed record fails its checksum");
        fixup::wal_records(&mut bytes);
        assert_eq!(count(&bytes), 2);
    }
}
