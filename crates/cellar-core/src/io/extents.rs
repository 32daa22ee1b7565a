//! Reads of arbitrary byte extents of one immutable file through the same three reader kinds as
//! the record store (ram, mmap, direct). Structures other than the record store use it: the IVF's
//! posting blocks and its full-precision vectors.
//!
//! The caller checks what it reads (each structure has its own checksums); this module only moves
//! bytes and counts them in [`ReadStats`] like the record readers do.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{Advice, Mmap};

use super::aligned::BufferPool;
use super::direct::{Engine, POOLED_BUFFER_BYTES};
use super::latency::EmulatedDevice;
use super::plan::{merge_ranges, Run};
use super::{BatchBytes, ReadStats, ReaderKind, ReaderOptions};
use crate::error::{CellarError, IoContext, Result};
use crate::format::fsio::open_with_flags;
use crate::format::PAGE_BYTES;

/// `len` bytes at absolute file offset `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub offset: u64,
    pub len: usize,
}

enum Source {
    Ram(Arc<Vec<u8>>),
    Mmap { map: Arc<Mmap>, willneed: bool },
    Direct { file: File, engine: Engine, emulated: Option<EmulatedDevice>, buffers: Arc<BufferPool> },
}

/// Idle pooled buffers kept per file read with O_DIRECT (the IVF's postings and vectors).
const POOLED_EXTENT_BUFFERS: usize = 4;

/// One open file and the reader kind its extents are read with.
pub struct ExtentReader {
    path: PathBuf,
    file_len: u64,
    source: Source,
}

/// The bytes of a batch of extents, in the order they were asked for.
pub struct ExtentBatch {
    bytes: BatchBytes,
    spans: Vec<(usize, usize)>,
    stats: ReadStats,
}

impl ExtentBatch {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The bytes of the `i`-th extent asked for.
    pub fn get(&self, i: usize) -> &[u8] {
        let (start, len) = self.spans[i];
        &self.bytes.as_slice()[start..start + len]
    }

    pub fn stats(&self) -> ReadStats {
        self.stats
    }
}

impl ExtentReader {
    /// Opens `path` for `options.kind`: ram reads the whole file now, mmap maps it with
    /// `MADV_RANDOM`, direct opens it with `O_DIRECT` and the options' I/O engine.
    pub fn open(path: &Path, options: &ReaderOptions) -> Result<ExtentReader> {
        let file_len = std::fs::metadata(path).at(path)?.len();
        let source = match options.kind {
            ReaderKind::Ram => Source::Ram(Arc::new(std::fs::read(path).at(path)?)),
            ReaderKind::Mmap => {
                let file = File::open(path).at(path)?;
                // SAFETY: index files are immutable once committed; nothing writes them while mapped.
                let map = unsafe { Mmap::map(&file) }.at(path)?;
                map.advise(Advice::Random).at(path)?;
                Source::Mmap { map: Arc::new(map), willneed: options.mmap_willneed }
            }
            ReaderKind::Direct if file_len % PAGE_BYTES as u64 != 0 => {
                return Err(CellarError::corrupted(
                    path,
                    file_len,
                    format!("read with O_DIRECT, the file must be a whole number of {PAGE_BYTES}-byte pages"),
                ))
            }
            ReaderKind::Direct => Source::Direct {
                file: open_with_flags(path, libc::O_DIRECT)?,
                engine: Engine::open(options)?,
                emulated: options.inject_latency.map(EmulatedDevice::new),
                buffers: BufferPool::new(POOLED_BUFFER_BYTES, POOLED_EXTENT_BUFFERS),
            },
        };
        Ok(ExtentReader { path: path.to_path_buf(), file_len, source })
    }

