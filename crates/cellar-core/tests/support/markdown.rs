//! Reading `docs/format/*.md` in the tests that hold those pages to the code (`format_docs` in
//! cellar-core and cellar-search, `docs` in cellar-stream's `format` tests; each includes this
//! file with `#[path]`; each uses part of it).

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cellar_core::format::VersionRange;

/// The workspace's root (two levels above the including crate).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of `docs/format/<name>`.
pub fn page(name: &str) -> String {
    let path = workspace().join("docs/format").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Rows of the first Markdown table whose header row starts with `first_column`, each cell
/// trimmed and without backticks.
pub fn table(text: &str, first_column: &str) -> Vec<Vec<String>> {
    table_where(text, |header| header[0] == first_column)
}

/// Rows of the first Markdown table whose header row is `columns`.
pub fn table_headed(text: &str, columns: &[&str]) -> Vec<Vec<String>> {
    table_where(text, |header| header == columns)
}

fn table_where(text: &str, header_matches: impl Fn(&[String]) -> bool) -> Vec<Vec<String>> {
    let cells = |line: &str| {
        line.trim().trim_matches('|').split('|').map(|c| c.trim().replace('`', "")).collect::<Vec<_>>()
    };
    let mut lines =
        text.lines().skip_while(|l| !(l.trim_start().starts_with('|') && header_matches(&cells(l))));
    lines.next().expect("no table with that header");
    lines.skip(1).take_while(|l| l.trim_start().starts_with('|')).map(cells).collect()
}

/// (field, offset, size) of the first table whose columns start `offset | size | field`.
pub fn field_rows(text: &str) -> Vec<(String, usize, usize)> {
    table(text, "offset")
        .into_iter()
        .map(|r| (r[2].clone(), r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect()
}

/// A field table of the code in the shape of [`field_rows`].
pub fn owned(fields: &[(&str, usize, usize)]) -> Vec<(String, usize, usize)> {
    fields.iter().map(|(n, o, s)| (n.to_string(), *o, *s)).collect()
}

/// `bytes A..B`: where a field of `fields` named `name` lies, as the compatibility table says it.
pub fn bytes_of(fields: &[(&str, usize, usize)], name: &str) -> String {
    let (_, offset, size) = fields.iter().find(|f| f.0 == name).unwrap_or_else(|| panic!("no field {name}"));
    format!("bytes {offset}..{}", offset + size)
}

/// The columns of README.md's compatibility table.
pub const VERSION_COLUMNS: [&str; 6] = ["file", "crate", "version", "written", "read", "golden files"];

/// The rows of README.md's compatibility table that `krate` answers for, without that column:
/// file, version field, version written, versions read, golden directory.
pub fn version_rows(krate: &str) -> Vec<Vec<String>> {
    let rows = table_headed(&page("README.md"), &VERSION_COLUMNS);
    let mine = rows.into_iter().filter(|r| r[1] == krate);
    mine.map(|r| r.into_iter().enumerate().filter(|(i, _)| *i != 1).map(|(_, c)| c).collect()).collect()
}

/// One row of the compatibility table, as [`version_rows`] returns it, after checking that its
/// golden directories (none, one, or several separated by ", ") exist.
pub fn version_row(file: &str, field: &str, written: u32, read: VersionRange, golden: &str) -> Vec<String> {
    for dir in golden.split(", ").filter(|d| !d.is_empty()) {
        assert!(workspace().join(dir).is_dir(), "{dir} is not a directory");
    }
    let read = format!("{}..={}", read.oldest, read.newest);
    [file, field, &written.to_string(), &read, golden].map(String::from).to_vec()
}

/// Whether `s` looks like a file name of the formats (`name.bin`, `.json`, `.log`, `.seg`,
/// perhaps with a directory: `ivf/ivf.json`).
pub fn is_file_name(s: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    [".bin", ".json", ".log", ".seg"].iter().any(|ext| s.ends_with(ext)) && s.chars().all(allowed)
}

/// The file names a page mentions in inline code, code blocks left out.
pub fn file_names(text: &str) -> BTreeSet<String> {
    let mut in_block = false;
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if !in_block {
            let spans = line.split('`').skip(1).step_by(2);
            names.extend(spans.filter(|s| is_file_name(s)).map(String::from));
        }
    }
    names
}

/// The first code block of `text` fenced as ```json.
pub fn json_block(text: &str) -> serde_json::Value {
    let block = text.split("```json").nth(1).and_then(|rest| rest.split("```").next()).expect("a json block");
    serde_json::from_str(block).unwrap_or_else(|e| panic!("{e}: {block}"))
}

/// The keys of every object in `value`, by path (`counts.docs`, `files[].name`).
pub fn json_keys(value: &serde_json::Value) -> BTreeSet<String> {
    fn walk(value: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
        match value {
            serde_json::Value::Object(map) => map.iter().for_each(|(key, v)| {
                let path = format!("{prefix}{key}");
                walk(v, &format!("{path}."), out);
                out.insert(path);
            }),
            serde_json::Value::Array(items) => {
                let prefix = format!("{}[].", prefix.trim_end_matches('.'));
                items.iter().for_each(|v| walk(v, &prefix, out))
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(value, "", &mut out);
    out
}
