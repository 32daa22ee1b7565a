//! Immutable segment files: entries sorted by (group, id), each group one page-aligned,
//! checksummed extent, and a group directory (the only part kept in RAM).
//!
//! ```text
//! page 0  header: magic "CELLAR-G" | version u32 | dim u32 | n_groups u64 | n_entries u64
//!         | min_seq u64 | max_seq u64 | dir_offset u64 | dir_len u64 | dir_crc32c u32
//!         | header_crc32c u32 (CRC-32C of the 68 bytes before it); rest of the page zero
//!         ([`SEGMENT_HEADER_FIELDS`]: what encoding, decoding and `docs/format/stream.md` follow)
//! extents one per group, each starting on a 4 KiB boundary: the group's entries (doc.rs)
//!         sorted by id, zero padding after
//! dir     per group, sorted: group_len u16 | group | offset u64 | len u64 | count u32
//!         | crc u32 (CRC-32C of the extent's bytes)
//! ```
//! Written under a temporary name, fsynced, renamed, directory fsynced: a crash leaves no torn
//! segment, only a stray temporary or an orphan the manifest does not list (both removed on open).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use cellar_core::failpoint::{self, FailPoint};
use cellar_core::format::fsio::sync_dir;
use cellar_core::format::VersionRange;
use cellar_core::io::{FileSlice, SliceBytes};
use cellar_core::{CellarError, IoContext, Result};

use crate::doc::entry_len;

pub const SEGMENT_MAGIC: [u8; 8] = *b"CELLAR-G";
pub const SEGMENT_VERSION: u32 = 1;
/// The segment versions this build reads.
pub const SEGMENT_READABLE_VERSIONS: VersionRange = VersionRange::only(SEGMENT_VERSION);
pub const PAGE: u64 = 4096;
/// (name, offset, size) of every field of a segment's header, in order. The magic and the
/// version keep their place in every version; the rest is the version's own.
pub const SEGMENT_HEADER_FIELDS: [(&str, usize, usize); 11] = [
    ("magic", 0, 8),
    ("version", 8, 4),
    ("dim", 12, 4),
    ("n_groups", 16, 8),
    ("n_entries", 24, 8),
    ("min_seq", 32, 8),
    ("max_seq", 40, 8),
    ("dir_offset", 48, 8),
    ("dir_len", 56, 8),
    ("dir_crc32c", 64, 4),
    ("header_crc32c", 68, 4),
];
/// Bytes of page 0 the header uses: up to the end of its last field.
const HEADER_USED: usize = {
    let (_, offset, size) = SEGMENT_HEADER_FIELDS[SEGMENT_HEADER_FIELDS.len() - 1];
    offset + size
};

/// Where header field `name` starts.
pub fn header_field(name: &str) -> usize {
    SEGMENT_HEADER_FIELDS.iter().find(|f| f.0 == name).expect("segment header field name").1
}
/// Bytes a query reads at once from a group's extent.
pub const CHUNK_BYTES: usize = 4 << 20;

/// Where one group's entries lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub offset: u64,
    pub len: u64,
    pub count: u32,
    pub crc: u32,
}

/// Streams a segment to disk, one group after another in sorted order.
pub struct SegmentWriter {
    path: PathBuf,
    tmp: PathBuf,
    out: BufWriter<File>,
    pos: u64,
    dim: usize,
    dir: Vec<(String, Extent)>,
    open: Option<(String, Extent)>,
    entries: u64,
    seq_range: (u64, u64),
    committed: bool,
}

