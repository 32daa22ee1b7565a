//! Documents and queries as JSON (the HTTP bodies, `cellar feed`'s lines, the Python package's
//! dicts): parsed with unknown fields refused, then turned into [`StreamDoc`] / [`Query`] once
//! vectors are known (given by the caller, or encoded from the text; see `encoding`).

use std::collections::BTreeMap;

use cellar_core::{CellarError, Result};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::doc::{MetaValue, StreamDoc, MAX_DIM, MAX_KEY_BYTES, MAX_META_FIELDS, MAX_TEXT_BYTES, MAX_TOKENS};
use crate::search::{Mode, Query, MAX_K, MAX_QUERY_TOKENS};

/// A streaming document. `group` and `id` come from the URL on PUT (if given in the body they
/// must agree) and from the body in a feed. Without `tokens` the server encodes `text` with its
/// model.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocJson {
    #[schemars(length(max = MAX_KEY_BYTES))]
    pub group: Option<String>,
    #[schemars(length(max = MAX_KEY_BYTES))]
    pub id: Option<String>,
    #[serde(default)]
    #[schemars(length(max = MAX_TEXT_BYTES))]
    pub text: String,
    /// Scalar values only: strings, numbers, booleans.
    #[serde(default)]
    #[schemars(extend("maxProperties" = MAX_META_FIELDS))]
    pub metadata: BTreeMap<String, Value>,
    /// Token vectors, one array per token; encoded from `text` when absent.
    #[schemars(length(min = 1, max = MAX_TOKENS), inner(length(max = MAX_DIM)))]
    pub tokens: Option<Vec<Vec<f32>>>,
    /// Default: the normalised mean of the token vectors.
    #[schemars(length(max = MAX_DIM))]
    pub pooled: Option<Vec<f32>>,
}

/// A search inside one group, as JSON.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryJson {
    /// Query text, encoded by the server when `query_tokens` is absent.
    pub query: Option<String>,
    #[schemars(length(max = MAX_QUERY_TOKENS), inner(length(max = MAX_DIM)))]
    pub query_tokens: Option<Vec<Vec<f32>>>,
    #[schemars(length(max = MAX_DIM))]
    pub query_pooled: Option<Vec<f32>>,
    /// `maxsim` (default) or `pooled`.
    pub mode: Option<String>,
    /// Results to return (default 10).
    #[schemars(range(min = 1, max = MAX_K))]
    pub k: Option<usize>,
    /// Only documents containing every term of this text.
    pub require_terms: Option<String>,
    /// Metadata equality filters.
    #[serde(default)]
    pub filters: BTreeMap<String, Value>,
    /// A filter of the index's grammar (`{"field": value}`, or `eq` and `and` of them in the long
    /// form: a stream runs equality), instead of `filters`. Read by the front end, which turns
    /// it into `filters` (`cellar_search::Filter::equalities`).
    #[serde(default)]
    pub filter: Option<Value>,
    pub include_text: Option<bool>,
}

pub const DEFAULT_K: usize = 10;

fn invalid(message: String) -> CellarError {
    CellarError::InvalidInput(message)
}

