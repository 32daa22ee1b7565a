//! Text → vectors for documents and queries that come without them: the encoder of
//! `cellar-encode`, loaded on first use and shared.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cellar_core::{CellarError, Result};
use cellar_encode::{default_model_dir, Encoder, EncoderConfig};

use crate::doc::StreamDoc;
use crate::input::{DocJson, QueryJson};
use crate::registry::Streams;
use crate::search::Query;
use crate::Collection;

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

/// The documents with vectors, encoding in one batch the texts of those that have none.
pub fn docs_with_vectors(docs: Vec<DocJson>, dim: usize, encoder: &LazyEncoder) -> Result<Vec<StreamDoc>> {
    let texts: Vec<&str> = docs.iter().filter(|d| d.tokens.is_none()).map(|d| d.text.as_str()).collect();
    let mut encoded = if texts.is_empty() {
        Vec::new()
    } else {
        let encoder = encoder.get()?;
        if encoder.dim() != dim {
            return Err(CellarError::WrongDimension { expected: dim, received: encoder.dim() });
        }
        encoder.encode_docs(&texts)?
    }
    .into_iter();
    docs.into_iter()
        .map(|d| {
            let vectors = if d.tokens.is_none() {
                encoded.next().map(|e| (e.tokens, e.n_tokens, e.pooled))
            } else {
                None
            };
            d.into_doc(dim, vectors)
        })
        .collect()
}

/// The query with vectors, encoding its text when it has none.
pub fn query_with_vectors(query: QueryJson, dim: usize, encoder: &LazyEncoder) -> Result<Query> {
    if !query.needs_encoding() {
        return query.into_query(dim, None);
    }
    let text = query.query.as_deref().unwrap_or("");
    if text.trim().is_empty() {
        return Err(CellarError::InvalidInput("the search has neither query text nor query_tokens".into()));
    }
    let encoder = encoder.get()?;
    if encoder.dim() != dim {
        return Err(CellarError::WrongDimension { expected: dim, received: encoder.dim() });
    }
    let encoded = encoder.encode_query(text)?;
    query.into_query(dim, Some((encoded.tokens, encoded.pooled)))
}

/// The dimension of a write of `docs` to `name`: the stream's when it exists, else that of the
/// caller's vectors, else the encoder's.
pub fn write_dim(streams: &Streams, name: &str, docs: &[DocJson], encoder: &LazyEncoder) -> Result<usize> {
    match streams.get(name, None) {
        Ok(collection) => Ok(collection.dim()),
        Err(CellarError::NotFound(_)) => match docs.iter().find_map(DocJson::given_dim) {
            Some(dim) => Ok(dim),
            None => Ok(encoder.get()?.dim()),
        },
        Err(e) => Err(e),
    }
}

/// Writes `docs` to `name` as one batch, encoding the texts of those without vectors; the stream
/// is created (with `write_dim`) only when the whole batch is valid.
pub fn write_docs(
    streams: &Streams,
    name: &str,
    docs: Vec<DocJson>,
    encoder: &LazyEncoder,
) -> Result<(Arc<Collection>, u64)> {
    let dim = write_dim(streams, name, &docs, encoder)?;
    let docs = docs_with_vectors(docs, dim, encoder)?;
    streams.put_batch(name, dim, &docs)
}
