//! `cellar-bench load` end to end against a fake server this test runs (fixed answers whose hit
//! ids follow the query, optional 429s, a /metrics page whose read counter grows 4096 bytes per
//! answered search), and exit code 2 for bad arguments: no model or real server needed. The last
//! test starts real `cellar serve` children (the `cellar` binary built beside `cellar-bench`) and
//! needs the default model installed.

mod common;
use common::{assert_user_error, bench, cellar, text};

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The fake server's answer to "question number N": documents dN, then "other".
fn hits_for(query: &str) -> String {
    let n = query.rsplit(' ').next().unwrap();
    let hits = serde_json::json!([{ "id": format!("d{n}"), "score": 2.0 }, { "id": "other", "score": 1.0 }]);
    serde_json::json!({ "hits": hits, "candidates": 2 }).to_string()
}

/// Answers every search with 200 (every `reject_every`-th with 429); returns its port.
fn fake_server(reject_every: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let searches = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (searches, answered) = (Arc::clone(&searches), Arc::clone(&answered));
            std::thread::spawn(move || serve(stream, reject_every, &searches, &answered));
        }
    });
    port
}

fn serve(mut stream: TcpStream, reject_every: usize, searches: &AtomicUsize, answered: &AtomicUsize) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let Ok(n) = stream.read(&mut chunk) else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = text(&buf[..head_end]);
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = text(&buf[head_end..]);
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (status, body) = match path.as_str() {
        "/healthz" => ("200 OK", "{\"status\":\"ok\",\"docs\":8}".to_string()),
        "/metrics" => (
            "200 OK",
            format!(
                "cellar_read_bytes_total {}\ncellar_process_rss_bytes 10485760\n",
                4096 * answered.load(Ordering::SeqCst)
            ),
        ),
        "/v1/search" => {
            let request: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
            assert!(request["query"].is_string() && request["include_text"] == false, "{request}");
            let n = searches.fetch_add(1, Ordering::SeqCst) + 1;
            if reject_every > 0 && n.is_multiple_of(reject_every) {
                ("429 Too Many Requests", "{\"code\":\"overloaded\"}".to_string())
            } else {
                answered.fetch_add(1, Ordering::SeqCst);
                ("200 OK", hits_for(request["query"].as_str().unwrap()))
            }
        }
        _ => ("404 Not Found", "{}".to_string()),
    };
    let response =
        format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    let _ = stream.write_all(response.as_bytes());
}

fn write_queries(dir: &Path) -> String {
    let path = dir.join("queries.jsonl");
    let lines: String =
        (0..5).map(|i| format!("{{\"_id\": \"q{i}\", \"text\": \"question number {i}\"}}\n")).collect();
    std::fs::write(&path, lines).unwrap();
    path.display().to_string()
}

/// Runs a short sweep against `port`; returns the command's output and the JSON report.
fn load(dir: &Path, port: u16, extra: &[&str]) -> (Output, serde_json::Value) {
    let queries = write_queries(dir);
    let out_prefix = dir.join("load").display().to_string();
    let url = format!("http://127.0.0.1:{port}");
    let mut args = vec![
        "load",
        "--url",
        &url,
        "--name",
        "fake",
        "--queries",
        &queries,
        "--qps",
        "20,40",
        "--duration",
        "1",
        "--warmup",
        "0.5",
        "--drain",
        "2",
        "--out",
        &out_prefix,
    ];
    args.extend_from_slice(extra);
    let out = bench(&args);
    let json = std::fs::read_to_string(dir.join("load.json"))
        .unwrap_or_else(|e| panic!("no load.json ({e}); stderr: {}", text(&out.stderr)));
    (out, serde_json::from_str(&json).unwrap())
}

/// The plot needs matplotlib: without it the command fails with exit code 2 and says how to get
/// it, after writing the JSON and markdown.
fn assert_plot_or_install_hint(out: &Output, dir: &Path) {
    assert_plot_or_install_hint_for(out, &dir.join("load"));
}

/// Judgments of the five queries against the fake server's answers (dN, other), with the nDCG@10
/// of each answer worked out by hand: q0 and q1 rank their one relevant document first (1), q2's
/// is second (1/log2 3), q3 finds one of two at rank 1 (1 / (1 + 1/log2 3), recall 1/2), q4 none.
fn write_qrels(dir: &Path) -> (String, f64, f64) {
    let path = dir.join("qrels.tsv");
    let rows = "query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t2\nq2\tother\t1\nq3\td3\t1\nq3\tmissing\t1\nq4\tmissing\t1\n";
    std::fs::write(&path, rows).unwrap();
    let d2 = 1.0 / 3f64.log2();
    let ndcg = (1.0 + 1.0 + d2 + 1.0 / (1.0 + d2) + 0.0) / 5.0;
    let recall = (1.0 + 1.0 + 1.0 + 0.5 + 0.0) / 5.0;
    (path.display().to_string(), ndcg, recall)
}