    pub fn kind(&self) -> ReaderKind {
        match self.source {
            Source::Ram(_) => ReaderKind::Ram,
            Source::Mmap { .. } => ReaderKind::Mmap,
            Source::Direct { .. } => ReaderKind::Direct,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the file this reader holds in RAM: all of it for the ram reader, else none.
    pub fn ram_bytes(&self) -> u64 {
        match self.source {
            Source::Ram(_) => self.file_len,
            _ => 0,
        }
    }

    /// The file's length in bytes at open.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Reads every extent (duplicates and overlaps allowed).
    pub fn read(&self, extents: &[Extent]) -> Result<ExtentBatch> {
        self.check_bounds(extents)?;
        let plan = PagePlan::new(extents);
        match &self.source {
            Source::Ram(bytes) => {
                let stats =
                    ReadStats { read_calls: 0, pages: plan.pages, bytes: plan.requested_bytes, cached: 0 };
                Ok(ExtentBatch {
                    bytes: BatchBytes::Shared(bytes.clone()),
                    spans: file_spans(extents),
                    stats,
                })
            }
            Source::Mmap { map, willneed } => {
                let mut read_calls = 0;
                if *willneed {
                    for run in &plan.runs {
                        let len = run.len.min((self.file_len - run.file_offset) as usize);
                        // A hint: if the kernel declines, the caller's touches still fault the pages in.
                        let _ = map.advise_range(Advice::WillNeed, run.file_offset as usize, len);
                    }
                    read_calls = plan.runs.len() as u64;
                }
                let stats = ReadStats {
                    read_calls,
                    pages: plan.pages,
                    bytes: plan.pages * PAGE_BYTES as u64,
                    cached: 0,
                };
                Ok(ExtentBatch { bytes: BatchBytes::Shared(map.clone()), spans: file_spans(extents), stats })
            }
            Source::Direct { file, engine, emulated, buffers } => {
                let mut buf = buffers.take(plan.buf_len);
                // The thread sleeps on the disk here: its CPU slot, if it has one, goes to another.
                super::wait::waiting_on_io(|| -> Result<()> {
                    engine.read_runs(file, &self.path, &plan.runs, buf.inner_mut())?;
                    if let Some(device) = emulated {
                        device.charge(plan.runs.len());
                    }
                    Ok(())
                })?;
                let stats = ReadStats {
                    read_calls: plan.runs.len() as u64,
                    pages: plan.pages,
                    bytes: plan.buf_len as u64,
                    cached: 0,
                };
                Ok(ExtentBatch { bytes: BatchBytes::Pooled(buf), spans: plan.spans, stats })
            }
        }
    }

    fn check_bounds(&self, extents: &[Extent]) -> Result<()> {
        match extents.iter().find(|e| e.offset + e.len as u64 > self.file_len) {
            None => Ok(()),
            Some(e) => Err(CellarError::corrupted(
                &self.path,
                e.offset,
                format!(
                    "an extent of {} bytes runs past the end of the file ({} bytes)",
                    e.len, self.file_len
                ),
            )),
        }
    }
}

fn file_spans(extents: &[Extent]) -> Vec<(usize, usize)> {
    extents.iter().map(|e| (e.offset as usize, e.len)).collect()
}

/// Page-aligned runs covering a batch of extents: overlapping or touching pages are read once,
/// adjacent ones merged as the record store's plans are (`plan::merge_ranges`).
struct PagePlan {
    runs: Vec<Run>,
    /// Per extent: (start, len) inside the run buffer.
    spans: Vec<(usize, usize)>,
    buf_len: usize,
    pages: u64,
    requested_bytes: u64,
}

impl PagePlan {
    fn new(extents: &[Extent]) -> PagePlan {
        let page = PAGE_BYTES as u64;
        let ranges: Vec<(u64, u64)> = extents
            .iter()
            .map(|e| (e.offset / page * page, (e.offset + e.len.max(1) as u64).div_ceil(page) * page))
            .collect();
        let (runs, run_of, buf_len) = merge_ranges(&ranges);
        let spans = extents
            .iter()
            .zip(&run_of)
            .map(|(e, r)| (runs[*r].buf_offset + (e.offset - runs[*r].file_offset) as usize, e.len))
            .collect();
        let requested_bytes = extents.iter().map(|e| e.len as u64).sum();
        PagePlan { runs, spans, buf_len, pages: (buf_len / PAGE_BYTES) as u64, requested_bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_reads_shared_pages_once_and_maps_every_extent() {
        let extents = [
            Extent { offset: 5000, len: 100 },
            Extent { offset: 10, len: 20 },
            Extent { offset: 4090, len: 20 },
            Extent { offset: 100_000, len: 8192 },
        ];
        let plan = PagePlan::new(&extents);
        // Pages 0..2 merge (0, 4090-4110, 5000) into one run; 100_000 is far away.
        assert_eq!(plan.runs.len(), 2);
        assert_eq!(plan.runs[0], Run { file_offset: 0, len: 8192, buf_offset: 0 });
        assert_eq!(plan.spans[1], (10, 20));
        assert_eq!(plan.spans[0], (5000, 100));
        let far = plan.runs[1];
        assert_eq!(far.file_offset, 98_304);
        assert_eq!(plan.spans[3], (8192 + (100_000 - 98_304), 8192));
        assert_eq!(plan.pages as usize, plan.buf_len / PAGE_BYTES);
    }

    #[test]
    fn every_reader_kind_returns_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.bin");
        let data: Vec<u8> = (0..53_248u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let extents = [
            Extent { offset: 12_345, len: 999 },
            Extent { offset: 0, len: 1 },
            Extent { offset: 52_000, len: 1248 },
        ];
        for kind in ReaderKind::ALL {
            let reader = match ExtentReader::open(&path, &ReaderOptions::new(kind)) {
                Ok(reader) => reader,
                Err(CellarError::Unsupported(_)) if kind == ReaderKind::Direct => continue,
                Err(e) => panic!("{kind:?}: {e}"),
            };
            let batch = reader.read(&extents).unwrap();
            for (i, e) in extents.iter().enumerate() {
                assert_eq!(
                    batch.get(i),
                    &data[e.offset as usize..e.offset as usize + e.len],
                    "{kind:?} extent {i}"
                );
            }
            let past_end = reader.read(&[Extent { offset: 53_247, len: 2 }]);
            assert!(matches!(past_end, Err(CellarError::Corrupted { .. })), "{kind:?}");
        }
    }
}
