//! The JSON bodies of the search endpoints and their translation into the pipeline's types.
//! Unknown fields are refused, so a misspelt parameter is an error rather than a silent default.

use cellar_core::CellarError;
use cellar_search::search::QueryVectors;
use cellar_search::{Index, Mode, SearchOptions, SearchParams};
use serde::Deserialize;

use crate::error::ApiError;

/// Results per query when the request does not say.
pub const DEFAULT_K: usize = 10;
/// Most queries in one batch request.
pub const MAX_BATCH: usize = 64;

/// `POST /v1/search`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    #[serde(default)]
    pub query: String,
    pub k: Option<usize>,
    pub mode: Option<String>,
    pub alpha: Option<f32>,
    pub rerank_k: Option<usize>,
    pub candidates: Option<usize>,
    pub include_text: Option<bool>,
    pub query_vectors: Option<VectorsIn>,
    pub nprobe: Option<usize>,
    pub oversample: Option<f32>,
    pub rescore: Option<bool>,
    pub prefetch: Option<bool>,
    pub prefetch_step: Option<f32>,
    pub hybrid_candidates: Option<usize>,
}

/// Caller-supplied query vectors, in the model's space.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorsIn {
    /// May be left out by the modes that score no token vectors (dense-exact, ivf).
    #[serde(default)]
    pub tokens: Vec<Vec<f32>>,
    pub pooled: Option<Vec<f32>>,
}

/// `POST /v1/search/batch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub queries: Vec<SearchRequest>,
}

/// A request checked against the index, ready to run on the CPU pool.
pub struct ValidSearch {
    pub text: String,
    pub params: SearchParams,
    pub vectors: Option<QueryVectors>,
    pub include_text: bool,
}

impl SearchRequest {
    /// Checks everything that can be checked without encoding: mode, k, alpha, the query's
    /// length, and the shape and values of supplied vectors.
    pub fn validate(self, index: &Index) -> Result<ValidSearch, ApiError> {
        let mode = self.mode.as_deref().map(str::parse::<Mode>).transpose()?;
        let options = SearchOptions {
            k: self.k.unwrap_or(DEFAULT_K),
            mode,
            candidates: self.candidates,
            rerank_k: self.rerank_k,
            alpha: self.alpha,
            nprobe: self.nprobe,
            oversample: self.oversample,
            rescore: self.rescore,
            prefetch: self.prefetch,
            prefetch_step: self.prefetch_step,
            hybrid_candidates: self.hybrid_candidates,
        };
        let params = index.resolve(&options)?;
        let dim = index.config().encoder.model_dim;
        let vectors = self.query_vectors.map(|v| v.flatten(dim)).transpose()?;
        index.check_input(&self.query, params.mode, vectors.as_ref())?;
        Ok(ValidSearch { text: self.query, params, vectors, include_text: self.include_text.unwrap_or(true) })
    }
}

impl VectorsIn {
    /// Rows into one flat buffer, each row checked to have the model's dimension (the flat
    /// buffer no longer shows rows; count and values are checked by `Index::check_input`).
    fn flatten(self, dim: usize) -> Result<QueryVectors, CellarError> {
        let n_tokens = self.tokens.len();
        if let Some(row) = self.tokens.iter().find(|row| row.len() != dim) {
            return Err(CellarError::WrongDimension { expected: dim, received: row.len() });
        }
        let tokens = self.tokens.into_iter().flatten().collect();
        Ok(QueryVectors { tokens, n_tokens, pooled: self.pooled })
    }
}

impl ValidSearch {
    /// Encodes (or projects the supplied, already checked vectors), ranks, and fetches texts.
    pub fn run(self, index: &Index) -> cellar_core::Result<cellar_search::SearchResponse> {
        let query = match self.vectors {
            Some(vectors) => index.project_vectors(&self.text, vectors),
            None => index.prepare(&self.text, self.params.mode)?,
        };
        index.respond(&query, &self.params, self.include_text)
    }
}
