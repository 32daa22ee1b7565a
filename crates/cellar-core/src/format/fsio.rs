//! File-system calls that name their path in every error, and atomic writes.
//!
//! Atomic write protocol: write `NAME.cellar-tmp`, fsync it, rename it over `NAME`, fsync the
//! directory. A crash leaves either the old file, the new file, or a stray temp file that the next
//! build removes — never a torn `NAME`.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::header::{FileHeader, HEADER_BYTES};
use super::FileKind;
use crate::error::{CellarError, IoContext, Result};
use crate::failpoint::{self, FailPoint};

pub const TMP_SUFFIX: &str = ".cellar-tmp";

fn tmp_path_for(final_path: &Path) -> PathBuf {
    let mut name = final_path.as_os_str().to_owned();
    name.push(TMP_SUFFIX);
    PathBuf::from(name)
}

/// Fsyncs a directory so a rename inside it is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// Writes `bytes` to `path` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path_for(path);
    let mut file = File::create(&tmp).at(&tmp)?;
    failpoint::check(FailPoint::FileWrite, path).at(&tmp)?;
    file.write_all(bytes).at(&tmp)?;
    file.sync_all().at(&tmp)?;
    drop(file);
    std::fs::rename(&tmp, path).at(path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Streams the body of one binary file under a temporary name, keeping a running checksum; the
/// header is written last, at offset 0, by [`BodyWriter::finish`], which then commits atomically.
pub struct BodyWriter {
    final_path: PathBuf,
    tmp_path: PathBuf,
    out: BufWriter<File>,
    kind: FileKind,
    body_offset: u64,
    body_len: u64,
    body_crc32c: u32,
    committed: bool,
}

impl BodyWriter {
    /// `body_offset` >= 64: 64 for plain files, 4096 for page-aligned bodies.
    pub fn create(final_path: &Path, kind: FileKind, body_offset: u64) -> Result<Self> {
        assert!(body_offset >= HEADER_BYTES as u64);
        let tmp_path = tmp_path_for(final_path);
        let file = File::create(&tmp_path).at(&tmp_path)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        // Placeholder header and padding; the real header overwrites bytes 0..64 at finish.
        out.write_all(&vec![0u8; body_offset as usize]).at(&tmp_path)?;
        Ok(BodyWriter {
            final_path: final_path.to_path_buf(),
            tmp_path,
            out,
            kind,
            body_offset,
            body_len: 0,
            body_crc32c: 0,
            committed: false,
        })
    }

    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        failpoint::check(FailPoint::FileWrite, &self.final_path).at(&self.tmp_path)?;
        self.out.write_all(bytes).at(&self.tmp_path)?;
        self.body_crc32c = crc32c::crc32c_append(self.body_crc32c, bytes);
        self.body_len += bytes.len() as u64;
        Ok(())
    }

    /// Absolute file offset the next body byte will land at.
    pub fn position(&self) -> u64 {
        self.body_offset + self.body_len
    }

    /// Writes the header, fsyncs, renames into place and fsyncs the directory.
    pub fn finish(mut self) -> Result<FileHeader> {
        let header = FileHeader::new(self.kind, self.body_offset, self.body_len, self.body_crc32c);
        failpoint::check(FailPoint::FileWrite, &self.final_path).at(&self.tmp_path)?;
        self.out.flush().at(&self.tmp_path)?;
        let file = self.out.get_mut();
        file.seek(SeekFrom::Start(0)).at(&self.tmp_path)?;
        file.write_all(&header.encode()).at(&self.tmp_path)?;
        file.sync_all().at(&self.tmp_path)?;
        std::fs::rename(&self.tmp_path, &self.final_path).at(&self.final_path)?;
        sync_dir(self.final_path.parent().unwrap_or(Path::new(".")))?;
        self.committed = true;
        Ok(header)
    }
}

impl Drop for BodyWriter {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp_path);
        }
    }
}

/// Writes a small binary file (header at 0, body at 64) atomically.
pub fn write_small_file(path: &Path, kind: FileKind, body: &[u8]) -> Result<FileHeader> {
    let mut writer = BodyWriter::create(path, kind, HEADER_BYTES as u64)?;
    writer.write(body)?;
    writer.finish()
}

/// Opens `path` and validates its header as `kind`.
pub fn open_checked(path: &Path, kind: FileKind) -> Result<(File, FileHeader)> {
    let file = File::open(path).at(path)?;
    let file_len = file.metadata().at(path)?.len();
    let mut head = vec![0u8; HEADER_BYTES.min(file_len as usize)];
    file.read_exact_at(&mut head, 0).at(path)?;
    let header = FileHeader::decode(&head, path, kind, file_len)?;
    check_zero_gap(&file, path, &header)?;
    Ok((file, header))
}

/// The bytes between the header and a page-aligned body are not covered by either checksum,
/// so they must be zero.
fn check_zero_gap(file: &File, path: &Path, header: &FileHeader) -> Result<()> {
    let mut gap = vec![0u8; header.body_offset as usize - HEADER_BYTES];
    file.read_exact_at(&mut gap, HEADER_BYTES as u64).at(path)?;
    match gap.iter().position(|b| *b != 0) {
        None => Ok(()),
        Some(i) => Err(CellarError::corrupted(
            path,
            (HEADER_BYTES + i) as u64,
            "non-zero byte in the padding between header and body",
        )),
    }
}

