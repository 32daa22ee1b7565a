//! `DocIn`: a document as every front end states it, for an index's writes and builds and for
//! a streaming collection's feed alike, with the one set of rules it is held to. Its metadata
//! is `crate::meta`'s, its vectors `crate::request`'s `QueryVectorsIn`; the limits are declared
//! here once.

use cellar_core::codec::check_stored_vector;
use cellar_core::store::MAX_TOKENS_PER_DOC;
use cellar_core::{CellarError, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::build::EmbeddedDoc;
use crate::meta::Metadata;
use crate::plan::{flatten, flatten_owned};
use crate::request::QueryVectorsIn;

/// Bytes of a document's id, and of a streaming document's group.
pub const MAX_ID_BYTES: usize = 1024;
/// Bytes of a document's title and text together.
pub const MAX_DOC_TEXT_BYTES: usize = 1 << 20;

/// A document's given vectors checked where they lie, each by the one rule of stored vectors
/// (`cellar_core::codec::check_stored_vector`), with at most `MAX_TOKENS_PER_DOC` token rows:
/// JSON rows in place (nothing copied), the base64 forms decoded (`flatten`). Returns the token
/// count; `at` (`document.vectors`) is what errors name. What a stream checks before it creates
/// a collection of the first document's dimension.
pub fn check_vectors(vectors: &QueryVectorsIn, dim: usize, at: &str) -> Result<usize> {
    if vectors.tokens_b64.is_some() || vectors.pooled_b64.is_some() {
        let flat = flatten(vectors, dim, at, MAX_TOKENS_PER_DOC)?;
        check_stored_rows(flat.tokens.chunks_exact(dim.max(1)), flat.pooled.as_deref(), dim, at)?;
        return Ok(flat.n_tokens);
    }
    if vectors.tokens.len() > MAX_TOKENS_PER_DOC {
        return Err(CellarError::invalid(format!(
            "{at}: {} token vectors; at most {MAX_TOKENS_PER_DOC} allowed",
            vectors.tokens.len()
        )));
    }
    check_stored_rows(vectors.tokens.iter().map(Vec::as_slice), vectors.pooled.as_deref(), dim, at)?;
    Ok(vectors.tokens.len())
}

/// Each token row, then the pooled vector, by the stored-vector rule; errors name `at token t`
/// or `at pooled vector`.
fn check_stored_rows<'a>(
    rows: impl Iterator<Item = &'a [f32]>,
    pooled: Option<&[f32]>,
    dim: usize,
    at: &str,
) -> Result<()> {
    for (t, row) in rows.enumerate() {
        check_stored_vector(row, dim, || format!("{at} token {t}"))?;
    }
    match pooled {
        Some(p) => check_stored_vector(p, dim, || format!("{at} pooled vector")),
        None => Ok(()),
    }
}

/// A document to add or update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocIn {
    /// The collection's id: 1 to 1024 bytes, no control character.
    pub id: String,
    /// A streaming collection's group (the same rule as `id`): a group's documents are stored
    /// together and searched one group at a time. An index has no groups and refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub text: String,
    /// Scalar values filters run on: strings, numbers, booleans, lists of strings (at most 64
    /// keys).
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
    /// The document's own vectors in the model's space (before any PCA), in the form of
    /// `query_vectors` (token rows, optional pooled vector, or their base64 forms). Without
    /// them, title and text are encoded with the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vectors: Option<QueryVectorsIn>,
}

/// A document id or a group: 1 to [`MAX_ID_BYTES`] bytes, no control character (keys appear in
/// URL paths, logs and file directories).
pub fn check_key(what: &str, key: &str) -> Result<()> {
    key_error(what, key).map_or(Ok(()), |e| Err(CellarError::invalid(e)))
}

/// The key a document is found by among an index's documents: its id, or in a grouped index
/// its group and id (joined by a NUL, which neither may hold).
pub(crate) fn doc_key(group: Option<&str>, id: &str) -> String {
    match group {
        Some(group) => format!("{group}\0{id}"),
        None => id.to_string(),
    }
}

/// What is wrong with a key, if anything.
pub(crate) fn key_error(what: &str, key: &str) -> Option<String> {
    if key.is_empty() {
        Some(format!("the {what} is empty"))
    } else if key.len() > MAX_ID_BYTES {
        Some(format!("the {what} is {} bytes, over the limit of {MAX_ID_BYTES}", key.len()))
    } else if key.chars().any(char::is_control) {
        Some(format!("the {what} {key:?} holds a control character"))
    } else {
        None
    }
}

