//! Checks of the command line before anything starts: value ranges of the flags, and the list
//! of configurations (every `--config`, or the one `--url` server) with unique names.

use std::path::PathBuf;

use cellar_core::{CellarError, Result};
use cellar_search::Mode;

use super::client;
use super::config::{self, ConfigSpec, Vectors};
use super::LoadArgs;
use crate::harness::child::this_exe;

pub fn invalid(msg: impl Into<String>) -> CellarError {
    CellarError::InvalidInput(msg.into())
}

pub fn validate(args: &LoadArgs) -> Result<()> {
    validate_levels(args)?;
    validate_request(args)?;
    validate_files(args)
}

/// `--qps`, the per-level seconds and the in-flight cap.
fn validate_levels(args: &LoadArgs) -> Result<()> {
    if args.qps.is_empty() {
        return Err(invalid("--qps: give at least one level"));
    }
    for &q in &args.qps {
        if !(q > 0.0 && q <= 100_000.0) {
            return Err(invalid(format!("--qps {q}: each level must be > 0 and at most 100000")));
        }
    }
    let seconds = [
        ("--duration", args.duration, false),
        ("--warmup", args.warmup, true),
        ("--drain", args.drain, true),
        ("--timeout", args.timeout, false),
    ];
    for (flag, v, zero_ok) in seconds {
        if !(v.is_finite() && v <= 3600.0 && (v > 0.0 || (zero_ok && v == 0.0))) {
            let need = if zero_ok { ">= 0" } else { "> 0" };
            return Err(invalid(format!("{flag} {v}: seconds must be {need} and at most 3600")));
        }
    }
    if let Some(s) = args.zipf.filter(|s| !(s.is_finite() && *s > 0.0 && *s <= 5.0)) {
        return Err(invalid(format!("--zipf {s}: the exponent must be > 0 and at most 5")));
    }
    if args.max_in_flight == 0 {
        return Err(invalid("--max-in-flight must be at least 1"));
    }
    Ok(())
}

/// What every search request asks for.
fn validate_request(args: &LoadArgs) -> Result<()> {
    if args.k == 0 {
        return Err(invalid("-k must be at least 1"));
    }
    if !Mode::ALL.iter().any(|m| m.name() == args.mode) {
        let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
        return Err(invalid(format!("--mode {:?}: expected one of {}", args.mode, names.join(", "))));
    }
    if args.rerank_k == Some(0) {
        return Err(invalid("--rerank-k must be at least 1"));
    }
    if let Some(a) = args.alpha.filter(|a| !(0.0..=1.0).contains(a)) {
        return Err(invalid(format!("--alpha {a}: must be within [0, 1]")));
    }
    Ok(())
}

fn validate_files(args: &LoadArgs) -> Result<()> {
    if !args.queries.is_file() {
        return Err(invalid(format!("--queries {}: no such file", args.queries.display())));
    }
    if let Some(q) = args.qrels.as_ref().filter(|q| !q.is_file()) {
        return Err(invalid(format!("--qrels {}: no such file", q.display())));
    }
    Ok(())
}

/// The `cellar` binary whose `serve` the `--config`s start: `--cellar`, or the `cellar` beside
/// this executable. Checked before anything starts; with `--url` nothing is started.
pub fn cellar_binary(args: &LoadArgs) -> Result<PathBuf> {
    let path = match &args.cellar {
        Some(path) => path.clone(),
        None => this_exe()?.with_file_name("cellar"),
    };
    if args.url.is_none() && !path.is_file() {
        return Err(invalid(format!(
            "no cellar binary at {} (the --config servers run its `serve`): build it with \
             cargo build --release -p cellar-cli, or pass --cellar PATH",
            path.display()
        )));
    }
    Ok(path)
}

/// The configurations to run: every `--config`, or the one `--url` server.
pub fn configurations(args: &LoadArgs) -> Result<Vec<ConfigSpec>> {
    let configs = match &args.url {
        Some(url) => vec![attached_config(args, url)?],
        None if args.configs.is_empty() => {
            return Err(invalid("give one or more --config SPEC, or --url URL of a running server"))
        }
        None => args.configs.iter().map(|s| config::parse(s)).collect::<Result<Vec<_>>>()?,
    };
    for (i, c) in configs.iter().enumerate() {
        if configs[..i].iter().any(|o| o.name == c.name) {
            return Err(invalid(format!("two configurations are named {:?}", c.name)));
        }
    }
    if let Some(b) = args.baseline.as_ref().filter(|b| !configs.iter().any(|c| &&c.name == b)) {
        return Err(invalid(format!("--baseline {b:?} names no configuration")));
    }
    Ok(configs)
}

/// The configuration of `--url` (with `--name`, `--vectors`, `--index`).
fn attached_config(args: &LoadArgs, url: &str) -> Result<ConfigSpec> {
    client::parse_loopback_url(url)?;
    let vectors: Vectors = args.vectors.as_deref().unwrap_or("server").parse()?;
    if vectors.by_client() {
        let index = args.index.as_ref().ok_or_else(|| invalid("--vectors client needs --index DIR"))?;
        if !index.join("index.json").is_file() {
            return Err(invalid(format!("--index {}: not an index (no index.json)", index.display())));
        }
    }
    Ok(ConfigSpec {
        name: args.name.clone().unwrap_or_else(|| "server".into()),
        index: args.index.clone(),
        vectors,
        url: Some(url.to_string()),
        ..ConfigSpec::default()
    })
}
