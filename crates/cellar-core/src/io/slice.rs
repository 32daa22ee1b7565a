//! One way to read byte ranges of an immutable file: a [`FileSlice`] is a file opened once in
//! one reader kind and a range of it. Slicing it again is free (an `Arc` and two numbers), and
//! every read of it goes through the same code whatever the kind:
//! - ram: the whole file read into memory at open; reads borrow it (nothing copied, 0 calls);
//! - mmap: the file mapped (`MADV_RANDOM`); reads borrow the mapping, each run of more than a
//!   page announced with `MADV_WILLNEED` when the options ask, and the pages fault in where the
//!   caller touches them;
//! - direct: `O_DIRECT`, the ranges of a batch turned into page-aligned runs (shared pages read
//!   once, adjacent ones merged) read through io_uring or the pread pool into a pooled buffer
//!   taken under the process's read-buffer budget, with the emulated SSD latency charged per
//!   run, the thread's CPU slot given back while it waits;
//! - positioned: plain `pread`s through the page cache, one per range, into a buffer of their
//!   own (files read a record at a time that are not whole pages, such as the texts).
//!
//! Every read reports [`ReadStats`] as the record readers always have. Reads do not check what
//! they read: each structure has its own checksums. A range past the end of the slice is an
//! error naming the file. The record store ([`super::RecordReader`]), the IVF, the token stage,
//! SPLADE, the pooled vectors and the texts all read through it.

use std::fs::File;
use std::ops::{Deref, Range};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{Advice, Mmap, UncheckedAdvice};

use super::aligned::{BufferPool, PooledBuf};
use super::direct::{Engine, POOLED_BUFFER_BYTES};
use super::latency::EmulatedDevice;
use super::plan::{Extent, PagePlan};
use super::{ReadStats, ReaderKind, ReaderOptions};
use crate::error::{CellarError, IoContext, Result};
use crate::format::fsio::open_with_flags;
use crate::format::PAGE_BYTES;

/// Idle pooled buffers kept per file read with O_DIRECT, unless its opener asks for others
/// ([`SliceOpener::direct_buffers`]).
const IDLE_BUFFERS: usize = 4;

/// Most bytes announced by one `WILLNEED` call. The kernel reads at most the device's read-ahead
/// window a call (`force_page_cache_ra`: 128 KiB by default, 8 MiB on this project's virtual
/// disk) and silently nothing of the rest of a longer range, whose pages then fault in one at a
/// time: a 32 MiB range read that way took 0.6 s here, in 128 KiB pieces 25 ms
/// (bench/results/stream-mmap.md).
const WILLNEED_BYTES: u64 = 128 << 10;

/// Calls `advise(offset, len)` on `len` bytes at `offset` in pieces of at most
/// [`WILLNEED_BYTES`]; returns the calls made.
fn will_need_in_pieces(offset: u64, len: u64, advise: &mut dyn FnMut(u64, u64)) -> u64 {
    let mut calls = 0;
    for at in (offset..offset + len).step_by(WILLNEED_BYTES as usize) {
        advise(at, WILLNEED_BYTES.min(offset + len - at));
        calls += 1;
    }
    calls
}

/// `MADV_WILLNEED` on `len` bytes at `offset` of `map`, in pieces; returns the calls made. A
/// hint: if the kernel declines, the touches still fault the pages in.
fn will_need_mapped(map: &Mmap, offset: u64, len: u64) -> u64 {
    will_need_in_pieces(offset, len, &mut |at, n| {
        let _ = map.advise_range(Advice::WillNeed, at as usize, n as usize);
    })
}

/// Bytes a read returns: borrowed from the open file (ram, mmap), a pooled page-aligned buffer
/// (direct), or a buffer of their own (positioned).
pub(crate) enum BatchBytes {
    Shared(Arc<dyn AsRef<[u8]> + Send + Sync>),
    Pooled(PooledBuf),
    Owned(Vec<u8>),
}

