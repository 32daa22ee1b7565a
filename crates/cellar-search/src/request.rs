//! `SearchRequest`: one search as every front end states it. The HTTP API deserializes it
//! directly (unknown fields refused), the Python binding fills it from keyword arguments, the
//! CLI from flags (with the `cli` feature), and the OpenAPI document shows its JSON schema.
//! Adding a knob is one field here plus its check in [`crate::plan`] or [`crate::params`].
//!
//! Every limit a request is held to is declared here once; the checks and the schema use the
//! same constants.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cellar_core::codec::MAX_DIM;

use crate::filter::Filter;
use crate::fusion::Fusion;
use crate::mode::{DenseStage, Lexical, Mode};

/// Results per query when the request does not say.
pub const DEFAULT_K: usize = 10;
/// Most results one request may ask for.
pub const MAX_K: usize = 10_000;
/// Deepest first stage one request may ask for (BM25's top-N heap and the IVF's shortlist are
/// sized by it).
pub const MAX_CANDIDATES: usize = 100_000;
/// Most IVF clusters one request may probe (and at most the IVF's cluster count).
pub const MAX_NPROBE: usize = 1 << 16;
/// Longest query accepted, in bytes (queries are cut at `query_max_tokens` tokens anyway).
pub const MAX_QUERY_BYTES: usize = 4096;
/// Most query token vectors a caller may supply.
pub const MAX_QUERY_VECTORS: usize = 512;
/// Most queries in one batch request.
pub const MAX_BATCH: usize = 64;
/// Most hits one batch request may ask for in all (the sum of its queries' `k`): as many as one
/// query may. 64 queries of `k` 10,000 built a 553 MB answer (+1.06 GB of peak RSS) when only
/// each `k` was bounded.
pub const MAX_BATCH_HITS: usize = MAX_K;