impl SegmentWriter {
    pub fn create(path: &Path, dim: usize) -> Result<SegmentWriter> {
        let tmp = path.with_extension("seg.tmp");
        let file = File::create(&tmp).at(&tmp)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&[0u8; PAGE as usize]).at(&tmp)?;
        Ok(SegmentWriter {
            path: path.to_path_buf(),
            tmp,
            out,
            pos: PAGE,
            dim,
            dir: Vec::new(),
            open: None,
            entries: 0,
            seq_range: (u64::MAX, 0),
            committed: false,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        failpoint::check(FailPoint::FileWrite, &self.path).at(&self.tmp)?;
        self.out.write_all(bytes).at(&self.tmp)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Starts `group`'s extent on the next page; groups must come in sorted order.
    pub fn begin_group(&mut self, group: &str) -> Result<()> {
        self.end_group();
        let pad = (PAGE - self.pos % PAGE) % PAGE;
        self.write(&vec![0u8; pad as usize])?;
        self.open = Some((group.to_string(), Extent { offset: self.pos, len: 0, count: 0, crc: 0 }));
        Ok(())
    }

    /// Appends one entry (with its seq) to the open group.
    pub fn push(&mut self, entry: &[u8], seq: u64) -> Result<()> {
        self.write(entry)?;
        let (_, extent) = self.open.as_mut().expect("push inside a group");
        extent.len += entry.len() as u64;
        extent.count += 1;
        extent.crc = crc32c::crc32c_append(extent.crc, entry);
        self.entries += 1;
        self.seq_range = (self.seq_range.0.min(seq), self.seq_range.1.max(seq));
        Ok(())
    }

    fn end_group(&mut self) {
        if let Some(done) = self.open.take() {
            if done.1.count > 0 {
                self.dir.push(done);
            }
        }
    }

    /// Writes the directory and header, syncs, renames into place; returns the opened segment.
    pub fn finish(mut self) -> Result<Segment> {
        self.end_group();
        let dir_offset = self.pos;
        let dir = encode_dir(&self.dir);
        self.write(&dir)?;
        let header = self.header(dir_offset, &dir);
        self.out.flush().at(&self.tmp)?;
        let file = self.out.get_ref();
        file.write_all_at(&header, 0).at(&self.tmp)?;
        file.sync_all().at(&self.tmp)?;
        std::fs::rename(&self.tmp, &self.path).at(&self.path)?;
        self.committed = true;
        sync_dir(self.path.parent().unwrap_or(Path::new(".")))?;
        Segment::open(&self.path)
    }

    fn header(&self, dir_offset: u64, dir: &[u8]) -> [u8; HEADER_USED] {
        let mut h = [0u8; HEADER_USED];
        let mut put = |name: &str, bytes: &[u8]| {
            let at = header_field(name);
            h[at..at + bytes.len()].copy_from_slice(bytes);
        };
        let (min, max) = if self.entries == 0 { (0, 0) } else { self.seq_range };
        put("magic", &SEGMENT_MAGIC);
        put("version", &SEGMENT_VERSION.to_le_bytes());
        put("dim", &(self.dim as u32).to_le_bytes());
        put("n_groups", &(self.dir.len() as u64).to_le_bytes());
        put("n_entries", &self.entries.to_le_bytes());
        put("min_seq", &min.to_le_bytes());
        put("max_seq", &max.to_le_bytes());
        put("dir_offset", &dir_offset.to_le_bytes());
        put("dir_len", &(dir.len() as u64).to_le_bytes());
        put("dir_crc32c", &crc32c::crc32c(dir).to_le_bytes());
        let crc_at = header_field("header_crc32c");
        let crc = crc32c::crc32c(&h[..crc_at]);
        h[crc_at..].copy_from_slice(&crc.to_le_bytes());
        h
    }
}

impl Drop for SegmentWriter {
    /// An unfinished writer leaves no temporary behind (best effort; open also sweeps them).
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn encode_dir(dir: &[(String, Extent)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (group, e) in dir {
        out.extend_from_slice(&(group.len() as u16).to_le_bytes());
        out.extend_from_slice(group.as_bytes());
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.len.to_le_bytes());
        out.extend_from_slice(&e.count.to_le_bytes());
        out.extend_from_slice(&e.crc.to_le_bytes());
    }
    out
}

/// An open segment: its file (read with positioned reads through the page cache, as every
/// file of an index is read: `cellar_core::io::FileSlice`) and group directory.
pub struct Segment {
    pub path: PathBuf,
    file: FileSlice,
    pub dim: usize,
    pub entries: u64,
    pub min_seq: u64,
    pub max_seq: u64,
    dir: HashMap<Box<str>, Extent>,
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Segment {
    /// Opens a segment, checking its version, then its header and directory checksums. The
    /// version comes right after the magic and is checked first: a segment from a newer Cellar is
    /// `Incompatible` whatever the rest of its header looks like.
    pub fn open(path: &Path) -> Result<Segment> {
        let file = FileSlice::positioned(File::open(path).at(path)?, path)?;
        let len = file.len();
        let mut h = [0u8; HEADER_USED];
        let head = len.min(HEADER_USED as u64) as usize;
        h[..head].copy_from_slice(&file.read_bytes(0..head as u64)?);
        let version_at = header_field("version");
        if head < version_at + 4 || h[..version_at] != SEGMENT_MAGIC {
            return Err(CellarError::corrupted(path, 0, "not a Cellar segment (bad magic)"));
        }
        SEGMENT_READABLE_VERSIONS.check(path, le_u32(&h, version_at))?;
        if len < PAGE {
            return Err(CellarError::corrupted(path, 0, "shorter than its header page"));
        }
        let crc_at = header_field("header_crc32c");
        if le_u32(&h, crc_at) != crc32c::crc32c(&h[..crc_at]) {
            return Err(CellarError::corrupted(path, crc_at as u64, "header checksum mismatch"));
        }
        let dir_at = header_field("dir_offset");
        let (dir_offset, dir_len) = (le_u64(&h, dir_at), le_u64(&h, header_field("dir_len")));
        if dir_offset.checked_add(dir_len) != Some(len) {
            return Err(CellarError::corrupted(path, dir_at as u64, "directory does not end the file"));
        }
        let dir = file.read_bytes(dir_offset..len)?;
        if crc32c::crc32c(&dir) != le_u32(&h, header_field("dir_crc32c")) {
            return Err(CellarError::corrupted(path, dir_offset, "group directory checksum mismatch"));
        }
        let dir = decode_dir(&dir, dir_offset).map_err(|(at, d)| CellarError::corrupted(path, at, d))?;
        Ok(Segment {
            path: path.to_path_buf(),
            file,
            dim: le_u32(&h, header_field("dim")) as usize,
            entries: le_u64(&h, header_field("n_entries")),
            min_seq: le_u64(&h, header_field("min_seq")),
            max_seq: le_u64(&h, header_field("max_seq")),
            dir,
        })
    }

    pub fn extent(&self, group: &str) -> Option<Extent> {
        self.dir.get(group).copied()
    }

    pub fn groups(&self) -> impl Iterator<Item = &str> {
        self.dir.keys().map(|g| &**g)
    }

    pub fn n_groups(&self) -> usize {
        self.dir.len()
    }

    /// Heap bytes of the group directory (table slots plus key bytes).
    pub fn ram_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(Box<str>, Extent)>() + 1;
        self.dir.capacity() * slot + self.dir.keys().map(|g| g.len()).sum::<usize>()
    }

    /// A cursor over `group`'s entries, reading at most `chunk` bytes at a time.
    pub fn cursor(&self, group: &str, chunk: usize) -> Option<ExtentCursor<'_>> {
        let extent = self.extent(group)?;
        Some(ExtentCursor::new(self, extent, chunk))
    }
}

fn decode_dir(bytes: &[u8], base: u64) -> std::result::Result<HashMap<Box<str>, Extent>, (u64, String)> {
    let mut dir = HashMap::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let bad = |detail: &str| (base + at as u64, detail.to_string());
        let group_len =
            u16::from_le_bytes(bytes.get(at..at + 2).ok_or_else(|| bad("cut short"))?.try_into().expect("2"))
                as usize;
        let end = at + 2 + group_len + 24;
        let rec = bytes.get(at + 2..end).ok_or_else(|| bad("cut short"))?;
        let group = std::str::from_utf8(&rec[..group_len]).map_err(|_| bad("group is not UTF-8"))?;
        let f = &rec[group_len..];
        let extent =
            Extent { offset: le_u64(f, 0), len: le_u64(f, 8), count: le_u32(f, 16), crc: le_u32(f, 20) };
        if extent.offset.checked_add(extent.len).is_none_or(|e| e > base) {
            return Err(bad("extent beyond the directory"));
        }
        dir.insert(group.into(), extent);
        at = end;
    }
    Ok(dir)
}

/// Reads one group's extent in bounded chunks and yields its entries in order; checks the
/// extent's checksum once the last byte has been read.
pub struct ExtentCursor<'a> {
    segment: &'a Segment,
    extent: Extent,
    chunk: usize,
    /// Next file offset to read.
    next: u64,
    buf: Vec<u8>,
    pos: usize,
    crc: u32,
    /// The next chunk, being read while the current one is scored.
    pending: Option<ReadAhead>,
    pub bytes_read: u64,
    pub read_calls: u64,
}

