//! The `cellar-bench` binary end to end: its subcommands, synthetic stores, the store
//! benchmark's worker (the child each reader runs in), and exit code 2 with a message (never a
//! panic) for bad input.

mod common;
use common::{assert_user_error, bench, cellar, text};

use std::path::Path;
use std::process::{Command, Output};

fn synth(dir: &Path, extra: &[&str]) -> Output {
    let out = dir.to_str().unwrap();
    let mut args = vec!["synth", "--docs", "300", "--tokens", "20", "--dim", "16", "--out", out];
    args.extend_from_slice(extra);
    bench(&args)
}

#[test]
fn help_lists_every_benchmark_and_hides_the_workers() {
    let out = bench(&["--help"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let help = text(&out.stdout);
    for command in ["load", "store", "ivf", "stream", "synth"] {
        assert!(help.contains(&format!("  {command} ")), "{command} missing from:\n{help}");
    }
    assert!(!help.contains("worker"), "{help}");
    let ivf = text(&bench(&["ivf", "--help"]).stdout);
    assert!(ivf.contains("recall") && ivf.contains("rerank-k") && !ivf.contains("ram-worker"), "{ivf}");
}

#[test]
fn synth_writes_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let out = synth(&dir, &["--codec", "int8"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("wrote 300 docs") && stdout.contains("codec int8"), "{stdout}");
    assert!(dir.join("manifest.json").is_file());
}

#[test]
fn bad_arguments_exit_with_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    assert_user_error(&synth(&tmp.path().join("a"), &["--codec", "f8"]), "unknown codec");
    let zero = bench(&["synth", "--docs", "0", "--out", tmp.path().join("b").to_str().unwrap()]);
    assert_user_error(&zero, "docs, tokens, dim and clusters");
    let dir = tmp.path().join("c");
    assert!(synth(&dir, &[]).status.success());
    assert_user_error(&synth(&dir, &[]), "already holds an index");
    let store = bench(&["store", "--store", dir.to_str().unwrap(), "--cap-fraction", "1.5"]);
    assert_user_error(&store, "--cap-fraction");
    let stream = bench(&["stream", "--users", "0", "--work", tmp.path().join("s").to_str().unwrap()]);
    assert_user_error(&stream, "--users");
}

/// A tiny streaming benchmark runs to its report (it opens each collection once at a time: its
/// directory lock refuses a second handle), with the cold and warm P95 beside the P50 per class.
#[test]
fn stream_runs_to_a_report_with_p95_per_size_class() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, out) = (tmp.path().join("work"), tmp.path().join("out"));
    let run = bench(&[
        "stream",
        "--users",
        "20",
        "--scale",
        "0.001",
        "--queries",
        "3",
        "--no-global",
        "--work",
        work.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let json = std::fs::read_to_string(out.join("stream-bench.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let classes = report["queries"].as_array().unwrap();
    assert_eq!(classes.len(), 5, "{json}");
    for class in classes {
        let ms = |key: &str| class[key].as_f64().unwrap_or_else(|| panic!("{key} in {class}"));
        assert_eq!(class["queries"], 3);
        // Nearest rank over 3 timings: the P95 is the largest.
        assert!(ms("cold_ms_p50") <= ms("cold_ms_p95") && ms("cold_ms_p95") == ms("cold_ms_max"), "{class}");
        assert!(ms("warm_ms_p50") <= ms("warm_ms_p95"), "{class}");
    }
    let md = std::fs::read_to_string(out.join("stream-bench.md")).unwrap();
    assert!(md.contains("| cold p50 ms | cold p95 ms | cold max ms | warm p50 ms | warm p95 ms |"), "{md}");
}

#[test]
fn refused_io_uring_falls_back_to_preads_with_one_loud_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    assert!(synth(&dir, &[]).status.success());
    let run = |env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cellar-bench"));
        command.args(["store-worker", "--store", dir.to_str().unwrap(), "--reader", "direct"]);
        command.args(["--batches", "6", "--batch-size", "20", "--threads", "3", "--seed", "1"]);
        if let Some(value) = env {
            command.env("CELLAR_IO_URING", value);
        }
        command.output().unwrap()
    };
    let out = run(Some("off"));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["engine"], "pread-pool");
    assert_eq!(report["records"], 120);
    assert_eq!(stderr.matches("WARNING: cellar: the kernel refuses io_uring").count(), 1, "{stderr}");
    let out = run(None);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["engine"], "io_uring");
    assert!(!text(&out.stderr).contains("WARNING"), "{}", text(&out.stderr));
}

