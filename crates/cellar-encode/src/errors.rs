//! Builders for the `CellarError`s this crate returns.

use std::path::Path;

use cellar_core::CellarError;

/// A checkpoint file at `path` is missing or unusable.
pub(crate) fn model_err(path: &Path, detail: impl Into<String>) -> CellarError {
    CellarError::Model { path: path.to_path_buf(), detail: detail.into() }
}

/// The caller handed us something unusable.
pub(crate) fn invalid(detail: impl Into<String>) -> CellarError {
    CellarError::InvalidInput(detail.into())
}

/// A tensor operation failed while running the model in `dir`.
pub(crate) fn tensor_err(dir: &Path, e: candle_core::Error) -> CellarError {
    model_err(dir, format!("forward pass failed: {e}"))
}
