//! Display text of every document, with its collection id: `texts.bin` holds one JSON line per
//! document (`{"id","title","text"}`, and `"meta"` when it has metadata) in internal-id order, `text_offsets.bin` where each line
//! starts and the CRC-32C of its bytes (layout: `docs/format/texts.md`). Only the offsets and
//! checksums live in RAM (12 bytes per document); a line is read with one `pread` (a positioned
//! `cellar-core` [`FileSlice`] of the body) when a hit is displayed, and checked against its
//! checksum before it is parsed.
//!
//! `text_offsets.bin` of header version 2 (written since the checksums came) holds per document
//! `offset u64 | crc32c u32 | reserved u32 (zero)`, then the end offset u64. Version 1 held the
//! offsets alone (u64 each, one more than documents); it is still read, its records unchecked
//! but for their JSON.

use std::path::{Path, PathBuf};

use cellar_core::format::fsio::{open_checked, read_small_file, BodyWriter};
use cellar_core::format::{FileHeader, FileKind, HEADER_BYTES};
use cellar_core::io::{FileSlice, SliceBytes};
use cellar_core::{CellarError, DocId, Result};
use serde::{Deserialize, Serialize};

use crate::corpus::Document;
use crate::meta::Metadata;

/// Bytes of one document's entry in `text_offsets.bin` version 2.
pub const TEXT_ENTRY_BYTES: usize = 16;
/// (name, offset, size) of each field of a version-2 entry, in order.
pub const TEXT_ENTRY_FIELDS: [(&str, usize, usize); 3] =
    [("offset", 0, 8), ("crc32c", 8, 4), ("reserved", 12, 4)];
/// Bytes of the end offset that follows the entries (and of a version-1 entry).
pub const TEXT_END_BYTES: usize = 8;

/// One line as written (borrowed, no copies).
#[derive(Serialize)]
struct LineOut<'a> {
    id: &'a str,
    title: &'a str,
    text: &'a str,
    #[serde(skip_serializing_if = "Metadata::is_empty")]
    meta: &'a Metadata,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<&'a str>,
}

/// One line as read (owned: JSON escapes must be decoded).
#[derive(Deserialize)]
struct LineIn {
    id: String,
    title: String,
    text: String,
    #[serde(default)]
    meta: Metadata,
    #[serde(default)]
    group: Option<String>,
}

/// Streams documents' text to disk in internal-id order.
pub struct TextsWriter {
    texts: BodyWriter,
    offsets: BodyWriter,
    written: u64,
}

impl TextsWriter {
    pub fn create(dir: &Path) -> Result<TextsWriter> {
        let texts =
            BodyWriter::create(&dir.join(FileKind::Texts.file_name()), FileKind::Texts, HEADER_BYTES as u64)?;
        let offsets_path = dir.join(FileKind::TextOffsets.file_name());
        let offsets = BodyWriter::create(&offsets_path, FileKind::TextOffsets, HEADER_BYTES as u64)?;
        Ok(TextsWriter { texts, offsets, written: 0 })
    }

