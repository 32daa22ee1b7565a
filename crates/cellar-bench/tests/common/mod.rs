//! What the `cellar-bench` test binaries share: run `cellar-bench`, run the `cellar` binary the
//! load benchmark starts (built beside it), and read what came back.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `cellar-bench` with `args`.
pub fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cellar-bench")).args(args).output().expect("run cellar-bench")
}

/// The `cellar` binary of this build: where `cellar-bench load` looks for it, beside
/// `cellar-bench`. `cargo test --workspace` builds it; `cargo test -p cellar-bench` alone does not.
pub fn cellar_path() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_cellar-bench")).with_file_name("cellar");
    assert!(
        path.is_file(),
        "{} is missing: build it first (cargo build -p cellar-cli, or run cargo test --workspace)",
        path.display()
    );
    path
}

/// Runs the `cellar` binary beside `cellar-bench` with `args`.
pub fn cellar(args: &[&str]) -> Output {
    Command::new(cellar_path()).args(args).output().expect("run cellar")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Exit code 2 with `needle` in stderr, and never a panic.
pub fn assert_user_error(out: &Output, needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(needle) && !err.contains("panicked"), "expected {needle:?} in: {err}");
}
