//! The pages of `docs/format/` must match the code: the byte layouts drawn there against the
//! field tables the code encodes with, and the files, kinds, magics and versions they name against
//! the ones the code declares. This file holds the store's pages and README.md's store rows to
//! cellar-core; cellar-search and cellar-stream hold theirs, and the first test below checks that
//! every page and every row of the compatibility table has its test.

use std::collections::BTreeSet;

use cellar_core::codec::CodecKind;
use cellar_core::format::header::{HEADER_FIELDS, MAGIC};
use cellar_core::format::manifest::MANIFEST_FILE;
use cellar_core::format::offsets::{ENTRY_BYTES, ENTRY_FIELDS};
use cellar_core::format::record::{RECORD_FIELDS, RECORD_HEADER_BYTES};
use cellar_core::format::versioned::FORMAT_VERSION_FIELD;
use cellar_core::format::{FileKind, Manifest, FORMAT_VERSION, HEADER_BYTES, PAGE_BYTES, READABLE_VERSIONS};
use serde_json::Value;

use crate::fixture;
use crate::markdown::{
    field_rows, file_names, is_file_name, json_block, json_keys, owned, page, table, table_headed,
    version_row, version_rows, workspace, VERSION_COLUMNS,
};

const THIS_TEST: &str = "crates/cellar-core/tests/it/format_docs.rs";
const SEARCH_TEST: &str = "crates/cellar-search/tests/it/format_docs.rs";
const STREAM_TEST: &str = "crates/cellar-stream/tests/format/docs.rs";

/// Every page of `docs/format/` and the test that holds it to the code.
const PAGES: [(&str, &str); 12] = [
    ("README.md", THIS_TEST),
    ("codec.md", THIS_TEST),
    ("header.md", THIS_TEST),
    ("manifest.md", THIS_TEST),
    ("offsets.md", THIS_TEST),
    ("vectors.md", THIS_TEST),
    ("ivf.md", SEARCH_TEST),
    ("live.md", SEARCH_TEST),
    ("splade.md", SEARCH_TEST),
    ("stream.md", STREAM_TEST),
    ("texts.md", SEARCH_TEST),
    ("tokens.md", SEARCH_TEST),
];

/// The crates that answer for rows of README.md's compatibility table, and their test.
const VERSION_OWNERS: [(&str, &str); 3] =
    [("cellar-core", THIS_TEST), ("cellar-search", SEARCH_TEST), ("cellar-stream", STREAM_TEST)];