    pub fn add(&mut self, doc: &Document) -> Result<()> {
        let line = LineOut {
            id: &doc.id,
            title: &doc.title,
            text: &doc.text,
            meta: &doc.metadata,
            group: doc.group.as_deref(),
        };
        let mut bytes = serde_json::to_vec(&line).map_err(|e| CellarError::InvalidInput(e.to_string()))?;
        bytes.push(b'\n');
        let mut entry = [0u8; TEXT_ENTRY_BYTES];
        entry[field("offset")].copy_from_slice(&self.written.to_le_bytes());
        entry[field("crc32c")].copy_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
        self.offsets.write(&entry)?;
        self.texts.write(&bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Writes the end offset and commits both files.
    pub fn finish(mut self) -> Result<()> {
        self.offsets.write(&self.written.to_le_bytes())?;
        self.texts.finish()?;
        self.offsets.finish()?;
        Ok(())
    }
}

fn field(name: &str) -> std::ops::Range<usize> {
    let (_, offset, size) = TEXT_ENTRY_FIELDS.iter().find(|(n, _, _)| *n == name).expect("entry field name");
    *offset..offset + size
}

/// What `TextsReader::verify` read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextsVerified {
    pub records: usize,
    /// Records checked against their own checksum (none in a version-1 `text_offsets.bin`).
    pub record_crcs: usize,
    pub bytes: u64,
}

/// Most bytes between two records that [`TextsReader::get_many`] reads with them rather than
/// in a read of their own.
pub const TEXT_GAP_BYTES: u64 = 16 << 10;

/// Reads documents' display text by internal id.
pub struct TextsReader {
    path: PathBuf,
    /// The body of `texts.bin`.
    body: FileSlice,
    header: FileHeader,
    offsets_version: u32,
    /// Start of each line in the body, then the body's end.
    offsets: Vec<u64>,
    /// CRC-32C of each line; `None` for a version-1 `text_offsets.bin`.
    crcs: Option<Vec<u32>>,
}

impl TextsReader {
    /// Opens both files: headers, the offsets' body checksum, and that the offsets cover the
    /// text body exactly, in order.
    pub fn open(dir: &Path) -> Result<TextsReader> {
        let offsets_path = dir.join(FileKind::TextOffsets.file_name());
        let (offsets_header, body) = read_small_file(&offsets_path, FileKind::TextOffsets)?;
        let (offsets, crcs) = decode_entries(&offsets_header, &body, &offsets_path)?;
        let path = dir.join(FileKind::Texts.file_name());
        let (file, header) = open_checked(&path, FileKind::Texts)?;
        if offsets.last() != Some(&header.body_len) {
            let detail = format!(
                "text offsets end at {} but the body of texts.bin is {} bytes",
                offsets.last().copied().unwrap_or(0),
                header.body_len
            );
            let at = offsets_header.body_offset + offsets_header.body_len - TEXT_END_BYTES as u64;
            return Err(CellarError::corrupted(&offsets_path, at, detail));
        }
        let body = FileSlice::positioned(file, &path)?
            .slice(header.body_offset..header.body_offset + header.body_len)?;
        Ok(TextsReader { path, body, header, offsets_version: offsets_header.format_version, offsets, crcs })
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The header version of `text_offsets.bin` (2: with a checksum per record).
    pub fn offsets_version(&self) -> u32 {
        self.offsets_version
    }

    /// The document stored under `id`, its record checked against its checksum first.
    pub fn get(&self, id: DocId) -> Result<Document> {
        let i = id.0 as usize;
        if i >= self.len() {
            return Err(CellarError::DocOutOfRange { id: id.0 as u64, count: self.len() as u64 });
        }
        let bytes = self.record(i)?;
        self.parse(i, &bytes)
    }

    /// The documents stored under `ids`, in their order: records that lie near one another in
    /// the file (gaps of at most [`TEXT_GAP_BYTES`]) are read in one read (a group's documents
    /// are stored together), each checked against its checksum.
    pub fn get_many(&self, ids: &[DocId]) -> Result<Vec<Document>> {
        if let Some(id) = ids.iter().find(|id| id.0 as usize >= self.len()) {
            return Err(CellarError::DocOutOfRange { id: id.0 as u64, count: self.len() as u64 });
        }
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|k| ids[*k].0);
        let mut out: Vec<Option<Document>> = vec![None; ids.len()];
        let mut rest = &order[..];
        while let Some(first) = rest.first() {
            let at = |k: usize| ids[k].0 as usize;
            let mut n = 1;
            while n < rest.len()
                && self.offsets[at(rest[n])] <= self.offsets[at(rest[n - 1]) + 1] + TEXT_GAP_BYTES
            {
                n += 1;
            }
            let start = self.offsets[at(*first)];
            let bytes = self.body.read_bytes(start..self.offsets[at(rest[n - 1]) + 1])?;
            for k in &rest[..n] {
                let i = at(*k);
                let line = &bytes[(self.offsets[i] - start) as usize..(self.offsets[i + 1] - start) as usize];
                self.check(i, line)?;
                out[*k] = Some(self.parse(i, line)?);
            }
            rest = &rest[n..];
        }
        Ok(out.into_iter().map(|d| d.expect("every id was read")).collect())
    }

