//! A child of this process's own cgroup-v1 memory cgroup, with a limit that counts page cache.
//! Removed on drop. Unavailable cgroups are an error the caller reports, never skipped silently.
//! A child process is placed in it between fork and exec (`place`), so everything the program
//! it runs allocates is charged: the capped program needs no flag of its own.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use cellar_core::{CellarError, IoContext, Result};

#[derive(Clone, Copy, Debug)]
pub struct CgroupUsage {
    pub peak_bytes: u64,
    pub fail_count: u64,
}

pub struct MemoryCgroup {
    path: PathBuf,
}

/// This process's own memory cgroup. No cgroup-v1 memory controller is `Unsupported`: this
/// machine cannot cap memory that way.
fn own_memory_cgroup() -> Result<PathBuf> {
    let table = Path::new("/proc/self/cgroup");
    let text = std::fs::read_to_string(table).at(table)?;
    let relative =
        text.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string())).ok_or_else(|| {
            CellarError::Unsupported("no cgroup v1 memory controller in /proc/self/cgroup".into())
        })?;
    Ok(PathBuf::from(format!("/sys/fs/cgroup/memory{relative}")))
}

fn read_u64(path: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(path).at(path)?;
    text.trim().parse().map_err(|e| CellarError::corrupted(path, 0, format!("not a number ({e}): {text:?}")))
}

impl MemoryCgroup {
    /// A child cgroup `name` of this process's own, limited to `limit_bytes` (RSS + page cache).
    pub fn create(name: &str, limit_bytes: u64) -> Result<Self> {
        let path = own_memory_cgroup()?.join(name);
        std::fs::create_dir_all(&path).at(&path)?;
        let cgroup = MemoryCgroup { path };
        let limit = cgroup.path.join("memory.limit_in_bytes");
        std::fs::write(&limit, limit_bytes.to_string()).at(&limit)?;
        Ok(cgroup)
    }

    /// Makes the child that `command` spawns join this cgroup after fork and before exec: the
    /// new program starts inside it. A failed join fails the spawn.
    pub fn place(&self, command: &mut Command) {
        let procs = self.path.join("cgroup.procs");
        let procs = CString::new(procs.as_os_str().as_bytes()).expect("a cgroup path has no NUL byte");
        // SAFETY: `join_self` only makes async-signal-safe calls (getpid, open, write, close)
        // and allocates nothing, as code between fork and exec must.
        unsafe { command.pre_exec(move || join_self(&procs)) };
    }

    /// Memory charged to the cgroup right now (RSS + page cache).
    pub fn usage_now(&self) -> Result<u64> {
        read_u64(&self.path.join("memory.usage_in_bytes"))
    }

    /// Peak charge (RSS + page cache) and how often the limit was hit.
    pub fn usage(&self) -> Result<CgroupUsage> {
        Ok(CgroupUsage {
            peak_bytes: read_u64(&self.path.join("memory.max_usage_in_bytes"))?,
            fail_count: read_u64(&self.path.join("memory.failcnt"))?,
        })
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path.join("memory.force_empty"), "0");
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// Writes the calling process's pid into `procs` (a `cgroup.procs` file). Runs in the child
/// between fork and exec: no allocation, async-signal-safe calls only.
fn join_self(procs: &CStr) -> std::io::Result<()> {
    // SAFETY: getpid has no preconditions.
    let mut pid = unsafe { libc::getpid() } as u32;
    let mut digits = [0u8; 10];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    let text = &digits[start..];
    // SAFETY: `procs` is a NUL-terminated path; `text` is a live buffer of `text.len()` bytes.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let written = libc::write(fd, text.as_ptr().cast(), text.len());
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        if written != text.len() as isize {
            return Err(error);
        }
    }
    Ok(())
}
