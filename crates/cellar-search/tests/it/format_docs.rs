//! `docs/format/ivf.md`, `texts.md` and README.md's rows for the search index's files must match
//! the code: file names and kinds, the layout versions, the sizes the layouts encode with, and
//! where each file keeps its version (see cellar-core's `format_docs` for the other pages).

use std::collections::BTreeSet;

use cellar_core::format::header::HEADER_FIELDS;
use cellar_core::format::versioned::FORMAT_VERSION_FIELD;
use cellar_core::format::{
    FileKind, HEADER_BYTES, PAGE_BYTES, TEXT_OFFSETS_READABLE_VERSIONS, TEXT_OFFSETS_VERSION,
};
use cellar_core::CellarError;
use cellar_encode::Pca;
use cellar_search::config::{CONFIG_FILE, INDEX_FORMAT_VERSION, INDEX_READABLE_VERSIONS};
use cellar_search::index::PCA_FILE;
use cellar_search::ivf::layout::{CENTROIDS_PREAMBLE_BYTES, MEMBER_FIXED_BYTES, TABLE_ENTRY_BYTES};
use cellar_search::ivf::{IVF_CONFIG_FILE, IVF_DIR, IVF_FORMAT_VERSION, IVF_KINDS, IVF_READABLE_VERSIONS};
use cellar_search::texts::{TEXT_END_BYTES, TEXT_ENTRY_BYTES, TEXT_ENTRY_FIELDS};
use cellar_search::tokens::layout::{ENTRY_BYTES, HEAD_BYTES};
use cellar_search::tokens::lists::BLOCK_IDS;
use cellar_search::tokens::{
    TOKENS_CONFIG_FILE, TOKENS_DIR, TOKENS_FORMAT_VERSION, TOKENS_READABLE_VERSIONS, TOKEN_KINDS,
};

use cellar_search::live::merge::MERGED_SUFFIX;
use cellar_search::live::{
    FROZEN_WAL_FILE, LIVE_DIR, LIVE_MANIFEST, LIVE_READABLE_VERSIONS, LIVE_VERSION, OP_DELETE, OP_PUT,
    OP_PUT_GROUP, OP_PUT_META, WAL_FILE,
};
use cellar_search::{DocIn, Index, OpenOptions, WriteOp, WriteRequest};

use crate::markdown::{
    bytes_of, field_rows, file_names, json_block, json_keys, owned, page, table, version_row, version_rows,
};

const TEXT_KINDS: [FileKind; 2] = [FileKind::Texts, FileKind::TextOffsets];

#[test]
fn texts_page_matches_the_code() {
    let text = page("texts.md");
    let files: Vec<(String, String)> =
        table(&text, "file").into_iter().map(|r| (r[0].clone(), r[1].clone())).collect();
    let expected: Vec<(String, String)> = TEXT_KINDS
        .iter()
        .map(|k| (k.file_name().to_string(), format!("{} {}", *k as u32, k.name())))
        .collect();
    assert_eq!(files, expected);
    assert_eq!(field_rows(&text), owned(&TEXT_ENTRY_FIELDS));
    let last = TEXT_ENTRY_FIELDS.last().unwrap();
    assert_eq!(last.1 + last.2, TEXT_ENTRY_BYTES);
    assert!(text.contains(&format!("one {TEXT_ENTRY_BYTES}-byte entry per document")));
    assert!(text.contains(&format!("{TEXT_END_BYTES} bytes each")), "version 1's offsets and the end offset");
    assert!(text.contains(&format!("common {HEADER_BYTES}-byte header")));
    assert!(text.contains(&format!("## `text_offsets.bin`, version {TEXT_OFFSETS_VERSION}")));
    for version in TEXT_OFFSETS_READABLE_VERSIONS.oldest..TEXT_OFFSETS_VERSION {
        assert!(
            text.contains(&format!("## `text_offsets.bin`, version {version} (still read)")),
            "version {version}"
        );
    }
    assert_eq!((FileKind::Texts.version(), FileKind::TextOffsets.version()), (1, TEXT_OFFSETS_VERSION));
    let known: BTreeSet<String> = TEXT_KINDS.iter().map(|k| k.file_name().to_string()).collect();
    assert_eq!(file_names(&text), known, "texts.md names exactly the text store's files");
}