/// A chunk read in the background, or already read.
enum ReadAhead {
    Thread(JoinHandle<Result<SliceBytes>>),
    Done(Result<SliceBytes>),
}

impl ReadAhead {
    fn join(self, path: &Path) -> Result<SliceBytes> {
        match self {
            ReadAhead::Thread(handle) => handle.join().unwrap_or_else(|_| {
                Err(CellarError::internal(format!("the read-ahead of {path:?} panicked")))
            }),
            ReadAhead::Done(result) => result,
        }
    }
}

impl<'a> ExtentCursor<'a> {
    fn new(segment: &'a Segment, extent: Extent, chunk: usize) -> Self {
        if extent.len > chunk as u64 {
            // Let the kernel read the rest of a large extent ahead while its first chunks are
            // scored. The directory placed the extent inside the file, so the range is valid.
            let _ = segment.file.will_need(extent.offset..extent.offset + extent.len);
        }
        ExtentCursor {
            segment,
            extent,
            chunk: chunk.max(PAGE as usize),
            next: extent.offset,
            buf: Vec::new(),
            pos: 0,
            crc: 0,
            pending: None,
            bytes_read: 0,
            read_calls: 0,
        }
    }

    fn end(&self) -> u64 {
        self.extent.offset + self.extent.len
    }

