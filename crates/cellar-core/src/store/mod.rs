//! The token-vector store: one record per document in 4 KiB-aligned pages (`vectors.bin`), an
//! offsets table (`offsets.bin`), codec parameters (`codec.bin`) and `manifest.json`.
//!
//! Build with [`StoreWriter`], open with [`VectorStore::open`], which validates every header,
//! the small files' checksums and the manifest's counts, keeps only the offsets table in RAM and
//! reads records through the reader the options name.

mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::format::offsets::{OffsetEntry, OffsetsTable};
pub use crate::format::record::RecordView;
pub use writer::{StoreWriter, MAX_TOKENS_PER_DOC};

use crate::codec::{codec_from_params, Codec};
use crate::error::{CellarError, IoContext, Result};
use crate::format::fsio::{open_checked, read_small_file, verify_body};
use crate::format::{FileHeader, FileKind, Manifest};
use crate::ids::DocId;
use crate::io::hot::{HotRecords, HotStats};
use crate::io::{ReaderKind, ReaderOptions, ReaderSource, RecordBatch, RecordReader};

/// Records read per batch by [`VectorStore::verify`].
const VERIFY_BATCH_DOCS: usize = 256;

pub struct VectorStore {
    dir: PathBuf,
    manifest: Manifest,
    codec: Arc<dyn Codec>,
    offsets: Arc<OffsetsTable>,
    vectors_header: FileHeader,
    reader: RecordReader,
    /// [`crate::io::chunk_bytes`] of the offsets, computed once at open.
    chunk_bytes: usize,
    /// The hot-record cache, when one was asked for ([`VectorStore::with_hot_cache`]).
    hot: Option<HotRecords>,
}

impl VectorStore {
    pub fn open(dir: &Path, options: &ReaderOptions) -> Result<Self> {
        let manifest = Manifest::read(dir)?;
        let vectors_path = dir.join(FileKind::Vectors.file_name());
        let (_, vectors_header) = open_checked(&vectors_path, FileKind::Vectors)?;
        check_against_manifest(&manifest, &vectors_path, &vectors_header)?;

        let offsets_path = dir.join(FileKind::Offsets.file_name());
        let (offsets_header, body) = read_small_file(&offsets_path, FileKind::Offsets)?;
        check_against_manifest(&manifest, &offsets_path, &offsets_header)?;
        let offsets = OffsetsTable::decode(&body, &offsets_path, &vectors_header)?;
        if offsets.len() as u64 != manifest.counts.docs {
            return Err(CellarError::corrupted(
                &offsets_path,
                0,
                format!(
                    "{} entries but the manifest counts {} documents",
                    offsets.len(),
                    manifest.counts.docs
                ),
            ));
        }

        let codec_path = dir.join(FileKind::CodecParams.file_name());
        let (codec_header, params) = read_small_file(&codec_path, FileKind::CodecParams)?;
        check_against_manifest(&manifest, &codec_path, &codec_header)?;
        let codec = codec_from_params(manifest.codec, manifest.dim, &params, &codec_path)?;
        if codec.bytes_per_vector() != manifest.bytes_per_token {
            return Err(CellarError::corrupted(
                &codec_path,
                0,
                format!(
                    "the codec takes {} bytes a token, but the manifest says {}",
                    codec.bytes_per_vector(),
                    manifest.bytes_per_token
                ),
            ));
        }

        let offsets = Arc::new(offsets);
        let source = ReaderSource {
            path: vectors_path,
            header: vectors_header.clone(),
            offsets: offsets.clone(),
            bytes_per_vector: codec.bytes_per_vector(),
        };
        let reader = RecordReader::open(source, options)?;
        let chunk_bytes = crate::io::chunk_bytes(&offsets);
        Ok(VectorStore {
            dir: dir.to_path_buf(),
            manifest,
            codec,
            offsets,
            vectors_header,
            reader,
            chunk_bytes,
            hot: None,
        })
    }

    /// Keeps up to `bytes` of the most re-read records in RAM ([`HotRecords`]). Refused for the
    /// ram reader, which holds every record in RAM already.
    pub fn with_hot_cache(mut self, bytes: usize) -> Result<Self> {
        if self.reader.kind() == ReaderKind::Ram {
            return Err(CellarError::InvalidInput(
                "a hot-record cache needs the mmap or direct reader: the ram reader holds every record in RAM already"
                    .into(),
            ));
        }
        let mean = usize::try_from(self.offsets.mean_record_page_bytes()).unwrap_or(usize::MAX);
        self.hot = Some(HotRecords::new(bytes, mean, self.len())?);
        Ok(self)
    }

    /// The hot-record cache's counters, when the store has one.
    pub fn hot_stats(&self) -> Option<HotStats> {
        self.hot.as_ref().map(HotRecords::stats)
    }