/// One search. Every field but the query may be left out: the index's stored (possibly tuned)
/// defaults, and its IVF's, fill them in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct SearchRequest {
    /// Query text. May be empty only in the dense-exact, ivf and dense modes with query_vectors.
    #[serde(default)]
    #[schemars(length(max = MAX_QUERY_BYTES))]
    #[cfg_attr(feature = "cli", arg(value_name = "QUERY"))]
    pub query: String,
    /// Results to return (default 10).
    #[schemars(range(min = 1, max = MAX_K))]
    #[cfg_attr(feature = "cli", arg(short, long))]
    pub k: Option<usize>,
    /// bm25, dense-exact (pooled-vector scan), ivf (the IVF alone), dense (IVF then MaxSim),
    /// rerank (BM25 then MaxSim) or hybrid (BM25, joined by IVF candidates, then fused MaxSim).
    /// Default: the index's (index.json).
    #[cfg_attr(feature = "cli", arg(long))]
    pub mode: Option<Mode>,
    /// Weight of z(first stage) in hybrid fusion, in [0, 1].
    #[schemars(range(min = 0.0, max = 1.0))]
    #[cfg_attr(feature = "cli", arg(long))]
    pub alpha: Option<f32>,
    /// The sparse first stage of the bm25, rerank and hybrid modes: bm25, splade (the
    /// learned-sparse stage of `cellar splade build`) or both (joined). Default: the index's.
    #[cfg_attr(feature = "cli", arg(long))]
    pub lexical: Option<Lexical>,
    /// How hybrid fuses its two scores: z (alpha-weighted z-scores), rrf (alpha-weighted
    /// reciprocal ranks) or z_peak (z with a per-query weight). Default: the index's.
    #[cfg_attr(feature = "cli", arg(long))]
    pub fusion: Option<Fusion>,
    /// First-stage candidates read and re-scored with MaxSim (at most `candidates`).
    #[schemars(range(max = MAX_CANDIDATES))]
    #[cfg_attr(feature = "cli", arg(long))]
    pub rerank_k: Option<usize>,
    /// First-stage depth N (raised to k when smaller).
    #[schemars(range(min = 1, max = MAX_CANDIDATES))]
    #[cfg_attr(feature = "cli", arg(long))]
    pub candidates: Option<usize>,
    /// Return each hit's title and text (default true).
    #[cfg_attr(feature = "cli", arg(long))]
    pub include_text: Option<bool>,
    /// A caller-encoded query, used instead of encoding the text on the server.
    #[cfg_attr(feature = "cli", arg(skip))]
    pub query_vectors: Option<QueryVectorsIn>,
    /// Dense and hybrid modes: the dense first stage, tokens (the token-level stage of
    /// `cellar tokens build`) or pooled (the IVF). Default: dense takes tokens where the index
    /// has them, hybrid the IVF where there is one.
    #[cfg_attr(feature = "cli", arg(long))]
    pub dense_stage: Option<DenseStage>,
    /// Clusters probed: the IVF's (1 to its cluster count), or for the token stage the leaves
    /// probed per query token (1 to its leaf count).
    #[schemars(range(min = 1, max = MAX_NPROBE))]
    #[cfg_attr(feature = "cli", arg(long))]
    pub nprobe: Option<usize>,
    /// IVF shortlist size as a multiple of the depth asked for, in [1, 100].
    #[schemars(range(min = 1.0, max = 100.0))]
    #[cfg_attr(feature = "cli", arg(long))]
    pub oversample: Option<f32>,
    /// Rescore the IVF shortlist with full-precision vectors: true or false.
    #[cfg_attr(feature = "cli", arg(long))]
    pub rescore: Option<bool>,
    /// Read likely candidates' token records while the dense first stage runs (the IVF's probe;
    /// in dense mode, the token stage's lists): true or false.
    #[cfg_attr(feature = "cli", arg(long))]
    pub prefetch: Option<bool>,
    /// Fraction of nprobe probed (the IVF) or of the postings scored (the token stage) before
    /// the prefetch starts, in (0, 1].
    #[schemars(range(max = 1.0), extend("exclusiveMinimum" = 0))]
    #[cfg_attr(feature = "cli", arg(long))]
    pub prefetch_step: Option<f32>,
    /// Hybrid: the dense stage's candidates joined to BM25's (0: BM25 only).
    #[schemars(range(max = MAX_K))]
    #[cfg_attr(feature = "cli", arg(long))]
    pub hybrid_candidates: Option<usize>,
    /// Rerank and hybrid text queries: run BM25 before encoding the text and read its best
    /// rerank_k candidates while the encoder runs: true (default) or false.
    #[cfg_attr(feature = "cli", arg(long))]
    pub early_read: Option<bool>,
    /// Only documents whose metadata matches: `{"eq": {"field": "lang", "value": "en"}}`,
    /// `in`, `range` (gt, gte, lt, lte), `and`, `or`, `not`. Applied in the first stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long, value_name = "JSON", value_parser = parse_filter))]
    pub filter: Option<Filter>,
    /// A filter matching at most this many documents ranks every match exactly instead of
    /// running the first stage (default 1024; 0: never; at most `MAX_CANDIDATES`).
    #[schemars(range(max = MAX_CANDIDATES))]
    #[cfg_attr(feature = "cli", arg(long))]
    pub filter_exact_max: Option<usize>,
    /// Only documents holding every term of this text, applied with the filter: an index
    /// matches the terms as BM25 analyses its text (lowercased and stemmed; stop words are not
    /// required), a stream as lowercased runs of letters and digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_QUERY_BYTES))]
    #[cfg_attr(feature = "cli", arg(long, value_name = "TEXT"))]
    pub require_terms: Option<String>,
}

/// `--filter JSON` of the CLI.
#[cfg(feature = "cli")]
fn parse_filter(text: &str) -> std::result::Result<Filter, String> {
    serde_json::from_str(text).map_err(|e| format!("not a filter: {e}"))
}

