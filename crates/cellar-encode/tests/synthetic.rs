//! A tiny random BERT written by the test itself: weight-name variants and the projection paths.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use cellar_encode::{CellarError, Encoder, EncoderConfig};

const HIDDEN: usize = 8;
const INTER: usize = 16;
const LAYERS: usize = 2;
const VOCAB: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "dog", "sat", "on", "mat", "a", "big", "red", "##s",
    "##ed", "run", "and", ".", ",", "!", "?", "(", ")", "is", "was", "not", "of", "in", "to", "it",
];
const TEXT: &str = "The big cats sat on a red mat, and it was not a dog!";

/// Deterministic pseudo-random values in [-0.5, 0.5).
struct Lcg(u64);

impl Lcg {
    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    fn tensor(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(self.values(n), shape, &Device::Cpu).expect("tensor")
    }
}

fn bert_tensors(prefix: &str) -> HashMap<String, Tensor> {
    let mut rng = Lcg(7);
    let mut t = HashMap::new();
    let mut put = |name: String, shape: &[usize]| {
        t.insert(format!("{prefix}{name}"), rng.tensor(shape));
    };
    put("embeddings.word_embeddings.weight".into(), &[VOCAB.len(), HIDDEN]);
    put("embeddings.position_embeddings.weight".into(), &[32, HIDDEN]);
    put("embeddings.token_type_embeddings.weight".into(), &[2, HIDDEN]);
    put("embeddings.LayerNorm.weight".into(), &[HIDDEN]);
    put("embeddings.LayerNorm.bias".into(), &[HIDDEN]);
    for l in 0..LAYERS {
        let p = format!("encoder.layer.{l}.");
        for (name, out, inp) in [
            ("attention.self.query", HIDDEN, HIDDEN),
            ("attention.self.key", HIDDEN, HIDDEN),
            ("attention.self.value", HIDDEN, HIDDEN),
            ("attention.output.dense", HIDDEN, HIDDEN),
            ("intermediate.dense", INTER, HIDDEN),
            ("output.dense", HIDDEN, INTER),
        ] {
            put(format!("{p}{name}.weight"), &[out, inp]);
            put(format!("{p}{name}.bias"), &[out]);
        }
        for ln in ["attention.output.LayerNorm", "output.LayerNorm"] {
            put(format!("{p}{ln}.weight"), &[HIDDEN]);
            put(format!("{p}{ln}.bias"), &[HIDDEN]);
        }
    }
    t
}

/// A BERT WordPiece `tokenizer.json` (lower-casing, [CLS] ... [SEP]) over `VOCAB`.
fn write_tokenizer(dir: &Path) {
    let vocab: serde_json::Map<String, serde_json::Value> =
        VOCAB.iter().enumerate().map(|(i, w)| (w.to_string(), i.into())).collect();
    let added: Vec<serde_json::Value> = VOCAB[..4]
        .iter()
        .enumerate()
        .map(|(i, w)| {
            serde_json::json!({"id": i, "content": w, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
            "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
        "decoder": null,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100, "vocab": vocab}
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).expect("tokenizer");
}

/// Writes a complete tiny checkpoint; `extra` tensors go into model.safetensors too.
fn write_model(dir: &Path, prefix: &str, extra: &[(&str, Tensor)]) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let config = serde_json::json!({
        "hidden_size": HIDDEN, "num_attention_heads": 2, "num_hidden_layers": LAYERS,
        "intermediate_size": INTER, "vocab_size": VOCAB.len(), "max_position_embeddings": 32,
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "_name_or_path": "tiny-test-bert"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).expect("config");
    let mut t = bert_tensors(prefix);
    for (name, tensor) in extra {
        t.insert(name.to_string(), tensor.clone());
    }
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).expect("safetensors");
    write_tokenizer(dir);
}

fn try_load(dir: &Path) -> Result<Encoder, CellarError> {
    let mut cfg = EncoderConfig::new(dir);
    cfg.query_max_tokens = 16;
    cfg.doc_max_tokens = 32;
    Encoder::load(cfg)
}

fn load(dir: &Path) -> Encoder {
    try_load(dir).expect("load tiny model")
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let d: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    d / (a.iter().map(|x| x * x).sum::<f32>().sqrt() * b.iter().map(|x| x * x).sum::<f32>().sqrt())
}

/// `w @ v` for a row-major `(out, HIDDEN)` weight.
fn apply(w: &[f32], v: &[f32]) -> Vec<f32> {
    w.chunks(HIDDEN).map(|row| row.iter().zip(v).map(|(a, b)| a * b).sum()).collect()
}

/// Each projected vector must be the normalised projection of the unprojected one (a linear map
/// without bias commutes with the per-vector scaling).
fn assert_projection_of(plain: &Encoder, projected: &Encoder, w: &[f32], out_dim: usize) {
    assert_eq!(plain.dim(), HIDDEN);
    assert_eq!(projected.dim(), out_dim);
    let a = plain.encode_docs(&[TEXT]).expect("plain").remove(0);
    let b = projected.encode_docs(&[TEXT]).expect("projected").remove(0);
    assert_eq!(a.n_tokens, b.n_tokens);
    assert_eq!(b.tokens.len(), b.n_tokens * out_dim);
    for (pa, pb) in a.tokens.chunks(HIDDEN).zip(b.tokens.chunks(out_dim)) {
        assert!(cosine(&apply(w, pa), pb) > 0.99999);
    }
    assert!(cosine(&apply(w, &a.pooled), &b.pooled) > 0.99999);
}

#[test]
fn bert_prefix_or_not_gives_the_same_model() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_model(&tmp.path().join("plain"), "", &[]);
    write_model(&tmp.path().join("prefixed"), "bert.", &[]);
    let a = load(&tmp.path().join("plain")).encode_docs(&[TEXT]).expect("plain").remove(0);
    let b = load(&tmp.path().join("prefixed")).encode_docs(&[TEXT]).expect("prefixed").remove(0);
    assert_eq!(a, b);
    // "the big cat ##s sat on a red mat , and it was not a dog !" less "," and "!"
    assert_eq!(a.n_tokens, 15);
}

