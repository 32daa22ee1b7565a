//! The `cellar` binary end to end: output of the store tools, exit code 2 with a message (never
//! a panic) for bad input, the exit code of each other kind of error, and a help that lists user
//! commands only and ends with the exit codes.

mod common;
use common::{assert_user_error, cellar, http, port_of, stderr};

use std::path::Path;

use cellar_core::codec::CodecKind;
use cellar_core::format::manifest::MANIFEST_FILE;
use cellar_core::format::versioned::FORMAT_VERSION_FIELD;
use cellar_core::synth::{SynthConfig, SynthCorpus};

/// A store of 300 synthetic documents (20 tokens of 16 dimensions on average), written by the
/// library as `cellar-bench synth --docs 300 --tokens 20 --dim 16` would.
fn store(dir: &Path, codec: CodecKind) {
    let config = SynthConfig { docs: 300, mean_tokens: 20, dim: 16, clusters: 1024, seed: 42 };
    SynthCorpus::new(config).unwrap().write_store(dir, codec, |_| ()).unwrap();
}

#[test]
fn inspect_reports_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    store(&dir, CodecKind::Int8);
    let out = cellar(&["inspect", dir.to_str().unwrap(), "--verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in
        ["codec int8", "16 bytes/token", "300 docs", "vectors.bin", "offsets.bin", "codec.bin", "checksum ok"]
    {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

#[test]
fn inspect_reports_damage_with_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    store(&dir, CodecKind::F16);
    let vectors = dir.join("vectors.bin");
    let mut bytes = std::fs::read(&vectors).unwrap();
    let last = bytes.len() - 5000;
    bytes[last] ^= 0x10;
    std::fs::write(&vectors, &bytes).unwrap();
    let out = cellar(&["inspect", dir.to_str().unwrap()]);
    assert!(out.status.success(), "inspect without --verify reads no vectors: {}", stderr(&out));
    // Every record is checked against its own CRC before the body's, so the damage is named
    // down to the document.
    assert_user_error(&cellar(&["inspect", dir.to_str().unwrap(), "--verify"]), "fails its checksum");
    bytes.truncate(bytes.len() - 4096);
    std::fs::write(&vectors, &bytes).unwrap();
    assert_user_error(&cellar(&["inspect", dir.to_str().unwrap()]), "truncated");
}

#[test]
fn bad_arguments_exit_with_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    assert_user_error(&cellar(&["inspect", missing.to_str().unwrap()]), "nope");
    assert_user_error(&cellar(&["inspect", tmp.path().to_str().unwrap()]), "has no manifest.json");
}

/// Exit codes name the kind of error (crates/cellar-cli/src/exit.rs): usage errors are 2 like
/// bad input, a format version this build does not read is 3, a model that is not there is 4.
#[test]
fn exit_codes_name_the_kind_of_error() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [&["inspect", "--no-such-flag"][..], &["search"][..], &["no-such-command"][..]] {
        let out = cellar(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("Usage:"), "{args:?}: {}", stderr(&out));
    }

    let dir = tmp.path().join("store");
    store(&dir, CodecKind::F16);
    let manifest = dir.join(MANIFEST_FILE);
    let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    json[FORMAT_VERSION_FIELD] = 99.into();
    std::fs::write(&manifest, json.to_string()).unwrap();
    let out = cellar(&["inspect", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("format version 99 is not supported"), "{}", stderr(&out));

    let corpus = tmp.path().join("corpus.jsonl");
    std::fs::write(&corpus, "{\"_id\": \"a\", \"text\": \"green tea\"}\n").unwrap();
    let (index, model) = (tmp.path().join("index"), tmp.path().join("no-model"));
    let (corpus_s, index_s) = (corpus.to_str().unwrap(), index.to_str().unwrap());
    let out = cellar(&["index", corpus_s, "--out", index_s, "--no-ivf", "--model", model.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("no-model"), "{}", stderr(&out));
}

/// `cellar --help` ends with the exit codes, and docs/cli.md shows the same rows.
#[test]
fn help_ends_with_the_exit_codes_the_docs_show() {
    let out = cellar(&["--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    let table = help.split("Exit codes:\n").nth(1).unwrap_or_else(|| panic!("no exit codes in:\n{help}"));
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli.md")).unwrap();
    let mut codes = Vec::new();
    for line in table.lines().filter(|l| !l.trim().is_empty()) {
        let (code, meaning) = line.trim().split_once("  ").unwrap_or_else(|| panic!("{line:?}"));
        assert!(
            docs.contains(&format!("| {code} | {meaning} |")),
            "docs/cli.md lacks code {code}: {meaning}"
        );
        codes.push(code.to_string());
    }
    assert_eq!(codes, ["0", "2", "3", "4", "5", "6"]);
}

/// The binary users install carries user commands only: the benchmarks are `cellar-bench`.
#[test]
fn help_lists_no_benchmark() {
    let out = cellar(&["--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    for command in ["index", "search", "serve", "feed", "inspect"] {
        assert!(help.contains(&format!("  {command} ")), "{command} missing from:\n{help}");
    }
    for gone in ["bench", "synth", "worker"] {
        assert!(!help.contains(gone), "{gone:?} in:\n{help}");
    }
    for gone in ["bench", "bench-store", "bench-store-worker", "synth"] {
        assert_eq!(cellar(&[gone, "--help"]).status.code(), Some(2), "cellar {gone} still parses");
    }
}

/// `cellar index --empty`: an index of no documents, filled by `cellar add`, searched, given its
/// first IVF by `cellar ivf retrain`; what an empty index cannot have is refused with exit 2.
#[test]
fn an_empty_index_is_created_filled_by_add_and_given_an_ivf() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, docs) = (tmp.path().join("notes"), tmp.path().join("docs.jsonl"));
    let dir_s = dir.to_str().unwrap();
    let out = cellar(&["index", "--empty", "--dim", "4", "--out", dir_s]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("empty index of 4-d f16 vectors"));
    let notes = |ids: std::ops::Range<usize>| -> String {
        let lines: Vec<String> = ids
            .map(|i| {
                let mut v = [0.1f32; 4];
                v[i % 4] = 1.0;
                format!(
                    r#"{{"id": "n{i}", "text": "note {i} colour{}", "vectors": {{"tokens": [{v:?}]}}}}"#,
                    i % 4
                )
            })
            .collect();
        lines.join("\n")
    };
    std::fs::write(&docs, notes(0..20)).unwrap();
    let out = cellar(&["add", docs.to_str().unwrap(), "--index", dir_s]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cellar(&["search", "--index", dir_s, "colour3", "--mode", "bm25", "--k", "5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let found = String::from_utf8_lossy(&out.stdout).matches("colour3").count();
    assert_eq!(found, 5, "every note of colour3 and none other: {}", String::from_utf8_lossy(&out.stdout));
    let out = cellar(&["ivf", "retrain", "--index", dir_s]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ivf: 20 docs"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Its first token stage, over the written documents; then 256 more written, and `cellar add`
    // retrains it on its own (the rule: 256 written since, one per 8 it covers).
    let out = cellar(&["tokens", "retrain", "--index", dir_s]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success() && stdout.contains("(ids below 20)"), "{stdout}{}", stderr(&out));
    std::fs::write(&docs, notes(20..276)).unwrap();
    let out = cellar(&["add", docs.to_str().unwrap(), "--index", dir_s]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success() && stdout.contains("retrained the token stage"), "{stdout}{}", stderr(&out));

    let other = tmp.path().join("other");
    let other = other.to_str().unwrap();
    assert_user_error(
        &cellar(&["index", "--empty", "--dim", "4", "--codec", "int8", "--out", other]),
        "codec int8",
    );
    assert_user_error(&cellar(&["index", "--empty", "--dim", "0", "--out", other]), "dim 0");
    assert_user_error(&cellar(&["index", "--dim", "4", "--out", other]), "--empty");
    assert!(!Path::new(other).exists(), "refused creations leave nothing");
}

/// A `cellar serve` child, stopped (SIGTERM, then waited for) when dropped.
struct Served {
    child: std::process::Child,
    port: u16,
}

impl Served {
    fn start(args: &[&str]) -> Served {
        Served::start_with_files(args, None)
    }

    /// `start`, under a limit of `files` open files (`ulimit -n`) when given.
    fn start_with_files(args: &[&str], files: Option<u64>) -> Served {
        use std::io::{BufRead, BufReader};
        use std::os::unix::process::CommandExt;
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cellar"));
        command
            .args(["serve", "--bind", "127.0.0.1:0", "--lazy-encoder", "--workers", "1"])
            .args(args)
            .stderr(std::process::Stdio::piped());
        if let Some(files) = files {
            let limit = libc::rlimit { rlim_cur: files, rlim_max: files };
            // SAFETY: setrlimit in the child between fork and exec touches nothing but the limit.
            unsafe {
                command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                });
            }
        }
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let ready = lines.next().expect("a ready line").unwrap();
        Served { port: port_of(&ready), child }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Issue 43.1 with real processes: a second `serve --data-dir` on the same directory exits 2
/// naming the first's pid; a server that never wrote an index sees what `cellar add` writes
/// to it; a drop while another process (`serve --index`) holds the index is 409 and keeps it.
#[test]
fn a_data_directory_has_one_server_which_follows_other_writers_and_drops_only_free_indexes() {
    let tmp = tempfile::TempDir::new().unwrap();
    let data = tmp.path().join("data");
    let data_s = data.to_str().unwrap();
    let first = Served::start(&["--data-dir", data_s]);
    let second = cellar(&["serve", "--data-dir", data_s, "--bind", "127.0.0.1:0", "--lazy-encoder"]);
    assert_user_error(
        &second,
        &format!("data directory is open elsewhere (held by pid {})", first.child.id()),
    );

    let doc = |id: &str, x: f32| {
        format!(r#"{{"id": "{id}", "text": "note {id}", "vectors": {{"tokens": [[1.0, {x}]]}}}}"#)
    };
    let create = format!(r#"{{"docs": [{}, {}], "codec": "f16"}}"#, doc("a", 0.0), doc("b", 1.0));
    for name in ["held", "read"] {
        let (status, body) = http(first.port, "PUT", &format!("/v1/indexes/{name}"), &create);
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = http(
        first.port,
        "POST",
        "/v1/indexes/held/docs",
        &format!(r#"{{"ops": [{{"add": {}}}]}}"#, doc("c", 2.0)),
    );
    assert_eq!(status, 200, "an acknowledged write: {body}");

    // `read` is open in the server, which has not written it; `cellar add` writes it.
    assert_eq!(http(first.port, "GET", "/v1/indexes/read/docs/a", "").0, 200);
    let lines = tmp.path().join("more.jsonl");
    std::fs::write(&lines, format!("{}\n", doc("added", 3.0))).unwrap();
    let read_dir = data.join("read");
    let out = cellar(&["add", lines.to_str().unwrap(), "--index", read_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (status, body) = http(first.port, "GET", "/v1/indexes/read/docs/added", "");
    assert_eq!(status, 200, "the server sees what `cellar add` wrote: {body}");

    let holder = Served::start(&["--index", data.join("held").to_str().unwrap()]);
    let (status, body) = http(first.port, "DELETE", "/v1/indexes/held", "");
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains(r#""code":"locked""#) && body.contains("another process holds the index"),
        "{body}"
    );
    assert!(!body.contains(data_s), "no server path: {body}");
    assert_eq!(http(first.port, "GET", "/v1/indexes/held/docs/c", "").0, 200, "the write stays");
    assert_eq!(http(holder.port, "GET", "/v1/docs/c", "").0, 200);
    drop(holder);
    let (status, body) = http(first.port, "DELETE", "/v1/indexes/held", "");
    assert_eq!(status, 200, "no other holder now: {body}");
    assert!(!data.join("held").exists());
}

/// Issue 43.4 under a file limit: a server allowed 64 open files (it starts with about 13, and
/// each open index holds 2) creates and searches 32 indexes, keeping at most --max-open-indexes
/// open (unbounded, PUTs failed with 500 after 119 indexes under 256); and a PUT past
/// --max-indexes is 409.
#[test]
fn many_indexes_fit_in_a_small_file_limit() {
    const MANY: usize = 32;
    let tmp = tempfile::TempDir::new().unwrap();
    let data = tmp.path().join("data");
    let limits = ["--max-open-indexes", "4", "--max-indexes", "32"];
    let served =
        Served::start_with_files(&[&["--data-dir", data.to_str().unwrap()][..], &limits].concat(), Some(64));
    let create = r#"{"docs": [{"id": "a", "text": "one", "vectors": {"tokens": [[1.0, 0.0]]}},
                              {"id": "b", "text": "two", "vectors": {"tokens": [[0.0, 1.0]]}}], "codec": "f16"}"#;
    let search =
        r#"{"mode": "dense-exact", "k": 1, "query_vectors": {"tokens": [[1.0, 0.1]], "pooled": [1.0, 0.1]}}"#;
    for i in 0..MANY {
        let (status, body) = http(served.port, "PUT", &format!("/v1/indexes/i{i}"), create);
        assert_eq!(status, 200, "PUT i{i}: {body}");
        let (status, body) = http(served.port, "POST", &format!("/v1/indexes/i{i}/search"), search);
        assert_eq!(status, 200, "search i{i}: {body}");
    }
    let (status, body) = http(served.port, "GET", "/healthz", "");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    let open = health["data_dir_indexes"].as_u64();
    assert!(status == 200 && open.is_some_and(|n| n <= 4), "{body}");
    let (status, body) = http(served.port, "PUT", "/v1/indexes/one-more", create);
    assert!(status == 409 && body.contains("too_many_indexes"), "{status}: {body}");
}
