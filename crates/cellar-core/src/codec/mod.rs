//! Vector encodings behind one trait. A codec turns an f32 vector of `dim` values into a fixed
//! number of bytes (`bytes_per_vector`), and scores a query against encoded documents with the
//! matching kernel. Codec parameters (e.g. int8 scales) live in `codec.bin`.

mod f16;
mod int8;
mod residual;

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use self::f16::{first_beyond_f16, F16Codec, F16_OVERFLOW};
pub use self::int8::Int8Codec;
pub use self::residual::{
    centroid_count, ResidualCodec, MAX_CENTROIDS, MAX_FIT_TOKENS, MAX_GIVEN_CENTROIDS, UNCODED_ENERGY_MAX,
};
use crate::error::{CellarError, Result};
use crate::kernels::{self, Isa};

/// The codecs a store can be written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodecKind {
    /// IEEE half precision, 2 bytes per value.
    F16,
    /// Signed 8-bit with one f32 scale per dimension, 1 byte per value.
    Int8,
    /// A 16-bit centroid id and a 1-bit residual per value (see [`ResidualCodec`]).
    Residual1,
    /// A 16-bit centroid id and a 2-bit residual per value.
    Residual2,
    /// A 16-bit centroid id and a 4-bit residual per value.
    Residual4,
}

impl CodecKind {
    /// The codec an index is built with unless told otherwise: on SciFact a 2-bit residual takes
    /// 96 bytes a token (8x fewer than f16) at hybrid nDCG@10 within 0.001 of f16's, and
    /// keeps a capped server's P95 near the uncapped ram reader's (README, "Defaults").
    pub const DEFAULT: CodecKind = CodecKind::Residual2;

    pub const ALL: [CodecKind; 5] =
        [CodecKind::F16, CodecKind::Int8, CodecKind::Residual1, CodecKind::Residual2, CodecKind::Residual4];

    pub fn name(self) -> &'static str {
        match self {
            CodecKind::F16 => "f16",
            CodecKind::Int8 => "int8",
            CodecKind::Residual1 => "residual1",
            CodecKind::Residual2 => "residual2",
            CodecKind::Residual4 => "residual4",
        }
    }

    /// Bits per value of a residual codec; `None` for the others.
    pub fn residual_bits(self) -> Option<usize> {
        match self {
            CodecKind::F16 | CodecKind::Int8 => None,
            CodecKind::Residual1 => Some(1),
            CodecKind::Residual2 => Some(2),
            CodecKind::Residual4 => Some(4),
        }
    }

    /// Whether [`fit_codec`] learns parameters from sample vectors.
    pub fn needs_sample(self) -> bool {
        self != CodecKind::F16
    }

    /// Bytes one encoded vector of `dim` values takes with every dimension coded (residual
    /// codecs need `dim` a multiple of 8, and may leave some dimensions uncoded: see
    /// [`CodecKind::allows_bytes_per_vector`]).
    pub fn bytes_per_vector(self, dim: usize) -> usize {
        match self {
            CodecKind::F16 => 2 * dim,
            CodecKind::Int8 => dim,
            CodecKind::Residual1 | CodecKind::Residual2 | CodecKind::Residual4 => {
                kernels::residual::CENTROID_ID_BYTES + dim * self.residual_bits().unwrap_or(8) / 8
            }
        }
    }

    /// Whether a store of `dim` values can take `bytes` a vector: exactly
    /// [`CodecKind::bytes_per_vector`], but for residual codecs, whose fit may leave groups of 8
    /// dimensions uncoded (at least 8 coded). The codec's own `bytes_per_vector` is checked
    /// against the manifest once its parameters are read.
    pub fn allows_bytes_per_vector(self, dim: usize, bytes: usize) -> bool {
        match self.residual_bits() {
            None => bytes == self.bytes_per_vector(dim),
            Some(_) => (8..=dim).step_by(8).any(|coded| self.bytes_per_vector(coded) == bytes),
        }
    }
}