/// The arguments of a small synthetic collection (128 dims: at 32 or 64 the random matches of
/// unrelated tokens blur MaxSim).
fn corpus_args(out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = "corpus --docs 3000 --queries 400 --dim 128 --vocab 6000 --topics 20 \
         --topic-words 300 --mean-words 30 --shard-docs 1000"
        .split_whitespace()
        .map(String::from)
        .collect();
    args.extend(["--out".to_string(), out.to_str().unwrap().to_string()]);
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// `cellar eval --query-vectors` over `index`: nDCG@10 by the rows' label prefixes.
fn eval_ndcg(index: &Path, data: &Path, prefixes: &[&str]) -> Vec<f64> {
    let json = index.with_extension("eval.json");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let out = cellar(&[
        "eval",
        "--index",
        &s(index),
        "--data",
        &s(data),
        "--query-vectors",
        &s(&data.join("query-vectors")),
        "--json",
        &s(&json),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let ndcg = |prefix: &&str| {
        let row = rows.iter().find(|r| r["label"].as_str().unwrap().starts_with(prefix)).expect(prefix);
        assert_eq!(row["metrics"]["queries"], 400);
        row["metrics"]["ndcg_at_10"].as_f64().unwrap()
    };
    prefixes.iter().map(ndcg).collect()
}

/// `cellar-bench corpus` writes a collection that `cellar index --vectors` indexes and `cellar
/// eval --query-vectors` evaluates without an encoder, and on it the systems rank as on real
/// collections: fusion over MaxSim over BM25, and MaxSim over the pooled vector alone (seeds 1,
/// 2, 3 and 17 all order them so, by 0.016 to 0.04 nDCG@10 between MaxSim and BM25). With
/// `--index` the same documents go straight into an index, which ranks exactly as the other
/// (f16 both: a fitted codec's sample would be rounded to f16 in one route and not the other).
#[test]
fn a_synthetic_corpus_indexes_evaluates_and_ranks_systems_plausibly() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, index) = (tmp.path().join("data"), tmp.path().join("index"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let args = corpus_args(&data, &[]);
    let out = bench(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("wrote 3000 documents"), "{}", text(&out.stdout));
    for file in [
        "corpus.jsonl",
        "embeddings.2.npy",
        "pooled.2.npy",
        "doclens.2.json",
        "queries.jsonl",
        "qrels/test.tsv",
    ] {
        assert!(data.join(file).is_file(), "{file} missing");
    }
    assert_user_error(&bench(&["corpus", "--docs", "10", "--out", &s(&data)]), "exists");
    assert_user_error(&bench(&["corpus", "--docs", "0", "--out", &s(&tmp.path().join("z"))]), "docs");
    let out = cellar(&["index", "--vectors", &s(&data), "--out", &s(&index), "--no-ivf", "--codec", "f16"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = ["bm25", "dense pooled", "rerank", "hybrid"];
    let [bm25, dense, rerank, hybrid] = eval_ndcg(&index, &data, &rows)[..] else { unreachable!() };
    let table = format!("bm25 {bm25:.3} dense {dense:.3} rerank {rerank:.3} hybrid {hybrid:.3}");
    assert!(bm25 > 0.3 && dense > 0.1, "a meaningful task: {table}");
    assert!(hybrid >= rerank && rerank >= bm25 && rerank > dense, "{table}");
    assert!(hybrid < 0.98, "not solved outright: {table}");
    // Without the queries' vectors the index has no encoder to make them.
    let out = cellar(&["eval", "--index", &s(&index), "--data", &s(&data)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    // One pass: generated documents go into the index, no embeddings folder is written.
    let (direct_data, direct) = (tmp.path().join("direct-data"), tmp.path().join("direct"));
    let args = corpus_args(&direct_data, &["--index", &s(&direct), "--no-ivf", "--codec", "f16"]);
    let out = bench(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!direct_data.join("embeddings.0.npy").exists() && direct_data.join("corpus.jsonl").is_file());
    let same = eval_ndcg(&direct, &direct_data, &["bm25", "rerank"]);
    assert_eq!(same, vec![bm25, rerank], "the direct build ranks as the two-step one");
}