/// Reads a whole small binary file, validating header and body checksum.
pub fn read_small_file(path: &Path, kind: FileKind) -> Result<(FileHeader, Vec<u8>)> {
    let (mut file, header) = open_checked(path, kind)?;
    let mut body = Vec::with_capacity(header.body_len as usize);
    file.seek(SeekFrom::Start(header.body_offset)).at(path)?;
    file.read_to_end(&mut body).at(path)?;
    header.check_body_crc(path, crc32c::crc32c(&body))?;
    Ok((header, body))
}

/// Streams the body of an open file through CRC-32C and checks it against the header.
pub fn verify_body(file: &File, path: &Path, header: &FileHeader) -> Result<()> {
    let mut crc = 0u32;
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = header.body_offset;
    let end = header.body_offset + header.body_len;
    while offset < end {
        let n = ((end - offset) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], offset).at(path)?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        offset += n as u64;
    }
    header.check_body_crc(path, crc)
}

/// Opens for reading with extra flags (e.g. O_DIRECT), naming the path in errors.
pub fn open_with_flags(path: &Path, flags: i32) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new().read(true).custom_flags(flags).open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => CellarError::Unsupported(format!(
            "{}: the file system refuses O_DIRECT (EINVAL); use the mmap or ram reader",
            path.display()
        )),
        _ => CellarError::io(path, e),
    })
}

/// The lock file of a directory held by [`DirLock`].
pub const LOCK_FILE: &str = "LOCK";

/// An advisory lock on a directory (`flock` on `dir/LOCK`), held while this value lives: one
/// exclusive holder (a writer), or any number of shared ones (readers), never both. The kernel
/// drops it when the process dies, so a crash leaves nothing to clean up; an opener the lock
/// refuses, in this process or another, gets [`CellarError::Locked`] naming the directory (and,
/// for an exclusive holder, its pid).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the exclusive lock of `dir` (which must exist) for `what` ("streaming collection",
    /// "index"), without waiting: refused while anyone else holds it, shared or exclusive.
    pub fn exclusive(dir: &Path, what: &str) -> Result<DirLock> {
        let path = dir.join(LOCK_FILE);
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).at(&path)?;
        if !flock(&file, libc::LOCK_EX).at(&path)? {
            let detail = if flock(&file, libc::LOCK_SH).at(&path)? {
                format!("this {what} is open for reading elsewhere; close it there first")
            } else {
                let by = holder(&mut file);
                format!(
                    "this {what} is open elsewhere{by}; one writer at a time: close it there, or go through the process that holds it"
                )
            };
            return Err(CellarError::Locked { path: dir.to_path_buf(), detail });
        }
        // Who holds it, for the next opener's message; best effort (a full disk refuses it, and
        // the lock is the flock, not these bytes).
        let me = format!("pid {}\n", std::process::id());
        let _ = file.set_len(0).and_then(|()| file.write_all_at(me.as_bytes(), 0));
        Ok(DirLock { _file: file })
    }

    /// Takes a shared lock of `dir` (which must exist) for `what`, without waiting: refused only
    /// while a writer holds it exclusively. Where the lock file can be neither created nor
    /// opened for writing (a read-only directory), an existing one is opened read-only, which
    /// `flock` takes as well.
    pub fn shared(dir: &Path, what: &str) -> Result<DirLock> {
        let path = dir.join(LOCK_FILE);
        let opened = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
        let mut file = match opened {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EROFS | libc::EPERM)) => {
                File::open(&path).at(&path)?
            }
            other => other.at(&path)?,
        };
        if !flock(&file, libc::LOCK_SH).at(&path)? {
            let by = holder(&mut file);
            return Err(CellarError::Locked {
                path: dir.to_path_buf(),
                detail: format!("this {what} is being written elsewhere{by}; open it once that has finished"),
            });
        }
        Ok(DirLock { _file: file })
    }
}

/// `flock(operation | LOCK_NB)`: `Ok(false)` when another holder refuses it.
fn flock(file: &File, operation: i32) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor the caller owns; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(error),
    }
}

/// " (held by pid N)" as the exclusive holder wrote it in the lock file, or nothing.
fn holder(file: &mut File) -> String {
    let mut holder = String::new();
    let _ = file.read_to_string(&mut holder);
    let holder = holder.trim();
    if holder.is_empty() {
        String::new()
    } else {
        format!(" (held by {holder})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: Result<DirLock>) -> String {
        match result {
            Err(CellarError::Locked { detail, .. }) => detail,
            other => panic!("expected Locked, got {other:?}"),
        }
    }

    #[test]
    fn readers_share_the_lock_and_a_writer_excludes_them_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::shared(dir.path(), "index").unwrap();
        let second = DirLock::shared(dir.path(), "index").unwrap();
        let detail = refused(DirLock::exclusive(dir.path(), "index"));
        assert!(detail.contains("index is open for reading elsewhere"), "{detail}");
        drop((first, second));
        let writer = DirLock::exclusive(dir.path(), "index").unwrap();
        let detail = refused(DirLock::shared(dir.path(), "index"));
        let pid = format!("being written elsewhere (held by pid {})", std::process::id());
        assert!(detail.contains(&pid), "{detail}");
        let detail = refused(DirLock::exclusive(dir.path(), "index"));
        assert!(detail.contains("open elsewhere (held by pid"), "{detail}");
        drop(writer);
        // The pid a writer left behind is not blamed on the readers that came after it.
        let _reader = DirLock::shared(dir.path(), "index").unwrap();
        let detail = refused(DirLock::exclusive(dir.path(), "index"));
        assert!(!detail.contains("pid"), "{detail}");
    }
}