#[test]
fn sweeps_a_running_server_and_writes_every_figure() {
    let tmp = tempfile::tempdir().unwrap();
    let port = fake_server(0);
    let (qrels, ndcg, recall) = write_qrels(tmp.path());
    let (out, report) = load(tmp.path(), port, &["--stop-at-saturation", "false", "--qrels", &qrels]);
    assert_plot_or_install_hint(&out, tmp.path());
    let config = &report["configurations"][0];
    assert_eq!(config["name"], "fake");
    assert_eq!(config["status"], "completed");
    let levels = config["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 2);
    for (level, qps) in levels.iter().zip([20.0, 40.0]) {
        assert_eq!(level["offered_qps"], qps);
        // Bounded: at most qps x (warm-up + duration) + 1 requests.
        let sent = level["sent"].as_u64().unwrap() + level["warmup_sent"].as_u64().unwrap();
        assert!(sent as f64 <= qps * 1.5 + 1.0, "{level}");
        assert_eq!(level["completed_ok"], level["sent"], "{level}");
        assert_eq!(level["http_429"], 0);
        assert!(level["latency"]["p95_ms"].as_f64().unwrap() > 0.0);
        // The fake server's counter grows 4096 bytes per answered search.
        assert_eq!(level["server_read_bytes_per_query"], 4096.0, "{level}");
        assert_eq!(level["server_rss_bytes"], 10485760);
    }
    assert!(report["command_line"].as_str().unwrap().contains("--qps 20,40"));
    assert_eq!(report["settings"]["n_queries"], 5);
    // Served quality: every query was answered during the sweep.
    let quality = &config["quality"];
    assert!((quality["ndcg_at_10"].as_f64().unwrap() - ndcg).abs() < 1e-9, "{quality}");
    assert!((quality["recall_at_10"].as_f64().unwrap() - recall).abs() < 1e-9, "{quality}");
    assert_eq!(quality["queries_answered"], 5, "{quality}");
    assert_eq!(quality["queries_judged"], 5, "{quality}");
    let md = std::fs::read_to_string(tmp.path().join("load.md")).unwrap();
    assert!(md.contains("## fake") && md.contains("| 40 |"), "{md}");
    let line = format!("Served quality: nDCG@10 {ndcg:.3}, Recall@10 0.700 over 5/5 judged queries.");
    assert!(md.contains(&line) && md.contains(&format!("| fake | {ndcg:.3} | 0.700 | 5/5 |")), "{md}");
}

#[test]
fn counts_429s_and_stops_at_saturation() {
    let tmp = tempfile::tempdir().unwrap();
    let port = fake_server(3);
    let (out, report) = load(tmp.path(), port, &[]);
    assert_plot_or_install_hint(&out, tmp.path());
    let levels = report["configurations"][0]["levels"].as_array().unwrap();
    // A third of the requests refused: past the 5% failure threshold at the first level.
    assert_eq!(levels.len(), 1, "{levels:?}");
    assert!(levels[0]["http_429"].as_u64().unwrap() > 0);
    assert_eq!(levels[0]["saturated"], true);
    // No --qrels: no quality.
    assert!(report["configurations"][0]["quality"].is_null());
}

#[test]
fn bad_arguments_exit_with_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let queries = write_queries(tmp.path());
    let index = tmp.path().join("index");
    std::fs::create_dir_all(&index).unwrap();
    std::fs::write(index.join("index.json"), "{}").unwrap();
    let q = queries.as_str();
    let cfg = |extra: &str| format!("name=a,index={},{extra}", index.display());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--url".into(), "http://10.1.2.3:8080".into()], "not loopback"),
        (vec!["--url".into(), "http://example.com:80".into()], "not loopback"),
        (vec!["--config".into(), cfg("colour=red")], "unknown key"),
        (vec!["--config".into(), cfg("cap=0")], "positive"),
        (vec!["--config".into(), cfg("reader=tape")], "reader"),
        (vec!["--config".into(), "name=a,index=/no/such/index".into()], "not an index"),
        (vec!["--config".into(), cfg("reader=mmap"), "--qps".into(), "0".into()], "--qps"),
        (vec!["--config".into(), cfg("reader=mmap"), "--duration".into(), "0".into()], "--duration"),
        (vec!["--config".into(), cfg("reader=mmap"), "--mode".into(), "fuzzy".into()], "--mode"),
        (vec!["--config".into(), cfg("reader=mmap"), "--baseline".into(), "zz".into()], "--baseline"),
        (vec![], "--config"),
    ];
    for (extra, needle) in cases {
        let mut args: Vec<String> = vec!["load".into(), "--queries".into(), q.into()];
        args.extend(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_user_error(&bench(&refs), needle);
    }
    let missing = tmp.path().join("nope.jsonl").display().to_string();
    assert_user_error(
        &bench(&["load", "--url", "http://127.0.0.1:9", "--queries", &missing]),
        "no such file",
    );
    // A configuration to start needs the `cellar` binary: a clear hint when it is not there.
    let nowhere = tmp.path().join("no-cellar").display().to_string();
    let started = ["load", "--queries", q, "--cellar", &nowhere, "--config", &cfg("reader=mmap")];
    assert_user_error(&bench(&started), "cargo build --release -p cellar-cli");
    // Nothing was started or written by any of them.
    assert!(!tmp.path().join("load.json").exists());
}