/// A metadata scalar from JSON; anything else is refused.
pub fn meta_value(key: &str, value: &Value) -> Result<MetaValue> {
    match value {
        Value::String(s) => Ok(MetaValue::Str(s.clone())),
        Value::Bool(b) => Ok(MetaValue::Bool(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(MetaValue::Int(i)),
            (None, Some(f)) => Ok(MetaValue::Float(f)),
            _ => Err(invalid(format!("metadata {key:?}: number out of range"))),
        },
        _ => Err(invalid(format!("metadata {key:?}: only strings, numbers and booleans are allowed"))),
    }
}

pub fn meta_to_json(value: &MetaValue) -> Value {
    match value {
        MetaValue::Str(s) => Value::from(s.clone()),
        MetaValue::Int(i) => Value::from(*i),
        MetaValue::Float(f) => Value::from(*f),
        MetaValue::Bool(b) => Value::from(*b),
    }
}

pub fn metadata_map(map: &BTreeMap<String, Value>) -> Result<BTreeMap<String, MetaValue>> {
    map.iter().map(|(k, v)| Ok((k.clone(), meta_value(k, v)?))).collect()
}

/// Flattens token rows, checking every row has `dim` values.
pub fn flatten_rows(rows: &[Vec<f32>], dim: usize) -> Result<Vec<f32>> {
    if let Some(bad) = rows.iter().find(|r| r.len() != dim) {
        return Err(CellarError::WrongDimension { expected: dim, received: bad.len() });
    }
    Ok(rows.concat())
}

impl DocJson {
    /// Fills `group`/`id` from the URL (a different value in the body is an error) and checks
    /// that they are there.
    pub fn with_keys(mut self, group: Option<&str>, id: Option<&str>) -> Result<DocJson> {
        for (field, from_url, what) in [(&mut self.group, group, "group"), (&mut self.id, id, "id")] {
            match (field.as_deref(), from_url) {
                (Some(a), Some(b)) if a != b => {
                    return Err(invalid(format!("the body's {what} {a:?} differs from the URL's {b:?}")))
                }
                (None, Some(b)) => *field = Some(b.to_string()),
                (None, None) => return Err(invalid(format!("the document has no {what}"))),
                _ => {}
            }
        }
        if self.tokens.is_none() && self.text.trim().is_empty() {
            return Err(invalid("the document has neither text nor tokens".into()));
        }
        Ok(self)
    }

    /// Dimension of the caller's vectors, if given.
    pub fn given_dim(&self) -> Option<usize> {
        self.tokens.as_ref().and_then(|t| t.first()).map(Vec::len)
    }

    /// The document with its vectors: the caller's (`self.tokens`) or `encoded` (tokens, n, pooled).
    pub fn into_doc(self, dim: usize, encoded: Option<(Vec<f32>, usize, Vec<f32>)>) -> Result<StreamDoc> {
        let metadata = metadata_map(&self.metadata)?;
        let (tokens, n_tokens, pooled) = match (self.tokens, encoded) {
            (Some(rows), _) => (flatten_rows(&rows, dim)?, rows.len(), self.pooled),
            (None, Some((tokens, n, pooled))) => (tokens, n, self.pooled.or(Some(pooled))),
            (None, None) => return Err(invalid("the document has no token vectors".into())),
        };
        Ok(StreamDoc {
            group: self.group.unwrap_or_default(),
            id: self.id.unwrap_or_default(),
            text: self.text,
            tokens,
            n_tokens,
            pooled,
            metadata,
        })
    }
}

impl QueryJson {
    pub fn needs_encoding(&self) -> bool {
        self.query_tokens.is_none()
            && !(self.mode.as_deref() == Some("pooled") && self.query_pooled.is_some())
    }

    /// The query with its vectors: the caller's, or `encoded` (tokens, pooled) from `query`.
    pub fn into_query(self, dim: usize, encoded: Option<(Vec<f32>, Vec<f32>)>) -> Result<Query> {
        if self.filter.is_some() {
            return Err(CellarError::Unsupported(
                "`filter` is read by the front end, which left it here".into(),
            ));
        }
        let mode: Mode = self.mode.as_deref().unwrap_or("maxsim").parse()?;
        let (tokens, pooled) = match (self.query_tokens, encoded) {
            (Some(rows), _) => (flatten_rows(&rows, dim)?, self.query_pooled),
            (None, Some((tokens, pooled))) => (tokens, self.query_pooled.or(Some(pooled))),
            (None, None) => (Vec::new(), self.query_pooled),
        };
        Ok(Query {
            tokens,
            pooled,
            mode,
            k: self.k.unwrap_or(DEFAULT_K),
            require_terms: self.require_terms,
            filters: metadata_map(&self.filters)?,
            include_text: self.include_text.unwrap_or(true),
        })
    }
}
