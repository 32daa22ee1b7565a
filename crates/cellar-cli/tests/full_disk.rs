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

    /// `cellar serve --streams MOUNT/streams` inside the namespace; its port.
    fn serve(&self) -> (Child, u16) {
        let root = self.mount.join("streams");
        let mut child = Command::new("nsenter")
            .args(["-t", &self.holder.id().to_string(), "-m", "--", env!("CARGO_BIN_EXE_cellar"), "serve"])
            .args(["--streams", root.to_str().unwrap(), "--bind", "127.0.0.1:0", "--lazy-encoder"])
            .args(["--stream-memtable-mb", "1", "--workers", "1"])
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