impl BatchBytes {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            BatchBytes::Shared(bytes) => (**bytes).as_ref(),
            BatchBytes::Pooled(buf) => buf.as_slice(),
            BatchBytes::Owned(bytes) => bytes,
        }
    }
}

enum Backing {
    Ram(Arc<Vec<u8>>),
    Mmap { map: Arc<Mmap>, willneed: bool },
    Direct { file: File, engine: Engine, emulated: Option<EmulatedDevice>, buffers: Arc<BufferPool> },
    Positioned(File),
}

/// A file opened once: its path (for errors), its length at open and how it is read.
struct OpenFile {
    path: PathBuf,
    len: u64,
    backing: Backing,
}

/// Bytes `start..start + len` of an open immutable file. Cloning or slicing it shares the open
/// file.
#[derive(Clone)]
pub struct FileSlice {
    file: Arc<OpenFile>,
    start: u64,
    len: u64,
}

/// How [`FileSlice::opener`] opens a file: the reader kind and engine of `options`, and what
/// differs from a random-access reader.
pub struct SliceOpener<'a> {
    options: &'a ReaderOptions,
    buffer_bytes: usize,
    idle_buffers: usize,
}

impl SliceOpener<'_> {
    /// Direct kind: pooled buffers of `bytes`, `idle` of them kept between reads.
    pub fn direct_buffers(mut self, bytes: usize, idle: usize) -> Self {
        (self.buffer_bytes, self.idle_buffers) = (bytes, idle);
        self
    }

    /// Opens `path`: ram reads the whole file now, mmap maps it, direct opens it with `O_DIRECT`
    /// (it must be a whole number of pages) and the options' I/O engine.
    pub fn open(&self, path: &Path) -> Result<FileSlice> {
        let len = std::fs::metadata(path).at(path)?.len();
        let backing = match self.options.kind {
            ReaderKind::Ram => Backing::Ram(Arc::new(std::fs::read(path).at(path)?)),
            ReaderKind::Mmap => {
                let file = File::open(path).at(path)?;
                // SAFETY: index files are immutable once committed; nothing writes them while mapped.
                let map = unsafe { Mmap::map(&file) }.at(path)?;
                map.advise(Advice::Random).at(path)?;
                Backing::Mmap { map: Arc::new(map), willneed: self.options.mmap_willneed }
            }
            ReaderKind::Direct if !len.is_multiple_of(PAGE_BYTES as u64) => {
                return Err(CellarError::corrupted(
                    path,
                    len,
                    format!("read with O_DIRECT, the file must be a whole number of {PAGE_BYTES}-byte pages"),
                ))
            }
            ReaderKind::Pread => Backing::Positioned(File::open(path).at(path)?),
            ReaderKind::Direct => Backing::Direct {
                file: open_with_flags(path, libc::O_DIRECT)?,
                engine: Engine::open(self.options)?,
                emulated: self.options.inject_latency.map(EmulatedDevice::new),
                buffers: BufferPool::new(self.buffer_bytes, self.idle_buffers),
            },
        };
        Ok(FileSlice::whole(OpenFile { path: path.to_path_buf(), len, backing }))
    }
}

/// The bytes of one range read from a slice, with what reading them cost.
pub struct SliceBytes {
    bytes: BatchBytes,
    range: Range<usize>,
    stats: ReadStats,
}

impl SliceBytes {
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes.as_slice()[self.range.clone()]
    }

    /// Whether the bytes are borrowed from the open file (ram, mmap) rather than read into a
    /// buffer of this value's own (direct, positioned).
    pub fn is_borrowed(&self) -> bool {
        matches!(self.bytes, BatchBytes::Shared(_))
    }

    pub fn stats(&self) -> ReadStats {
        self.stats
    }
}

