//! `docs/format/stream.md` and README.md's rows for a collection's files must match the code:
//! the log's and the segments' header tables, magics and versions, the entry's kinds and limits,
//! the JSON files as this build writes them, and the file names (see cellar-core's
//! `format_docs` for the other pages).

use std::collections::{BTreeMap, BTreeSet};

use cellar_core::ids::MAX_NAME_BYTES as MAX_META_KEY_BYTES;
use cellar_core::store::MAX_TOKENS_PER_DOC as MAX_TOKENS;
use cellar_search::doc::{MAX_DOC_TEXT_BYTES as MAX_TEXT_BYTES, MAX_ID_BYTES as MAX_KEY_BYTES};
use cellar_search::meta::{MAX_META_KEYS as MAX_META_FIELDS, MAX_META_STRING_BYTES};
use cellar_stream::doc::MAX_DOC_BYTES;
use cellar_stream::legacy::{
    segment_file, ManifestV1, SegmentRef, Settings, KIND_PUT, KIND_TOMBSTONE, MANIFEST_FILE,
    MANIFEST_VERSION, PAGE, READABLE_VERSIONS, SEGMENT_HEADER_FIELDS, SEGMENT_MAGIC,
    SEGMENT_READABLE_VERSIONS, SEGMENT_VERSION, SETTINGS_FILE, VERSION_FIELD, WAL_FILE,
};
use cellar_stream::wal::{
    WAL_HEADER_BYTES, WAL_HEADER_FIELDS, WAL_MAGIC, WAL_READABLE_VERSIONS, WAL_VERSION,
};

use crate::markdown::{bytes_of, field_rows, file_names, json_block, json_keys, owned, page, table};
use crate::markdown::{version_row, version_rows};

const GOLDEN: &str = "testdata/stream-v1/";

/// The page's text from `heading` to the next heading, white space folded to single spaces.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no section {heading}"));
    let rest = &text[start + 1..];
    let end = rest[heading.len()..].find("\n## ").map_or(rest.len(), |i| i + heading.len());
    &rest[..end]
}

