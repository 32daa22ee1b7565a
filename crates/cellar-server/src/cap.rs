//! The memory cap this process runs under (its cgroup's, v1 or v2), for defaults that must fit
//! inside it.

use std::path::{Path, PathBuf};

/// Bytes the process's memory cgroup may still be charged (its limit less its usage, page
/// cache included), or `None` when it has no limit (or none can be read).
pub fn memory_headroom() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    headroom_in(Path::new("/sys/fs/cgroup"), &cgroups)
}

fn headroom_in(root: &Path, cgroups: &str) -> Option<u64> {
    let read = |path: PathBuf| std::fs::read_to_string(path).ok().map(|s| s.trim().to_string());
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let path = path.trim_start_matches('/');
        let (limit, usage) = if controllers.split(',').any(|c| c == "memory") {
            let dir = root.join("memory").join(path);
            (read(dir.join("memory.limit_in_bytes")), read(dir.join("memory.usage_in_bytes")))
        } else if controllers.is_empty() {
            let dir = root.join(path);
            (read(dir.join("memory.max")), read(dir.join("memory.current")))
        } else {
            continue;
        };
        // v1 writes "no limit" as a number near 2^63; v2 as "max".
        let limit: u64 = limit?.parse().ok().filter(|l| *l < 1 << 60)?;
        let usage: u64 = usage?.parse().ok()?;
        return Some(limit.saturating_sub(usage));
    }
    None
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
