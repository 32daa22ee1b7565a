//! A streaming document's rules (the one document type, `cellar_search::DocIn`, with a group):
//! what `Collection::put_batch` (and `cellar feed`, line by line) checks before the grouped
//! index takes a batch, and before a first write creates a collection of the first document's
//! dimension. Its vectors are held to the index's own rule (`cellar_search::doc::check_vectors`).

use cellar_core::{CellarError, Result};
use cellar_search::doc::{check_key, check_vectors};
use cellar_search::vectors::mean_normalized;
use cellar_search::{DocIn, MetaValue};

/// Largest document (text, f16 vectors and metadata together).
pub const MAX_DOC_BYTES: usize = 4 << 20;

fn invalid(message: String) -> CellarError {
    CellarError::InvalidInput(message)
}

/// A document's or a query's pooled vector when it gives none: the one rule of every front end
/// (`cellar_search::vectors::mean_normalized`); zero when the mean is zero.
pub fn mean_or_zero(tokens: &[f32], dim: usize) -> Vec<f32> {
    mean_normalized(tokens, dim).unwrap_or_else(|| vec![0.0; dim])
}

/// Every rule `doc` must pass before a collection of dimension `dim` takes it: the rules of
/// every document (`DocIn::check`: id, text, metadata), a group, no title, token vectors as
/// every stored vector (`dim` finite values within the range of f16), at most [`MAX_DOC_BYTES`]
/// stored. `at` (`document`) is what errors name.
pub fn check_doc(doc: &DocIn, dim: usize, at: &str) -> Result<()> {
    let group = doc.group.as_deref().ok_or_else(|| invalid(format!("{at}: the document has no group")))?;
    check_key("group", group)?;
    doc.check(at)?;
    if !doc.title.is_empty() {
        return Err(invalid(format!("{at}.title: a stream stores no title: put it in the text")));
    }
    let vectors = doc.vectors.as_ref().ok_or_else(|| invalid(format!("{at}: no vectors")))?;
    let n_tokens = check_vectors(vectors, dim, &format!("{at}.vectors"))?;
    if n_tokens == 0 {
        return Err(invalid(format!("{at}: the document has no token vectors")));
    }
    let meta: usize = doc.metadata.0.iter().map(|(k, v)| 2 + k.len() + 1 + meta_value_len(v)).sum();
    let size = group.len() + doc.id.len() + doc.text.len() + 2 * dim * (n_tokens + 1) + meta;
    if size > MAX_DOC_BYTES {
        return Err(invalid(format!(
            "document {:?} is {size} bytes encoded, over the limit of {MAX_DOC_BYTES}",
            doc.id
        )));
    }
    Ok(())
}

fn meta_value_len(value: &MetaValue) -> usize {
    match value {
        MetaValue::Str(s) => 4 + s.len(),
        MetaValue::Int(_) | MetaValue::Float(_) => 8,
        MetaValue::Bool(_) => 1,
        MetaValue::List(l) => 4 + l.iter().map(|s| 4 + s.len()).sum::<usize>(),
    }
}