fn folded(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `4 MiB`, `64 KiB`, `128 bytes`: a size as the page writes it.
fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// How the page names segment files: `segment_file` with its digits as `N`.
fn segment_pattern() -> String {
    segment_file(1).chars().map(|c| if c.is_ascii_digit() { 'N' } else { c }).collect()
}

fn header_bytes(fields: &[(&str, usize, usize)]) -> usize {
    fields.last().map(|(_, offset, size)| offset + size).unwrap()
}

fn magic_row(text: &str) -> String {
    table(text, "offset").into_iter().find(|r| r[2] == "magic").map(|r| r[3].clone()).expect("a magic row")
}

#[test]
fn log_and_segment_headers_match_the_code() {
    let text = page("stream.md");
    let wal = section(&text, &format!("## `{WAL_FILE}`"));
    assert_eq!(field_rows(wal), owned(&WAL_HEADER_FIELDS));
    assert_eq!(header_bytes(&WAL_HEADER_FIELDS) as u64, WAL_HEADER_BYTES);
    assert!(wal.contains(&format!("A {WAL_HEADER_BYTES}-byte header, version {WAL_VERSION}:")));
    assert_eq!(magic_row(wal).as_bytes(), WAL_MAGIC);
    let segment = section(&text, &format!("## `{}`", segment_pattern()));
    assert_eq!(field_rows(segment), owned(&SEGMENT_HEADER_FIELDS));
    let bytes = header_bytes(&SEGMENT_HEADER_FIELDS);
    assert!(segment.contains(&format!("A {bytes}-byte header in page 0, version {SEGMENT_VERSION}:")));
    assert_eq!(magic_row(segment).as_bytes(), SEGMENT_MAGIC);
    let segment = folded(segment);
    assert!(segment.contains(&format!("each starting on a {} boundary", size(PAGE as usize))));
}

#[test]
fn entry_kinds_and_limits_match_the_code() {
    let text = page("stream.md");
    let meaning: BTreeMap<String, String> =
        table(&text, "field").into_iter().map(|r| (r[0].clone(), r[2].clone())).collect();
    assert_eq!(meaning["kind"], format!("{KIND_PUT} put, {KIND_TOMBSTONE} tombstone"));
    assert_eq!(meaning["n_tokens"], format!("1..={MAX_TOKENS}"));
    assert_eq!(meaning["n_meta"], format!("0..={MAX_META_FIELDS}"));
    let limits = format!(
        "group and id 1..={MAX_KEY_BYTES} bytes, text {}, metadata key {} and string {}, encoded document {}.",
        size(MAX_TEXT_BYTES),
        size(MAX_META_KEY_BYTES),
        size(MAX_META_STRING_BYTES),
        size(MAX_DOC_BYTES)
    );
    assert!(folded(&text).contains(&limits), "stream.md does not say: {limits}");
}

#[test]
fn json_files_are_drawn_as_this_build_writes_them() {
    let text = page("stream.md");
    let drawn = json_block(&text);
    let read: ManifestV1 = serde_json::from_value(drawn.clone()).expect("the example parses as a manifest");
    assert_eq!(read.version, MANIFEST_VERSION);
    let segment = SegmentRef { file: segment_file(7), min_seq: 1, max_seq: 2, entries: 2 };
    let written =
        ManifestV1 { version: MANIFEST_VERSION, segments: vec![segment], flushed_seq: 2, next_segment: 8 };
    assert_eq!(json_keys(&drawn), json_keys(&serde_json::to_value(&written).unwrap()));
    // The settings, drawn in the directory listing with the dimension as `D`.
    let line = text.lines().find(|l| l.trim_start().starts_with(SETTINGS_FILE)).expect("stream.json's line");
    let drawn = line[line.find('{').unwrap()..].replace(": D,", ": 8,");
    let read: Settings = serde_json::from_str(&drawn).unwrap();
    assert_eq!(read, Settings { version: MANIFEST_VERSION, dim: 8, encoder: None });
    assert_eq!(serde_json::to_string(&read).unwrap(), drawn.replace(": ", ":").replace(", ", ","));
}

#[test]
fn the_page_names_the_collection_files_and_no_others() {
    let text = page("stream.md");
    let known: BTreeSet<String> =
        [SETTINGS_FILE, MANIFEST_FILE, WAL_FILE, &segment_pattern()].map(String::from).into();
    let unknown: Vec<String> = file_names(&text).difference(&known).cloned().collect();
    assert!(unknown.is_empty(), "stream.md names files the code does not declare: {unknown:?}");
    let listing = text.split("```text").nth(1).and_then(|rest| rest.split("```").next()).unwrap();
    let listed: BTreeSet<String> =
        listing.lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect();
    for file in [SETTINGS_FILE, MANIFEST_FILE, WAL_FILE, &segment_file(1)] {
        assert!(listed.contains(file), "the directory listing lacks {file}");
    }
}

#[test]
fn readme_names_the_collection_files_and_their_versions() {
    let json = format!("{SETTINGS_FILE}, {MANIFEST_FILE}");
    let wal = bytes_of(&WAL_HEADER_FIELDS, "version");
    let segment = bytes_of(&SEGMENT_HEADER_FIELDS, "version");
    let expected = vec![
        version_row(&json, VERSION_FIELD, MANIFEST_VERSION, READABLE_VERSIONS, GOLDEN),
        version_row(WAL_FILE, &wal, WAL_VERSION, WAL_READABLE_VERSIONS, GOLDEN),
        version_row(&segment_pattern(), &segment, SEGMENT_VERSION, SEGMENT_READABLE_VERSIONS, GOLDEN),
    ];
    assert_eq!(version_rows("cellar-stream"), expected);
}
