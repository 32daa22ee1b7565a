//! A memory cgroup with a limit that counts page cache, on either cgroup hierarchy. Removed on
//! drop. Unavailable cgroups are an error the caller reports, never skipped silently. A child
//! process is placed in it between fork and exec (`place`), so everything the program it runs
//! allocates is charged: the capped program needs no flag of its own.
//!
//! - cgroup v1 (the memory controller on a tree of its own, `/sys/fs/cgroup/memory/...`): a child
//!   of this process's own memory cgroup, limited by `memory.limit_in_bytes`.
//! - cgroup v2 (one unified tree, `/sys/fs/cgroup/...`, most current systems): limited by
//!   `memory.max`, which counts page cache too, so a cap means the same on both. A v2 cgroup can
//!   give its children the memory controller only while it holds no process of its own (the "no
//!   internal processes" rule), and this process lives in its own cgroup. So the first cap moves
//!   this process into a leaf of its cgroup ([`SELF_LEAF`]), then enables the controller for the
//!   children (`+memory` into `cgroup.subtree_control`); the caps are children of this process's
//!   cgroup, siblings of the leaf. This process stays in the leaf and the controller stays
//!   enabled after the caps are dropped. Any other process in that cgroup (the shell that
//!   started this one, a child started before the first cap) makes the kernel refuse (EBUSY): the
//!   error says to start `cellar-bench` in a cgroup of its own.
//!
//! Which hierarchy is read from /proc/self/cgroup: a v1 memory controller line wins (a hybrid
//! machine mounts both, with memory on v1). Swap is left alone on both, as v1 always did.
//!
//! Tested: v1 against a real kernel (the benchmarks' machines so far run v1); v2 only on a fake
//! tree in a temporary directory (the files written and read), never against a v2 kernel.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use cellar_core::{CellarError, IoContext, Result};

/// Where the cgroup filesystem is mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The leaf of its own v2 cgroup this process moves into, so that the cgroup holds no process
/// and can give its children (the caps) the memory controller.
const SELF_LEAF: &str = "cellar-bench-self";

#[derive(Clone, Copy, Debug)]
pub struct CgroupUsage {
    pub peak_bytes: u64,
    pub fail_count: u64,
}

/// The two layouts of the cgroup filesystem: the same figures in differently named files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hierarchy {
    /// The memory controller on a tree of its own, `ROOT/memory/...`.
    V1,
    /// One unified tree, `ROOT/...`, offering the memory controller.
    V2,
}

pub struct MemoryCgroup {
    path: PathBuf,
    hierarchy: Hierarchy,
}

/// `rel` (a path of /proc/self/cgroup, absolute within its hierarchy) under `dir`.
fn under(dir: &Path, rel: &str) -> PathBuf {
    match rel.trim_start_matches('/') {
        "" => dir.to_path_buf(),
        rel => dir.join(rel),
    }
}

/// Whether `path` (a `cgroup.controllers` or `cgroup.subtree_control`) lists `memory`; an
/// unreadable or missing file lists nothing.
fn lists_memory(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| text.split_whitespace().any(|c| c == "memory"))
}

/// This process's own memory cgroup under `root` (the cgroup filesystem) and its hierarchy, from
/// `table` (the text of /proc/self/cgroup). A v1 line naming the memory controller
/// (`N:memory:/path`, possibly with others: `N:cpu,memory:/path`) wins; else the unified line
/// (`0::/path`) when the v2 tree offers the memory controller (`root/cgroup.controllers` lists
/// it). Neither is `Unsupported`: this machine cannot cap memory with a cgroup.
fn own_memory_cgroup(root: &Path, table: &str) -> Result<(Hierarchy, PathBuf)> {
    let mut unified = None;
    for line in table.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Ok((Hierarchy::V1, under(&root.join("memory"), path)));
        }
        if id == "0" && controllers.is_empty() {
            unified = Some(path);
        }
    }
    let offered = root.join("cgroup.controllers");
    match unified {
        Some(path) if lists_memory(&offered) => Ok((Hierarchy::V2, under(root, path))),
        _ => Err(CellarError::Unsupported(format!(
            "no memory cgroup: /proc/self/cgroup has neither a cgroup-v1 memory controller line \
             (N:memory:/path) nor a cgroup-v2 line (0::/path) with the memory controller listed in {}",
            offered.display()
        ))),
    }
}