impl Deref for SliceBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// The bytes of a batch of extents, in the order they were asked for.
pub struct SliceBatch {
    bytes: BatchBytes,
    spans: Vec<(usize, usize)>,
    stats: ReadStats,
}

impl SliceBatch {
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

    /// The bytes, where each extent lies in them, and the stats (for the record batches).
    pub(crate) fn into_parts(self) -> (BatchBytes, Vec<(usize, usize)>, ReadStats) {
        (self.bytes, self.spans, self.stats)
    }
}

impl FileSlice {
    /// Opens all of `path` for random reads of `options.kind` (see [`SliceOpener::open`]).
    pub fn open(path: &Path, options: &ReaderOptions) -> Result<FileSlice> {
        FileSlice::opener(options).open(path)
    }

    /// An opener for `options`' kind and engine, to set more than [`FileSlice::open`] does.
    pub fn opener(options: &ReaderOptions) -> SliceOpener<'_> {
        SliceOpener { options, buffer_bytes: POOLED_BUFFER_BYTES, idle_buffers: IDLE_BUFFERS }
    }

    /// All of `file` (opened from `path`), read with positioned reads through the page cache.
    pub fn positioned(file: File, path: &Path) -> Result<FileSlice> {
        let len = file.metadata().at(path)?.len();
        Ok(FileSlice::whole(OpenFile { path: path.to_path_buf(), len, backing: Backing::Positioned(file) }))
    }

    fn whole(file: OpenFile) -> FileSlice {
        let len = file.len;
        FileSlice { file: Arc::new(file), start: 0, len }
    }

    /// Bytes `range` of this slice, sharing its open file; an error naming the file if the range
    /// runs past the slice's end.
    pub fn slice(&self, range: Range<u64>) -> Result<FileSlice> {
        self.check(range.start, range.end.saturating_sub(range.start), range.start <= range.end)?;
        Ok(FileSlice {
            file: self.file.clone(),
            start: self.start + range.start,
            len: range.end - range.start,
        })
    }

    /// The reader kind the file was opened with (positioned reads: `Pread`).
    pub fn kind(&self) -> ReaderKind {
        match self.file.backing {
            Backing::Ram(_) => ReaderKind::Ram,
            Backing::Mmap { .. } => ReaderKind::Mmap,
            Backing::Direct { .. } => ReaderKind::Direct,
            Backing::Positioned(_) => ReaderKind::Pread,
        }
    }

    /// How reads are issued ("memory", "willneed+faults", "page-faults", "io_uring",
    /// "pread-pool", "pread").
    pub fn engine(&self) -> &'static str {
        match &self.file.backing {
            Backing::Ram(_) => "memory",
            Backing::Mmap { willneed: true, .. } => "willneed+faults",
            Backing::Mmap { willneed: false, .. } => "page-faults",
            Backing::Direct { engine, .. } => engine.name(),
            Backing::Positioned(_) => "pread",
        }
    }

    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// Bytes in this slice.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the file held in RAM for this slice: all of the file for the ram kind, else none.
    pub fn ram_bytes(&self) -> u64 {
        match self.file.backing {
            Backing::Ram(_) => self.file.len,
            _ => 0,
        }
    }

    /// Bytes `range` of this slice: borrowed from the file for ram and mmap, read into a buffer
    /// for direct (aligned to pages) and positioned reads.
    pub fn read_bytes(&self, range: Range<u64>) -> Result<SliceBytes> {
        self.check(range.start, range.end.saturating_sub(range.start), range.start <= range.end)?;
        if range.is_empty() {
            // Nothing to read (a direct read of an empty range at the file's end would read a page
            // past it).
            return Ok(SliceBytes {
                bytes: BatchBytes::Owned(Vec::new()),
                range: 0..0,
                stats: ReadStats::default(),
            });
        }
        if let Backing::Positioned(file) = &self.file.backing {
            // One pread into a buffer of the range's size, no page plan to make: a stream reads
            // a small group's whole extent this way on every warm query.
            let len = (range.end - range.start) as usize;
            let mut bytes = vec![0u8; len];
            file.read_exact_at(&mut bytes, self.start + range.start).at(&self.file.path)?;
            let page = PAGE_BYTES as u64;
            let (first, end) = (self.start + range.start, self.start + range.end);
            let pages = end.div_ceil(page) - first / page;
            let stats = ReadStats { read_calls: 1, pages, bytes: len as u64, cached: 0 };
            return Ok(SliceBytes { bytes: BatchBytes::Owned(bytes), range: 0..len, stats });
        }
        let extent = Extent { offset: range.start, len: (range.end - range.start) as usize };
        let (bytes, spans, stats) = self.read_batch(&[extent])?.into_parts();
        let (start, len) = spans[0];
        Ok(SliceBytes { bytes, range: start..start + len, stats })
    }

    /// Every extent (offsets within this slice; duplicates and overlaps allowed), in one batch.
    pub fn read_batch(&self, extents: &[Extent]) -> Result<SliceBatch> {
        for e in extents {
            self.check(e.offset, e.len as u64, true)?;
        }
        let absolute: Vec<Extent> =
            extents.iter().map(|e| Extent { offset: self.start + e.offset, len: e.len }).collect();
        let plan = PagePlan::new(&absolute);
        let file_spans = || absolute.iter().map(|e| (e.offset as usize, e.len)).collect();
        let path = &self.file.path;
        Ok(match &self.file.backing {
            Backing::Ram(bytes) => SliceBatch {
                bytes: BatchBytes::Shared(bytes.clone()),
                spans: file_spans(),
                stats: ReadStats { read_calls: 0, pages: plan.pages, bytes: plan.requested_bytes, cached: 0 },
            },
            Backing::Mmap { map, willneed } => {
                let mut read_calls = 0;
                // A run of one page is left to its fault, which reads just that page: a hint
                // would add a call and read nothing sooner.
                for run in plan.runs.iter().filter(|r| *willneed && r.len > PAGE_BYTES) {
                    let len = run.len.min((self.file.len - run.file_offset) as usize);
                    read_calls += will_need_mapped(map, run.file_offset, len as u64);
                }
                let bytes = plan.pages * PAGE_BYTES as u64;
                SliceBatch {
                    bytes: BatchBytes::Shared(map.clone()),
                    spans: file_spans(),
                    stats: ReadStats { read_calls, pages: plan.pages, bytes, cached: 0 },
                }
            }
            Backing::Direct { file, engine, emulated, buffers } => {
                let mut buf = buffers.take(plan.buf_len);
                // The thread sleeps on the disk here: its CPU slot, if it has one, goes to another.
                super::wait::waiting_on_io(|| -> Result<()> {
                    engine.read_runs(file, path, &plan.runs, buf.inner_mut())?;
                    if let Some(device) = emulated {
                        device.charge(plan.runs.len());
                    }
                    Ok(())
                })?;
                let read_calls = plan.runs.len() as u64;
                let stats =
                    ReadStats { read_calls, pages: plan.pages, bytes: plan.buf_len as u64, cached: 0 };
                SliceBatch { bytes: BatchBytes::Pooled(buf), spans: plan.spans, stats }
            }
            Backing::Positioned(file) if absolute.len() == 1 => {
                // One range: one pread of exactly its bytes.
                let e = absolute[0];
                let mut bytes = vec![0u8; e.len];
                file.read_exact_at(&mut bytes, e.offset).at(path)?;
                let stats = ReadStats { read_calls: 1, pages: plan.pages, bytes: e.len as u64, cached: 0 };
                SliceBatch { bytes: BatchBytes::Owned(bytes), spans: vec![(0, e.len)], stats }
            }
            Backing::Positioned(file) => {
                // The plan's runs: ranges on shared or adjacent pages are one pread (a group's
                // run of records is read in a few large reads, not one per record).
                let mut bytes = vec![0u8; plan.buf_len];
                let mut read = 0u64;
                for run in &plan.runs {
                    let len = run.len.min((self.file.len - run.file_offset) as usize);
                    file.read_exact_at(&mut bytes[run.buf_offset..run.buf_offset + len], run.file_offset)
                        .at(path)?;
                    read += len as u64;
                }
                let stats = ReadStats {
                    read_calls: plan.runs.len() as u64,
                    pages: plan.pages,
                    bytes: read,
                    cached: 0,
                };
                SliceBatch { bytes: BatchBytes::Owned(bytes), spans: plan.spans, stats }
            }
        })
    }

    /// Tells the kernel that bytes `range` of this slice will be read soon, so it reads them
    /// ahead while the caller works on what it has (positioned reads: `POSIX_FADV_WILLNEED`;
    /// mmap: `MADV_WILLNEED`; in pieces of [`WILLNEED_BYTES`]). A hint: nothing for ram and
    /// direct (which bypass the page cache), and a declined hint changes nothing but speed.
    pub fn will_need(&self, range: Range<u64>) -> Result<()> {
        self.check(range.start, range.end.saturating_sub(range.start), range.start <= range.end)?;
        let (offset, len) = (self.start + range.start, range.end - range.start);
        match &self.file.backing {
            Backing::Positioned(file) => {
                use std::os::unix::io::AsRawFd;
                will_need_in_pieces(offset, len, &mut |at, n| {
                    // SAFETY: an advisory call on a descriptor this slice holds open; it reads
                    // no memory of ours, and its failure only loses the read-ahead.
                    unsafe {
                        libc::posix_fadvise(
                            file.as_raw_fd(),
                            at as libc::off_t,
                            n as libc::off_t,
                            libc::POSIX_FADV_WILLNEED,
                        );
                    }
                });
            }
            Backing::Mmap { map, .. } => {
                will_need_mapped(map, offset, len);
            }
            Backing::Ram(_) | Backing::Direct { .. } => {}
        }
        Ok(())
    }

    /// Unmaps from this process the pages of this slice it has mapped (mmap: `MADV_DONTNEED`;
    /// the other kinds map nothing), so that evicting the file from the page cache
    /// (`cache::evict_file`, which skips mapped pages) then leaves none of it in memory: how a
    /// benchmark makes the next read cold. Nothing is lost: the next touch faults the same bytes
    /// in again.
    pub fn release_mapped(&self) -> Result<()> {
        let Backing::Mmap { map, .. } = &self.file.backing else { return Ok(()) };
        let page = PAGE_BYTES as u64;
        let (from, to) = (self.start / page * page, (self.start + self.len).div_ceil(page) * page);
        let to = to.min(map.len() as u64);
        if to <= from {
            return Ok(());
        }
        // SAFETY: MADV_DONTNEED on a read-only shared mapping of an immutable file only drops
        // this process's page-table entries; a later access faults the same bytes in again, so
        // every slice borrowed from the mapping stays valid and unchanged.
        unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, from as usize, (to - from) as usize) }
            .at(&self.file.path)
    }

    /// `len` bytes at `offset` of this slice lie inside it (and `ordered`: the range does not
    /// end before it starts); else an error naming the file and the absolute offset.
    fn check(&self, offset: u64, len: u64, ordered: bool) -> Result<()> {
        if ordered && offset.checked_add(len).is_some_and(|end| end <= self.len) {
            return Ok(());
        }
        let whole = self.start == 0 && self.len == self.file.len;
        let within = if whole {
            format!("the file ({} bytes)", self.file.len)
        } else {
            format!("the slice of bytes {}..{} of the file", self.start, self.start + self.len)
        };
        let detail = if ordered {
            format!("a range of {len} bytes runs past the end of {within}")
        } else {
            format!("a range that ends before it starts, in {within}")
        };
        Err(CellarError::corrupted(&self.file.path, self.start.saturating_add(offset), detail))
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::io::IoEngine;

    /// 13 pages and a half of bytes that differ from page to page and within one.
    fn data_file(dir: &Path, pages_and_a_half: bool) -> (PathBuf, Vec<u8>) {
        let len = 13 * PAGE_BYTES + if pages_and_a_half { PAGE_BYTES / 2 } else { 0 };
        let data: Vec<u8> = (0..len as u32).map(|i| ((i.wrapping_mul(7) % 251) ^ (i >> 12)) as u8).collect();
        let path = dir.join("data.bin");
        std::fs::write(&path, &data).unwrap();
        (path, data)
    }

    /// Every way of reading: ram, mmap (with and without `MADV_WILLNEED`), direct
    /// through io_uring (where the kernel allows it) and the pread pool, with an emulated latency
    /// on one of them.
    fn every_reader(path: &Path) -> Vec<(String, FileSlice)> {
        let mut readers = Vec::new();
        let mut options: Vec<ReaderOptions> = ReaderKind::ALL.into_iter().map(ReaderOptions::new).collect();
        options.push(ReaderOptions { mmap_willneed: false, ..ReaderOptions::new(ReaderKind::Mmap) });
        options.push(ReaderOptions {
            io_engine: IoEngine::Pread,
            inject_latency: Some(super::super::InjectedLatency {
                per_read: std::time::Duration::from_micros(1),
                max_in_flight: 2,
            }),
            ..ReaderOptions::new(ReaderKind::Direct)
        });
        for o in &options {
            match FileSlice::open(path, o) {
                Ok(slice) => readers.push((format!("{:?}/{}", o.kind, slice.engine()), slice)),
                // A file system without O_DIRECT: the direct kind cannot be checked here.
                Err(CellarError::Unsupported(e)) if o.kind == ReaderKind::Direct => eprintln!("skipped: {e}"),
                Err(e) => panic!("{o:?}: {e}"),
            }
        }
        let file = File::open(path).unwrap();
        readers.push(("positioned".into(), FileSlice::positioned(file, path).unwrap()));
        readers
    }

    #[test]
    fn every_kind_reads_the_same_bytes_as_std_fs_read_at_random_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = data_file(dir.path(), false);
        let reference = std::fs::read(&path).unwrap();
        let len = reference.len() as u64;
        let mut rng = rand::rngs::StdRng::seed_from_u64(46);
        // Unaligned starts and ends, ranges inside one page, across one boundary and across many.
        let mut ranges: Vec<Range<u64>> =
            vec![0..1, 4095..4097, 0..len, len - 1..len, 8192..8192, 4096..12_288];
        for _ in 0..200 {
            let start = rng.gen_range(0..len);
            let span = [rng.gen_range(0..64), rng.gen_range(0..3 * PAGE_BYTES as u64)][rng.gen_range(0..2)];
            ranges.push(start..(start + span).min(len));
        }
        let readers = every_reader(&path);
        for (name, slice) in &readers {
            assert_eq!(slice.len(), len, "{name}");
            for r in &ranges {
                let got = slice.read_bytes(r.clone()).unwrap();
                assert_eq!(&*got, &reference[r.start as usize..r.end as usize], "{name} {r:?}");
                if !r.is_empty() {
                    let borrowed = matches!(slice.kind(), ReaderKind::Ram | ReaderKind::Mmap);
                    assert_eq!(got.is_borrowed(), borrowed, "{name} {r:?}");
                }
            }
            // The same ranges in one batch, in the order asked for.
            let extents: Vec<Extent> =
                ranges.iter().map(|r| Extent { offset: r.start, len: (r.end - r.start) as usize }).collect();
            let batch = slice.read_batch(&extents).unwrap();
            assert_eq!(batch.len(), ranges.len());
            for (i, r) in ranges.iter().enumerate() {
                assert_eq!(batch.get(i), &reference[r.start as usize..r.end as usize], "{name} batch {r:?}");
            }
        }
    }

    #[test]
    fn a_slice_of_a_slice_reads_its_own_bytes_and_shares_the_open_file() {
        let dir = tempfile::tempdir().unwrap();
        let (path, reference) = data_file(dir.path(), false);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for (name, whole) in every_reader(&path) {
            for _ in 0..40 {
                let start = rng.gen_range(0..reference.len() as u64);
                let end = rng.gen_range(start..=reference.len() as u64);
                let outer = whole.slice(start..end).unwrap();
                assert_eq!(outer.len(), end - start, "{name}");
                let a = rng.gen_range(0..=outer.len());
                let b = rng.gen_range(a..=outer.len());
                let inner = outer.slice(a..b).unwrap();
                let want = &reference[(start + a) as usize..(start + b) as usize];
                assert_eq!(&*inner.read_bytes(0..inner.len()).unwrap(), want, "{name} {start}+{a}..{b}");
                assert_eq!(inner.path(), whole.path());
            }
        }
    }

    #[test]
    fn released_mapped_pages_leave_the_page_cache_with_an_eviction_and_read_the_same_again() {
        use crate::io::cache::{evict_file, resident_pages};
        let dir = tempfile::tempdir().unwrap();
        let (path, reference) = data_file(dir.path(), false);
        File::open(&path).unwrap().sync_all().unwrap();
        // A file system that keeps evicted pages (tmpfs) leaves nothing to check.
        std::fs::read(&path).unwrap();
        evict_file(&path).unwrap();
        if resident_pages(&path).unwrap().0 != 0 {
            return;
        }
        let whole = FileSlice::open(&path, &ReaderOptions::new(ReaderKind::Mmap)).unwrap();
        let part = whole.slice(5000..30_000).unwrap();
        let want = &reference[5000..30_000];
        assert_eq!(&*part.read_bytes(0..part.len()).unwrap(), want);
        evict_file(&path).unwrap();
        let (kept, _) = resident_pages(&path).unwrap();
        assert!(kept >= 6, "an eviction skips mapped pages: {kept} kept");
        part.release_mapped().unwrap();
        evict_file(&path).unwrap();
        assert_eq!(resident_pages(&path).unwrap().0, 0, "released, then evicted");
        assert_eq!(&*part.read_bytes(0..part.len()).unwrap(), want, "read again from the file");
        // Kinds that map nothing have nothing to release.
        for (name, slice) in every_reader(&path).into_iter().filter(|(_, s)| s.kind() != ReaderKind::Mmap) {
            slice.slice(5000..30_000).unwrap().release_mapped().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    /// A range longer than any device's read-ahead window (24 MiB; 8 MiB here, 128 KiB by
    /// default) is read in whole, mapped or positioned: one call would read its first window.
    #[test]
    fn will_need_reads_all_of_a_long_range_into_the_page_cache() {
        use crate::io::cache::{evict_file, resident_pages};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.bin");
        std::fs::write(&path, vec![7u8; 24 << 20]).unwrap();
        File::open(&path).unwrap().sync_all().unwrap();
        evict_file(&path).unwrap();
        if resident_pages(&path).unwrap().0 != 0 {
            return; // a file system that keeps evicted pages (tmpfs): nothing to check
        }
        let mmap = FileSlice::open(&path, &ReaderOptions::new(ReaderKind::Mmap)).unwrap();
        let positioned = FileSlice::positioned(File::open(&path).unwrap(), &path).unwrap();
        for (name, slice) in [("mmap", mmap), ("positioned", positioned)] {
            evict_file(&path).unwrap();
            slice.will_need(4096..slice.len()).unwrap();
            // The reads are the kernel's, in the background: waited for, at most 10 s.
            let (mut resident, start) = (0, std::time::Instant::now());
            while start.elapsed().as_secs() < 10 {
                resident = resident_pages(&path).unwrap().0;
                if resident >= (24 << 20) / 4096 - 1 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(resident >= (24 << 20) / 4096 - 1, "{name}: {resident} pages of 6144 read");
        }
    }

    #[test]
    fn stats_count_what_each_kind_reads() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = data_file(dir.path(), false);
        // Two ranges on page 0, one across pages 2 and 3: two runs of 1 and 2 pages.
        let extents = [
            Extent { offset: 10, len: 20 },
            Extent { offset: 100, len: 5 },
            Extent { offset: 12_000, len: 300 },
        ];
        for (name, slice) in every_reader(&path) {
            let stats = slice.read_batch(&extents).unwrap().stats();
            let want = match (slice.kind(), slice.engine()) {
                (ReaderKind::Ram, _) => ReadStats { read_calls: 0, pages: 3, bytes: 325, cached: 0 },
                (ReaderKind::Mmap, "page-faults") => {
                    ReadStats { read_calls: 0, pages: 3, bytes: 3 * 4096, cached: 0 }
                }
                // The one-page run is left to its fault: one hint, for the two-page run.
                (ReaderKind::Mmap, _) => ReadStats { read_calls: 1, pages: 3, bytes: 3 * 4096, cached: 0 },
                (ReaderKind::Direct | ReaderKind::Pread, _) => {
                    ReadStats { read_calls: 2, pages: 3, bytes: 3 * 4096, cached: 0 }
                }
            };
            assert_eq!(stats, want, "{name}");
            // One range read alone costs what a batch of it costs (positioned reads take a path
            // of their own), from a slice that starts inside a page too.
            let part = slice.slice(100..20_000).unwrap();
            for r in [0..1, 10..20, 3996..3997, 3990..4100, 11_900..12_300, 0..19_900] {
                let alone = part.read_bytes(r.clone()).unwrap().stats();
                let extent = Extent { offset: r.start, len: (r.end - r.start) as usize };
                assert_eq!(alone, part.read_batch(&[extent]).unwrap().stats(), "{name} {r:?}");
            }
        }
    }

    #[test]
    fn a_range_past_the_end_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = data_file(dir.path(), false);
        let len = std::fs::metadata(&path).unwrap().len();
        for (name, whole) in every_reader(&path) {
            let part = whole.slice(4000..9000).unwrap();
            let errors = [
                whole.slice(0..len + 1).err(),
                whole.slice(Range { start: 10, end: 5 }).err(),
                part.slice(0..5001).err(),
                part.read_bytes(4999..5001).err(),
                whole.read_batch(&[Extent { offset: 0, len: 1 }, Extent { offset: len - 1, len: 2 }]).err(),
                whole.read_bytes(len..len + 1).err(),
                part.will_need(4999..5001).err(),
            ];
            for (i, err) in errors.into_iter().enumerate() {
                let err = err.unwrap_or_else(|| panic!("{name}: case {i} was read"));
                assert!(matches!(err, CellarError::Corrupted { .. }), "{name} case {i}: {err}");
                assert!(err.to_string().contains(&path.display().to_string()), "{name} case {i}: {err}");
            }
            assert!(part.slice(0..5000).is_ok() && part.read_bytes(5000..5000).is_ok(), "{name}");
            // A hint inside the slice is taken, and changes nothing a read returns.
            part.will_need(0..5000).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                &*part.read_bytes(100..4100).unwrap(),
                &*whole.read_bytes(4100..8100).unwrap(),
                "{name}"
            );
        }
    }

    #[test]
    fn direct_refuses_a_file_of_a_partial_page_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = data_file(dir.path(), true);
        let err = FileSlice::open(&path, &ReaderOptions::new(ReaderKind::Direct)).err().unwrap();
        assert!(matches!(err, CellarError::Corrupted { .. }), "{err}");
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    }
}
