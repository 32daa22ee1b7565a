//! Documents and searches as JSON (the HTTP bodies, `cellar feed`'s lines, the Python package's
//! dicts), in the one model of `cellar-search`: a document is a `DocIn` with its `group`, a
//! search a `SearchRequest`. The first stream API's shapes are still read, each turned into the
//! one model here: a document with `tokens` and `pooled` beside its text, and a search with
//! `query_tokens`, `query_pooled`, `filters` (equalities) and the modes `maxsim` and `pooled`.

use std::collections::BTreeMap;

use cellar_core::codec::MAX_DIM;
use cellar_core::store::MAX_TOKENS_PER_DOC;
use cellar_core::{CellarError, Result};
use cellar_search::doc::{MAX_DOC_TEXT_BYTES, MAX_ID_BYTES};
use cellar_search::meta::MAX_META_KEYS;
use cellar_search::request::{MAX_K, MAX_QUERY_BYTES, MAX_QUERY_VECTORS};
use cellar_search::{DocIn, Filter, Metadata, Mode, QueryVectorsIn, SearchRequest};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// A streaming document: the one document type (`DocIn`, with its `group`), or the first
/// stream API's shape (`tokens` and `pooled` beside the text), still read.
#[derive(Clone, Debug, JsonSchema)]
#[serde(untagged)]
pub enum StreamDocJson {
    Doc(DocIn),
    Legacy(DocJson),
}

/// The first stream API's document: `{group, id, text, metadata, tokens, pooled}`. Read as the
/// `DocIn` it states (`tokens` and `pooled` are its `vectors`).
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocJson {
    #[schemars(length(max = MAX_ID_BYTES))]
    pub group: Option<String>,
    #[schemars(length(max = MAX_ID_BYTES))]
    pub id: Option<String>,
    #[serde(default)]
    #[schemars(length(max = MAX_DOC_TEXT_BYTES))]
    pub text: String,
    #[serde(default)]
    #[schemars(extend("maxProperties" = MAX_META_KEYS))]
    pub metadata: Map<String, Value>,
    /// Token vectors, one array per token; encoded from `text` when absent.
    #[schemars(length(min = 1, max = MAX_TOKENS_PER_DOC), inner(length(max = MAX_DIM)))]
    pub tokens: Option<Vec<Vec<f32>>>,
    /// Default: the normalised mean of the token vectors.
    #[schemars(length(max = MAX_DIM))]
    pub pooled: Option<Vec<f32>>,
}

fn legacy_keys(value: &Value, keys: &[&str]) -> bool {
    value.as_object().is_some_and(|o| keys.iter().any(|k| o.contains_key(*k)))
}

impl<'de> Deserialize<'de> for StreamDocJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let mut value = Value::deserialize(deserializer)?;
        let parsed = if legacy_keys(&value, &["tokens", "pooled"]) {
            DocJson::deserialize(value).map(StreamDocJson::Legacy)
        } else {
            // On a PUT the id comes from the URL ([`StreamDocJson::into_doc`]); a feed's
            // document without one is refused there as an empty id.
            if let Value::Object(fields) = &mut value {
                fields.entry("id").or_insert_with(|| Value::String(String::new()));
            }
            DocIn::deserialize(value).map(StreamDocJson::Doc)
        };
        parsed.map_err(serde::de::Error::custom)
    }
}

fn invalid(message: String) -> CellarError {
    CellarError::InvalidInput(message)
}

impl StreamDocJson {
    /// The document, `group` and `id` filled from the URL (a different value in the body is an
    /// error).
    pub fn into_doc(self, group: Option<&str>, id: Option<&str>) -> Result<DocIn> {
        let mut doc = match self {
            StreamDocJson::Doc(doc) => doc,
            StreamDocJson::Legacy(old) => DocIn {
                id: old.id.unwrap_or_default(),
                group: old.group,
                title: String::new(),
                text: old.text,
                metadata: Metadata::from_json(old.metadata).map_err(invalid)?,
                vectors: (old.tokens.is_some() || old.pooled.is_some()).then(|| QueryVectorsIn {
                    tokens: old.tokens.unwrap_or_default(),
                    pooled: old.pooled,
                    ..QueryVectorsIn::default()
                }),
            },
        };
        if let Some(url) = group {
            match doc.group.as_deref() {
                Some(body) if body != url => {
                    return Err(invalid(format!("the body's group {body:?} differs from the URL's {url:?}")))
                }
                _ => doc.group = Some(url.to_string()),
            }
        }
        if let Some(url) = id {
            match doc.id.as_str() {
                "" => doc.id = url.to_string(),
                body if body != url => {
                    return Err(invalid(format!("the body's id {body:?} differs from the URL's {url:?}")))
                }
                _ => {}
            }
        }
        if doc.group.is_none() {
            return Err(invalid("the document has no group".into()));
        }
        Ok(doc)
    }
}