/// The v2 cgroup the caps are children of, made able to have them: this process's own cgroup
/// `own` (or its parent, once this process has moved into [`SELF_LEAF`]), with the memory
/// controller enabled for its children. Enabling it needs the cgroup empty of processes: this
/// process first moves into [`SELF_LEAF`]; see [`subtree_refused`] for when others remain.
fn v2_parent(own: PathBuf) -> Result<PathBuf> {
    let parent = match own.parent() {
        Some(parent) if own.file_name().is_some_and(|n| n == SELF_LEAF) => parent.to_path_buf(),
        _ => own,
    };
    if !lists_memory(&parent.join("cgroup.controllers")) {
        return Err(CellarError::Unsupported(format!(
            "cgroup v2: the memory controller is not delegated to {} (its cgroup.controllers does not \
             list memory), so no cgroup under it can be capped",
            parent.display()
        )));
    }
    let subtree = parent.join("cgroup.subtree_control");
    if lists_memory(&subtree) {
        return Ok(parent);
    }
    let leaf = parent.join(SELF_LEAF);
    std::fs::create_dir_all(&leaf).at(&leaf)?;
    let procs = leaf.join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string()).at(&procs)?;
    std::fs::write(&subtree, "+memory").map_err(|e| subtree_refused(&subtree, e))?;
    Ok(parent)
}

/// The error of a refused `+memory` write into `subtree` (a `cgroup.subtree_control`). EBUSY is
/// the "no internal processes" rule: the cgroup still holds processes besides this one, which
/// only the user can move; it is `Unsupported` and says how to run instead.
fn subtree_refused(subtree: &Path, error: std::io::Error) -> CellarError {
    if error.raw_os_error() != Some(libc::EBUSY) {
        return CellarError::io(subtree, error);
    }
    let cgroup = subtree.parent().unwrap_or(subtree);
    CellarError::Unsupported(format!(
        "cgroup v2: {} refused +memory (EBUSY): {} holds processes other than this one, and a cgroup \
         with processes of its own cannot give its children the memory controller; start cellar-bench \
         in a cgroup of its own, e.g. `systemd-run --user --scope -p Delegate=yes cellar-bench ...` \
         (without --user as root)",
        subtree.display(),
        cgroup.display()
    ))
}

fn read_u64(path: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(path).at(path)?;
    text.trim().parse().map_err(|e| CellarError::corrupted(path, 0, format!("not a number ({e}): {text:?}")))
}

/// The count `key` of a flat keyed file such as `memory.events` (`low 0\nhigh 0\nmax 7\n...`).
fn keyed_u64(path: &Path, key: &str) -> Result<u64> {
    let text = std::fs::read_to_string(path).at(path)?;
    let value = text
        .lines()
        .find_map(|line| line.split_once(' ').filter(|(k, _)| *k == key).map(|(_, v)| v.trim()))
        .ok_or_else(|| CellarError::corrupted(path, 0, format!("no {key:?} line: {text:?}")))?;
    value
        .parse()
        .map_err(|e| CellarError::corrupted(path, 0, format!("{key}: not a number ({e}): {value:?}")))
}

impl MemoryCgroup {
    /// A cgroup `name` limited to `limit_bytes` (RSS + page cache): a child of this process's
    /// own memory cgroup (on v2, of its own cgroup, which this process leaves for a leaf; see
    /// the module doc).
    pub fn create(name: &str, limit_bytes: u64) -> Result<Self> {
        let table = Path::new("/proc/self/cgroup");
        let text = std::fs::read_to_string(table).at(table)?;
        Self::create_in(Path::new(CGROUP_ROOT), &text, name, limit_bytes)
    }

    /// [`create`](Self::create) on the cgroup filesystem at `root`, for a process whose
    /// /proc/self/cgroup reads `table`: the tests run it on a fake tree.
    fn create_in(root: &Path, table: &str, name: &str, limit_bytes: u64) -> Result<Self> {
        let (hierarchy, own) = own_memory_cgroup(root, table)?;
        let (parent, limit_file) = match hierarchy {
            Hierarchy::V1 => (own, "memory.limit_in_bytes"),
            Hierarchy::V2 => (v2_parent(own)?, "memory.max"),
        };
        let path = parent.join(name);
        std::fs::create_dir_all(&path).at(&path)?;
        let cgroup = MemoryCgroup { path, hierarchy };
        let limit = cgroup.path.join(limit_file);
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
        read_u64(&self.path.join(match self.hierarchy {
            Hierarchy::V1 => "memory.usage_in_bytes",
            Hierarchy::V2 => "memory.current",
        }))
    }