    /// Bytes of pages a query's reads are chunked into ([`crate::io::chunk_bytes`]).
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// The records of `ids`, in order: from the hot-record cache where it holds them, the rest
    /// read through the store's reader (and offered to the cache).
    pub fn read_batch(&self, ids: &[DocId]) -> Result<RecordBatch> {
        let Some(hot) = &self.hot else { return self.read_uncached(ids) };
        let found = hot.lookup(ids);
        if found.iter().all(Option::is_none) {
            let batch = self.read_uncached(ids)?;
            hot.offer(&batch, ids);
            return Ok(batch);
        }
        let misses: Vec<DocId> =
            ids.iter().zip(&found).filter(|(_, f)| f.is_none()).map(|(id, _)| *id).collect();
        let read = if misses.is_empty() { RecordBatch::empty() } else { self.read_uncached(&misses)? };
        hot.offer(&read, &misses);
        RecordBatch::with_cached(read, found)
    }

    /// [`RecordReader::will_need`]: the kernel reads a run of adjacent records ahead.
    pub fn will_need(&self, ids: &[DocId]) -> Result<bool> {
        self.reader.will_need(ids)
    }

    /// [`FileSlice::release_mapped`](crate::io::FileSlice::release_mapped) of the records
    /// file: after it, evicting the store's files from the page cache makes its next reads cold.
    pub fn release_mapped(&self) -> Result<()> {
        self.reader.release_mapped()
    }

    /// Reads the records of `ids`, in order, through the store's reader.
    fn read_uncached(&self, ids: &[DocId]) -> Result<RecordBatch> {
        match self.reader.kind() {
            ReaderKind::Ram => self.reader.read_batch(ids),
            // The thread sleeps on the disk here: its CPU slot, if it has one, goes to another.
            ReaderKind::Mmap | ReaderKind::Direct | ReaderKind::Pread => {
                crate::io::wait::waiting_on_io(|| self.reader.read_batch(ids))
            }
        }
    }

    /// Splits `ids` into consecutive ranges whose records span at most `budget` bytes of pages
    /// each (a record larger than that is a range alone): the chunks a query's candidates are
    /// read and scored in. A page a record shares with the record before it in the range is
    /// counted once (records on one page, or packed records, are read once per page).
    pub fn chunks(&self, ids: &[DocId], budget: usize) -> Result<Vec<std::ops::Range<usize>>> {
        let page = crate::format::PAGE_BYTES as u64;
        let mut chunks = Vec::new();
        let (mut start, mut bytes, mut last_page) = (0usize, 0u64, None);
        for (i, id) in ids.iter().enumerate() {
            let entry = self.offsets.get(*id)?;
            let (first, last) = crate::format::record::pages_of(entry.offset, entry.len);
            let shared = u64::from(last_page == Some(first));
            let record_bytes = (last - first + 1 - shared) * page;
            if i > start && bytes + record_bytes > budget as u64 {
                chunks.push(start..i);
                // The record starts the next range: its every page counts there.
                (start, bytes) = (i, (last - first + 1) * page);
            } else {
                bytes += record_bytes;
            }
            last_page = Some(last);
        }
        if start < ids.len() {
            chunks.push(start..ids.len());
        }
        Ok(chunks)
    }

    /// Reads every record through the store's reader, which checks each against the checksum
    /// of its offsets entry (the first damaged record is the error, at its offset), then streams
    /// the whole vectors body through the header's checksum, padding included (`cellar inspect
    /// --verify`; slow on large stores). Returns the number of records checked.
    pub fn verify(&self) -> Result<usize> {
        let ids: Vec<DocId> = (0..self.len() as u32).map(DocId).collect();
        for batch in ids.chunks(VERIFY_BATCH_DOCS) {
            self.read_uncached(batch)?;
        }
        let path = self.vectors_path();
        let file = std::fs::File::open(&path).at(&path)?;
        verify_body(&file, &path, &self.vectors_header)?;
        Ok(ids.len())
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.manifest.dim
    }

    pub fn codec(&self) -> &Arc<dyn Codec> {
        &self.codec
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn offsets(&self) -> &OffsetsTable {
        &self.offsets
    }

    pub fn reader_kind(&self) -> ReaderKind {
        self.reader.kind()
    }

    /// How the reader issues reads (e.g. "io_uring", or "pread-pool" after a fallback).
    pub fn reader_engine(&self) -> &'static str {
        self.reader.engine()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn vectors_path(&self) -> PathBuf {
        self.dir.join(FileKind::Vectors.file_name())
    }
}

/// A file's header must agree with what the manifest recorded for it.
fn check_against_manifest(manifest: &Manifest, path: &Path, header: &FileHeader) -> Result<()> {
    let name = header.kind.file_name();
    let entry = manifest
        .file(name)
        .ok_or_else(|| CellarError::corrupted(path, 0, format!("the manifest does not list {name}")))?;
    let file_bytes = header.body_offset + header.body_len;
    if entry.bytes != file_bytes || entry.body_crc32c != header.body_crc32c {
        return Err(CellarError::corrupted(
            path,
            0,
            format!(
                "header (bytes {file_bytes}, crc {:08x}) disagrees with the manifest (bytes {}, crc {:08x})",
                header.body_crc32c, entry.bytes, entry.body_crc32c
            ),
        ));
    }
    Ok(())
}