#[test]
fn ivf_page_matches_the_code() {
    let text = page("ivf.md");
    let files: Vec<(String, String)> =
        table(&text, "file").into_iter().map(|r| (r[0].clone(), r[1].clone())).collect();
    let mut expected = vec![(IVF_CONFIG_FILE.to_string(), "commit point".to_string())];
    expected.extend(IVF_KINDS.map(|k| (k.file_name().to_string(), format!("{} {}", k as u32, k.name()))));
    assert_eq!(files, expected);
    let version = format!("`{FORMAT_VERSION_FIELD}` in `{IVF_CONFIG_FILE}` ({IVF_FORMAT_VERSION})");
    assert!(text.contains(&version), "ivf.md does not say {version}");
    // The preamble of ivf_centroids.bin: contiguous fields ending where the rotation starts.
    let body = table(&text, "offset");
    let sized = |r: &&Vec<String>| r[0].parse::<usize>().is_ok() && r[1].parse::<usize>().is_ok();
    let mut end = 0;
    for row in body.iter().take_while(sized) {
        assert_eq!(row[0].parse::<usize>().unwrap(), end, "{row:?} does not follow the field before it");
        end += row[1].parse::<usize>().unwrap();
    }
    assert_eq!(end, CENTROIDS_PREAMBLE_BYTES);
    let rotation = body.iter().find(|r| !sized(r)).expect("the rotation's row");
    assert_eq!(rotation[0], CENTROIDS_PREAMBLE_BYTES.to_string(), "the rotation follows the preamble");
    assert!(text.contains(&format!("| {TABLE_ENTRY_BYTES} clusters |")), "cluster table entries");
    // A posting block's fixed columns (4n bytes each) and the member size the reader expects.
    let fixed: usize = table(&text, "size").iter().filter(|r| r[0] == "4n").map(|_| 4).sum();
    assert_eq!(fixed, MEMBER_FIXED_BYTES);
    assert!(text.contains(&format!("({MEMBER_FIXED_BYTES} + 8·words)")));
    assert!(text.contains(&format!("body at {PAGE_BYTES}")));
    let mut known: BTreeSet<String> = IVF_KINDS.iter().map(|k| k.file_name().to_string()).collect();
    known.insert(IVF_CONFIG_FILE.to_string());
    assert_eq!(file_names(&text), known, "ivf.md names exactly the IVF's files");
}

#[test]
fn tokens_page_matches_the_code() {
    let text = page("tokens.md");
    let files: Vec<(String, String)> =
        table(&text, "file").into_iter().map(|r| (r[0].clone(), r[1].clone())).collect();
    let mut expected = vec![(TOKENS_CONFIG_FILE.to_string(), "commit point".to_string())];
    expected.extend(TOKEN_KINDS.map(|k| (k.file_name().to_string(), format!("{} {}", k as u32, k.name()))));
    assert_eq!(files, expected);
    let version = format!("`{FORMAT_VERSION_FIELD}` in `{TOKENS_CONFIG_FILE}` ({TOKENS_FORMAT_VERSION})");
    assert!(text.contains(&version), "tokens.md does not say {version}");
    // The head of token_centroids.bin: contiguous fields ending where the tops start.
    let body = table(&text, "offset");
    let mut end = 0;
    for row in body.iter().take_while(|r| r[1].parse::<usize>().is_ok()) {
        assert_eq!(row[0].parse::<usize>().unwrap(), end, "{row:?} does not follow the field before it");
        end += row[1].parse::<usize>().unwrap();
    }
    assert_eq!(end, HEAD_BYTES);
    assert!(text.contains(&format!("| {ENTRY_BYTES}·K |")), "the directory's entries");
    assert!(text.contains(&format!("in blocks of {BLOCK_IDS}")));
    assert!(text.contains(&format!("body at {PAGE_BYTES}")));
    let mut known: BTreeSet<String> = TOKEN_KINDS.iter().map(|k| k.file_name().to_string()).collect();
    known.insert(TOKENS_CONFIG_FILE.to_string());
    assert_eq!(file_names(&text), known, "tokens.md names exactly the token stage's files");
}