impl DocIn {
    /// Every rule of a document that does not depend on where it goes: its id, the size of
    /// its title and text, something to store (text or vectors), its metadata. `at`
    /// (`ops[3].add`, `docs[2]`) is what errors name.
    pub fn check(&self, at: &str) -> Result<()> {
        if let Some(e) = key_error("document id", &self.id) {
            return Err(CellarError::invalid(format!(
                "{at}.id must be 1 to {MAX_ID_BYTES} bytes with no control character: {e}"
            )));
        }
        let bytes = self.title.len() + self.text.len();
        if bytes > MAX_DOC_TEXT_BYTES {
            return Err(CellarError::invalid(format!(
                "{at}: title and text of {bytes} bytes are over the limit of {MAX_DOC_TEXT_BYTES}"
            )));
        }
        if self.vectors.is_none() && self.title.trim().is_empty() && self.text.trim().is_empty() {
            return Err(CellarError::invalid(format!(
                "{at}: the document has no text to encode: neither text nor tokens (vectors)"
            )));
        }
        self.metadata.check().map_err(|e| CellarError::invalid(format!("{at}: {e}")))
    }

    /// [`DocIn::check`], and a group exactly when the index is `grouped`: what an index's writes
    /// and `Index::create` hold a document to.
    pub fn check_for_index(&self, at: &str, grouped: bool) -> Result<()> {
        self.check(at)?;
        match (&self.group, grouped) {
            (Some(group), false) => Err(CellarError::invalid(format!(
                "{at}.group: this index has no groups ({group:?}): groups belong to grouped indexes \
                 (streaming collections)"
            ))),
            (None, true) => Err(CellarError::invalid(format!(
                "{at}.group: this index is grouped: every document names its group"
            ))),
            (Some(group), true) => match key_error("group", group) {
                Some(e) => Err(CellarError::invalid(format!("{at}.group: {e}"))),
                None => Ok(()),
            },
            (None, false) => Ok(()),
        }
    }

    /// The document with its vectors (which it must carry) flattened and checked against the
    /// dimension `dim`: what a build, a write of given vectors and a stream store; `at`
    /// (`docs[3].vectors`) is what errors name.
    pub fn into_embedded(self, dim: usize, at: &str) -> Result<EmbeddedDoc> {
        let vectors = self.vectors.ok_or_else(|| CellarError::invalid(format!("{at}: no vectors")))?;
        let flat = flatten_owned(vectors, dim, at, MAX_TOKENS_PER_DOC)?;
        Ok(EmbeddedDoc {
            id: self.id,
            title: self.title,
            text: self.text,
            metadata: self.metadata,
            tokens: flat.tokens,
            pooled: flat.pooled,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::VectorDtype;

    /// Rows are checked in place and the bad one named by its place; the base64 form of the
    /// same vectors meets the same rule.
    #[test]
    fn given_vectors_are_held_to_the_stored_vector_rule_in_either_form() {
        let mut rows = vec![vec![0.5f32; 4]; 3];
        let given = |rows: &Vec<Vec<f32>>| QueryVectorsIn { tokens: rows.clone(), ..Default::default() };
        let packed = |rows: &Vec<Vec<f32>>| QueryVectorsIn::compact(&rows.concat(), None, VectorDtype::F32);
        assert_eq!(check_vectors(&given(&rows), 4, "v").unwrap(), 3);
        assert_eq!(check_vectors(&packed(&rows), 4, "v").unwrap(), 3);
        rows[2][1] = 1e9;
        for vectors in [given(&rows), packed(&rows)] {
            let err = check_vectors(&vectors, 4, "v").unwrap_err().to_string();
            assert!(
                err.contains("v token 2: the value at dimension 1 (1000000000) is beyond the range of f16"),
                "{err}"
            );
        }
        rows[2][1] = 0.5;
        let pooled = QueryVectorsIn { pooled: Some(vec![f32::NAN; 4]), ..given(&rows) };
        assert!(check_vectors(&pooled, 4, "v")
            .unwrap_err()
            .to_string()
            .contains("v pooled vector: value NaN"));
        rows[1].push(0.5);
        assert!(matches!(
            check_vectors(&given(&rows), 4, "v"),
            Err(CellarError::WrongDimension { expected: 4, received: 5 })
        ));
    }
}
