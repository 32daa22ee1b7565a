//! Helpers every CLI test binary shares: run the binary, read its output, check a user error.
#![allow(dead_code)] // each test binary uses its own subset

use std::process::{Command, Output};

pub fn cellar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cellar")).args(args).output().expect("run cellar")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn stderr(out: &Output) -> String {
    text(&out.stderr)
}

/// Exit code 2 with `needle` in the message, and never a panic.
pub fn assert_user_error(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(needle) && !err.contains("panicked"), "expected {needle:?} in: {err}");
}
