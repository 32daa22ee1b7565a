//! `cellar feed`, `cellar stream-search` and `cellar serve --streams` on a small JSONL file,
//! with the default model encoding the texts; bad lines are exit code 2 naming the line.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::{assert_user_error, cellar, port_of, text};
use serde_json::{json, Value};

const NOTES: &[(&str, &str, &str)] = &[
    ("ana", "n1", "Sourdough bread needs a starter, flour, water and salt"),
    ("ana", "n2", "Book the dentist appointment for next Tuesday"),
    ("ana", "n3", "The volcano erupted and lava reached the sea"),
    ("ben", "m1", "Recipe: rye bread with caraway seeds"),
    ("ben", "m2", "Quarterly tax return due in April"),
];

fn write_jsonl(path: &Path, lines: &[Value]) {
    let body: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(path, body.join("\n") + "\n").unwrap();
}

fn notes() -> Vec<Value> {
    NOTES
        .iter()
        .map(|(g, id, t)| json!({"group": g, "id": id, "text": t, "metadata": {"len": t.len()}}))
        .collect()
}

fn search(root: &str, group: &str, query: &str, extra: &[&str]) -> Value {
    let mut args = vec!["stream-search", "--streams", root, "--name", "notes", "--group", group, query];
    args.extend_from_slice(extra);
    let out = cellar(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(answer: &Value) -> Vec<&str> {
    answer["hits"].as_array().unwrap().iter().map(|h| h["id"].as_str().unwrap()).collect()
}

#[test]
fn feed_then_search_one_group() {
    let tmp = tempfile::tempdir().unwrap();
    let (file, root) = (tmp.path().join("notes.jsonl"), tmp.path().join("streams"));
    let root_s = root.to_str().unwrap();
    write_jsonl(&file, &notes());
    let out = cellar(&[
        "feed",
        file.to_str().unwrap(),
        "--streams",
        root_s,
        "--name",
        "notes",
        "--batch",
        "2",
        "--compact",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("fed 5 documents"), "{}", text(&out.stdout));
    let answer = search(root_s, "ana", "baking bread", &[]);
    assert_eq!(ids(&answer)[0], "n1");
    assert!(ids(&answer).iter().all(|id| id.starts_with('n')), "only ana's notes: {answer}");
    assert_eq!(answer["stats"]["docs_scanned"], 3);
    let ben = search(root_s, "ben", "bread", &["--k", "1", "--mode", "pooled"]);
    assert_eq!(ids(&ben), ["m1"]);
    let filtered = search(root_s, "ana", "bread", &["--filter", &format!("len={}", NOTES[1].2.len())]);
    assert_eq!(ids(&filtered), ["n2"]);
    let terms = search(root_s, "ana", "anything", &["--require-terms", "LAVA"]);
    assert_eq!(ids(&terms), ["n3"]);
    assert_user_error(
        &cellar(&["stream-search", "--streams", root_s, "--name", "notes", "--group", "zed", "bread"]),
        "no group \"zed\"",
    );
    assert_user_error(
        &cellar(&["stream-search", "--streams", root_s, "--name", "nope", "--group", "ana", "bread"]),
        "no stream named \"nope\"",
    );
}

#[test]
fn a_bad_line_is_exit_code_2_with_its_number() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("streams");
    let root_s = root.to_str().unwrap();
    let cases = [
        (json!({"id": "x", "text": "no group"}), "the document has no group"),
        (json!({"group": "g", "id": "x", "text": "t", "tokens": [[1.0, 2.0]]}), "wrong vector dimension"),
        (json!({"group": "g", "id": "x", "text": "t", "colour": "red"}), "unknown field `colour`"),
        (json!({"group": "g", "id": "", "text": "t"}), "the document id is empty"),
    ];
    for (i, (bad, message)) in cases.into_iter().enumerate() {
        let file = tmp.path().join(format!("bad{i}.jsonl"));
        let mut lines = notes();
        lines.insert(2, bad);
        write_jsonl(&file, &lines);
        let out =
            cellar(&["feed", file.to_str().unwrap(), "--streams", root_s, "--name", "notes", "--batch", "2"]);
        assert_user_error(&out, &format!("bad{i}.jsonl:3: "));
        assert_user_error(&out, message);
    }
}

#[test]
fn a_feed_refused_at_its_first_batch_and_a_search_of_a_missing_root_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("streams");
    let file = tmp.path().join("bad.jsonl");
    // Issue 21.5: the first document's dimension is 3, the second's value overflows f16.
    let lines = [
        json!({"group": "g", "id": "a", "text": "t", "tokens": [[1.0, 0.0, 0.0]]}),
        json!({"group": "g", "id": "b", "text": "t", "tokens": [[1e39, 0.0, 0.0]]}),
    ];
    write_jsonl(&file, &lines);
    let out = cellar(&["feed", file.to_str().unwrap(), "--streams", root.to_str().unwrap(), "--name", "s"]);
    assert_user_error(&out, "bad.jsonl:2: ");
    assert!(!root.join("s").exists(), "the refused feed created the stream");
    let missing = tmp.path().join("nonexistent");
    let out = cellar(&[
        "stream-search",
        "--streams",
        missing.to_str().unwrap(),
        "--name",
        "s",
        "--group",
        "g",
        "x",
    ]);
    assert_user_error(&out, "no streams root");
    assert!(!missing.exists(), "stream-search created its root");
}

/// An HTTP exchange whose body is read as JSON (`null` when it is not).
fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, body) = common::http(port, method, path, body);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[test]
fn serve_streams_without_an_index() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("streams");
    assert_user_error(&cellar(&["serve"]), "--index");
    let (mut child, port) = serve_streams(&root);
    let doc = json!({"text": "hello", "tokens": [[1.0, 0.0], [0.0, 1.0]]}).to_string();
    assert_eq!(http(port, "PUT", "/v1/streams/s/groups/g/docs/d1", &doc).0, 200);
    let (status, found) =
        http(port, "POST", "/v1/streams/s/groups/g/search", r#"{"query_tokens": [[1.0, 0.0]]}"#);
    assert_eq!((status, found["hits"][0]["id"].as_str()), (200, Some("d1")), "{found}");
    assert_eq!(http(port, "POST", "/v1/search", r#"{"query": "x"}"#).0, 404, "no index served");
    // Issue 21.2: a second process opening the served stream truncated the server's
    // acknowledged writes at the next restart. Now it is refused, and nothing is lost.
    let feed = tmp.path().join("more.jsonl");
    write_jsonl(&feed, &[json!({"group": "g", "id": "f1", "text": "x", "tokens": [[1.0, 0.0]]})]);
    let out = cellar(&["feed", feed.to_str().unwrap(), "--streams", root.to_str().unwrap(), "--name", "s"]);
    assert_user_error(&out, "open elsewhere");
    assert_eq!(http(port, "PUT", "/v1/streams/s/groups/g/docs/d2", &doc).0, 200);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    // The stream outlives the server: a text query now meets its 2-dimensional vectors (a missing
    // stream would be "no stream named").
    let out =
        cellar(&["stream-search", "--streams", root.to_str().unwrap(), "--name", "s", "--group", "g", "x"]);
    assert!(!out.status.success(), "a text query against a 2-dimensional stream is a dimension error");
    assert_user_error(&out, "wrong vector dimension");
    let (mut child, port) = serve_streams(&root);
    for id in ["d1", "d2"] {
        let (status, got) = http(port, "GET", &format!("/v1/streams/s/groups/g/docs/{id}"), "");
        assert_eq!(status, 200, "{id}, acknowledged before or after the refused feed, survived: {got}");
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_api_key_comes_from_a_file_and_never_from_the_process_list() {
    let tmp = tempfile::tempdir().unwrap();
    let key_file = tmp.path().join("key");
    std::fs::write(&key_file, "s3cret-key\n").unwrap();
    let root = tmp.path().join("streams");
    let (mut child, port) = serve_streams_with(&root, &["--api-key-file", key_file.to_str().unwrap()]);
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains("s3cret"));
    let path = "/v1/streams/s";
    assert_eq!(common::http(port, "GET", path, "").0, 401, "no key");
    assert_eq!(common::http_with(port, "GET", path, "X-Api-Key: wrong\r\n", "").0, 401);
    let (status, body) = common::http_with(port, "GET", path, "Authorization: Bearer s3cret-key\r\n", "");
    assert_eq!(status, 404, "the key from the file is accepted (and there is no stream s): {body}");
    let (status, health) = http(port, "GET", "/healthz", "");
    assert_eq!((status, health["streams"].as_bool()), (200, Some(true)), "{health}");
    assert!(!health.to_string().contains(root.to_str().unwrap()), "healthz shows the root: {health}");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    std::fs::write(&key_file, "  \n").unwrap();
    let args = ["serve", "--streams", root.to_str().unwrap(), "--api-key-file", key_file.to_str().unwrap()];
    assert_user_error(&cellar(&args), "the API key is empty");
    let missing = tmp.path().join("no-such-key");
    let args = ["serve", "--streams", root.to_str().unwrap(), "--api-key-file", missing.to_str().unwrap()];
    let out = cellar(&args);
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("no-such-key"), "{}", text(&out.stderr));
}

/// `cellar serve --streams root` on a free loopback port.
fn serve_streams(root: &Path) -> (std::process::Child, u16) {
    serve_streams_with(root, &[])
}

fn serve_streams_with(root: &Path, extra: &[&str]) -> (std::process::Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cellar"))
        .args(["serve", "--streams", root.to_str().unwrap(), "--bind", "127.0.0.1:0", "--lazy-encoder"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = BufReader::new(child.stderr.take().unwrap()).lines().next().unwrap().unwrap();
    (child, port_of(&ready))
}

#[test]
fn feed_and_serve_with_a_codec_source_store_its_codec_and_still_find_the_note() {
    let tmp = tempfile::tempdir().unwrap();
    // The codec source: an index of texts like the notes (the default codec, residual2).
    let corpus = tmp.path().join("corpus.jsonl");
    let lines: Vec<Value> = (0..40)
        .map(|i| {
            let (_, _, t) = NOTES[i % NOTES.len()];
            json!({"_id": format!("c{i}"), "title": "", "text": format!("{t} (copy {i})")})
        })
        .collect();
    write_jsonl(&corpus, &lines);
    let source = tmp.path().join("source");
    let out = cellar(&["index", corpus.to_str().unwrap(), "--out", source.to_str().unwrap(), "--no-ivf"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (file, root) = (tmp.path().join("notes.jsonl"), tmp.path().join("streams"));
    let root_s = root.to_str().unwrap();
    write_jsonl(&file, &notes());
    let feed = |name: &str, from: &Path| {
        let file = file.to_str().unwrap();
        cellar(&[
            "feed",
            file,
            "--streams",
            root_s,
            "--name",
            name,
            "--codec-from",
            from.to_str().unwrap(),
            "--compact",
        ])
    };
    let out = feed("notes", &source);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let config: Value =
        serde_json::from_slice(&std::fs::read(root.join("notes/index.json")).unwrap()).unwrap();
    assert_eq!(config["codec"], "residual2");
    assert_eq!(ids(&search(root_s, "ana", "baking bread", &[]))[0], "n1");
    // A source that is not an index is refused, naming it.
    let missing = tmp.path().join("nothing");
    let out = feed("other", &missing);
    assert_user_error(&out, "nothing");
    // The server creates its streams with the codec too, and refuses a bad source at start.
    let served = tmp.path().join("served");
    let (mut child, port) = serve_streams_with(&served, &["--stream-codec-from", source.to_str().unwrap()]);
    let doc = json!({"text": NOTES[0].2}).to_string();
    assert_eq!(http(port, "PUT", "/v1/streams/s/groups/ana/docs/n1", &doc).0, 200);
    let config: Value = serde_json::from_slice(&std::fs::read(served.join("s/index.json")).unwrap()).unwrap();
    assert_eq!(config["codec"], "residual2");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    let bad = ["serve", "--streams", root_s, "--stream-codec-from", missing.to_str().unwrap()];
    assert_user_error(&cellar(&bad), "no such index directory");
}
