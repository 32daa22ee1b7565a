//! A child of this process's own cgroup-v1 memory cgroup, with a limit that counts page cache.
//! Removed on drop. Unavailable cgroups are an error the caller reports, never skipped silently.

use std::path::{Path, PathBuf};

use cellar_core::{CellarError, Result};

#[derive(Clone, Copy, Debug)]
pub struct CgroupUsage {
    pub peak_bytes: u64,
    pub fail_count: u64,
}

pub struct MemoryCgroup {
    path: PathBuf,
}

fn own_memory_cgroup() -> Result<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| CellarError::Unsupported(format!("cannot read /proc/self/cgroup: {e}")))?;
    let relative =
        text.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string())).ok_or_else(|| {
            CellarError::Unsupported("no cgroup v1 memory controller in /proc/self/cgroup".into())
        })?;
    Ok(PathBuf::from(format!("/sys/fs/cgroup/memory{relative}")))
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|e| CellarError::Unsupported(format!("{}: {e}", path.display())))
}

fn read_u64(path: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CellarError::Unsupported(format!("{}: {e}", path.display())))?;
    text.trim().parse().map_err(|e| CellarError::Unsupported(format!("{}: {e}", path.display())))
}

impl MemoryCgroup {
    pub fn create(name: &str, limit_bytes: u64) -> Result<Self> {
        let path = own_memory_cgroup()?.join(name);
        std::fs::create_dir_all(&path).map_err(|e| {
            CellarError::Unsupported(format!("cannot create memory cgroup {}: {e}", path.display()))
        })?;
        let cgroup = MemoryCgroup { path };
        write(&cgroup.path.join("memory.limit_in_bytes"), &limit_bytes.to_string())?;
        Ok(cgroup)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the calling process into the cgroup at `path` (used by the worker on start).
    pub fn join(path: &Path) -> Result<()> {
        write(&path.join("cgroup.procs"), &std::process::id().to_string())
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