#[test]
fn colbert_linear_in_model_safetensors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let w = Lcg(99).values(4 * HIDDEN);
    let linear = Tensor::from_vec(w.clone(), (4, HIDDEN), &Device::Cpu).expect("tensor");
    write_model(&tmp.path().join("plain"), "bert.", &[]);
    write_model(&tmp.path().join("colbert"), "bert.", &[("linear.weight", linear)]);
    assert_projection_of(&load(&tmp.path().join("plain")), &load(&tmp.path().join("colbert")), &w, 4);
}

fn write_dense(dir: &Path, w: &[f32], activation: &str) {
    let dense = dir.join("1_Dense");
    std::fs::create_dir_all(&dense).expect("mkdir");
    let cfg = serde_json::json!({"in_features": HIDDEN, "out_features": 3, "bias": false,
        "activation_function": activation});
    std::fs::write(dense.join("config.json"), cfg.to_string()).expect("config");
    let t = Tensor::from_vec(w.to_vec(), (3, HIDDEN), &Device::Cpu).expect("tensor");
    let tensors = HashMap::from([("linear.weight".to_string(), t)]);
    candle_core::safetensors::save(&tensors, dense.join("model.safetensors")).expect("save");
    let modules = serde_json::json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "sentence_transformers.models.Dense"}
    ]);
    std::fs::write(dir.join("modules.json"), modules.to_string()).expect("modules");
}

#[test]
fn sentence_transformers_dense_module() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let w = Lcg(5).values(3 * HIDDEN);
    let (plain, dense) = (tmp.path().join("plain"), tmp.path().join("dense"));
    write_model(&plain, "", &[]);
    write_model(&dense, "", &[]);
    write_dense(&dense, &w, "torch.nn.modules.linear.Identity");
    assert_projection_of(&load(&plain), &load(&dense), &w, 3);
    write_dense(&dense, &w, "torch.nn.modules.activation.ReLU");
    match try_load(&dense) {
        Err(CellarError::Model { path, .. }) => assert!(path.ends_with("1_Dense/config.json")),
        other => panic!("expected a Model error, got {:?}", other.err()),
    }
}

#[test]
fn wrong_shapes_are_model_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bad = Tensor::zeros((4, HIDDEN + 1), candle_core::DType::F32, &Device::Cpu).expect("tensor");
    write_model(tmp.path(), "", &[("linear.weight", bad)]);
    assert!(matches!(try_load(tmp.path()), Err(CellarError::Model { .. })));
}