/// Where the compatibility table says `pca.bin` keeps its version: checked by writing one and
/// claiming the next version there, which must be refused as `Incompatible`.
fn pca_version_bytes_are_where_the_table_says(field: &str) {
    let range = field.strip_prefix("bytes ").expect("bytes A..B");
    let (start, end) = range.split_once("..").unwrap();
    let (start, end): (usize, usize) = (start.parse().unwrap(), end.parse().unwrap());
    let sample: Vec<f32> = (0..64).map(|i| ((i * 37 % 11) as f32 - 5.0) / 5.0).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(PCA_FILE);
    Pca::fit(&sample, 4, 2).unwrap().save(&path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes[start..end], Pca::VERSION.to_le_bytes());
    let newer = Pca::READABLE_VERSIONS.newest + 1;
    bytes[start..end].copy_from_slice(&newer.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    assert!(matches!(Pca::load(&path), Err(CellarError::Incompatible { found, .. }) if found == newer));
}

#[test]
fn readme_names_the_search_index_files_and_their_versions() {
    let text = page("README.md");
    let ivf_row =
        table(&text, "file").into_iter().find(|r| r[0] == format!("{IVF_DIR}/")).expect("an ivf/ row");
    assert_eq!(ivf_row[2], "[ivf.md](ivf.md)");
    let rows = version_rows("cellar-search");
    let pca_field = rows.iter().find(|r| r[0] == PCA_FILE).map(|r| r[1].clone()).expect("a pca.bin row");
    pca_version_bytes_are_where_the_table_says(&pca_field);
    let texts_row =
        table(&text, "file").into_iter().find(|r| r[2] == "[texts.md](texts.md)").expect("a texts row");
    assert_eq!(texts_row[0], TEXT_KINDS.map(|k| k.file_name()).join(", "));
    let ivf_json = format!("{IVF_DIR}/{IVF_CONFIG_FILE}");
    let expected = vec![
        version_row(CONFIG_FILE, FORMAT_VERSION_FIELD, INDEX_FORMAT_VERSION, INDEX_READABLE_VERSIONS, ""),
        version_row(
            FileKind::TextOffsets.file_name(),
            &bytes_of(&HEADER_FIELDS, FORMAT_VERSION_FIELD),
            FileKind::TextOffsets.version(),
            FileKind::TextOffsets.readable_versions(),
            "testdata/texts-v1/, testdata/texts-v2/",
        ),
        version_row(PCA_FILE, &pca_field, Pca::VERSION, Pca::READABLE_VERSIONS, ""),
        version_row(
            &ivf_json,
            FORMAT_VERSION_FIELD,
            IVF_FORMAT_VERSION,
            IVF_READABLE_VERSIONS,
            "testdata/ivf-v1/",
        ),
        version_row(
            &format!("{}/{}", cellar_search::splade::SPLADE_DIR, cellar_search::splade::SPLADE_CONFIG),
            FORMAT_VERSION_FIELD,
            cellar_search::splade::SPLADE_FORMAT_VERSION,
            cellar_search::splade::SPLADE_READABLE_VERSIONS,
            "",
        ),
        version_row(
            &format!("{TOKENS_DIR}/{TOKENS_CONFIG_FILE}"),
            FORMAT_VERSION_FIELD,
            TOKENS_FORMAT_VERSION,
            TOKENS_READABLE_VERSIONS,
            "testdata/tokens-v1/",
        ),
        version_row(
            &format!("{LIVE_DIR}/{LIVE_MANIFEST}"),
            "version",
            LIVE_VERSION,
            LIVE_READABLE_VERSIONS,
            "",
        ),
    ];
    assert_eq!(rows, expected);
}

#[test]
fn live_page_matches_the_code_and_a_written_index() {
    let text = page("live.md");
    let files: Vec<String> = table(&text, "file").into_iter().map(|r| r[0].clone()).collect();
    let lock = cellar_core::format::fsio::LOCK_FILE;
    let merged = format!("seg-<seq>{MERGED_SUFFIX}/");
    assert_eq!(files, [lock, LIVE_MANIFEST, WAL_FILE, FROZEN_WAL_FILE, "seg-<seq>/", merged.as_str()]);
    let tags: Vec<(String, String)> = table(&text, "tag")
        .into_iter()
        .map(|r| (r[0].clone(), r[1].split(':').next().unwrap().to_string()))
        .collect();
    assert_eq!(
        tags,
        [
            (OP_PUT.to_string(), "put".to_string()),
            (OP_DELETE.to_string(), "delete".to_string()),
            (OP_PUT_META.to_string(), "put with metadata".to_string()),
            (OP_PUT_GROUP.to_string(), "put in a group".to_string())
        ]
    );
    assert!(text.contains(&format!("\"version\": {LIVE_VERSION}")));

    let (_tmp, dir) = crate::fixture::copy_index();
    let index = Index::open(&dir, OpenOptions::default()).unwrap();
    let doc = DocIn { id: "new".into(), text: "a written document".into(), ..Default::default() };
    index.write(WriteRequest { ops: vec![WriteOp::Add(doc), WriteOp::Delete("bread-0".into())] }).unwrap();
    index.flush().unwrap();
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(LIVE_DIR).join(LIVE_MANIFEST)).unwrap()).unwrap();
    assert_eq!(
        json_keys(&json_block(&text)),
        json_keys(&written),
        "the page's example has the manifest's fields"
    );
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir.join(LIVE_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let segment = written["segments"][0]["name"].as_str().unwrap().to_string();
    assert_eq!(
        on_disk,
        BTreeSet::from([lock.to_string(), LIVE_MANIFEST.to_string(), WAL_FILE.to_string(), segment])
    );
}

