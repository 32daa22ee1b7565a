//! The `cellar` binary end to end: output of the store tools, and exit code 2 with a message
//! (never a panic) for bad input.

mod common;
use common::{assert_user_error, cellar, stderr};

use std::path::Path;
use std::process::{Command, Output};

fn synth(dir: &Path, extra: &[&str]) -> Output {
    let out = dir.to_str().unwrap();
    let mut args = vec!["synth", "--docs", "300", "--tokens", "20", "--dim", "16", "--out", out];
    args.extend_from_slice(extra);
    cellar(&args)
}

#[test]
fn synth_then_inspect_reports_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let out = synth(&dir, &["--codec", "int8"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("wrote 300 docs"));
    let out = cellar(&["inspect", dir.to_str().unwrap(), "--verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in
        ["codec int8", "16 bytes/token", "300 docs", "vectors.bin", "offsets.bin", "codec.bin", "checksum ok"]
    {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

#[test]
fn inspect_reports_damage_with_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    assert!(synth(&dir, &[]).status.success());
    let vectors = dir.join("vectors.bin");
    let mut bytes = std::fs::read(&vectors).unwrap();
    let last = bytes.len() - 5000;
    bytes[last] ^= 0x10;
    std::fs::write(&vectors, &bytes).unwrap();
    let out = cellar(&["inspect", dir.to_str().unwrap()]);
    assert!(out.status.success(), "inspect without --verify reads no vectors: {}", stderr(&out));
    assert_user_error(&cellar(&["inspect", dir.to_str().unwrap(), "--verify"]), "body checksum mismatch");
    bytes.truncate(bytes.len() - 4096);
    std::fs::write(&vectors, &bytes).unwrap();
    assert_user_error(&cellar(&["inspect", dir.to_str().unwrap()]), "truncated");
}

#[test]
fn bad_arguments_exit_with_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    assert_user_error(&cellar(&["inspect", missing.to_str().unwrap()]), "nope");
    assert_user_error(&cellar(&["inspect", tmp.path().to_str().unwrap()]), "has no manifest.json");
    assert_user_error(&synth(&tmp.path().join("a"), &["--codec", "f8"]), "unknown codec");
    let zero = cellar(&["synth", "--docs", "0", "--out", tmp.path().join("b").to_str().unwrap()]);
    assert_user_error(&zero, "docs, tokens, dim and clusters");
    let dir = tmp.path().join("c");
    assert!(synth(&dir, &[]).status.success());
    assert_user_error(&synth(&dir, &[]), "already holds an index");
    let bench = cellar(&["bench-store", "--store", dir.to_str().unwrap(), "--cap-fraction", "1.5"]);
    assert_user_error(&bench, "--cap-fraction");
}

#[test]
fn refused_io_uring_falls_back_to_preads_with_one_loud_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    assert!(synth(&dir, &[]).status.success());
    let run = |env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cellar"));
        command.args(["bench-store-worker", "--store", dir.to_str().unwrap(), "--reader", "direct"]);
        command.args(["--batches", "6", "--batch-size", "20", "--threads", "3", "--seed", "1"]);
        if let Some(value) = env {
            command.env("CELLAR_IO_URING", value);
        }
        command.output().unwrap()
    };
    let out = run(Some("off"));
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["engine"], "pread-pool");
    assert_eq!(report["records"], 120);
    assert_eq!(
        stderr(&out).matches("WARNING: cellar: the kernel refuses io_uring").count(),
        1,
        "{}",
        stderr(&out)
    );
    let out = run(None);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["engine"], "io_uring");
    assert!(!stderr(&out).contains("WARNING"), "{}", stderr(&out));
}
