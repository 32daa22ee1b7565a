//! `cellar serve` under a memory cgroup near its cap (issue 43.11): it answers 429 before the
//! OOM killer can take it. The server runs in a cgroup v1 memory cap made for the test (a child
//! of this process's own memory cgroup; it needs root, as the machines of this project give);
//! a second process in the same cgroup takes anonymous memory until what the cgroup cannot
//! reclaim passes the server's line (`cellar_memory_shed_line_bytes`), as a server's own heap
//! does when it grows under overload. Searches are then refused with 429 `overloaded`
//! (`details.memory_pressure`), a burst past saturation changes nothing but the count of
//! refusals, the server stays alive, and once the memory is given back it answers again.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// A cgroup v1 memory cap under this process's own memory cgroup; removed on drop (after its
/// processes are gone).
struct Cap {
    dir: PathBuf,
}

impl Cap {
    fn new(limit: u64) -> Cap {
        let table = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let own = table
            .lines()
            .find_map(|l| {
                let mut fields = l.splitn(3, ':');
                let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
                controllers
                    .split(',')
                    .any(|c| c == "memory")
                    .then(|| path.trim_start_matches('/').to_string())
            })
            .expect("this test needs the cgroup v1 memory controller (a 'memory' line in /proc/self/cgroup)");
        let dir = PathBuf::from("/sys/fs/cgroup/memory")
            .join(own)
            .join(format!("cellar-test-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| {
            panic!("this test needs to create a memory cgroup (root): {}: {e}", dir.display())
        });
        std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
        Cap { dir }
    }

    /// `program ARGS` started inside the cap (it joins before exec: everything it allocates is
    /// charged here).
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let procs = self.dir.join("cgroup.procs");
        let mut command = Command::new("sh");
        command.args(["-c", "echo $$ > \"$0\" && exec \"$@\"", procs.to_str().unwrap(), program]).args(args);
        command
    }

    /// What the cap cannot reclaim now: its charge less its file pages.
    fn unreclaimable(&self) -> u64 {
        let number =
            |name: &str| std::fs::read_to_string(self.dir.join(name)).unwrap().trim().parse::<u64>().unwrap();
        let stat = std::fs::read_to_string(self.dir.join("memory.stat")).unwrap();
        let field = |key: &str| {
            stat.lines().find_map(|l| l.strip_prefix(key).map(|v| v.trim().parse::<u64>().unwrap())).unwrap()
        };
        number("memory.usage_in_bytes") - field("total_inactive_file ") - field("total_active_file ")
    }

    fn oom_kills(&self) -> u64 {
        let control = std::fs::read_to_string(self.dir.join("memory.oom_control")).unwrap();
        control.lines().find_map(|l| l.strip_prefix("oom_kill ")).map_or(0, |v| v.trim().parse().unwrap())
    }
}

impl Drop for Cap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, body) = common::http(port, method, path, body);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// The value of the metric `name` in `/metrics`.
fn metric(port: u16, name: &str) -> u64 {
    let (status, text) = common::http(port, "GET", "/metrics", "");
    assert_eq!(status, 200, "{text}");
    let line =
        text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("no {name}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// A process in the cap that takes anonymous memory a MiB at a time until what the cap cannot
/// reclaim passes `target`, then holds it until killed.
fn hog(cap: &Cap, target: u64) -> Child {
    let script = format!(
        "import time\n\
         d = {dir:?}\n\
         def unreclaimable():\n\
         \x20   stat = dict(l.split() for l in open(d + '/memory.stat'))\n\
         \x20   usage = int(open(d + '/memory.usage_in_bytes').read())\n\
         \x20   return usage - int(stat['total_inactive_file']) - int(stat['total_active_file'])\n\
         held = []\n\
         while unreclaimable() <= {target}:\n\
         \x20   held.append(bytearray(b'\\x01') * (1 << 20))\n\
         print('held', flush=True)\n\
         time.sleep(600)\n",
        dir = cap.dir.to_str().unwrap()
    );
    let mut child = cap.command("python3", &["-c", &script]).stdout(Stdio::piped()).spawn().unwrap();
    let line = BufReader::new(child.stdout.take().unwrap()).lines().next();
    assert!(matches!(line, Some(Ok(ref l)) if l == "held"), "the memory hog did not start: {line:?}");
    child
}

#[test]
fn a_server_near_its_memory_cap_answers_429_stays_alive_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let cap = Cap::new(256 << 20);
    let data = tmp.path().join("indexes");
    let mut server = cap
        .command(
            env!("CARGO_BIN_EXE_cellar"),
            &["serve", "--bind", "127.0.0.1:0", "--lazy-encoder", "--workers", "1"],
        )
        .args(["--data-dir", data.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = BufReader::new(server.stderr.take().unwrap()).lines().next().unwrap().unwrap();
    let port = common::port_of(&ready);
    let note = |i: usize| json!({"id": format!("n{i}"), "text": format!("note {i}"), "vectors": {"tokens": [[1.0, i as f32]]}});
    let create = json!({"docs": (0..16).map(note).collect::<Vec<_>>(), "codec": "f16"});
    let (status, body) = http(port, "PUT", "/v1/indexes/notes", &create.to_string());
    assert_eq!(status, 200, "{body}");
    let search = json!({"mode": "dense-exact", "k": 3, "query_vectors": {"tokens": [[1.0, 3.0]], "pooled": [1.0, 3.0]}}).to_string();
    let (status, body) = http(port, "POST", "/v1/indexes/notes/search", &search);
    assert_eq!(status, 200, "{body}");

    let line = metric(port, "cellar_memory_shed_line_bytes");
    assert!(line > 0 && line < 256 << 20, "the server watches its cap: line {line}");
    // Past the line by a MiB, still under the limit (the reserve is at least 2 MiB).
    let mut hogging = hog(&cap, line + (1 << 20));
    let mut refused = None;
    for _ in 0..100 {
        let (status, body) = http(port, "POST", "/v1/indexes/notes/search", &search);
        if status == 429 {
            refused = Some(body);
            break;
        }
        assert_eq!(status, 200, "{body}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let refused = refused.unwrap_or_else(|| {
        panic!(
            "no 429 with {} MiB unreclaimable past a line of {} MiB",
            cap.unreclaimable() >> 20,
            line >> 20
        )
    });
    assert_eq!(refused["code"], "overloaded", "{refused}");
    assert_eq!(refused["details"]["memory_pressure"], true, "{refused}");
    assert_eq!(http(port, "GET", "/healthz", "").0, 200, "health is never shed");

    // A burst past saturation: 64 searches at once, each answered 429 (never a dropped connection).
    let burst: Vec<_> = (0..64)
        .map(|_| {
            let search = search.clone();
            std::thread::spawn(move || http(port, "POST", "/v1/indexes/notes/search", &search).0)
        })
        .collect();
    for handle in burst {
        assert_eq!(handle.join().unwrap(), 429);
    }
    assert!(server.try_wait().unwrap().is_none(), "the server is alive");
    assert!(metric(port, "cellar_memory_shed_requests_total") >= 65);

    hogging.kill().unwrap();
    hogging.wait().unwrap();
    let mut answered = false;
    for _ in 0..100 {
        let (status, _) = http(port, "POST", "/v1/indexes/notes/search", &search);
        if status == 200 {
            answered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(answered, "searches are answered again once the memory is given back");
    assert!(metric(port, "cellar_memory_shed_episodes_total") >= 1);
    assert_eq!(cap.oom_kills(), 0, "nothing in the cap was OOM-killed");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success());
    let _ = std::io::stderr().flush();
}