    /// Peak charge (RSS + page cache) and how often the limit was hit. v1:
    /// `memory.max_usage_in_bytes` and `memory.failcnt`. v2: `memory.peak` (Linux 5.19 and
    /// later; where it is missing, the charge at the time of reading, `memory.current`, stands
    /// in: read after the child exited, that is mostly its page cache, below its true peak) and
    /// the `max` count of `memory.events` (how often the charge was about to pass `memory.max`
    /// and reclaim ran, as v1's failcnt counts).
    pub fn usage(&self) -> Result<CgroupUsage> {
        match self.hierarchy {
            Hierarchy::V1 => Ok(CgroupUsage {
                peak_bytes: read_u64(&self.path.join("memory.max_usage_in_bytes"))?,
                fail_count: read_u64(&self.path.join("memory.failcnt"))?,
            }),
            Hierarchy::V2 => {
                let peak_bytes = match read_u64(&self.path.join("memory.peak")) {
                    Err(CellarError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                        read_u64(&self.path.join("memory.current"))?
                    }
                    peak => peak?,
                };
                Ok(CgroupUsage {
                    peak_bytes,
                    fail_count: keyed_u64(&self.path.join("memory.events"), "max")?,
                })
            }
        }
    }
}

impl Drop for MemoryCgroup {
    /// v1 first reclaims the page cache still charged (`memory.force_empty`), which would
    /// otherwise move to the parent; v2 has no such file (its removal reparents the charge).
    fn drop(&mut self) {
        if self.hierarchy == Hierarchy::V1 {
            let _ = std::fs::write(self.path.join("memory.force_empty"), "0");
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn unsupported(result: Result<MemoryCgroup>) -> String {
        match result {
            Err(CellarError::Unsupported(message)) => message,
            Err(other) => panic!("expected Unsupported, got {other:?}"),
            Ok(cg) => panic!("expected Unsupported, got a cgroup at {}", cg.path.display()),
        }
    }

    #[test]
    fn v1_caps_a_child_of_the_own_memory_cgroup_even_where_v2_is_mounted_too() {
        let root = tempfile::tempdir().unwrap();
        // A hybrid machine: the unified tree offers memory too, but memory is on v1.
        write(&root.path().join("cgroup.controllers"), "cpu memory\n");
        let table = "12:cpu,cpuacct:/\n9:memory:/bench/server\n0::/bench/server\n";
        let cg = MemoryCgroup::create_in(root.path(), table, "cap", 1 << 20).unwrap();
        let dir = root.path().join("memory/bench/server/cap");
        assert_eq!((cg.hierarchy, cg.path.as_path()), (Hierarchy::V1, dir.as_path()));
        assert_eq!(read(&dir.join("memory.limit_in_bytes")), "1048576");
        assert!(!dir.join("memory.max").exists());
        write(&dir.join("memory.max_usage_in_bytes"), "2048\n");
        write(&dir.join("memory.failcnt"), "3\n");
        write(&dir.join("memory.usage_in_bytes"), "1024\n");
        let usage = cg.usage().unwrap();
        assert_eq!((usage.peak_bytes, usage.fail_count), (2048, 3));
        assert_eq!(cg.usage_now().unwrap(), 1024);
        drop(cg);
        assert_eq!(read(&dir.join("memory.force_empty")), "0", "v1 reclaims the page cache on drop");

        let shared = MemoryCgroup::create_in(root.path(), "4:cpu,memory:/x\n", "cap", 7).unwrap();
        assert_eq!(read(&root.path().join("memory/x/cap/memory.limit_in_bytes")), "7");
        drop(shared);
    }

    #[test]
    fn v2_moves_this_process_into_a_leaf_enables_memory_and_writes_memory_max() {
        let root = tempfile::tempdir().unwrap();
        write(&root.path().join("cgroup.controllers"), "cpuset cpu io memory pids\n");
        let own = root.path().join("user.slice/bench");
        write(&own.join("cgroup.controllers"), "cpu memory pids\n");
        write(&own.join("cgroup.subtree_control"), "\n");
        let cg = MemoryCgroup::create_in(root.path(), "0::/user.slice/bench\n", "cap", 5000).unwrap();
        assert_eq!((cg.hierarchy, cg.path.as_path()), (Hierarchy::V2, own.join("cap").as_path()));
        assert_eq!(read(&own.join("cap/memory.max")), "5000");
        assert!(!own.join("cap/memory.limit_in_bytes").exists());
        assert_eq!(read(&own.join("cgroup.subtree_control")), "+memory");
        assert_eq!(read(&own.join(SELF_LEAF).join("cgroup.procs")), std::process::id().to_string());

        write(&cg.path.join("memory.peak"), "4096\n");
        write(&cg.path.join("memory.current"), "3000\n");
        write(&cg.path.join("memory.events"), "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n");
        let usage = cg.usage().unwrap();
        assert_eq!((usage.peak_bytes, usage.fail_count), (4096, 7));
        assert_eq!(cg.usage_now().unwrap(), 3000);
        std::fs::remove_file(cg.path.join("memory.peak")).unwrap();
        assert_eq!(cg.usage().unwrap().peak_bytes, 3000, "before Linux 5.19: the charge now");
        write(&cg.path.join("memory.events"), "low 0\nhigh 0\n");
        assert!(matches!(cg.usage(), Err(CellarError::Corrupted { .. })));
        let dir = cg.path.clone();
        drop(cg);
        assert!(!dir.join("memory.force_empty").exists(), "v2 has no force_empty");

        // The next cap, with this process in the leaf and memory enabled (as the kernel shows
        // it): a sibling of the leaf, and the subtree control left as it is.
        write(&own.join("cgroup.subtree_control"), "memory\n");
        let table = format!("0::/user.slice/bench/{SELF_LEAF}\n");
        let next = MemoryCgroup::create_in(root.path(), &table, "cap2", 6000).unwrap();
        assert_eq!(next.path, own.join("cap2"));
        assert_eq!(read(&own.join("cap2/memory.max")), "6000");
        assert_eq!(read(&own.join("cgroup.subtree_control")), "memory\n");
    }

    #[test]
    fn neither_hierarchy_or_no_delegated_memory_controller_is_unsupported() {
        let root = tempfile::tempdir().unwrap();
        for table in ["garbage", "", "12:name=systemd:/\n1:cpu:/\n"] {
            let message = unsupported(MemoryCgroup::create_in(root.path(), table, "cap", 1));
            assert!(message.contains("cgroup-v1") && message.contains("cgroup-v2"), "{message}");
        }
        // A unified line, but no cgroup.controllers (a v1 tmpfs root), then one without memory.
        unsupported(MemoryCgroup::create_in(root.path(), "1:cpu:/\n0::/\n", "cap", 1));
        write(&root.path().join("cgroup.controllers"), "cpu io pids\n");
        unsupported(MemoryCgroup::create_in(root.path(), "0::/\n", "cap", 1));
        // The tree offers memory, but this process's cgroup was not given it: nothing is moved.
        write(&root.path().join("cgroup.controllers"), "cpu io memory pids\n");
        write(&root.path().join("app/cgroup.controllers"), "cpu pids\n");
        let message = unsupported(MemoryCgroup::create_in(root.path(), "0::/app\n", "cap", 1));
        assert!(message.contains("not delegated"), "{message}");
        assert!(!root.path().join("app").join(SELF_LEAF).exists());
        assert!(!root.path().join("app/cap").exists());
    }

    #[test]
    fn a_parent_with_other_processes_says_what_to_do_and_other_refusals_stay_io() {
        let subtree = Path::new("/sys/fs/cgroup/user.slice/bench/cgroup.subtree_control");
        match subtree_refused(subtree, std::io::Error::from_raw_os_error(libc::EBUSY)) {
            CellarError::Unsupported(message) => {
                assert!(message.contains("/sys/fs/cgroup/user.slice/bench holds processes"), "{message}");
                assert!(message.contains("systemd-run --user --scope -p Delegate=yes"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let denied = subtree_refused(subtree, std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(matches!(denied, CellarError::Io { ref path, .. } if path == subtree), "{denied:?}");
    }
}
