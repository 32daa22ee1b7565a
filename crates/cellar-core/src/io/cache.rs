//! Page-cache control: evict a file's cached pages so the next reads hit the disk (benchmarks),
//! and turn off read-ahead for a file read at random places.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::error::{CellarError, IoContext, Result};

/// Drops `path`'s clean pages from the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`).
pub fn evict_file(path: &Path) -> Result<()> {
    evict_range(&File::open(path).at(path)?, path, 0, 0)
}

/// Drops the clean pages of bytes `offset..offset + len` of `file` (opened from `path`) from the
/// page cache, those not mapped by any process (`posix_fadvise(POSIX_FADV_DONTNEED)` on the
/// range; pages only partly inside it stay).
pub fn evict_range(file: &File, path: &Path, offset: u64, len: u64) -> Result<()> {
    let too_far = |what: u64| CellarError::invalid(format!("{}: range {what} past i64", path.display()));
    let (offset, len) =
        (i64::try_from(offset).map_err(|_| too_far(offset))?, i64::try_from(len).map_err(|_| too_far(len))?);
    fadvise(file, path, offset, len, libc::POSIX_FADV_DONTNEED)
}

/// Tells the kernel that `file` (opened from `path`) is read at random places
/// (`POSIX_FADV_RANDOM`): a small positioned read brings in the pages it covers and no read-ahead
/// around them. For the word-embedding rows a query's tokens name, read-ahead filled the page
/// cache with their neighbours, which under a memory cap evicted what the server needed.
pub fn advise_random(file: &File, path: &Path) -> Result<()> {
    fadvise(file, path, 0, 0, libc::POSIX_FADV_RANDOM)
}

/// `posix_fadvise(advice)` on bytes `offset..offset + len` of `file` (0: to its end), an error
/// naming `path`.
fn fadvise(file: &File, path: &Path, offset: i64, len: i64, advice: libc::c_int) -> Result<()> {
    // SAFETY: plain syscall on a valid fd.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, advice) };
    if rc != 0 {
        return Err(CellarError::io(path, std::io::Error::from_raw_os_error(rc)));
    }
    Ok(())
}

/// How many of `path`'s pages are resident in the page cache right now (via mincore).
pub fn resident_pages(path: &Path) -> Result<(u64, u64)> {
    let file = File::open(path).at(path)?;
    let len = file.metadata().at(path)?.len() as usize;
    if len == 0 {
        return Ok((0, 0));
    }
    // SAFETY: read-only private mapping of a file we opened; unmapped before returning.
    let ptr = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0)
    };
    if ptr == libc::MAP_FAILED {
        return Err(CellarError::io(path, std::io::Error::last_os_error()));
    }
    let pages = len.div_ceil(4096);
    let mut vec = vec![0u8; pages];
    // SAFETY: ptr maps len bytes; vec has one byte per page.
    let rc = unsafe { libc::mincore(ptr, len, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: unmapping what we mapped.
    unsafe { libc::munmap(ptr, len) };
    if rc != 0 {
        return Err(CellarError::io(path, err));
    }
    Ok((vec.iter().filter(|b| **b & 1 == 1).count() as u64, pages as u64))
}
