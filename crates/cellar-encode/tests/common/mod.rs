//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use cellar_encode::{default_model_dir, Encoder, EncoderConfig};

/// The all-MiniLM-L6-v2 directory; fails the test with install instructions when absent.
pub fn model_dir() -> PathBuf {
    match default_model_dir() {
        Ok(dir) => dir,
        Err(e) => panic!("this test needs the all-MiniLM-L6-v2 checkpoint: {e}"),
    }
}

/// An encoder with `edit` applied to the default options.
pub fn encoder_with(edit: impl FnOnce(&mut EncoderConfig)) -> Encoder {
    let mut cfg = EncoderConfig::new(model_dir());
    edit(&mut cfg);
    Encoder::load(cfg).expect("load all-MiniLM-L6-v2")
}

/// One encoder with default options, shared by the tests of a binary.
pub fn default_encoder() -> &'static Encoder {
    static ENC: OnceLock<Encoder> = OnceLock::new();
    ENC.get_or_init(|| encoder_with(|_| {}))
}

/// Cosine of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

/// Smallest row-by-row cosine of two equally shaped row-major matrices.
pub fn min_row_cosine(a: &[f32], b: &[f32], dim: usize) -> f32 {
    assert_eq!(a.len(), b.len(), "shapes differ");
    a.chunks(dim).zip(b.chunks(dim)).map(|(x, y)| cosine(x, y)).fold(1.0, f32::min)
}
