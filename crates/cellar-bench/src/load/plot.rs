//! PREFIX.png: P95 against offered QPS, one line per configuration, drawn by matplotlib (the
//! script is embedded in the binary). A missing python3 or matplotlib is an error, not a skip.

use std::path::Path;
use std::process::Command;

use cellar_core::{CellarError, Result};

const SCRIPT: &str = include_str!("plot.py");

pub fn draw(json: &Path, png: &Path) -> Result<()> {
    let fail = |why: String| {
        CellarError::Unsupported(format!(
            "cannot draw {}: {why}; python3 with matplotlib is needed: pip install matplotlib (or make setup)",
            png.display()
        ))
    };
    let out = Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .arg(json)
        .arg(png)
        .output()
        .map_err(|e| fail(format!("cannot run python3 ({e})")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.trim().lines().last().unwrap_or("").to_string();
        return Err(fail(format!("python3 exited with {} ({last})", out.status)));
    }
    Ok(())
}
