//! One pooled (mean of all token states, L2-normalised) vector per document: `pooled.bin`, f16
//! little-endian, `docs x dim` row-major. It serves the exact single-vector dense baseline, which
//! scans every row, so it is loaded into RAM on first use only. It is read through
//! `cellar-core`'s [`FileSlice`].

use std::fs::File;
use std::path::Path;

use cellar_core::format::fsio::{open_checked, verify_body, BodyWriter};
use cellar_core::format::{FileHeader, FileKind, HEADER_BYTES};
use cellar_core::io::{FileSlice, ReaderKind, ReaderOptions, SliceBytes};
use cellar_core::kernels::{dot_f16, Isa};
use cellar_core::{CellarError, DocId, Result};
use half::f16;

use crate::scored::Scored;
use crate::topk::TopK;

/// Streams pooled vectors to `pooled.bin`.
pub struct PooledWriter {
    body: BodyWriter,
    dim: usize,
    buf: Vec<u8>,
}

impl PooledWriter {
    pub fn create(dir: &Path, dim: usize) -> Result<PooledWriter> {
        let path = dir.join(FileKind::Pooled.file_name());
        let body = BodyWriter::create(&path, FileKind::Pooled, HEADER_BYTES as u64)?;
        Ok(PooledWriter { body, dim, buf: Vec::with_capacity(dim * 2) })
    }

    pub fn add(&mut self, pooled: &[f32]) -> Result<()> {
        if pooled.len() != self.dim {
            return Err(CellarError::WrongDimension { expected: self.dim, received: pooled.len() });
        }
        self.buf.clear();
        for v in pooled {
            self.buf.extend_from_slice(&f16::from_f32(*v).to_le_bytes());
        }
        self.body.write(&self.buf)
    }

    /// Appends a row given as stored: `dim` f16, little-endian (a written document's, copied
    /// into a segment without converting it twice).
    pub fn add_f16(&mut self, row: &[u8]) -> Result<()> {
        if row.len() != self.dim * 2 {
            return Err(CellarError::WrongDimension { expected: self.dim, received: row.len() / 2 });
        }
        self.body.write(row)
    }

    pub fn finish(self) -> Result<()> {
        self.body.finish().map(|_| ())
    }
}

/// Opens the pooled-vectors file `path` (an index's `pooled.bin`, or a synthetic one) and checks
/// its header and that its body is `docs` rows of `dim` f16, without reading the rows: what
/// `Index::open` checks, so a missing or cut file is found at open, not at the first dense query.
pub fn open_pooled(path: &Path, dim: usize, docs: u64) -> Result<(File, FileHeader)> {
    let (file, header) = open_checked(path, FileKind::Pooled)?;
    let expected = docs.checked_mul(2 * dim as u64);
    if Some(header.body_len) != expected {
        let detail = format!("{} bytes, expected {docs} rows of {dim} f16", header.body_len);
        return Err(CellarError::corrupted(path, header.body_offset, detail));
    }
    Ok((file, header))
}

/// Up to `n` rows of `pooled.bin` spread evenly over its `docs`, each read on its own (no row
/// is loaded but those), as f32.
pub fn sample_rows(path: &Path, dim: usize, docs: usize, n: usize) -> Result<Vec<Vec<f32>>> {
    let (file, header) = open_pooled(path, dim, docs as u64)?;
    let rows = FileSlice::positioned(file, path)?.slice(body_range(&header))?;
    let stride = docs.div_ceil(n.max(1)).max(1);
    let row = (dim * 2) as u64;
    (0..docs as u64)
        .step_by(stride)
        .map(|i| {
            let bytes = rows.read_bytes(i * row..(i + 1) * row)?;
            Ok(bytes.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect())
        })
        .collect()
}

/// Where `header`'s body lies in its file.
fn body_range(header: &FileHeader) -> std::ops::Range<u64> {
    header.body_offset..header.body_offset + header.body_len
}

/// All pooled vectors: read into RAM, or mapped (a written segment's: the page cache holds them,
/// and gives them back under memory pressure).
pub struct PooledMatrix {
    dim: usize,
    /// The body's bytes: read into a buffer of their own, or borrowed from a mapping.
    rows: SliceBytes,
    /// The file they come from.
    file: FileSlice,
}

impl PooledMatrix {
    /// Loads and checks `pooled.bin` (`docs` rows of `dim` f16, body checksum).
    pub fn load(dir: &Path, dim: usize, docs: usize) -> Result<PooledMatrix> {
        let path = dir.join(FileKind::Pooled.file_name());
        let (file, header) = open_pooled(&path, dim, docs as u64)?;
        PooledMatrix::checked(dim, &header, FileSlice::positioned(file, &path)?)
    }