fn test_source(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_page_and_every_version_row_is_held_to_the_code_by_a_test() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(workspace().join("docs/format"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .collect();
    let listed: BTreeSet<String> = PAGES.iter().map(|(page, _)| page.to_string()).collect();
    assert_eq!(on_disk, listed, "a page of docs/format/ without a test, or a test of a page that is gone");
    for (name, test) in PAGES {
        assert!(test_source(test).contains(&format!("page(\"{name}\")")), "{test} does not read {name}");
    }
    let owners: BTreeSet<&str> = VERSION_OWNERS.iter().map(|(krate, _)| *krate).collect();
    for row in table_headed(&page("README.md"), &VERSION_COLUMNS) {
        assert!(owners.contains(row[1].as_str()), "no test answers for the row of {}", row[0]);
    }
    for (krate, test) in VERSION_OWNERS {
        let call = format!("version_rows(\"{krate}\")");
        assert!(test_source(test).contains(&call), "{test} does not check the rows of {krate}");
    }
}

#[test]
fn header_layout_matches_the_code() {
    let text = page("header.md");
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
    let text = page("vectors.md");
    assert_eq!(field_rows(&text), owned(&RECORD_FIELDS));
    assert!(text.contains(&format!("{RECORD_HEADER_BYTES}-byte record header")));
    assert!(text.contains(&format!("{PAGE_BYTES}-byte pages")));
}

#[test]
fn offsets_layout_matches_the_code() {
    let text = page("offsets.md");
    assert_eq!(field_rows(&text), owned(&ENTRY_FIELDS));
    assert!(text.contains(&format!("{ENTRY_BYTES} bytes per document")));
}

#[test]
fn codec_page_names_every_codec() {
    let text = page("codec.md");
    assert!(text.contains(&format!("after the {HEADER_BYTES}-byte header")));
    for codec in CodecKind::ALL {
        assert!(text.contains(&format!("- `{}`:", codec.name())), "codec.md does not describe {codec:?}");
    }
}

#[test]
fn manifest_example_is_what_the_code_writes_and_reads() {
    let text = page("manifest.md");
    let example = json_block(&text);
    let read: Manifest = serde_json::from_value(example.clone()).expect("the example parses as a manifest");
    assert_eq!((read.format_version, read.page_bytes), (FORMAT_VERSION, PAGE_BYTES));
    let files: Vec<(&str, &str)> = read.files.iter().map(|f| (f.name.as_str(), f.kind.as_str())).collect();
    let store: Vec<(&str, &str)> = FileKind::STORE.iter().map(|k| (k.file_name(), k.name())).collect();
    assert_eq!(files, store);
    let dir = tempfile::tempdir().unwrap();
    fixture::write(dir.path(), CodecKind::F16, &fixture::docs(3, 1));
    let written: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(MANIFEST_FILE)).unwrap()).unwrap();
    let why = "manifest.md's example has other fields than a manifest this build writes";
    assert_eq!(json_keys(&example), json_keys(&written), "{why}");
    assert!(text.contains(&format!("`{FORMAT_VERSION_FIELD}` is read first")));
}

#[test]
fn readme_names_the_store_files_and_their_versions() {
    let text = page("README.md");
    assert!(text.contains(&format!("This is format version {FORMAT_VERSION};")));
    let newest = table(&text, "version").last().map(|row| row[0].parse::<u32>().unwrap());
    assert_eq!(newest, Some(FORMAT_VERSION), "the versions table ends with this build's version");
    // The rows whose page this test holds; the others' crates check theirs.
    let mine = |row: &Vec<String>| {
        PAGES.iter().any(|(page, test)| row[2] == format!("[{page}]({page})") && *test == THIS_TEST)
    };
    let store_rows: Vec<(String, String)> =
        table(&text, "file").into_iter().filter(mine).map(|row| (row[0].clone(), row[2].clone())).collect();
    let mut expected = vec![(MANIFEST_FILE.to_string(), "[manifest.md](manifest.md)".to_string())];
    for (kind, page) in FileKind::STORE.into_iter().zip(["vectors.md", "offsets.md", "codec.md"]) {
        expected.push((kind.file_name().to_string(), format!("[{page}]({page})")));
    }
    assert_eq!(store_rows, expected);
    let file = format!("{MANIFEST_FILE} and the common header of every other binary file");
    let row =
        version_row(&file, FORMAT_VERSION_FIELD, FORMAT_VERSION, READABLE_VERSIONS, "testdata/format-v1/");
    assert_eq!(version_rows("cellar-core"), vec![row]);
}

#[test]
fn pages_name_only_files_the_code_declares() {
    let mut known: BTreeSet<String> = FileKind::ALL.iter().map(|k| k.file_name().to_string()).collect();
    known.insert(MANIFEST_FILE.to_string());
    for name in ["codec.md", "header.md", "manifest.md", "offsets.md", "vectors.md"] {
        let unknown: Vec<String> = file_names(&page(name)).difference(&known).cloned().collect();
        assert!(unknown.is_empty(), "{name} names files the code does not declare: {unknown:?}");
    }
    // README.md may also name the files of the compatibility table, each checked by its crate.
    for row in table_headed(&page("README.md"), &VERSION_COLUMNS) {
        known.extend(row[0].split([' ', ',']).filter(|w| is_file_name(w)).map(String::from));
    }
    let unknown: Vec<String> = file_names(&page("README.md")).difference(&known).cloned().collect();
    assert!(unknown.is_empty(), "README.md names files the code does not declare: {unknown:?}");
}
