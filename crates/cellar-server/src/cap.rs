//! The memory cap this process runs under (its cgroup's, v1 or v2), for defaults that must fit
//! inside it: `CgroupFiles` finds the cgroup and reads it (its headroom here, its
//! unreclaimable charge for `pressure`).

use std::path::{Path, PathBuf};

/// Bytes the process's memory cgroup may still be charged (its limit less its usage, page
/// cache included), or `None` when it has no limit (or none can be read).
pub fn memory_headroom() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    headroom_in(Path::new("/sys/fs/cgroup"), &cgroups)
}

fn headroom_in(root: &Path, cgroups: &str) -> Option<u64> {
    CgroupFiles::find(root, cgroups)?.headroom()
}

/// One reading of a memory cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    pub limit: u64,
    /// What reclaim cannot take back: anonymous memory and kernel memory.
    pub unreclaimable: u64,
}

/// Where a memory cgroup's files are, and which layout they have.
#[derive(Clone, Debug)]
pub struct CgroupFiles {
    dir: PathBuf,
    v1: bool,
}

impl CgroupFiles {
    /// This process's memory cgroup under `root` (normally `/sys/fs/cgroup`), from the lines of
    /// `/proc/self/cgroup`; `None` without one.
    pub fn find(root: &Path, cgroups: &str) -> Option<CgroupFiles> {
        for line in cgroups.lines() {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let path = path.trim_start_matches('/');
            if controllers.split(',').any(|c| c == "memory") {
                return Some(CgroupFiles { dir: root.join("memory").join(path), v1: true });
            }
            if controllers.is_empty() && root.join(path).join("memory.max").is_file() {
                return Some(CgroupFiles { dir: root.join(path), v1: false });
            }
        }
        None
    }

    /// Bytes the cgroup may still be charged (its limit less its usage, page cache included);
    /// `None` when it has no limit or cannot be read.
    pub fn headroom(&self) -> Option<u64> {
        let (limit, usage) = if self.v1 {
            (self.number("memory.limit_in_bytes")?, self.number("memory.usage_in_bytes")?)
        } else {
            (self.number("memory.max")?, self.number("memory.current")?)
        };
        // v1 writes "no limit" as a number near 2^63; v2 as "max" (which does not parse).
        (limit < 1 << 60).then(|| limit.saturating_sub(usage))
    }

    fn number(&self, name: &str) -> Option<u64> {
        std::fs::read_to_string(self.dir.join(name)).ok()?.trim().parse().ok()
    }

    /// Whether this is the v1 layout (the memory controller on a tree of its own).
    pub fn is_v1(&self) -> bool {
        self.v1
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The charge now; `None` when the cgroup has no limit or cannot be read.
    pub fn read(&self) -> Option<Charge> {
        let number = |name: &str| self.number(name);
        let stat = std::fs::read_to_string(self.dir.join("memory.stat")).ok()?;
        let field = |name: &str| {
            stat.lines().find_map(|l| {
                let (key, value) = l.split_once(' ')?;
                (key == name).then(|| value.trim().parse::<u64>().ok()).flatten()
            })
        };
        let (limit, usage, file) = if self.v1 {
            let file = field("total_inactive_file")? + field("total_active_file")?;
            (number("memory.limit_in_bytes")?, number("memory.usage_in_bytes")?, file)
        } else {
            (number("memory.max")?, number("memory.current")?, field("file")?)
        };
        // v1 writes "no limit" as a number near 2^63; v2 as "max" (which does not parse).
        (limit < 1 << 60).then_some(Charge { limit, unreclaimable: usage.saturating_sub(file) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_limits_are_read_and_no_limit_is_none() {
        let root = tempfile::tempdir().unwrap();
        let v1 = root.path().join("memory/bench/server");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), "104857600\n").unwrap();
        std::fs::write(v1.join("memory.usage_in_bytes"), "41943040\n").unwrap();
        let lines = "12:cpu,cpuacct:/\n9:memory:/bench/server\n";
        assert_eq!(headroom_in(root.path(), lines), Some(60 << 20));
        std::fs::write(v1.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        assert_eq!(headroom_in(root.path(), lines), None, "v1's unlimited");
        let v2 = root.path().join("user.slice/app");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        std::fs::write(v2.join("memory.current"), "1000\n").unwrap();
        assert_eq!(headroom_in(root.path(), "0::/user.slice/app\n"), None, "v2's unlimited");
        std::fs::write(v2.join("memory.max"), "5000\n").unwrap();
        assert_eq!(headroom_in(root.path(), "0::/user.slice/app\n"), Some(4000));
        assert_eq!(headroom_in(root.path(), "garbage"), None);
    }
}
