//! `cellar index`, `search`, `tune` and `eval` end to end on a collection the test writes, and
//! exit code 2 with a message for bad input. Needs the default model installed.

use std::path::Path;
use std::process::{Command, Output};

fn cellar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cellar")).args(args).output().expect("run cellar")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_user_error(out: &Output, needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(needle) && !err.contains("panicked"), "expected {needle:?} in: {err}");
}

fn write_collection(dir: &Path) {
    std::fs::create_dir_all(dir.join("qrels")).unwrap();
    let topics = [
        ("tea", "Green tea leaves are steamed and dried"),
        ("moon", "The moon orbits the earth every month"),
    ];
    let mut corpus = String::new();
    for (topic, sentence) in topics {
        for n in 0..4 {
            corpus.push_str(&format!(
                "{{\"_id\": \"{topic}{n}\", \"title\": \"{topic}\", \"text\": \"{sentence}, note {n}.\"}}\n"
            ));
        }
    }
    std::fs::write(dir.join("corpus.jsonl"), corpus).unwrap();
    std::fs::write(dir.join("queries.jsonl"), "{\"_id\": \"q\", \"text\": \"how is green tea dried\"}\n")
        .unwrap();
    let qrels = "query-id\tcorpus-id\tscore\nq\ttea0\t1\nq\ttea1\t2\n";
    std::fs::write(dir.join("qrels/test.tsv"), qrels).unwrap();
    std::fs::write(dir.join("qrels/train.tsv"), qrels).unwrap();
}

#[test]
fn index_search_tune_eval() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    write_collection(&data);
    let index = tmp.path().join("index");
    let (data_s, index_s) = (data.to_str().unwrap(), index.to_str().unwrap());
    let out = cellar(&["index", data_s, "--out", index_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("indexed 8 docs"), "{}", text(&out.stdout));

    let out = cellar(&["search", "--index", index_s, "green tea", "-k", "3", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let response: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(response["hits"].as_array().unwrap().len(), 3);
    assert!(response["hits"][0]["id"].as_str().unwrap().starts_with("tea"));
    assert!(response["io"]["bytes_read"].as_u64().unwrap() > 0);

    let out = cellar(&["tune", "--index", index_s, "--data", data_s, "--split", "train"]);
    assert!(
        out.status.success() && text(&out.stdout).contains("saved as the defaults"),
        "{}",
        text(&out.stderr)
    );
    let out = cellar(&["eval", "--index", index_s, "--data", data_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for row in ["| bm25 |", "| dense pooled (exact) |", "| rerank |", "rerank_k=16 |", "rerank_k=200 |"] {
        assert!(text(&out.stdout).contains(row), "{row} missing from:\n{}", text(&out.stdout));
    }

    assert_user_error(&cellar(&["search", "--index", index_s, "tea", "--mode", "fuzzy"]), "unknown mode");
    assert_user_error(&cellar(&["search", "--index", index_s, "tea", "-k", "0"]), "k must be");
    assert_user_error(&cellar(&["search", "--index", index_s, "  "]), "query is empty");
    assert_user_error(
        &cellar(&["tune", "--index", index_s, "--data", data_s, "--split", "test"]),
        "test split",
    );
    assert_user_error(&cellar(&["index", data_s, "--out", index_s]), "not empty");
    assert_user_error(&cellar(&["search", "--index", data_s, "tea"]), "not a Cellar index");
}
