//! The report's header: the command line, when and where it ran, and the settings every
//! configuration shared.

use std::time::{SystemTime, UNIX_EPOCH};

use super::report::{ConfigResult, Report, Settings};
use super::BenchArgs;

/// The report of a finished run over `n_queries` queries.
pub fn new_report(args: &BenchArgs, n_queries: usize, configurations: Vec<ConfigResult>) -> Report {
    let baseline = args.baseline.clone().unwrap_or_else(|| configurations[0].spec.name.clone());
    Report {
        command_line: std::env::args().map(|a| shell_quote(&a)).collect::<Vec<_>>().join(" "),
        date_utc: utc_now(),
        git_commit: crate::bench_store::git_commit(),
        cpu_model: crate::bench_store::cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        client: "this process: a tokio runtime with 1 worker thread, one TCP connection per request \
                 (Connection: close); it shares the machine's cores with the server"
            .into(),
        settings: settings(args, n_queries),
        baseline,
        configurations,
    }
}

fn settings(args: &BenchArgs, n_queries: usize) -> Settings {
    Settings {
        queries: args.queries.clone(),
        qrels: args.qrels.clone(),
        n_queries,
        qps: args.qps.clone(),
        warmup_s: args.warmup,
        duration_s: args.duration,
        drain_s: args.drain,
        timeout_s: args.timeout,
        max_in_flight: args.max_in_flight,
        stop_at_saturation: args.stop_at_saturation,
        mode: args.mode.clone(),
        k: args.k,
        rerank_k: args.rerank_k,
        alpha: args.alpha,
        seed: args.seed,
        evict_cache: args.evict_cache,
    }
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c)) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
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
}
