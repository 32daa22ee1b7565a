//! Writing a report: `PREFIX.json` (pretty, one trailing newline) and `PREFIX.md`, the prefix's
//! folder created first. `PREFIX` + suffix, never `with_extension` (which would eat a dot in the
//! prefix).

use std::path::{Path, PathBuf};

use cellar_core::{CellarError, IoContext, Result};
use serde::Serialize;

/// `PREFIX` + `suffix`.
pub fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Writes `PREFIX.json` and `PREFIX.md`; returns their paths.
pub fn write_report(prefix: &Path, json: &impl Serialize, markdown: &str) -> Result<(PathBuf, PathBuf)> {
    if let Some(dir) = prefix.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).at(dir)?;
    }
    let json_path = with_suffix(prefix, ".json");
    let md_path = with_suffix(prefix, ".md");
    let text = serde_json::to_string_pretty(json)
        .map_err(|e| CellarError::internal(format!("a report does not serialise: {e}")))?;
    std::fs::write(&json_path, text + "\n").at(&json_path)?;
    std::fs::write(&md_path, markdown).at(&md_path)?;
    Ok((json_path, md_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_both_files_under_a_new_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let prefix = tmp.path().join("results/run.v2");
        let (json, md) = write_report(&prefix, &serde_json::json!({ "a": 1 }), "# run\n").unwrap();
        assert_eq!(json, tmp.path().join("results/run.v2.json"));
        assert_eq!(std::fs::read_to_string(json).unwrap(), "{\n  \"a\": 1\n}\n");
        assert_eq!(std::fs::read_to_string(md).unwrap(), "# run\n");
    }
}