impl std::str::FromStr for CodecKind {
    type Err = CellarError;
    fn from_str(s: &str) -> Result<Self> {
        CodecKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = CodecKind::ALL.iter().map(|k| k.name()).collect();
            CellarError::invalid(format!("unknown codec {s:?}: expected one of {}", names.join(", ")))
        })
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
    /// Appends the encodings of `vs` (whole vectors of `dim` values), vector after vector: the
    /// bytes [`Codec::encode`] writes for each, which a codec may compute several at a time.
    fn encode_many(&self, vs: &[f32], out: &mut Vec<u8>) {
        vs.chunks_exact(self.dim()).for_each(|v| self.encode(v, out));
    }
    /// Appends the `dim` decoded values of one encoded vector to `out`.
    fn decode(&self, bytes: &[u8], out: &mut Vec<f32>);
    /// Turns query vectors (`nq * dim` f32) into the form the kernel expects.
    fn prepare_query(&self, query: &[f32]) -> Vec<f32>;
    /// [`Codec::prepare_query`] of a query the caller gives up: a codec whose kernel takes the
    /// values as they are returns them without a copy.
    fn prepare_query_vec(&self, query: Vec<f32>) -> Vec<f32> {
        self.prepare_query(&query)
    }
    /// MaxSim of a prepared query against `nd` encoded token vectors.
    fn maxsim(&self, isa: Isa, prepared: &[f32], doc: &[u8]) -> f32;
    /// Parameters persisted in `codec.bin` (may be empty).
    fn params(&self) -> Vec<u8>;
    /// Whether encoding a token costs enough (a centroid search) that the store writer spreads
    /// a document's tokens over the cores.
    fn costly_encode(&self) -> bool {
        false
    }
}

/// Rebuilds a codec from its persisted parameters; `path` names `codec.bin` in errors.
pub fn codec_from_params(kind: CodecKind, dim: usize, params: &[u8], path: &Path) -> Result<Arc<dyn Codec>> {
    Ok(match kind {
        CodecKind::F16 => Arc::new(F16Codec::new(dim)?),
        CodecKind::Int8 => Arc::new(Int8Codec::from_params(dim, params, path)?),
        CodecKind::Residual1 | CodecKind::Residual2 | CodecKind::Residual4 => {
            Arc::new(ResidualCodec::from_params(kind, dim, params, path)?)
        }
    })
}

/// A two-level centroid tree given to a residual fit instead of the one its k-means would place
/// (e.g. another stage's quantizer, so that one centroid id per token serves both, as in PLAID).
/// A vector is assigned to the nearest (L2) leaf under its nearest top centroid.
#[derive(Clone, PartialEq)]
pub struct CentroidTree {
    pub dim: usize,
    /// Top centroids, row after row (`groups * dim`).
    pub top: Vec<f32>,
    /// Top centroid `t`'s leaves are `ranges[t]..ranges[t + 1]`: `groups + 1` values ascending
    /// strictly from 0 to the leaf count.
    pub ranges: Vec<u32>,
    /// Leaf centroids, row after row (`leaves * dim`, 1 to [`MAX_GIVEN_CENTROIDS`] leaves).
    pub leaves: Vec<f32>,
}

impl CentroidTree {
    /// Leaf centroids (rows of `leaves`, whole or not).
    pub fn leaf_count(&self) -> usize {
        self.leaves.len() / self.dim.max(1)
    }
}

/// The shape, not the values: a tree holds megabytes of floats.
impl Debug for CentroidTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CentroidTree")
            .field("dim", &self.dim)
            .field("groups", &self.ranges.len().saturating_sub(1))
            .field("leaves", &self.leaf_count())
            .finish()
    }
}

/// How a residual codec is fitted; `None` keeps the codec's own default. Builds use the
/// defaults (a fixed seed, so a build repeats); benchmarks compare fits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FitOptions {
    /// Seed of the centroid tree's k-means.
    pub seed: Option<u64>,
    /// Share of the residual energy the uncoded dimensions may hold, in [0, 1)
    /// ([`UNCODED_ENERGY_MAX`]; 0 codes every dimension).
    pub uncoded_energy_max: Option<f64>,
    /// Leaf centroids of the tree, from 1 to [`residual::MAX_CENTROIDS`] and at most the fitted
    /// points (default: [`residual::centroid_count`] of the fitted points).
    pub centroids: Option<usize>,
    /// Most points the tree's top level is placed on (default: `TOP_FIT_POINTS` of
    /// `residual/fit.rs`; at least 1).
    pub top_fit_points: Option<usize>,
    /// Most Lloyd passes of each top cluster's split into leaves (default: `LEAF_ITERATIONS`
    /// of `residual/fit.rs`; at least 1).
    pub leaf_iterations: Option<usize>,
    /// Centroids given instead of fitted: no k-means runs (so `seed`, `centroids`,
    /// `top_fit_points` and `leaf_iterations` must be `None`), the residual scales, buckets and
    /// uncoded dimensions are fitted on the sample against this tree as usual.
    pub tree: Option<Arc<CentroidTree>>,
}

