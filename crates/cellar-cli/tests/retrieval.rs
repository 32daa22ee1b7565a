//! `cellar index`, `search`, `tune` and `eval` end to end on a collection the test writes, and
//! exit code 2 with a message for bad input. Needs the default model installed.

mod common;
use common::{assert_user_error, cellar, http, port_of, text};

use std::path::{Path, PathBuf};
use std::process::Command;

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
    let queries = "{\"_id\": \"q\", \"text\": \"how is green tea dried\"}\n\
                   {\"_id\": \"m\", \"text\": \"what orbits the earth\"}\n";
    std::fs::write(dir.join("queries.jsonl"), queries).unwrap();
    let qrels = "query-id\tcorpus-id\tscore\nq\ttea0\t1\nq\ttea1\t2\n";
    // The test split judges both queries, so it can be cross-validated in two folds.
    std::fs::write(dir.join("qrels/test.tsv"), format!("{qrels}m\tmoon2\t1\n")).unwrap();
    std::fs::write(dir.join("qrels/train.tsv"), qrels).unwrap();
}

/// A collection and the index `cellar index` builds of it, in a temporary directory.
fn indexed() -> (tempfile::TempDir, PathBuf, PathBuf) {
    indexed_at("index")
}

/// The test collection indexed into `at` (a path under a new temporary directory).
fn indexed_at(at: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    write_collection(&data);
    let index = tmp.path().join(at);
    let out = cellar(&["index", data.to_str().unwrap(), "--out", index.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    (tmp, data, index)
}

/// `cellar tune --p95-ms`: the best setting within the bound is saved, the token stage's nprobe
/// with it; a bound no setting meets is refused (exit 2) and nothing is saved.
#[test]
fn tune_holds_the_choice_to_a_p95_bound_and_tunes_the_token_stage() {
    let (_tmp, data, index) = indexed();
    let (data_s, index_s) = (data.to_str().unwrap(), index.to_str().unwrap());
    let out = cellar(&["tokens", "build", "--index", index_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tokens_json = index.join("tokens").join("tokens.json");
    let tune = ["tune", "--index", index_s, "--data", data_s, "--split", "train", "--p95-ms"];
    let (index_before, tokens_before) =
        (std::fs::read(index.join("index.json")).unwrap(), std::fs::read(&tokens_json).unwrap());
    let refused = cellar(&[&tune[..], &["0.000001"]].concat());
    assert_user_error(&refused, "no setting keeps P95 within 0.000001 ms");
    assert!(text(&refused.stderr).contains("nothing was saved"), "{}", text(&refused.stderr));
    assert_eq!(std::fs::read(index.join("index.json")).unwrap(), index_before, "nothing saved");
    assert_eq!(std::fs::read(&tokens_json).unwrap(), tokens_before, "nothing saved");
    assert_user_error(&cellar(&[&tune[..], &["0"]].concat()), "positive number of milliseconds");

    let out = cellar(&[&tune[..], &["100000"]].concat());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for says in
        ["| rerank_k (hybrid) |", "best nDCG@10 with P95 within 100000 ms", "| nprobe (dense, token stage) |"]
    {
        assert!(stdout.contains(says), "{says} missing from:\n{stdout}");
    }
    // The number printed right after `said`.
    let number_after = |said: &str| -> usize {
        let rest = stdout.split(said).nth(1).unwrap_or_else(|| panic!("no {said:?} in:\n{stdout}"));
        rest.split_whitespace().next().and_then(|n| n.parse().ok()).expect("a number")
    };
    let chosen = number_after("token stage chosen (best nDCG@10 with P95 within 100000 ms): nprobe ");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&tokens_json).unwrap()).unwrap();
    assert_eq!(saved["search"]["nprobe"], chosen, "the chosen nprobe is the token stage's default");
    assert!(stdout.contains("| depth (dense, token stage) |"), "{stdout}");
    let depth = number_after("token stage depth chosen: ");
    assert_eq!(saved["search"]["depth"], depth, "the chosen depth is the token stage's default");
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(index.join("index.json")).unwrap()).unwrap();
    assert!(config["search"]["tuned"]["qrels"].as_str().unwrap().ends_with("train.tsv"), "{config}");

    // A written document joins the stage's lists on disk with `cellar tokens retrain`, which
    // keeps the tuned nprobe.
    let docs = data.join("written.jsonl");
    std::fs::write(&docs, "{\"id\": \"kelp\", \"text\": \"Kelp forests grow in cold coastal seas\"}\n")
        .unwrap();
    let out = cellar(&["add", docs.to_str().unwrap(), "--index", index_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cellar(&["tokens", "retrain", "--index", index_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("(ids below 9)"), "{}", text(&out.stdout));
    let retrained: serde_json::Value = serde_json::from_slice(&std::fs::read(&tokens_json).unwrap()).unwrap();
    assert_eq!(
        (retrained["docs"].as_u64(), &retrained["search"]["nprobe"], &retrained["search"]["depth"]),
        (Some(9), &saved["search"]["nprobe"], &saved["search"]["depth"])
    );
    // Every leaf probed (tune may choose as few as 2 of them), so every document in the lists on
    // disk is met, the written one with them.
    let every_leaf = retrained["leaves"].as_u64().expect("the stage's leaves").to_string();
    let search = ["search", "--index", index_s, "kelp forests in cold seas", "--mode", "dense", "--json"];
    let out = cellar(&[&search[..], &["--nprobe", &every_leaf]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // (The test model scores every pair near 1: the written document is a candidate, not first.)
    let found = hits["hits"].as_array().unwrap().iter().any(|h| h["id"] == "kelp");
    assert!(found && hits["tokens"]["scored"] == 9, "{hits}");
    // `inspect` names the stage and the defaults a search takes from it.
    let out = cellar(&["inspect", index_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // (impute: one leaf in 128, at least 1; this stage has fewer than 128 leaves.)
    let says = format!(
        "tokens     {every_leaf} leaves over {} tokens, default nprobe {}, impute 1, dense depth {}",
        retrained["tokens"], saved["search"]["nprobe"], saved["search"]["depth"]
    );
    assert!(text(&out.stdout).contains(&says), "{says:?} missing from:\n{}", text(&out.stdout));
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
    assert!(text(&out.stdout).contains("ivf: 8 docs in 1 clusters"), "{}", text(&out.stdout));

    let dense = ["search", "--index", index_s, "green tea", "--mode", "dense", "--nprobe", "1"];
    let out = cellar(
        &[&dense[..], &["--prefetch", "true", "--prefetch-step", "0.5", "--rerank-k", "4", "--json"]]
            .concat(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let response: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(response["hits"][0]["id"].as_str().unwrap().starts_with("tea"), "{response}");
    assert_eq!(response["prefetch"]["needed"], 4, "{response}");
    assert_user_error(&cellar(&[&dense[..2], &["tea", "--mode", "ivf", "--nprobe", "0"]].concat()), "nprobe");
    assert_user_error(&cellar(&[&dense[..], &["--prefetch-step", "2"]].concat()), "prefetch_step");
    assert_user_error(&cellar(&["ivf", "build", "--index", index_s, "--cluster-size", "4"]), "cluster_size");
    let out = cellar(&["ivf", "build", "--index", index_s, "--cluster-size", "8"]);
    assert!(text(&out.stdout).contains("ivf: 8 docs in 1 clusters"), "{}", text(&out.stderr));

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
    let rows = ["| bm25 |", "| dense pooled (exact) |", "| rerank |", "rerank_k=16 |", "rerank_k=200 |"];
    let ivf_rows = [
        "| ivf nprobe=1 (rescored, 1 clusters) |",
        "| dense: IVF nprobe=1 → MaxSim |",
        "BM25 candidates only (default joins 100 IVF) |",
    ];
    for row in rows.iter().chain(&ivf_rows) {
        assert!(text(&out.stdout).contains(row), "{row} missing from:\n{}", text(&out.stdout));
    }

    assert_user_error(&cellar(&["search", "--index", index_s, "tea", "--mode", "fuzzy"]), "unknown mode");
    assert_user_error(&cellar(&["search", "--index", index_s, "tea", "-k", "0"]), "k must be");
    assert_user_error(&cellar(&["search", "--index", index_s, "  "]), "query is empty");
    // Issue 21.1: this aborted the process sizing a 120 GB heap.
    let huge = ["search", "--index", index_s, "wing", "--candidates", "5000000000"];
    assert_user_error(&cellar(&huge), "candidates must be between 1 and");
    assert_user_error(
        &cellar(&["tune", "--index", index_s, "--data", data_s, "--split", "test"]),
        "test split",
    );
    // Issue 18.2: the test split only with cross-validation, reported as such.
    let cv = ["tune", "--index", index_s, "--data", data_s, "--split", "test", "--cv", "2"];
    let out = cellar(&cv);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("2-fold cross-validated nDCG@10"), "{}", text(&out.stdout));
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(index.join("index.json")).unwrap()).unwrap();
    assert_eq!(config["search"]["tuned"]["cv"]["folds"], 2, "{config}");
    assert!(["z", "rrf", "z_peak"].contains(&config["search"]["fusion"].as_str().unwrap()));
    let out = cellar(&["eval", "--index", index_s, "--data", data_s]);
    assert!(text(&out.stdout).contains("2-fold cross-validation"), "{}", text(&out.stdout));
    let one = ["tune", "--index", index_s, "--data", data_s, "--split", "test", "--cv", "1"];
    assert_user_error(&cellar(&one), "1 folds: 2 to 20 allowed");
    let three = ["tune", "--index", index_s, "--data", data_s, "--split", "test", "--cv", "3"];
    assert_user_error(&cellar(&three), "no more than the 2 judged queries");
    assert_user_error(&cellar(&["search", "--index", index_s, "tea", "--fusion", "max"]), "unknown fusion");
    let out = cellar(&["search", "--index", index_s, "green tea", "--fusion", "rrf", "--json"]);
    let response: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(response["params"]["fusion"], "rrf");
    assert_user_error(&cellar(&["index", data_s, "--out", index_s]), "not empty");
    assert_user_error(&cellar(&["search", "--index", data_s, "tea"]), "not a Cellar index");

    // Issue 18.3: the SPLADE stage, built on its own, searched alone and in eval's rows.
    assert_user_error(
        &cellar(&["search", "--index", index_s, "tea", "--lexical", "splade"]),
        "cellar splade build",
    );
    let out = cellar(&["splade", "build", "--index", index_s, "--threads", "1"]);
    assert!(out.status.success() && text(&out.stdout).contains("splade: 8 docs"), "{}", text(&out.stderr));
    let out = cellar(&[
        "search",
        "--index",
        index_s,
        "green tea",
        "--lexical",
        "splade",
        "--mode",
        "bm25",
        "--json",
    ]);
    let response: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(response["hits"][0]["id"].as_str().unwrap().starts_with("tea"), "{response}");
    let out = cellar(&["eval", "--index", index_s, "--data", data_s]);
    assert!(
        text(&out.stdout).contains("| splade |") && text(&out.stdout).contains("BM25 + SPLADE candidates")
    );
    assert_user_error(
        &cellar(&["search", "--index", index_s, "tea", "--lexical", "colbert"]),
        "unknown lexical",
    );
    // Issue 44: eval's rows take the token stage once the index has one.
    let out = cellar(&["tokens", "build", "--index", index_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cellar(&["eval", "--index", index_s, "--data", data_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for row in
        ["| dense: token stage nprobe=", "+ 100 token-stage candidates |", "| dense: IVF nprobe=1 → MaxSim |"]
    {
        assert!(text(&out.stdout).contains(row), "{row} missing from:\n{}", text(&out.stdout));
    }

    // Issue 21: one changed byte in bm25/meta.json (a segment's document count) made tantivy
    // panic, exit code 101, where a damaged index is exit code 2 naming the directory.
    let meta = index.join("bm25/meta.json");
    let json = std::fs::read_to_string(&meta).unwrap();
    let count = json.find("\"max_doc\"").unwrap();
    let digit = count + json[count..].find(|c: char| c.is_ascii_digit()).unwrap();
    let mut bytes = json.into_bytes();
    bytes[digit] = b'3';
    std::fs::write(&meta, bytes).unwrap();
    let out = cellar(&["search", "--index", index_s, "green tea", "--mode", "bm25"]);
    assert_user_error(&out, "bm25: corrupted");
}

#[test]
fn serve_answers_over_loopback_and_stops_cleanly_on_sigterm() {
    use std::io::{BufRead, BufReader};
    let (_tmp, data, index) = indexed();
    let index_s = index.to_str().unwrap();
    assert_user_error(
        &cellar(&["serve", "--index", index_s, "--reader", "mmap", "--inject-latency-us", "80"]),
        "direct reader only",
    );
    assert_user_error(
        &cellar(&["serve", "--index", index_s, "--workers", "0"]),
        "--workers must be at least 1",
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_cellar"))
        .args(["serve", "--index", index_s, "--reader", "direct", "--bind", "127.0.0.1:0"])
        .args(["--inject-latency-us", "80", "--queue", "8"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = lines.next().expect("a ready line").unwrap();
    let port = port_of(&ready);

    let (status, health) = http(port, "GET", "/healthz", "");
    assert_eq!(status, 200, "{health}");
    assert!(health.contains("\"reader\":\"direct\""), "{health}");
    let (status, body) = http(port, "POST", "/v1/search", r#"{"query": "how is green tea dried", "k": 2}"#);
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(answer["hits"][0]["id"].as_str().unwrap().starts_with("tea"), "{answer}");
    let (status, body) = http(port, "POST", "/v1/search", r#"{"query": "tea", "k": 0}"#);
    assert_eq!(status, 400, "{body}");
    assert_eq!(http(port, "GET", "/healthz", "").0, 200, "still serving after a bad request");

    // Issue 21: builds are refused while the index is served, and the server keeps serving.
    let ivf_build = ["ivf", "build", "--index", index_s, "--cluster-size", "8"];
    assert_user_error(&cellar(&ivf_build), "open for reading elsewhere");
    assert_user_error(
        &cellar(&["index", data.to_str().unwrap(), "--out", index_s]),
        "open for reading elsewhere",
    );
    assert_eq!(http(port, "POST", "/v1/search", r#"{"query": "moon", "k": 1}"#).0, 200);

    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "a SIGTERM'd server exits cleanly, got {status:?}");
    assert!(cellar(&ivf_build).status.success(), "the server's lock went with it");
}

/// Flips one bit of `path` at `offset` (from the end when negative), returning the old bytes.
fn flip(path: &Path, offset: i64) -> Vec<u8> {
    let original = std::fs::read(path).unwrap();
    let mut bytes = original.clone();
    let at = if offset < 0 { bytes.len() - offset.unsigned_abs() as usize } else { offset as usize };
    bytes[at] ^= 0x04;
    std::fs::write(path, bytes).unwrap();
    original
}

/// Issue 21: `inspect --verify` on an index root checks every file and names the damaged one.
#[test]
fn inspect_verify_reads_every_file_of_an_index_and_names_the_first_damage() {
    let (_tmp, _data, index) = indexed();
    let index_s = index.to_str().unwrap();
    let out = cellar(&["inspect", index_s, "--verify"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let files = [
        "index.json",
        "vectors/manifest.json",
        "vectors/offsets.bin",
        "vectors/codec.bin",
        "vectors/vectors.bin",
        "text_offsets.bin",
        "texts.bin",
        "pooled.bin",
        "ivf/ivf.json",
        "ivf/ivf_centroids.bin",
        "ivf/ivf_postings.bin",
        "ivf/ivf_vectors.bin",
        "bm25",
    ];
    for file in files {
        assert!(stdout.contains(&format!("verify     {file} ")), "no line for {file} in:\n{stdout}");
    }
    let store = index.join("vectors");
    let out = cellar(&["inspect", store.to_str().unwrap(), "--verify"]);
    assert!(out.status.success() && text(&out.stdout).contains("checksum ok"), "{}", text(&out.stderr));

    let texts = std::fs::read(index.join("texts.bin")).unwrap();
    let moon = texts.windows(4).position(|w| w == b"moon").unwrap() as i64;
    let segment = std::fs::read_dir(index.join("bm25"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .expect("a postings file");
    let damages: [(PathBuf, i64, &str); 7] = [
        (index.join("texts.bin"), moon, "text record fails its checksum"),
        (index.join("text_offsets.bin"), -3, "body checksum mismatch"),
        (index.join("pooled.bin"), 70, "body checksum mismatch"),
        (index.join("vectors/vectors.bin"), 4096 + 20, "fails its checksum"),
        (index.join("ivf/ivf_postings.bin"), 4096 + 3, "posting block of cluster 0"),
        (index.join("ivf/ivf_vectors.bin"), 4096 + 3, "the vector of document"),
        (segment.clone(), 20, "footer checksum"),
    ];
    for (path, offset, needle) in damages {
        let original = flip(&path, offset);
        let out = cellar(&["inspect", index_s, "--verify"]);
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_user_error(&out, needle);
        assert!(
            text(&out.stderr).contains(&format!("{name}: corrupted at byte offset")),
            "{}",
            text(&out.stderr)
        );
        std::fs::write(&path, original).unwrap();
    }
    assert!(cellar(&["inspect", index_s, "--verify"]).status.success());
}

#[test]
fn add_and_delete_write_durably_and_bad_lines_exit_2() {
    let (tmp, _data, index) = indexed();
    let index_s = index.to_str().unwrap();
    let docs = tmp.path().join("new.jsonl");
    std::fs::write(
        &docs,
        "{\"id\": \"comet0\", \"title\": \"comet\", \"text\": \"A comet trails a tail of ice and dust\", \"metadata\": {\"kind\": \"icy\"}}\n\n\
         {\"id\": \"comet1\", \"text\": \"Comets orbit the sun on long ellipses\", \"metadata\": {\"kind\": \"orbit\"}}\n",
    )
    .unwrap();
    let out = cellar(&["add", docs.to_str().unwrap(), "--index", index_s, "--batch", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("added 2 documents; the index holds 10"), "{}", text(&out.stdout));
    let search = ["search", "--index", index_s, "comet tail of ice", "--mode", "rerank", "--json"];
    let out = cellar(&search);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits["hits"][0]["id"], "comet0", "{hits}");
    let filtered = ["search", "--index", index_s, "comet", "--mode", "bm25", "--json", "--filter"];
    let out = cellar(&[&filtered[..], &["{\"eq\": {\"field\": \"kind\", \"value\": \"orbit\"}}"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((hits["hits"][0]["id"].as_str(), hits["hits"].as_array().unwrap().len()), (Some("comet1"), 1));
    // `{"like": 1}` is the shorthand of an equality; an object is no field's value.
    assert_user_error(&cellar(&[&filtered[..], &["{\"like\": {\"x\": 1}}"]].concat()), "not a filter");

    assert_user_error(
        &cellar(&["add", docs.to_str().unwrap(), "--index", index_s]),
        "exists; update it instead",
    );
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"id\": \"comet2\", \"text\": \"fine\"}\n{\"id\": \"comet3\", \"txt\": \"typo\"}\n",
    )
    .unwrap();
    assert_user_error(
        &cellar(&["add", bad.to_str().unwrap(), "--index", index_s]),
        "bad.jsonl:2: not a document",
    );
    assert_user_error(&cellar(&["delete", "nope", "--index", index_s]), "no document \"nope\"");
    let by_filter = "{\"eq\": {\"field\": \"kind\", \"value\": \"orbit\"}}";
    let out = cellar(&["delete", "moon0", "--filter", by_filter, "--index", index_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("deleted 2 documents; the index holds 8"), "{}", text(&out.stdout));
    let out = cellar(&["search", "--index", index_s, "comets", "--mode", "bm25", "--json"]);
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = hits["hits"].as_array().unwrap().iter().map(|h| h["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["comet0"], "the deleted comet is gone; the unwritten line 1 of bad.jsonl too");
    let out = cellar(&["inspect", index_s, "--verify"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("live/wal.log"), "{}", text(&out.stdout));
}

#[test]
fn serve_data_dir_serves_each_index_by_name() {
    use std::io::{BufRead, BufReader};
    let (tmp, _data, _index) = indexed_at("indexes/main");
    let root = tmp.path().join("indexes");
    assert_user_error(&cellar(&["serve"]), "--data-dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cellar"))
        .args(["serve", "--data-dir", root.to_str().unwrap(), "--bind", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = lines.next().expect("a ready line").unwrap();
    assert!(ready.contains("1 indexes in"), "{ready}");
    let port = port_of(&ready);
    assert_eq!(http(port, "GET", "/v1/indexes", ""), (200, r#"{"indexes":["main"]}"#.to_string()));
    let (status, body) =
        http(port, "POST", "/v1/indexes/main/search", r#"{"query": "how is green tea dried", "k": 1}"#);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"id\":\"tea"), "{body}");
    assert_eq!(http(port, "POST", "/v1/search", r#"{"query": "tea"}"#).0, 404, "no --index");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}
