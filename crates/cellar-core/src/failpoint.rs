//! Failpoints in the write paths (issue 16.4), in the manner of tantivy's `fail` crate: a test
//! arms one for the files under a directory, and the writes through it there fail with the
//! error a full disk gives (`ENOSPC`), so every write path's handling of a full disk can be
//! shown without filling one. Only files under the armed directory are touched, so tests that
//! run side by side in one process do not see each other's failures; disarmed on drop. With
//! nothing armed, a check is one relaxed atomic load.
//!
//! The points, each checked before the write it names:
//! - [`FailPoint::WalAppend`]: a batch appended to a write-ahead log (a write's durability);
//! - [`FailPoint::FileWrite`]: every other file Cellar writes (atomic small files, the bodies
//!   of binary files, segments of streams and of living indexes, manifests): flushes, merges,
//!   builds and IVF trainings all write through it;
//! - [`FailPoint::Bm25Commit`]: a living index's BM25 (tantivy) commit, after its documents
//!   were handed to tantivy (armed with [`arm_errno`], it can fail with `EMFILE` as well).
//!
//! tantivy's own files are also shown on a real full file system (the small tmpfs of
//! `cellar-cli/tests/full_disk.rs` and `cellar-search/tests/it/disk_full.rs`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailPoint {
    WalAppend,
    FileWrite,
    Bm25Commit,
}

struct Armed {
    id: usize,
    point: FailPoint,
    under: PathBuf,
    /// Writes let through before the failures start.
    pass: u64,
    failed: u64,
    /// The OS error the failures carry.
    errno: i32,
}

static ARMED: Mutex<Vec<Armed>> = Mutex::new(Vec::new());
static ARMED_COUNT: AtomicUsize = AtomicUsize::new(0);
static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// An armed failpoint; dropping it disarms it.
pub struct Guard {
    id: usize,
}

impl Guard {
    /// How many writes it has failed so far.
    pub fn failed(&self) -> u64 {
        armed().iter().find(|a| a.id == self.id).map_or(0, |a| a.failed)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut armed = armed();
        armed.retain(|a| a.id != self.id);
        ARMED_COUNT.store(armed.len(), Ordering::Release);
    }
}

fn armed() -> std::sync::MutexGuard<'static, Vec<Armed>> {
    ARMED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Makes `point` fail with `ENOSPC` for files under `under`, after letting `pass` writes
/// through, until the guard is dropped.
pub fn arm(point: FailPoint, under: &Path, pass: u64) -> Guard {
    arm_errno(point, under, pass, libc::ENOSPC)
}

/// [`arm`], failing with the OS error `errno` (`libc::EMFILE`: out of file descriptors).
pub fn arm_errno(point: FailPoint, under: &Path, pass: u64, errno: i32) -> Guard {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut armed = armed();
    armed.push(Armed { id, point, under: under.to_path_buf(), pass, failed: 0, errno });
    ARMED_COUNT.store(armed.len(), Ordering::Release);
    Guard { id }
}

/// The error an armed `point` gives a write to `path`, if one does (`ENOSPC` unless armed
/// with another).
pub fn check(point: FailPoint, path: &Path) -> std::io::Result<()> {
    if ARMED_COUNT.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let mut armed = armed();
    let Some(hit) = armed.iter_mut().find(|a| a.point == point && path.starts_with(&a.under)) else {
        return Ok(());
    };
    if hit.pass > 0 {
        hit.pass -= 1;
        return Ok(());
    }
    hit.failed += 1;
    Err(std::io::Error::from_raw_os_error(hit.errno))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_armed_point_fails_only_its_directory_after_its_passes_until_dropped() {
        let (a, b) = (Path::new("/x/a"), Path::new("/x/b"));
        let guard = arm(FailPoint::FileWrite, a, 1);
        assert!(check(FailPoint::FileWrite, &a.join("f")).is_ok(), "one write passes");
        let err = check(FailPoint::FileWrite, &a.join("f")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert!(check(FailPoint::WalAppend, &a.join("f")).is_ok(), "another point");
        assert!(check(FailPoint::FileWrite, &b.join("f")).is_ok(), "another directory");
        assert_eq!(guard.failed(), 1);
        drop(guard);
        assert!(check(FailPoint::FileWrite, &a.join("f")).is_ok());
    }
}
