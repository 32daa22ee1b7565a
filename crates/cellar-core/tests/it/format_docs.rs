//! The byte layouts drawn in `docs/format/` must match the constants the code encodes with.

use cellar_core::format::header::{HEADER_FIELDS, MAGIC};
use cellar_core::format::{FileKind, FORMAT_VERSION, HEADER_BYTES, PAGE_BYTES};
use cellar_core::store::offsets::{ENTRY_BYTES, ENTRY_FIELDS};
use cellar_core::store::record::{RECORD_FIELDS, RECORD_HEADER_BYTES};

fn doc(name: &str) -> String {
    let path = format!("{}/../../docs/format/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Rows of the markdown table whose header row starts with `first_column`.
fn table(text: &str, first_column: &str) -> Vec<Vec<String>> {
    let cells = |line: &str| {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect::<Vec<_>>()
    };
    let mut lines =
        text.lines().skip_while(|l| !(l.trim_start().starts_with('|') && cells(l)[0] == first_column));
    lines.next().unwrap_or_else(|| panic!("no table starting with column {first_column:?}"));
    lines.skip(1).take_while(|l| l.trim_start().starts_with('|')).map(cells).collect()
}

fn field_rows(text: &str) -> Vec<(String, usize, usize)> {
    table(text, "offset")
        .into_iter()
        .map(|r| (r[2].clone(), r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect()
}

fn owned(fields: &[(&str, usize, usize)]) -> Vec<(String, usize, usize)> {
    fields.iter().map(|(n, o, s)| (n.to_string(), *o, *s)).collect()
}

#[test]
fn header_layout_matches_the_code() {
    let text = doc("header.md");
    assert_eq!(field_rows(&text), owned(&HEADER_FIELDS));
    let last = HEADER_FIELDS.last().unwrap();
    assert_eq!(last.1 + last.2, HEADER_BYTES);
    assert!(text.contains(&format!("{HEADER_BYTES}-byte header")));
    assert!(text.contains(r"\x89CELLAR\n") && MAGIC == *b"\x89CELLAR\n");
    assert!(text.contains(&format!("format version {FORMAT_VERSION}")));
    let kinds: Vec<(u32, String, String)> = table(&text, "kind")
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].clone(), r[2].clone()))
        .collect();
    let expected: Vec<(u32, String, String)> =
        FileKind::ALL.iter().map(|k| (*k as u32, k.name().to_string(), k.file_name().to_string())).collect();
    assert_eq!(kinds, expected);
}

#[test]
fn record_layout_matches_the_code() {
    let text = doc("vectors.md");
    assert_eq!(field_rows(&text), owned(&RECORD_FIELDS));
    assert!(text.contains(&format!("{RECORD_HEADER_BYTES}-byte record header")));
    assert!(text.contains(&format!("{PAGE_BYTES}-byte pages")));
}

#[test]
fn offsets_layout_matches_the_code() {
    let text = doc("offsets.md");
    assert_eq!(field_rows(&text), owned(&ENTRY_FIELDS));
    assert!(text.contains(&format!("{ENTRY_BYTES} bytes per document")));
}
