//! Child processes of the benchmarks, declared once: a program started inside a memory cgroup
//! (placed there before it runs), this binary re-run for one isolated measurement (`run_self`:
//! its stdout is the measurement), how a child ended, in words, and what /proc says of a process
//! (peak RSS, bytes read from storage).
//!
//! Errors: a child that cannot be started is `Io` naming the program; one that dies or exits
//! with a failure is `Internal` (a vanished worker: its stderr, inherited, says why).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use cellar_core::{CellarError, IoContext, Result};

use super::cgroup::{CgroupUsage, MemoryCgroup};

/// This executable (`cellar-bench`), for re-running it as a worker.
pub fn this_exe() -> Result<PathBuf> {
    std::env::current_exe().at(Path::new("/proc/self/exe"))
}

/// A command running `program` with `args`, placed in `cgroup` (when given) before it runs, so
/// that everything the program allocates is charged to it.
pub fn command(program: &Path, args: &[String], cgroup: Option<&MemoryCgroup>) -> Command {
    let mut command = Command::new(program);
    command.args(args);
    if let Some(cg) = cgroup {
        cg.place(&mut command);
    }
    command
}

/// Starts `command` (built by [`command`] for `program`).
pub fn spawn(command: &mut Command, program: &Path) -> Result<Child> {
    command.spawn().at(program)
}

/// How a child ended, in words; under a memory cap a SIGKILL is most likely the OOM killer.
pub fn describe_exit(status: ExitStatus, capped: bool) -> String {
    match status.signal() {
        Some(libc::SIGKILL) if capped => {
            "killed by SIGKILL (the memory cap's OOM killer, most likely)".into()
        }
        Some(sig) => format!("killed by signal {sig}"),
        None => format!("exited with {status}"),
    }
}

/// Runs this binary with `args` (a hidden worker subcommand) to the end, inside `cgroup` when
/// given; its stderr goes to ours. Returns its stdout and the cgroup's usage. `name` names the
/// child in errors.
pub fn run_self(
    args: &[String],
    cgroup: Option<&MemoryCgroup>,
    name: &str,
) -> Result<(Vec<u8>, Option<CgroupUsage>)> {
    let exe = this_exe()?;
    let mut command = command(&exe, args, cgroup);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    let output = spawn(&mut command, &exe)?.wait_with_output().at(&exe)?;
    if !output.status.success() {
        let how = describe_exit(output.status, cgroup.is_some());
        return Err(CellarError::internal(format!("the {name} child {how}")));
    }
    let usage = cgroup.map(MemoryCgroup::usage).transpose()?;
    Ok((output.stdout, usage))
}

/// `VmHWM` (peak resident set) of a process, in bytes.
pub fn vm_hwm_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// CPU time a process has used (user + system), in seconds, from /proc/PID/stat.
pub fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count the fields after its closing ')'.
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) as f64 / ticks as f64)
}

/// `read_bytes` of /proc/PID/io: bytes this process caused to be read from storage (page-cache
/// hits are not counted, O_DIRECT reads are).
pub fn proc_read_bytes(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines().find_map(|l| l.strip_prefix("read_bytes:")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_readers_see_this_process() {
        let me = std::process::id();
        assert!(vm_hwm_bytes(me).unwrap() > 0);
        assert!(proc_read_bytes(me).is_some());
        let spent = proc_cpu_seconds(me).unwrap();
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(300) {
            std::hint::black_box((0..1000u64).sum::<u64>());
        }
        assert!(proc_cpu_seconds(me).unwrap() > spent, "a busy loop shows as CPU time");
        assert!(vm_hwm_bytes(u32::MAX).is_none());
    }

    #[test]
    fn exits_are_described() {
        let killed = ExitStatus::from_raw(libc::SIGKILL);
        assert!(describe_exit(killed, true).contains("OOM killer"));
        assert_eq!(describe_exit(killed, false), format!("killed by signal {}", libc::SIGKILL));
        assert!(describe_exit(ExitStatus::from_raw(2 << 8), false).contains("exited with"));
    }

    #[test]
    fn a_program_that_cannot_start_is_an_io_error_naming_it() {
        let missing = Path::new("/no/such/cellar");
        let err = spawn(&mut command(missing, &[], None), missing).unwrap_err();
        assert!(matches!(&err, CellarError::Io { path, .. } if path == missing), "{err}");
    }
}