/// Fits a codec of `kind` on `sample` (`n * dim` values; f16 ignores it).
pub fn fit_codec(kind: CodecKind, dim: usize, sample: &[f32]) -> Result<Arc<dyn Codec>> {
    fit_codec_with(kind, dim, sample, &FitOptions::default())
}

/// [`fit_codec`] with `options` (f16 and int8 have nothing they change).
pub fn fit_codec_with(
    kind: CodecKind,
    dim: usize,
    sample: &[f32],
    options: &FitOptions,
) -> Result<Arc<dyn Codec>> {
    Ok(match kind {
        CodecKind::F16 => Arc::new(F16Codec::new(dim)?),
        CodecKind::Int8 => Arc::new(Int8Codec::fit(dim, sample.chunks_exact(dim.max(1)))?),
        CodecKind::Residual1 | CodecKind::Residual2 | CodecKind::Residual4 => {
            Arc::new(ResidualCodec::fit_with(kind, dim, sample, options)?)
        }
    })
}

/// Checks a vector is `dim` long and finite; `what` names it in the error.
pub fn validate_vector(v: &[f32], dim: usize, what: impl Fn() -> String) -> Result<()> {
    if v.len() != dim {
        return Err(CellarError::WrongDimension { expected: dim, received: v.len() });
    }
    if all_finite(v) {
        return Ok(());
    }
    let k = v.iter().position(|x| !x.is_finite()).expect("a value that is not finite");
    Err(CellarError::invalid(format!("{}: value {} at dimension {k} is not finite", what(), v[k])))
}

/// The rule every stored vector is held to, a build's, a write's and a stream's alike: `dim`
/// values, each finite and within the range of f16. Pooled vectors are stored as f16 whatever
/// the codec, and so are the f16 codec's token vectors: a larger value would be stored as
/// infinity, and every score against it lost. `what` names the vector in errors.
///
/// One pass over the values when they are good (`first_beyond_f16` also finds NaN and
/// infinities); a bad vector is looked at again to name a value that is not finite first.
pub fn check_stored_vector(v: &[f32], dim: usize, what: impl Fn() -> String) -> Result<()> {
    if v.len() != dim {
        return Err(CellarError::WrongDimension { expected: dim, received: v.len() });
    }
    let Some(d) = first_beyond_f16(v) else { return Ok(()) };
    validate_vector(v, dim, &what)?;
    Err(CellarError::invalid(format!(
        "{}: the value at dimension {d} ({}) is beyond the range of f16 (half precision, +-65504), in which vectors are stored",
        what(),
        v[d]
    )))
}

/// Whether every value of `v` is finite, eight lanes at a time so that it vectorises: `x * 0`
/// is ±0 for a finite `x` and NaN for an infinite or NaN one, and a NaN stays in its lane's sum.
/// (A first-failure search with a branch per value was 3-4% of a residual build's samples.)
fn all_finite(v: &[f32]) -> bool {
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    let mut lanes = [0f32; 8];
    for chunk in chunks {
        for t in 0..8 {
            lanes[t] += chunk[t] * 0.0;
        }
    }
    lanes.iter().all(|l| *l == 0.0) && tail.iter().all(|x| x.is_finite())
}

/// Largest vector dimension a store accepts.
pub const MAX_DIM: usize = 65_536;