    /// Tells the kernel the records of `ids` will be read soon: the span from the first to the
    /// end of the last (`FileSlice::will_need`, a hint), for records that lie together.
    pub fn will_need(&self, ids: &[DocId]) -> Result<()> {
        let (Some(first), Some(last)) = (ids.iter().min(), ids.iter().max()) else { return Ok(()) };
        if last.0 as usize >= self.len() {
            return Err(CellarError::DocOutOfRange { id: last.0 as u64, count: self.len() as u64 });
        }
        self.body.will_need(self.offsets[first.0 as usize]..self.offsets[last.0 as usize + 1])
    }

    /// Record `i`'s bytes, checked against its checksum where the offsets file has one.
    fn record(&self, i: usize) -> Result<SliceBytes> {
        let (start, end) = (self.offsets[i], self.offsets[i + 1]);
        let bytes = self.body.read_bytes(start..end)?;
        self.check(i, &bytes)?;
        Ok(bytes)
    }

    /// Record `i`'s `bytes` against its checksum, where the offsets file has one.
    fn check(&self, i: usize, bytes: &[u8]) -> Result<()> {
        let Some(crcs) = &self.crcs else { return Ok(()) };
        let computed = crc32c::crc32c(bytes);
        if computed != crcs[i] {
            return Err(CellarError::corrupted(
                &self.path,
                self.header.body_offset + self.offsets[i],
                format!(
                    "document {i}: text record fails its checksum (stored {:08x}, computed {computed:08x})",
                    crcs[i]
                ),
            ));
        }
        Ok(())
    }

    fn parse(&self, i: usize, bytes: &[u8]) -> Result<Document> {
        let line: LineIn = serde_json::from_slice(bytes).map_err(|e| {
            CellarError::corrupted(
                &self.path,
                self.header.body_offset + self.offsets[i],
                format!("document {i}: {e}"),
            )
        })?;
        Ok(Document {
            id: line.id,
            title: line.title,
            text: line.text,
            metadata: line.meta,
            group: line.group,
        })
    }