/// Query vectors a caller computed itself, in the model's output space (before any PCA), used
/// instead of encoding the query's text. Token vectors are used as given (the encoder's are
/// L2-normalised).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryVectorsIn {
    /// One row of the model's dimension per query token. At least one for the modes that score
    /// MaxSim (dense, rerank, hybrid); may be left out by dense-exact and ivf.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_QUERY_VECTORS), inner(length(max = MAX_DIM)))]
    pub tokens: Vec<Vec<f32>>,
    /// The query's pooled vector (dense-exact, ivf, and dense or hybrid over the IVF). Default: the
    /// L2-normalised mean of `tokens`, as a document's pooled vector defaults to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_DIM))]
    pub pooled: Option<Vec<f32>>,
    /// `tokens` in compact form, instead of them: base64 (standard alphabet, padded) of the rows'
    /// values back to back, little-endian `dtype`. A 32 x 384 query is 66 KB as f32 and 33 KB as
    /// f16 against about 115 KB of JSON numbers, and decodes without parsing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_b64: Option<String>,
    /// `pooled` in the same compact form, instead of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooled_b64: Option<String>,
    /// Element type of `tokens_b64` and `pooled_b64` (default f32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<VectorDtype>,
}

/// Element type of base64 query vectors: little-endian IEEE 754 single or half precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VectorDtype {
    #[default]
    F32,
    F16,
}

impl VectorDtype {
    /// Bytes per value.
    pub fn bytes(self) -> usize {
        match self {
            VectorDtype::F32 => 4,
            VectorDtype::F16 => 2,
        }
    }

    /// The values of `bytes` (whole values only: the caller checks the length).
    pub fn values(self, bytes: &[u8]) -> Vec<f32> {
        match self {
            VectorDtype::F32 => {
                bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
            }
            VectorDtype::F16 => {
                bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
            }
        }
    }

    /// `values` as little-endian bytes of this type (what a client sends).
    pub fn bytes_of(self, values: &[f32]) -> Vec<u8> {
        match self {
            VectorDtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            VectorDtype::F16 => values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
        }
    }
}

impl QueryVectorsIn {
    /// Rows of `dim` values from `tokens` (`n * dim` values, row after row), and a pooled
    /// vector when there is one.
    pub fn from_flat(tokens: &[f32], dim: usize, pooled: Option<Vec<f32>>) -> QueryVectorsIn {
        let tokens = tokens.chunks(dim.max(1)).map(<[f32]>::to_vec).collect();
        QueryVectorsIn { tokens, pooled, ..QueryVectorsIn::default() }
    }

    /// The compact form of `n * dim` token values and a pooled vector, as `dtype` base64.
    pub fn compact(tokens: &[f32], pooled: Option<&[f32]>, dtype: VectorDtype) -> QueryVectorsIn {
        QueryVectorsIn {
            tokens_b64: Some(base64_encode(&dtype.bytes_of(tokens))),
            pooled_b64: pooled.map(|p| base64_encode(&dtype.bytes_of(p))),
            dtype: Some(dtype),
            ..QueryVectorsIn::default()
        }
    }
}

const BASE64_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard padded base64 of `bytes` (RFC 4648).
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let word = chunk.iter().enumerate().fold(0u32, |w, (i, b)| w | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            let c =
                if i <= chunk.len() { BASE64_ALPHABET[(word >> (18 - 6 * i) & 63) as usize] } else { b'=' };
            out.push(c as char);
        }
    }
    out
}

/// Standard base64 (RFC 4648 alphabet, `=` padding required to a multiple of 4 characters).
pub fn base64_decode(text: &str) -> std::result::Result<Vec<u8>, String> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return Err(format!("{} characters: base64 comes in groups of 4 (pad with '=')", text.len()));
    }
    let value = |c: u8| BASE64_ALPHABET.iter().position(|a| *a == c).map(|v| v as u32);
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for (g, group) in text.chunks_exact(4).enumerate() {
        let last = g + 1 == text.len() / 4;
        let pad = group.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err(format!("misplaced '=' padding in group {g}"));
        }
        let mut word = 0u32;
        for (i, &c) in group[..4 - pad].iter().enumerate() {
            let v = value(c)
                .ok_or_else(|| format!("{:?} at character {} is not base64", c as char, 4 * g + i))?;
            word |= v << (18 - 6 * i);
        }
        out.extend_from_slice(&word.to_be_bytes()[1..4 - pad]);
    }
    Ok(out)
}

