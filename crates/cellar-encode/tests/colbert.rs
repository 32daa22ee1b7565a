//! ColBERT checkpoints are encoded exactly as their library encodes them: each fixture under
//! `testdata/colbert-v1/` is a tiny randomly initialised checkpoint saved by its library (PyLate
//! for `bert/`, colbert-ai for `stanford/`), with the token vectors that library returned for a
//! handful of texts (longer than the limits, full of punctuation, one letter). Made once, by
//! hand: `python3 testdata/colbert-v1/make_fixtures.py pylate|colbert-ai`.

use std::path::PathBuf;

use cellar_encode::{Encoded, Encoder, EncoderConfig, WeightPrecision};
use serde::Deserialize;

#[derive(Deserialize)]
struct Expected {
    made_by: String,
    queries: Vec<Case>,
    documents: Vec<Case>,
}

/// `expected-<variant>.json`: PyLate's query vectors with other settings of the same checkpoint.
#[derive(Deserialize)]
struct Variant {
    settings: serde_json::Map<String, serde_json::Value>,
    queries: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    vectors: Vec<Vec<f32>>,
}

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/colbert-v1").join(name)
}

fn fixture(name: &str) -> (Encoder, Expected) {
    let dir = fixture_dir(name);
    let encoder = Encoder::load(EncoderConfig::new(&dir)).unwrap();
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    (encoder, serde_json::from_str(&text).unwrap())
}

/// The same number of vectors, each within 1e-4 of PyLate's and at cosine >= 0.9999.
fn same(got: &Encoded, case: &Case, dim: usize, what: &str) {
    assert_eq!(got.n_tokens, case.vectors.len(), "{what} {:?}: token count", case.text);
    for (i, (row, want)) in got.tokens.chunks_exact(dim).zip(&case.vectors).enumerate() {
        assert_eq!(want.len(), dim, "{what}: fixture dimension");
        let diff = row.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let dot: f32 = row.iter().zip(want).map(|(a, b)| a * b).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let cosine = dot / (norm(row) * norm(want));
        assert!(
            diff <= 1e-4 && cosine >= 0.9999,
            "{what} {:?} token {i}: max diff {diff}, cosine {cosine}",
            case.text
        );
    }
}

fn check(name: &str) {
    let (encoder, expected) = fixture(name);
    assert!(
        encoder.is_colbert(),
        "{name}: config_sentence_transformers.json not read as a ColBERT checkpoint"
    );
    let dim = encoder.dim();
    for case in &expected.queries {
        same(
            &encoder.encode_query(&case.text).unwrap(),
            case,
            dim,
            &format!("{name} query ({})", expected.made_by),
        );
    }
    let texts: Vec<&str> = expected.documents.iter().map(|c| c.text.as_str()).collect();
    let batch = encoder.encode_docs(&texts).unwrap();
    for (got, case) in batch.iter().zip(&expected.documents) {
        same(got, case, dim, &format!("{name} document in a batch"));
        same(&encoder.encode_docs(&[&case.text]).unwrap()[0], case, dim, &format!("{name} document alone"));
    }
}

#[test]
fn a_pylate_bert_checkpoint_encodes_as_pylate_does() {
    check("bert");
}

#[test]
fn a_pylate_modernbert_checkpoint_encodes_as_pylate_does() {
    check("modernbert");
}

/// `--model-weights f16` reaches a ModernBERT checkpoint's layers too (it was silently f32):
/// every token within cosine 0.999 of the f32 encoding, and not identical to it.
#[test]
fn a_modernbert_checkpoint_takes_f16_layer_weights() {
    let (full, expected) = fixture("modernbert");
    let mut config = EncoderConfig::new(fixture_dir("modernbert"));
    config.weights = WeightPrecision::F16;
    let half = Encoder::load(config).unwrap();
    let dim = full.dim();
    for case in expected.queries.iter().chain(&expected.documents) {
        let (a, b) = (full.encode_query(&case.text).unwrap(), half.encode_query(&case.text).unwrap());
        assert_eq!(a.n_tokens, b.n_tokens);
        let mut min = f32::MAX;
        for (x, y) in a.tokens.chunks_exact(dim).zip(b.tokens.chunks_exact(dim)) {
            let dot: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
            let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
            min = min.min(dot / (norm(x) * norm(y)));
        }
        assert!(min > 0.999, "{:?}: smallest token cosine {min}", case.text);
        assert_ne!(a.tokens, b.tokens, "{:?}: f16 weights changed nothing", case.text);
    }
}

#[test]
fn a_stanford_colbert_ai_checkpoint_encodes_as_colbert_ai_does() {
    check("stanford");
}

/// The PyLate checkpoint with every query token attending to its [MASK] expansion, and with no
/// expansion: a copy whose `config_sentence_transformers.json` takes the variant's settings.
#[test]
fn pylate_query_settings_change_the_vectors_as_in_pylate() {
    for variant in ["attend", "no-expansion"] {
        let from = fixture_dir("bert");
        let text = std::fs::read_to_string(from.join(format!("expected-{variant}.json"))).unwrap();
        let expected: Variant = serde_json::from_str(&text).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("bert");
        for sub in ["", "1_Dense"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
            for entry in std::fs::read_dir(from.join(sub)).unwrap() {
                let path = entry.unwrap().path();
                if path.is_file() {
                    std::fs::copy(&path, dir.join(sub).join(path.file_name().unwrap())).unwrap();
                }
            }
        }
        let config_path = dir.join("config_sentence_transformers.json");
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
        for (key, value) in &expected.settings {
            config[key] = value.clone();
        }
        std::fs::write(&config_path, config.to_string()).unwrap();
        let encoder = Encoder::load(EncoderConfig::new(&dir)).unwrap();
        for case in &expected.queries {
            same(
                &encoder.encode_query(&case.text).unwrap(),
                case,
                encoder.dim(),
                &format!("{variant} query"),
            );
        }
    }
}
