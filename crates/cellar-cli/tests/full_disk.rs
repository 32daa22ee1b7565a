//! `cellar serve --streams` on a disk that fills up (issue 21, "also found"): a small tmpfs
//! mounted in a private mount namespace (`unshare -m`, so nothing outside sees it; it needs
//! root, as the machines of this project give) that a holder process keeps alive, and servers
//! started inside it with `nsenter`. Every write is answered 200 (durable) or 507 (nothing
//! written); none is 500, a flush that fails after its batch was logged does not fail the batch,
//! a stream first written on the full disk is usable, and freeing space ends the refusals
//! without a restart. A restart then finds every acknowledged document.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

/// A private mount namespace holding a tmpfs of `mb` MiB at `mount`; killed on drop.
struct SmallDisk {
    holder: Child,
    mount: PathBuf,
}

impl SmallDisk {
    fn new(mount: &Path, mb: u64) -> SmallDisk {
        let script = format!(
            "mount -t tmpfs -o size={mb}m cellar-test {} && echo mounted && exec sleep 600",
            mount.display()
        );
        let mut holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) runs");
        let line = BufReader::new(holder.stdout.take().unwrap()).lines().next();
        if !matches!(line, Some(Ok(ref l)) if l == "mounted") {
            let _ = holder.kill();
            let out = holder.wait_with_output().unwrap();
            panic!(
                "this test needs a private tmpfs (root: unshare -m, mount -t tmpfs): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        SmallDisk { holder, mount: mount.to_path_buf() }
    }

    /// `path` (inside the mount) as this process sees it: through the holder's root.
    fn outside(&self, path: &str) -> PathBuf {
        let inside = self.mount.join(path);
        PathBuf::from(format!("/proc/{}/root{}", self.holder.id(), inside.display()))
    }

    /// `cellar ARGS` inside the namespace, `MOUNT` in them standing for the mount point.
    fn cellar(&self, args: &[&str]) -> Command {
        let mut command = Command::new("nsenter");
        command.args(["-t", &self.holder.id().to_string(), "-m", "--", env!("CARGO_BIN_EXE_cellar")]);
        command.args(args.iter().map(|a| a.replace("MOUNT", self.mount.to_str().unwrap())));
        command
    }

    /// `cellar serve --streams MOUNT/streams` inside the namespace; its port.
    fn serve(&self) -> (Child, u16) {
        self.serve_with(&["--streams", "MOUNT/streams", "--stream-memtable-mb", "1"])
    }

    /// `cellar serve ARGS` inside the namespace; its port.
    fn serve_with(&self, args: &[&str]) -> (Child, u16) {
        let mut child = self
            .cellar(&["serve", "--bind", "127.0.0.1:0", "--lazy-encoder", "--workers", "1"])
            .args(args.iter().map(|a| a.replace("MOUNT", self.mount.to_str().unwrap())))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ready = BufReader::new(child.stderr.take().unwrap()).lines().next().unwrap().unwrap();
        (child, common::port_of(&ready))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, body) = common::http(port, method, path, body);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// A document of about 60 KB of text and one 2-dimensional token.
fn doc(i: usize) -> String {
    json!({ "text": format!("{i} {}", "lorem ipsum ".repeat(5000)), "tokens": [[1.0, i as f32]] }).to_string()
}

#[test]
fn a_full_disk_refuses_writes_with_507_loses_no_acknowledged_write_and_recovers_when_freed() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = SmallDisk::new(tmp.path(), 8);
    // Space to give back later without touching the streams.
    std::fs::write(disk.outside("ballast"), vec![1u8; 1 << 20]).unwrap();
    let (server, port) = disk.serve();
    let mut acknowledged = Vec::new();
    let mut refused = 0;
    for i in 0..400 {
        let (status, body) = http(port, "PUT", &format!("/v1/streams/s/groups/g/docs/d{i}"), &doc(i));
        match status {
            200 => acknowledged.push(i),
            507 => {
                assert_eq!(body["code"], "disk_full", "{body}");
                assert!(!body.to_string().contains(tmp.path().to_str().unwrap()), "a path in {body}");
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            other => panic!("write {i}: HTTP {other}: {body}"),
        }
    }
    assert!(refused == 3 && acknowledged.len() > 20, "{} written, {refused} refused", acknowledged.len());
    // Whether a flush or a log write met the full disk first depends on where the space ran
    // out; cellar-stream's `a_failed_flush_fails_no_logged_write` makes the flush fail surely.
    let (_, stats) = http(port, "GET", "/v1/streams/s", "");
    eprintln!("full disk: {} acknowledged, flush_failures {}", acknowledged.len(), stats["flush_failures"]);
    for &i in &acknowledged {
        assert_eq!(http(port, "GET", &format!("/v1/streams/s/groups/g/docs/d{i}"), "").0, 200, "d{i}");
    }
    // A stream first written on the full disk: refused, and not left half-made.
    let small = json!({ "text": "x", "tokens": [[1.0, 0.0]] }).to_string();
    let (status, body) = http(port, "PUT", "/v1/streams/late/groups/g/docs/a", &small);
    assert!(status == 507 || status == 200, "HTTP {status}: {body}");

    std::fs::remove_file(disk.outside("ballast")).unwrap();
    let (status, body) = http(port, "PUT", "/v1/streams/s/groups/g/docs/after", &doc(9999));
    assert_eq!(status, 200, "space was freed, yet: {body}");
    let (status, body) = http(port, "PUT", "/v1/streams/late/groups/g/docs/b", &small);
    assert_eq!(status, 200, "the stream first written on the full disk: {body}");
    stop(server);

    let (server, port) = disk.serve();
    for i in acknowledged.iter().map(|i| format!("d{i}")).chain(["after".to_string()]) {
        let (status, body) = http(port, "GET", &format!("/v1/streams/s/groups/g/docs/{i}"), "");
        assert_eq!(status, 200, "{i} was acknowledged before the restart: {body}");
    }
    assert_eq!(http(port, "GET", "/v1/streams/late/groups/g/docs/b", "").0, 200);
    stop(server);
}

/// A living index of a data directory on a disk that fills up (issue 16.4): every write is 200
/// or 507 (never 500, whether the log, BM25's commit or a flush met the full disk: issue 43.2,
/// 43.3), searches and reads go on while the disk is full, writes resume once space is freed,
/// and a restart finds every acknowledged document (tantivy's files included, which no
/// failpoint reaches) and none that was refused.
#[test]
fn a_living_index_on_a_full_disk_refuses_writes_keeps_answering_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = SmallDisk::new(tmp.path(), 8);
    std::fs::write(disk.outside("ballast"), vec![1u8; 1 << 20]).unwrap();
    let (server, port) = disk.serve_with(&["--data-dir", "MOUNT/indexes"]);
    let note = |i: usize, text: String| json!({"id": format!("n{i}"), "text": text, "vectors": {"tokens": [[1.0, i as f32]]}});
    let create =
        json!({"docs": (0..8).map(|i| note(i, format!("note {i}"))).collect::<Vec<_>>(), "codec": "f16"});
    let (status, body) = http(port, "PUT", "/v1/indexes/notes", &create.to_string());
    assert_eq!(status, 200, "{body}");
    let (mut acknowledged, mut refused) = (Vec::new(), Vec::new());
    for i in 100..400 {
        let add = json!({"ops": [{"add": note(i, format!("{i} {}", "lorem ipsum ".repeat(5000)))}]});
        let (status, body) = http(port, "POST", "/v1/indexes/notes/docs", &add.to_string());
        match status {
            200 => acknowledged.push(i),
            507 => {
                assert_eq!(body["code"], "disk_full", "{body}");
                assert!(!body.to_string().contains(tmp.path().to_str().unwrap()), "a path in {body}");
                refused.push(i);
                if refused.len() == 3 {
                    break;
                }
            }
            other => panic!("write {i}: HTTP {other}: {body}"),
        }
    }
    assert!(
        refused.len() == 3 && acknowledged.len() > 20,
        "{} written, {refused:?} refused",
        acknowledged.len()
    );
    for &i in &refused {
        assert_eq!(http(port, "GET", &format!("/v1/indexes/notes/docs/n{i}"), "").0, 404, "n{i} was refused");
    }
    let search = json!({"mode": "dense-exact", "k": 3, "query_vectors": {"tokens": [[1.0, 120.0]], "pooled": [1.0, 120.0]}});
    let (status, body) = http(port, "POST", "/v1/indexes/notes/search", &search.to_string());
    assert_eq!(status, 200, "searches go on while the disk is full: {body}");
    for &i in &acknowledged {
        assert_eq!(http(port, "GET", &format!("/v1/indexes/notes/docs/n{i}"), "").0, 200, "n{i}");
    }
    std::fs::remove_file(disk.outside("ballast")).unwrap();
    let add = json!({"ops": [{"add": note(9999, "after the space came back".into())}]});
    let (status, body) = http(port, "POST", "/v1/indexes/notes/docs", &add.to_string());
    assert_eq!(status, 200, "space was freed, yet: {body}");
    stop(server);

    let (server, port) = disk.serve_with(&["--data-dir", "MOUNT/indexes"]);
    for i in acknowledged.iter().copied().chain([9999, 3]) {
        let (status, body) = http(port, "GET", &format!("/v1/indexes/notes/docs/n{i}"), "");
        assert_eq!(status, 200, "n{i} was acknowledged before the restart: {body}");
    }
    for &i in &refused {
        let (status, body) = http(port, "GET", &format!("/v1/indexes/notes/docs/n{i}"), "");
        assert_eq!(status, 404, "n{i} was refused before the restart: {body}");
    }
    stop(server);
}

/// `cellar feed` onto a disk that fills up: it stops with the disk-full error and exit code 2,
/// says how many documents were written and from which line to feed again, and those
/// documents are there.
#[test]
fn a_feed_that_fills_the_disk_stops_clearly_and_keeps_what_it_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = SmallDisk::new(tmp.path(), 4);
    let input = tempfile::tempdir().unwrap();
    let file = input.path().join("feed.jsonl");
    let lines: Vec<String> = (0..200)
        .map(|i| {
            json!({"group": "g", "id": format!("d{i}"), "text": format!("{i} {}", "lorem ipsum ".repeat(5000)),
                   "tokens": [[1.0, i as f32]]})
            .to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = disk
        .cellar(&["feed", file.to_str().unwrap(), "--streams", "MOUNT/feed", "--name", "f", "--batch", "4"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    let said =
        stderr.split("the ").nth(1).and_then(|s| s.split(' ').next()).and_then(|n| n.parse::<usize>().ok());
    let written = said.unwrap_or_else(|| panic!("no count of written documents in: {stderr}"));
    assert!(written > 0 && written.is_multiple_of(4) && written < 200, "{written}: {stderr}");
    assert!(stderr.contains(&format!("stopped at line {}", written + 1)), "{stderr}");

    let (server, port) = disk.serve_with(&["--streams", "MOUNT/feed"]);
    for i in 0..written {
        assert_eq!(http(port, "GET", &format!("/v1/streams/f/groups/g/docs/d{i}"), "").0, 200, "d{i}");
    }
    stop(server);
}