    /// Makes at least `need` unread bytes available in the buffer, if the extent has them.
    fn fill(&mut self, need: usize) -> Result<()> {
        let have = self.buf.len() - self.pos;
        if have >= need || (self.next >= self.end() && self.pending.is_none()) {
            return Ok(());
        }
        self.buf.drain(..self.pos);
        self.pos = 0;
        while self.buf.len() < need && (self.next < self.end() || self.pending.is_some()) {
            let read = match self.pending.take() {
                Some(read) => read,
                None => {
                    let n = (need - self.buf.len()).max(self.chunk) as u64;
                    self.start_read(n)
                }
            };
            let bytes = read.join(&self.segment.path)?;
            self.crc = crc32c::crc32c_append(self.crc, &bytes);
            self.bytes_read += bytes.stats().bytes;
            self.read_calls += bytes.stats().read_calls;
            self.buf.extend_from_slice(&bytes);
            if self.next < self.end() {
                // Double buffering: the next chunk is read while this one is scored.
                self.pending = Some(self.start_read(self.chunk as u64));
            }
        }
        if self.next == self.end() && self.pending.is_none() && self.crc != self.extent.crc {
            return Err(CellarError::corrupted(
                &self.segment.path,
                self.extent.offset,
                "group extent checksum mismatch",
            ));
        }
        Ok(())
    }

    /// Reads up to `n` bytes at `next` (on a thread of its own when more may follow).
    fn start_read(&mut self, n: u64) -> ReadAhead {
        let n = n.min(self.end() - self.next);
        let (file, at) = (self.segment.file.clone(), self.next);
        self.next += n;
        let read = move || file.read_bytes(at..at + n);
        if self.next < self.end() || self.pending.is_some() {
            ReadAhead::Thread(std::thread::spawn(read))
        } else {
            ReadAhead::Done(read())
        }
    }

    /// The next entry's bytes, or `None` at the end of the extent.
    pub fn next_entry(&mut self) -> Result<Option<&[u8]>> {
        self.fill(4)?;
        let rest = &self.buf[self.pos..];
        if rest.is_empty() {
            return Ok(None);
        }
        let offset = self.next - (self.buf.len() - self.pos) as u64;
        let len = entry_len(rest).filter(|&l| l >= 4).ok_or_else(|| {
            CellarError::corrupted(&self.segment.path, offset, "entry length cut short or zero")
        })?;
        self.fill(len)?;
        if self.buf.len() - self.pos < len {
            return Err(CellarError::corrupted(
                &self.segment.path,
                offset,
                "entry runs past its group extent",
            ));
        }
        let entry = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(Some(entry))
    }

    /// The segment's file (for error messages).
    pub fn path(&self) -> &'a Path {
        &self.segment.path
    }
}
