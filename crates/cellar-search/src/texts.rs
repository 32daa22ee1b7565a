//! Display text of every document, with its collection id: `texts.bin` holds one JSON line per
//! document (`{"id","title","text"}`) in internal-id order, `text_offsets.bin` the byte offset of
//! each line (u64 little-endian, one more entry than documents: the end). Only the offsets live
//! in RAM (8 bytes per document); a line is read with one `pread` when a hit is displayed.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use cellar_core::format::fsio::{open_checked, read_small_file, BodyWriter};
use cellar_core::format::{FileKind, HEADER_BYTES};
use cellar_core::{CellarError, DocId, IoContext, Result};
use serde::{Deserialize, Serialize};

use crate::corpus::Document;

/// One line as written (borrowed, no copies).
#[derive(Serialize)]
struct LineOut<'a> {
    id: &'a str,
    title: &'a str,
    text: &'a str,
}

/// One line as read (owned: JSON escapes must be decoded).
#[derive(Deserialize)]
struct LineIn {
    id: String,
    title: String,
    text: String,
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
        let line = LineOut { id: &doc.id, title: &doc.title, text: &doc.text };
        let mut bytes = serde_json::to_vec(&line).map_err(|e| CellarError::InvalidInput(e.to_string()))?;
        bytes.push(b'\n');
        self.offsets.write(&self.written.to_le_bytes())?;
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

/// Reads documents' display text by internal id.
pub struct TextsReader {
    path: PathBuf,
    file: File,
    body_offset: u64,
    offsets: Vec<u64>,
}

impl TextsReader {
    pub fn open(dir: &Path) -> Result<TextsReader> {
        let offsets_path = dir.join(FileKind::TextOffsets.file_name());
        let (_, body) = read_small_file(&offsets_path, FileKind::TextOffsets)?;
        let offsets = decode_offsets(&body, &offsets_path)?;
        let path = dir.join(FileKind::Texts.file_name());
        let (file, header) = open_checked(&path, FileKind::Texts)?;
        if offsets.last() != Some(&header.body_len) {
            let detail = "text offsets do not end at the end of texts.bin".to_string();
            return Err(CellarError::corrupted(&offsets_path, 0, detail));
        }
        Ok(TextsReader { path, file, body_offset: header.body_offset, offsets })
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The document stored under `id`.
    pub fn get(&self, id: DocId) -> Result<Document> {
        let i = id.0 as usize;
        if i >= self.len() {
            return Err(CellarError::DocOutOfRange { id: id.0 as u64, count: self.len() as u64 });
        }
        let (start, end) = (self.offsets[i], self.offsets[i + 1]);
        let mut bytes = vec![0u8; (end - start) as usize];
        self.file.read_exact_at(&mut bytes, self.body_offset + start).at(&self.path)?;
        let line: LineIn = serde_json::from_slice(&bytes).map_err(|e| {
            CellarError::corrupted(&self.path, self.body_offset + start, format!("document {i}: {e}"))
        })?;
        Ok(Document { id: line.id, title: line.title, text: line.text })
    }
}

fn decode_offsets(body: &[u8], path: &Path) -> Result<Vec<u64>> {
    if !body.len().is_multiple_of(8) || body.is_empty() {
        let detail = format!("{} bytes is not a whole, non-empty number of u64 offsets", body.len());
        return Err(CellarError::corrupted(path, 0, detail));
    }
    let offsets: Vec<u64> =
        body.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk"))).collect();
    if let Some(i) = offsets.windows(2).position(|w| w[0] > w[1]) {
        let detail = format!("text offset {} goes backwards", i + 1);
        return Err(CellarError::corrupted(path, (i as u64 + 1) * 8, detail));
    }
    Ok(offsets)
}