    /// Maps and checks `pooled.bin` as [`PooledMatrix::load`] does, without copying its rows
    /// into the process's memory.
    pub fn map(dir: &Path, dim: usize, docs: usize) -> Result<PooledMatrix> {
        let path = dir.join(FileKind::Pooled.file_name());
        let (_, header) = open_pooled(&path, dim, docs as u64)?;
        // A pooled.bin is immutable once written (segments are renamed into place whole and
        // never rewritten); a file damaged under the map fails the checksum or gives wrong
        // scores. Mapped for random access (a group's search reads its own rows; a fault on a
        // file read ahead in order would read up to the device's read-ahead, megabytes, around
        // one row): whoever reads many rows announces them first (`will_need`).
        let file = FileSlice::opener(&ReaderOptions::new(ReaderKind::Mmap)).open(&path)?;
        PooledMatrix::checked(dim, &header, file)
    }

    /// The body of `file` (a pooled.bin with `header`), checked against the header's checksum.
    fn checked(dim: usize, header: &FileHeader, file: FileSlice) -> Result<PooledMatrix> {
        let file = file.slice(body_range(header))?;
        if file.kind() == ReaderKind::Mmap {
            // The checksum reads every row: at once, not one fault at a time.
            file.will_need(0..file.len())?;
        }
        let rows = file.read_bytes(0..file.len())?;
        header.check_body_crc(file.path(), crc32c::crc32c(&rows))?;
        Ok(PooledMatrix { dim, rows, file })
    }

    /// Tells the kernel that `rows` of a mapped matrix will be read now, so it reads their pages
    /// at once instead of one fault at a time (nothing when the matrix is in RAM).
    pub fn will_need(&self, rows: std::ops::Range<usize>) -> Result<()> {
        if !self.rows.is_borrowed() {
            return Ok(());
        }
        let row = (self.dim * 2) as u64;
        self.file.will_need(rows.start as u64 * row..rows.end as u64 * row)
    }

    /// [`FileSlice::release_mapped`] of a mapped matrix's file (nothing for a loaded one).
    pub fn release_mapped(&self) -> Result<()> {
        self.file.release_mapped()
    }

    fn bytes(&self) -> &[u8] {
        &self.rows
    }

    /// Bytes of rows this matrix keeps in the process's own memory (0 when mapped).
    pub fn ram_bytes(&self) -> usize {
        if self.rows.is_borrowed() {
            0
        } else {
            self.rows.len()
        }
    }

    /// Streams `pooled.bin` through its body checksum (`cellar inspect --verify`) after the checks
    /// of [`open_pooled`]; returns its body length.
    pub fn verify(dir: &Path, dim: usize, docs: usize) -> Result<u64> {
        let path = dir.join(FileKind::Pooled.file_name());
        let (file, header) = open_pooled(&path, dim, docs as u64)?;
        verify_body(&file, &path, &header)?;
        Ok(header.body_len)
    }

    /// Document `i`'s pooled vector as f32.
    pub fn row(&self, i: usize) -> Vec<f32> {
        let bytes = &self.bytes()[i * self.dim * 2..(i + 1) * self.dim * 2];
        bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
    }

    /// Document `i`'s pooled vector as stored: f16 little-endian.
    pub fn row_bytes(&self, i: usize) -> &[u8] {
        &self.bytes()[i * self.dim * 2..(i + 1) * self.dim * 2]
    }

    /// Exact top-`k` documents by dot product with `query` (L2-normalised, so cosine).
    pub fn search(&self, query: &[f32], k: usize) -> Vec<Scored> {
        let mut top = TopK::new(k);
        self.score_into(query, &|i| DocId(i as u32), &|_| false, &mut top);
        top.into_sorted()
    }

    /// Scores every row not `excluded` into `top`, row `i` as document `id_of(i)`.
    pub fn score_into(
        &self,
        query: &[f32],
        id_of: &dyn Fn(usize) -> DocId,
        excluded: &dyn Fn(DocId) -> bool,
        top: &mut TopK,
    ) {
        let isa = Isa::detected();
        for (i, row) in self.bytes().chunks_exact(self.dim * 2).enumerate() {
            let id = id_of(i);
            if !excluded(id) {
                top.push(id, dot_f16(isa, query, row));
            }
        }
    }
}
