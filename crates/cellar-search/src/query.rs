//! A query on its way to the kernels: the caller's vectors flattened (`QueryVectors`), then
//! prepared for the codec (`PreparedQuery`).

use std::sync::Arc;

use crate::filter::Allowed;

/// A query ready to rank: its text and, when the mode needs them, its vectors.
pub struct PreparedQuery {
    pub text: String,
    /// Token vectors in the store's space (PCA applied), prepared for the codec's kernel.
    pub tokens: Vec<f32>,
    /// The same token vectors in the store's space before the codec's preparation (what the
    /// token stage routes).
    pub store_tokens: Vec<f32>,
    pub n_tokens: usize,
    /// Pooled vector in the model's space.
    pub pooled: Vec<f32>,
    pub encode_ms: f64,
    /// The documents the search's filter matched (`None`: no filter).
    pub allowed: Option<Arc<Allowed>>,
    /// Evaluating the filter.
    pub filter_ms: f64,
    /// How its text was encoded (`None`: it was not, the caller gave vectors or the mode
    /// needs none).
    pub encoding: Option<QueryEncoding>,
}

/// How a query's text went through the encoder: whole, in windows, or cut (a ColBERT
/// checkpoint's fixed query length), so a response never hides a cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct QueryEncoding {
    /// Tokens of the text, [CLS] and [SEP] included.
    pub tokens: usize,
    /// Windows it was encoded in (1 unless it was longer than the query limit).
    pub windows: usize,
    /// Tokens cut off its end and never seen by the model (0 but for a ColBERT checkpoint's
    /// fixed query length).
    pub tokens_cut: usize,
}

impl QueryEncoding {
    pub fn of(encoded: &cellar_encode::Encoded) -> QueryEncoding {
        QueryEncoding {
            tokens: encoded.text_tokens,
            windows: encoded.windows,
            tokens_cut: encoded.tokens_cut,
        }
    }
}

/// Query vectors a caller computed itself, in the model's output space (before any PCA), used
/// instead of encoding the query's text. Token vectors are used as given (the encoder's are
/// L2-normalised).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueryVectors {
    /// `n_tokens` rows of the model's dimension, row after row.
    pub tokens: Vec<f32>,
    pub n_tokens: usize,
    /// Needed by the dense mode only.
    pub pooled: Option<Vec<f32>>,
}