/// `POST /v1/search/batch`: each query succeeds or fails on its own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// The queries; their `k` (10 when left out) sum to at most `x-max-total-k`.
    #[schemars(length(min = 1, max = MAX_BATCH), extend("x-max-total-k" = MAX_BATCH_HITS))]
    pub queries: Vec<SearchRequest>,
}

impl BatchRequest {
    /// Every check of a batch as a whole (each query is checked when it is planned): 1 to
    /// [`MAX_BATCH`] queries asking for at most [`MAX_BATCH_HITS`] hits in all.
    pub fn check(&self) -> std::result::Result<(), String> {
        let n = self.queries.len();
        if n == 0 || n > MAX_BATCH {
            return Err(format!("queries: a batch holds 1 to {MAX_BATCH} queries, got {n}"));
        }
        let hits: usize = self.queries.iter().map(|q| q.k.unwrap_or(DEFAULT_K).min(MAX_K)).sum();
        if hits > MAX_BATCH_HITS {
            return Err(format!(
                "queries[].k: a batch asks for at most {MAX_BATCH_HITS} hits in all (the sum of its \
                 queries' k), got {hits}: lower k or split the batch"
            ));
        }
        Ok(())
    }
}

impl SearchRequest {
    /// A request for `query` in `mode`, everything else left to the index's defaults.
    pub fn new(query: impl Into<String>, mode: Mode) -> SearchRequest {
        SearchRequest { query: query.into(), mode: Some(mode), ..SearchRequest::default() }
    }

    /// The same request asking for `k` results.
    pub fn with_k(mut self, k: usize) -> SearchRequest {
        self.k = Some(k);
        self
    }

    /// `k`, or [`DEFAULT_K`], checked: 1 to [`MAX_K`].
    pub fn checked_k(&self) -> cellar_core::Result<usize> {
        match self.k.unwrap_or(DEFAULT_K) {
            k @ 1..=MAX_K => Ok(k),
            k => Err(cellar_core::CellarError::InvalidInput(format!(
                "k must be between 1 and {MAX_K}, got {k}"
            ))),
        }
    }

    /// A request from a JSON value (the Python keyword arguments), refusing unknown fields.
    /// The error names the field: `k: invalid value: integer `-3`, expected usize`.
    pub fn from_value(value: serde_json::Value) -> Result<SearchRequest, FieldError> {
        serde_path_to_error::deserialize(value).map_err(FieldError::from)
    }

    /// The JSON schema of a search request (the OpenAPI document, the Python stubs' test).
    pub fn schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(SearchRequest)).expect("a schema serializes")
    }
}

/// A body or argument that does not fit a request type, with the path of the field at fault.
#[derive(Debug)]
pub struct FieldError {
    /// `k`, `query_vectors.tokens[3]`, or `.` for the whole value.
    pub path: String,
    pub error: serde_json::Error,
}

impl FieldError {
    /// True when a value has the wrong type (a string for a number, ...) or the field is
    /// unknown, as opposed to a value out of its type's range.
    pub fn is_type_error(&self) -> bool {
        let text = self.error.to_string();
        text.starts_with("invalid type") || text.starts_with("unknown field")
    }
}

impl From<serde_path_to_error::Error<serde_json::Error>> for FieldError {
    fn from(e: serde_path_to_error::Error<serde_json::Error>) -> Self {
        FieldError { path: e.path().to_string(), error: e.into_inner() }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path == "." {
            write!(f, "{}", self.error)
        } else {
            write!(f, "{}: {}", self.path, self.error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length_and_refuses_bad_text() {
        for n in 0..10u8 {
            let bytes: Vec<u8> = (0..n).map(|i| i.wrapping_mul(97).wrapping_add(200)).collect();
            assert_eq!(base64_decode(&base64_encode(&bytes)).unwrap(), bytes, "{n} bytes");
        }
        assert_eq!(base64_encode(b"Man"), "TWFu");
        assert_eq!(base64_encode(b"Ma"), "TWE=");
        assert!(base64_decode("TQ==TWFu").unwrap_err().contains("padding"));
        assert!(base64_decode("TW=u").unwrap_err().contains("not base64"));
        assert!(base64_decode("TWF").unwrap_err().contains("groups of 4"));
    }
}