/// A collection's dimension: 1 to [`MAX_DIM`].
pub fn check_dim(dim: usize) -> Result<()> {
    if dim == 0 || dim > MAX_DIM {
        return Err(CellarError::invalid(format!("dimension {dim} is out of range 1..={MAX_DIM}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored vector is refused exactly where f16 would hold infinity or NaN, and the error
    /// names the vector, the dimension and the value.
    #[test]
    fn a_stored_vector_is_refused_exactly_where_f16_cannot_hold_a_value() {
        let edges = [
            0.0f32,
            1.0,
            65_504.0,
            65_519.0,
            65_519.996,
            65_520.0,
            65_536.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
        ];
        for v in edges.into_iter().flat_map(|v| [v, -v]) {
            let stored = half::f16::from_f32(v).is_finite();
            assert_eq!(check_stored_vector(&[0.5, v], 2, String::new).is_ok(), stored, "{v}");
        }
        let mut long = vec![0.25f32; 200];
        long[130] = 1e6;
        long[190] = f32::NAN;
        let what = || "doc token 3".to_string();
        // The non-finite value is named first, wherever it lies; then the one beyond f16.
        let err = check_stored_vector(&long, 200, what).unwrap_err().to_string();
        assert!(err.contains("doc token 3: value NaN at dimension 190 is not finite"), "{err}");
        long[190] = 0.0;
        let err = check_stored_vector(&long, 200, what).unwrap_err().to_string();
        assert!(
            err.contains("doc token 3: the value at dimension 130 (1000000) is beyond the range of f16"),
            "{err}"
        );
        assert!(matches!(
            check_stored_vector(&long, 128, what),
            Err(CellarError::WrongDimension { expected: 128, received: 200 })
        ));
    }

    /// The lane-wise check finds every value that is not finite wherever it sits (in the eight
    /// lanes or the tail), names the first one, and passes the extremes of the finite range.
    #[test]
    fn validation_finds_the_first_value_that_is_not_finite_anywhere() {
        for dim in 1..=20 {
            let finite: Vec<f32> = (0..dim).map(|i| [f32::MAX, f32::MIN, -0.0, 1e-45, 3.5][i % 5]).collect();
            assert!(validate_vector(&finite, dim, String::new).is_ok(), "dim {dim}");
            for at in 0..dim {
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                    let mut v = finite.clone();
                    v[at] = bad;
                    if at + 1 < dim {
                        v[dim - 1] = f32::NAN;
                    }
                    let err = validate_vector(&v, dim, || "doc".into()).unwrap_err().to_string();
                    assert!(err.contains(&format!("at dimension {at} is not finite")), "dim {dim}: {err}");
                }
            }
        }
        let short = validate_vector(&[1.0, 2.0], 3, String::new).unwrap_err();
        assert!(matches!(short, CellarError::WrongDimension { expected: 3, received: 2 }));
    }

    /// The f16 codec's one-pass `encode_many` writes the bytes `encode` writes vector by vector,
    /// for every kind of value (subnormals, rounding to the largest and past it, signs, NaN).
    #[test]
    fn f16_encode_many_writes_what_encode_writes() {
        let dim = 7;
        let codec = f16::F16Codec::new(dim).unwrap();
        let special = [0.0, -0.0, 1e-8, -6e-8, 65_504.0, 65_519.0, 65_520.0, -1e9, f32::NAN, 0.333_333];
        let values: Vec<f32> =
            (0..dim * 9).map(|i| special[i % special.len()] * if i % 3 == 0 { 1.0 } else { 0.7 }).collect();
        let mut many = Vec::new();
        codec.encode_many(&values, &mut many);
        let mut one_by_one = Vec::new();
        values.chunks_exact(dim).for_each(|v| codec.encode(v, &mut one_by_one));
        assert_eq!(many, one_by_one);
    }

    /// A query given up (`prepare_query_vec`) is prepared as one lent (`prepare_query`) by every
    /// codec.
    #[test]
    fn a_query_given_up_is_prepared_as_one_lent() {
        let dim = 16;
        let sample: Vec<f32> = (0..64 * dim).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let query: Vec<f32> = (0..3 * dim).map(|i| ((i * 13 % 29) as f32 - 14.0) / 14.0).collect();
        for kind in CodecKind::ALL {
            let codec = fit_codec(kind, dim, &sample).unwrap();
            assert_eq!(codec.prepare_query_vec(query.clone()), codec.prepare_query(&query), "{kind:?}");
        }
    }
}
