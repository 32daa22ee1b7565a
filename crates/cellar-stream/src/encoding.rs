//! Text → vectors for documents and queries that come without them: the encoder of
//! `cellar-encode`, loaded on first use and shared.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cellar_core::{CellarError, Result};
use cellar_encode::{default_model_dir, Encoder, EncoderConfig};
use cellar_search::{DocIn, QueryVectorsIn, SearchRequest};

use crate::registry::Streams;
use crate::Collection;
use cellar_search::group::scores_maxsim;
use cellar_search::plan::check_query;

/// An encoder loaded on the first call that needs one.
pub struct LazyEncoder {
    model_dir: Option<PathBuf>,
    loaded: Mutex<Option<Arc<Encoder>>>,
}

impl LazyEncoder {
    /// `model_dir: None` means `cellar_encode::default_model_dir()`.
    pub fn new(model_dir: Option<PathBuf>) -> LazyEncoder {
        LazyEncoder { model_dir, loaded: Mutex::new(None) }
    }

    pub fn get(&self) -> Result<Arc<Encoder>> {
        let mut slot = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(encoder) = slot.as_ref() {
            return Ok(encoder.clone());
        }
        let dir = match &self.model_dir {
            Some(dir) => dir.clone(),
            None => default_model_dir()?,
        };
        let encoder = Arc::new(Encoder::load(EncoderConfig::new(dir))?);
        *slot = Some(encoder.clone());
        Ok(encoder)
    }
}

/// Whether `doc` comes without token vectors (its text is encoded; a given pooled vector is
/// kept).
pub(crate) fn needs_tokens(doc: &DocIn) -> bool {
    doc.vectors.as_ref().is_none_or(|v| v.tokens.is_empty() && v.tokens_b64.is_none())
}

/// The encoder, checked to give vectors of `dim` values.
fn encoder_of(encoder: &LazyEncoder, dim: usize) -> Result<Arc<Encoder>> {
    let encoder = encoder.get()?;
    if encoder.dim() != dim {
        return Err(CellarError::WrongDimension { expected: dim, received: encoder.dim() });
    }
    Ok(encoder)
}

/// The documents with vectors, encoding in one batch the texts of those that have none.
pub fn docs_with_vectors(mut docs: Vec<DocIn>, dim: usize, encoder: &LazyEncoder) -> Result<Vec<DocIn>> {
    let texts: Vec<&str> = docs.iter().filter(|d| needs_tokens(d)).map(|d| d.text.as_str()).collect();
    if texts.is_empty() {
        return Ok(docs);
    }
    // A document with nothing to encode is refused before the model loads.
    for doc in docs.iter().filter(|d| needs_tokens(d)) {
        doc.check(&format!("document {:?}", doc.id))?;
    }
    let mut encoded = encoder_of(encoder, dim)?.encode_docs(&texts)?.into_iter();
    for doc in docs.iter_mut().filter(|d| needs_tokens(d)) {
        let e = encoded.next().expect("one encoding per text");
        let pooled = doc.vectors.take().and_then(|v| v.pooled).unwrap_or(e.pooled);
        doc.vectors = Some(QueryVectorsIn::from_flat(&e.tokens, dim, Some(pooled)));
    }
    Ok(docs)
}

/// The search with its query vectors, encoding its text when it has none.
pub fn request_with_vectors(
    mut request: SearchRequest,
    dim: usize,
    encoder: &LazyEncoder,
) -> Result<SearchRequest> {
    let maxsim = scores_maxsim(request.mode)?;
    let given = request.query_vectors.as_ref();
    let has_tokens = given.is_some_and(|v| !v.tokens.is_empty() || v.tokens_b64.is_some());
    let has_pooled = given.is_some_and(|v| v.pooled.is_some() || v.pooled_b64.is_some());
    if has_tokens || (!maxsim && has_pooled) {
        return Ok(request);
    }
    if request.query.trim().is_empty() {
        return Err(CellarError::InvalidInput(
            "the search has neither query text nor query_tokens (query_vectors)".into(),
        ));
    }
    check_query(&request.query)?;
    let encoded = encoder_of(encoder, dim)?.encode_query(&request.query)?;
    let pooled = request.query_vectors.take().and_then(|v| v.pooled).unwrap_or(encoded.pooled);
    request.query_vectors = Some(QueryVectorsIn::from_flat(&encoded.tokens, dim, Some(pooled)));
    Ok(request)
}

/// The dimension of a write of `docs` to `name`: the stream's when it exists, else that of the
/// caller's vectors, else the encoder's.
pub fn write_dim(streams: &Streams, name: &str, docs: &[DocIn], encoder: &LazyEncoder) -> Result<usize> {
    match streams.get(name, None) {
        Ok(collection) => Ok(collection.dim()),
        Err(CellarError::NotFound(_)) => match docs.iter().find_map(given_dim) {
            Some(dim) => Ok(dim),
            None => Ok(encoder.get()?.dim()),
        },
        Err(e) => Err(e),
    }
}

/// The dimension of a document's own token rows, when it gives rows.
fn given_dim(doc: &DocIn) -> Option<usize> {
    doc.vectors.as_ref().and_then(|v| v.tokens.first()).map(Vec::len)
}

/// Writes `docs` to `name` as one batch, encoding the texts of those without vectors; the stream
/// is created (with `write_dim`) only when the whole batch is valid.
pub fn write_docs(
    streams: &Streams,
    name: &str,
    docs: Vec<DocIn>,
    encoder: &LazyEncoder,
) -> Result<(Arc<Collection>, u64)> {
    let dim = write_dim(streams, name, &docs, encoder)?;
    let docs = docs_with_vectors(docs, dim, encoder)?;
    streams.put_batch(name, dim, docs)
}
