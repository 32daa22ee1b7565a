//! The provenance record every benchmark report starts with: the command line that made it (shell
//! quoted, so it can be pasted to re-run), when, at which commit, on which CPU and how many cores.
//! Reports flatten it into their JSON and open their markdown with [`Provenance::markdown`].

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use cellar_core::kernels::cpu_model;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Provenance {
    pub command_line: String,
    pub date_utc: String,
    pub git_commit: String,
    pub cpu_model: String,
    pub cores: usize,
}

impl Provenance {
    /// The record of this process, now.
    pub fn now() -> Self {
        Provenance {
            command_line: std::env::args().map(|a| shell_quote(&a)).collect::<Vec<_>>().join(" "),
            date_utc: utc_now(),
            git_commit: git_commit(),
            cpu_model: cpu_model(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// "Command: `...`" and "Machine: CPU (N cores), commit C, DATE.", as two paragraphs.
    pub fn markdown(&self) -> String {
        format!(
            "Command: `{}`\n\nMachine: {} ({} cores), commit {}, {}.\n",
            self.command_line, self.cpu_model, self.cores, self.git_commit, self.date_utc
        )
    }
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c)) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// The checkout's short commit, or "unknown" outside one; "+changes" when the code (the crates,
/// the workspace's manifests) differs from that commit, so a report made by a binary of
/// uncommitted code does not pass for the commit's.
fn git_commit() -> String {
    let git = |args: &[&str]| Command::new("git").args(args).output().ok().filter(|o| o.status.success());
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else { return "unknown".into() };
    let commit = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let changed =
        git(&["status", "--porcelain", "--untracked-files=no", "--", "crates", "Cargo.toml", "Cargo.lock"])
            .is_some_and(|o| !o.stdout.is_empty());
    if changed {
        format!("{commit}+changes")
    } else {
        commit
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        let d = utc_now();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("--qps=5,10"), "--qps=5,10");
        assert_eq!(shell_quote("name=a b"), "'name=a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn the_record_names_this_process() {
        let p = Provenance::now();
        assert!(p.cores >= 1 && !p.cpu_model.is_empty() && !p.git_commit.is_empty());
        let md = p.markdown();
        assert!(md.starts_with("Command: `") && md.contains(&p.command_line), "{md}");
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["cores"], p.cores);
    }
}