/// A search inside one group: the one request type (`SearchRequest`: mode `dense` or
/// `dense-exact`, `query_vectors`, the whole filter grammar, `require_terms`), or the first
/// stream API's shape, still read.
#[derive(Clone, Debug, JsonSchema)]
#[serde(untagged)]
pub enum StreamSearchJson {
    Request(SearchRequest),
    Legacy(QueryJson),
}

/// The first stream API's search: `query_tokens`, `query_pooled`, `mode` `maxsim` (`dense`) or
/// `pooled` (`dense-exact`), `filters` (metadata equalities). Read as the `SearchRequest` it
/// states.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryJson {
    /// Query text, encoded by the server when `query_tokens` is absent.
    #[schemars(length(max = MAX_QUERY_BYTES))]
    pub query: Option<String>,
    #[schemars(length(max = MAX_QUERY_VECTORS), inner(length(max = MAX_DIM)))]
    pub query_tokens: Option<Vec<Vec<f32>>>,
    #[schemars(length(max = MAX_DIM))]
    pub query_pooled: Option<Vec<f32>>,
    /// `maxsim` (default) or `pooled`.
    pub mode: Option<String>,
    /// Results to return (default 10).
    #[schemars(range(min = 1, max = MAX_K))]
    pub k: Option<usize>,
    /// Only documents containing every term of this text.
    #[schemars(length(max = MAX_QUERY_BYTES))]
    pub require_terms: Option<String>,
    /// Metadata equality filters.
    #[serde(default)]
    pub filters: BTreeMap<String, Value>,
    /// A filter of the index's grammar, instead of `filters`.
    #[serde(default)]
    pub filter: Option<Filter>,
    pub include_text: Option<bool>,
}

/// A first-API mode name as the one `Mode`: `maxsim` is `dense`, `pooled` is `dense-exact`;
/// any other name is read as a mode of the index's.
pub fn legacy_mode(name: &str) -> Result<Mode> {
    match name {
        "maxsim" => Ok(Mode::Dense),
        "pooled" => Ok(Mode::DenseExact),
        other => other.parse(),
    }
}

impl<'de> Deserialize<'de> for StreamSearchJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let old_mode = matches!(value.get("mode").and_then(Value::as_str), Some("maxsim" | "pooled"));
        let parsed = if old_mode || legacy_keys(&value, &["query_tokens", "query_pooled", "filters"]) {
            QueryJson::deserialize(value).map(StreamSearchJson::Legacy)
        } else {
            SearchRequest::deserialize(value).map(StreamSearchJson::Request)
        };
        parsed.map_err(serde::de::Error::custom)
    }
}

impl StreamSearchJson {
    /// The search as the one request type.
    pub fn into_request(self) -> Result<SearchRequest> {
        let old = match self {
            StreamSearchJson::Request(request) => return Ok(request),
            StreamSearchJson::Legacy(old) => old,
        };
        let filter = match (old.filter, old.filters.is_empty()) {
            (Some(_), false) => return Err(invalid("give filter or filters, not both".into())),
            (Some(filter), true) => Some(filter),
            (None, true) => None,
            (None, false) => Some(
                serde_json::from_value::<Filter>(Value::Object(old.filters.into_iter().collect()))
                    .map_err(|e| invalid(format!("filters: {e}")))?,
            ),
        };
        let vectors = (old.query_tokens.is_some() || old.query_pooled.is_some()).then(|| QueryVectorsIn {
            tokens: old.query_tokens.unwrap_or_default(),
            pooled: old.query_pooled,
            ..QueryVectorsIn::default()
        });
        Ok(SearchRequest {
            query: old.query.unwrap_or_default(),
            k: old.k,
            mode: old.mode.as_deref().map(legacy_mode).transpose()?,
            query_vectors: vectors,
            filter,
            require_terms: old.require_terms,
            include_text: old.include_text,
            ..SearchRequest::default()
        })
    }
}