/// The real thing, small: `cellar index` on 8 documents, then `cellar-bench load` starts `cellar
/// serve` twice (mmap, encoder in the server; direct under a memory cap, vectors from the bench)
/// for one short level each, scoring the real answers against qrels. Needs the default model
/// installed (as `tests/retrieval.rs`).
#[test]
fn benchmarks_real_servers_it_starts_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus: String = (0..8)
        .map(|i| {
            let topic = if i % 2 == 0 { "green tea leaves are steamed" } else { "the moon orbits the earth" };
            format!("{{\"_id\": \"d{i}\", \"title\": \"t{i}\", \"text\": \"{topic}, note {i}.\"}}\n")
        })
        .collect();
    std::fs::write(tmp.path().join("corpus.jsonl"), corpus).unwrap();
    let index = tmp.path().join("index");
    let out = cellar(&[
        "index",
        tmp.path().join("corpus.jsonl").to_str().unwrap(),
        "--out",
        index.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let queries = write_queries(tmp.path());
    let (qrels, _, _) = write_qrels(tmp.path());
    let prefix = tmp.path().join("real").display().to_string();
    let i = index.display();
    let out = bench(&[
        "load",
        "--queries",
        &queries,
        "--qps",
        "4",
        "--duration",
        "1",
        "--warmup",
        "0.5",
        "--drain",
        "5",
        "--out",
        &prefix,
        "--qrels",
        &qrels,
        "--config",
        &format!("name=mmap,index={i},reader=mmap"),
        "--config",
        // The index is tiny: a cap of 200x its size still leaves the server only some MiB.
        &format!("name=direct-capped,index={i},reader=direct,cap=20000,vectors=client"),
    ]);
    let json = std::fs::read_to_string(tmp.path().join("real.json"))
        .unwrap_or_else(|e| panic!("no real.json ({e}); stderr: {}", text(&out.stderr)));
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let configs = report["configurations"].as_array().unwrap();
    let mmap = &configs[0];
    assert_eq!(mmap["status"], "completed", "{mmap}");
    let level = &mmap["levels"][0];
    assert!(level["completed_ok"].as_u64().unwrap() > 0, "{level}");
    assert!(level["server_read_bytes_per_query"].as_f64().unwrap() > 0.0, "{level}");
    assert!(mmap["peak_rss_bytes"].as_u64().unwrap() > 0);
    // The real server's answers parse: every 200 body had its hits[].id.
    let quality = &mmap["quality"];
    assert!(quality["queries_answered"].as_u64().unwrap() > 0, "{quality}");
    assert_eq!(quality["unreadable_answers"], 0, "{quality}");
    assert!((0.0..=1.0).contains(&quality["ndcg_at_10"].as_f64().unwrap()), "{quality}");
    let capped = &configs[1];
    // Without cgroups the direct reader runs uncapped, with a note saying so.
    assert_eq!(capped["status"], "completed", "{capped}");
    assert!(capped["server_args"].as_array().unwrap().iter().any(|a| a == "--lazy-encoder"));
    let level = &capped["levels"][0];
    assert!(level["completed_ok"].as_u64().unwrap() > 0, "{level}");
    assert!(level["server_read_bytes_per_query"].as_f64().unwrap() > 0.0, "{level}");
    if capped["capped"] == true {
        assert!(capped["cgroup_max_usage_bytes"].as_u64().unwrap() > 0, "{capped}");
        assert!(capped["cgroup_failcnt"].is_u64());
    } else {
        assert!(capped["notes"][0].as_str().unwrap().contains("NOT applied"), "{capped}");
    }
    assert_plot_or_install_hint_for(&out, &tmp.path().join("real"));
}

fn assert_plot_or_install_hint_for(out: &Output, prefix: &Path) {
    let with = |ext: &str| Path::new(&format!("{}.{ext}", prefix.display())).to_path_buf();
    assert!(with("md").is_file());
    if out.status.success() {
        assert!(with("png").is_file());
    } else {
        assert_user_error(out, "pip install matplotlib");
    }
}