    /// Reads every record: each against its checksum (version 2) and as JSON, and the whole body
    /// against the header's checksum. The first damage found is the error.
    pub fn verify(&self) -> Result<TextsVerified> {
        let mut body_crc = 0u32;
        for i in 0..self.len() {
            let bytes = self.record(i)?;
            self.parse(i, &bytes)?;
            body_crc = crc32c::crc32c_append(body_crc, &bytes);
        }
        self.header.check_body_crc(&self.path, body_crc)?;
        let record_crcs = if self.crcs.is_some() { self.len() } else { 0 };
        Ok(TextsVerified { records: self.len(), record_crcs, bytes: self.header.body_len })
    }
}

/// The offsets (then the end) and, from version 2, the checksums of `text_offsets.bin`'s body.
fn decode_entries(header: &FileHeader, body: &[u8], path: &Path) -> Result<(Vec<u64>, Option<Vec<u32>>)> {
    let at = |body_pos: usize| header.body_offset + body_pos as u64;
    let u64_at = |pos: usize| u64::from_le_bytes(body[pos..pos + 8].try_into().expect("8 bytes"));
    let (offsets, crcs) = if header.format_version == 1 {
        if !body.len().is_multiple_of(TEXT_END_BYTES) || body.is_empty() {
            let detail = format!("{} bytes is not a whole, non-empty number of u64 offsets", body.len());
            return Err(CellarError::corrupted(path, at(0), detail));
        }
        ((0..body.len()).step_by(TEXT_END_BYTES).map(u64_at).collect::<Vec<_>>(), None)
    } else {
        let entries = body.len().checked_sub(TEXT_END_BYTES).filter(|n| n % TEXT_ENTRY_BYTES == 0);
        let Some(entries_len) = entries else {
            let detail = format!(
                "{} bytes is not {TEXT_ENTRY_BYTES}-byte entries followed by a {TEXT_END_BYTES}-byte end offset",
                body.len()
            );
            return Err(CellarError::corrupted(path, at(0), detail));
        };
        let mut offsets = Vec::with_capacity(entries_len / TEXT_ENTRY_BYTES + 1);
        let mut crcs = Vec::with_capacity(entries_len / TEXT_ENTRY_BYTES);
        for (i, entry) in body[..entries_len].chunks_exact(TEXT_ENTRY_BYTES).enumerate() {
            if entry[field("reserved")].iter().any(|b| *b != 0) {
                let pos = i * TEXT_ENTRY_BYTES + field("reserved").start;
                return Err(CellarError::corrupted(
                    path,
                    at(pos),
                    format!("document {i}: reserved bytes are not zero"),
                ));
            }
            offsets.push(u64::from_le_bytes(entry[field("offset")].try_into().expect("8 bytes")));
            crcs.push(u32::from_le_bytes(entry[field("crc32c")].try_into().expect("4 bytes")));
        }
        offsets.push(u64_at(entries_len));
        (offsets, Some(crcs))
    };
    let stride = if crcs.is_some() { TEXT_ENTRY_BYTES } else { TEXT_END_BYTES };
    if offsets[0] != 0 {
        return Err(CellarError::corrupted(
            path,
            at(0),
            format!("the first text offset is {}, not 0", offsets[0]),
        ));
    }
    if let Some(i) = offsets.windows(2).position(|w| w[0] > w[1]) {
        let detail = format!("text offset {} goes backwards", i + 1);
        return Err(CellarError::corrupted(path, at((i + 1) * stride), detail));
    }
    Ok((offsets, crcs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_many_reads_near_records_together_and_answers_as_get_does() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = TextsWriter::create(dir.path()).unwrap();
        // Documents 20..23 are long: past them, records lie more than TEXT_GAP_BYTES apart.
        for i in 0..40 {
            let text =
                if (20..23).contains(&i) { "x".repeat(TEXT_GAP_BYTES as usize) } else { format!("text {i}") };
            writer.add(&Document::new(format!("d{i}"), "", text)).unwrap();
        }
        writer.finish().unwrap();
        let reader = TextsReader::open(dir.path()).unwrap();
        let ids: Vec<DocId> = [39u32, 0, 5, 5, 19, 30, 1, 24].into_iter().map(DocId).collect();
        let many = reader.get_many(&ids).unwrap();
        let one_by_one: Vec<Document> = ids.iter().map(|id| reader.get(*id).unwrap()).collect();
        assert_eq!(many, one_by_one);
        assert!(reader.get_many(&[]).unwrap().is_empty());
        reader.will_need(&ids).unwrap();
        reader.will_need(&[]).unwrap();
        assert!(matches!(
            reader.will_need(&[DocId(2), DocId(40)]),
            Err(CellarError::DocOutOfRange { id: 40, .. })
        ));
        assert!(matches!(
            reader.get_many(&[DocId(3), DocId(40)]),
            Err(CellarError::DocOutOfRange { id: 40, .. })
        ));
        // A damaged record is found by a read of several, at its own offset.
        let path = dir.path().join(FileKind::Texts.file_name());
        let mut bytes = std::fs::read(&path).unwrap();
        let at = HEADER_BYTES + reader.offsets[6] as usize + 3;
        bytes[at] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let reader = TextsReader::open(dir.path()).unwrap();
        assert!(reader.get_many(&[DocId(5), DocId(7)]).is_ok());
        let err = reader.get_many(&[DocId(5), DocId(6), DocId(7)]).unwrap_err();
        assert!(
            matches!(&err, CellarError::Corrupted { .. }) && err.to_string().contains("document 6"),
            "{err}"
        );
    }
}