#[test]
fn splade_page_names_the_files_a_build_writes_and_their_kinds() {
    use cellar_search::splade::{build_splade, SpladeBuildOptions, SPLADE_CONFIG, SPLADE_DIR};
    let text = page("splade.md");
    let rows = table(&text, "file");
    let files: Vec<String> = rows.iter().map(|r| r[0].clone()).collect();
    let kinds = [FileKind::SpladeTerms, FileKind::SpladePostings];
    let mut expected = vec![SPLADE_CONFIG.to_string()];
    expected.extend(kinds.iter().map(|k| k.file_name().to_string()));
    assert_eq!(files, expected);
    for (row, kind) in rows[1..].iter().zip(kinds) {
        assert_eq!(
            row[1],
            format!("{} {}", kind as u32, kind.name()),
            "the table cell without its code marks"
        );
    }
    let (_tmp, dir) = crate::fixture::copy_index();
    build_splade(&dir, &SpladeBuildOptions { threads: 1, ..SpladeBuildOptions::default() }).unwrap();
    let mut written: Vec<String> = std::fs::read_dir(dir.join(SPLADE_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    expected.sort();
    assert_eq!(written, expected, "the page lists what a build writes");
    let bytes = std::fs::read(dir.join(SPLADE_DIR).join(FileKind::SpladePostings.file_name())).unwrap();
    assert_eq!(bytes.len() % 4096, 0, "the postings are whole pages, as the page says");
}
