//! Vector encodings behind one trait. A codec turns an f32 vector of `dim` values into a fixed
//! number of bytes (`bytes_per_vector`), and scores a query against encoded documents with the
//! matching kernel. Codec parameters (e.g. int8 scales) live in `codec.bin`.

mod f16;
mod int8;

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use self::f16::F16Codec;
pub use self::int8::Int8Codec;
use crate::error::{CellarError, Result};
use crate::kernels::Isa;

/// The codecs a store can be written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodecKind {
    /// IEEE half precision, 2 bytes per value.
    F16,
    /// Signed 8-bit with one f32 scale per dimension, 1 byte per value.
    Int8,
}

impl CodecKind {
    pub const ALL: [CodecKind; 2] = [CodecKind::F16, CodecKind::Int8];

    pub fn name(self) -> &'static str {
        match self {
            CodecKind::F16 => "f16",
            CodecKind::Int8 => "int8",
        }
    }

    /// Bytes one encoded vector of `dim` values takes.
    pub fn bytes_per_vector(self, dim: usize) -> usize {
        match self {
            CodecKind::F16 => 2 * dim,
            CodecKind::Int8 => dim,
        }
    }
}

impl std::str::FromStr for CodecKind {
    type Err = CellarError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f16" => Ok(CodecKind::F16),
            "int8" => Ok(CodecKind::Int8),
            other => Err(CellarError::invalid(format!("unknown codec {other:?}: expected one of f16, int8"))),
        }
    }
}

/// An encoding of fixed-dimension vectors, with the scoring kernels that read it.
pub trait Codec: Send + Sync + Debug {
    fn kind(&self) -> CodecKind;
    fn dim(&self) -> usize;
    /// Bytes one encoded vector (one token) takes.
    fn bytes_per_vector(&self) -> usize;
    /// Appends the encoding of `v` (exactly `dim` finite values) to `out`.
    fn encode(&self, v: &[f32], out: &mut Vec<u8>);
    /// Appends the `dim` decoded values of one encoded vector to `out`.
    fn decode(&self, bytes: &[u8], out: &mut Vec<f32>);
    /// Turns query vectors (`nq * dim` f32) into the form the kernel expects.
    fn prepare_query(&self, query: &[f32]) -> Vec<f32>;
    /// MaxSim of a prepared query against `nd` encoded token vectors.
    fn maxsim(&self, isa: Isa, prepared: &[f32], doc: &[u8]) -> f32;
    /// Parameters persisted in `codec.bin` (may be empty).
    fn params(&self) -> Vec<u8>;
}

/// Rebuilds a codec from its persisted parameters; `path` names `codec.bin` in errors.
pub fn codec_from_params(kind: CodecKind, dim: usize, params: &[u8], path: &Path) -> Result<Arc<dyn Codec>> {
    Ok(match kind {
        CodecKind::F16 => Arc::new(F16Codec::new(dim)?),
        CodecKind::Int8 => Arc::new(Int8Codec::from_params(dim, params, path)?),
    })
}

/// Checks a vector is `dim` long and finite; `what` names it in the error.
pub fn validate_vector(v: &[f32], dim: usize, what: impl Fn() -> String) -> Result<()> {
    if v.len() != dim {
        return Err(CellarError::WrongDimension { expected: dim, received: v.len() });
    }
    if let Some(k) = v.iter().position(|x| !x.is_finite()) {
        return Err(CellarError::invalid(format!(
            "{}: value {} at dimension {k} is not finite",
            what(),
            v[k]
        )));
    }
    Ok(())
}

/// Largest vector dimension a store accepts.
pub const MAX_DIM: usize = 65_536;

pub(crate) fn check_dim(dim: usize) -> Result<()> {
    if dim == 0 || dim > MAX_DIM {
        return Err(CellarError::invalid(format!("dimension {dim} is out of range 1..={MAX_DIM}")));
    }
    Ok(())
}
