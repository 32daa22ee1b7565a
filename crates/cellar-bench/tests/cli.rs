//! The `cellar-bench` binary end to end: its subcommands, synthetic stores, the store
//! benchmark's worker (the child each reader runs in), and exit code 2 with a message (never a
//! panic) for bad input.

mod common;
use common::{assert_user_error, bench, text};

use std::path::Path;
use std::process::{Command, Output};

fn synth(dir: &Path, extra: &[&str]) -> Output {
    let out = dir.to_str().unwrap();
    let mut args = vec!["synth", "--docs", "300", "--tokens", "20", "--dim", "16", "--out", out];
    args.extend_from_slice(extra);
    bench(&args)
}

#[test]
fn help_lists_every_benchmark_and_hides_the_workers() {
    let out = bench(&["--help"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let help = text(&out.stdout);
    for command in ["load", "store", "ivf", "stream", "synth"] {
        assert!(help.contains(&format!("  {command} ")), "{command} missing from:\n{help}");
    }
    assert!(!help.contains("worker"), "{help}");
    let ivf = text(&bench(&["ivf", "--help"]).stdout);
    assert!(ivf.contains("recall") && ivf.contains("rerank-k") && !ivf.contains("ram-worker"), "{ivf}");
}

#[test]
fn synth_writes_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let out = synth(&dir, &["--codec", "int8"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("wrote 300 docs") && stdout.contains("codec int8"), "{stdout}");
    assert!(dir.join("manifest.json").is_file());
}

#[test]
fn bad_arguments_exit_with_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    assert_user_error(&synth(&tmp.path().join("a"), &["--codec", "f8"]), "unknown codec");
    let zero = bench(&["synth", "--docs", "0", "--out", tmp.path().join("b").to_str().unwrap()]);
    assert_user_error(&zero, "docs, tokens, dim and clusters");
    let dir = tmp.path().join("c");
    assert!(synth(&dir, &[]).status.success());
    assert_user_error(&synth(&dir, &[]), "already holds an index");
    let store = bench(&["store", "--store", dir.to_str().unwrap(), "--cap-fraction", "1.5"]);
    assert_user_error(&store, "--cap-fraction");
    let stream = bench(&["stream", "--users", "0", "--work", tmp.path().join("s").to_str().unwrap()]);
    assert_user_error(&stream, "--users");
}

#[test]
fn refused_io_uring_falls_back_to_preads_with_one_loud_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    assert!(synth(&dir, &[]).status.success());
    let run = |env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cellar-bench"));
        command.args(["store-worker", "--store", dir.to_str().unwrap(), "--reader", "direct"]);
        command.args(["--batches", "6", "--batch-size", "20", "--threads", "3", "--seed", "1"]);
        if let Some(value) = env {
            command.env("CELLAR_IO_URING", value);
        }
        command.output().unwrap()
    };
    let out = run(Some("off"));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["engine"], "pread-pool");
    assert_eq!(report["records"], 120);
    assert_eq!(stderr.matches("WARNING: cellar: the kernel refuses io_uring").count(), 1, "{stderr}");
    let out = run(None);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["engine"], "io_uring");
    assert!(!text(&out.stderr).contains("WARNING"), "{}", text(&out.stderr));
}
