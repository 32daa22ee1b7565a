//! The `cellar` binary end to end: output of the store tools, exit code 2 with a message (never
//! a panic) for bad input, and a help that lists user commands only.

mod common;
use common::{assert_user_error, cellar, stderr};

use std::path::Path;

use cellar_core::codec::CodecKind;
use cellar_core::synth::{SynthConfig, SynthCorpus};

/// A store of 300 synthetic documents (20 tokens of 16 dimensions on average), written by the
/// library as `cellar-bench synth --docs 300 --tokens 20 --dim 16` would.
fn store(dir: &Path, codec: CodecKind) {
    let config = SynthConfig { docs: 300, mean_tokens: 20, dim: 16, clusters: 1024, seed: 42 };
    SynthCorpus::new(config).unwrap().write_store(dir, codec, |_| ()).unwrap();
}

#[test]
fn inspect_reports_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    store(&dir, CodecKind::Int8);
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
    store(&dir, CodecKind::F16);
    let vectors = dir.join("vectors.bin");
    let mut bytes = std::fs::read(&vectors).unwrap();
    let last = bytes.len() - 5000;
    bytes[last] ^= 0x10;
    std::fs::write(&vectors, &bytes).unwrap();
    let out = cellar(&["inspect", dir.to_str().unwrap()]);
    assert!(out.status.success(), "inspect without --verify reads no vectors: {}", stderr(&out));
    // Every record is checked against its own CRC before the body's, so the damage is named
    // down to the document.
    assert_user_error(&cellar(&["inspect", dir.to_str().unwrap(), "--verify"]), "fails its checksum");
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
}

/// The binary users install carries user commands only: the benchmarks are `cellar-bench`.
#[test]
fn help_lists_no_benchmark() {
    let out = cellar(&["--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    for command in ["index", "search", "serve", "feed", "inspect"] {
        assert!(help.contains(&format!("  {command} ")), "{command} missing from:\n{help}");
    }
    for gone in ["bench", "synth", "worker"] {
        assert!(!help.contains(gone), "{gone:?} in:\n{help}");
    }
    for gone in ["bench", "bench-store", "bench-store-worker", "synth"] {
        assert_eq!(cellar(&[gone, "--help"]).status.code(), Some(2), "cellar {gone} still parses");
    }
}
