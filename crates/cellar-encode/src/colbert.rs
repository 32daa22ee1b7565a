//! ColBERT checkpoints in PyLate's layout — `config_sentence_transformers.json` names the query
//! and document prefixes, the query and document lengths, [MASK] query expansion, whether the
//! query attends to its expansion tokens, and the skiplist — or in the Stanford colbert-ai
//! layout — `artifact.metadata`: `query_token_id` / `doc_token_id` markers, `query_maxlen`,
//! `doc_maxlen`, `attend_to_mask_tokens`, `mask_punctuation` (the skiplist: each of Python's
//! `string.punctuation`). Texts are tokenised and their vectors kept exactly as PyLate's
//! `ColBERT.tokenize` / `ColBERT.encode` and colbert-ai's tokenizers / `ColBERT.query` / `doc`
//! do (the two libraries agree on every step):
//!
//! - truncation at `length - 1` tokens ([CLS] and [SEP] included), then the prefix token inserted
//!   after [CLS] (so `length` tokens at most);
//! - a query with expansion is padded with [MASK] to `query_length`; the padding is masked out of
//!   attention as keys (unless `attend_to_expansion_tokens`) but every position's vector is
//!   returned;
//! - a document keeps every token but those whose id is in the skiplist ([CLS], the prefix and
//!   [SEP] included); a skiplist word the vocabulary lacks stands for the unknown token, as
//!   `convert_tokens_to_ids` makes it;
//! - vectors go through the Dense projection, then are L2-normalised.

use std::collections::HashSet;
use std::path::Path;

use cellar_core::Result;
use serde::Deserialize;

use crate::errors::model_err;

/// The file whose PyLate fields make a checkpoint a ColBERT one.
pub(crate) const ST_CONFIG: &str = "config_sentence_transformers.json";
/// The Stanford colbert-ai checkpoint's settings.
pub(crate) const STANFORD_METADATA: &str = "artifact.metadata";

/// The fields of colbert-ai's `artifact.metadata` (a JSON `ColBERTConfig`) that shape encoding.
#[derive(Deserialize)]
struct StanfordMetadata {
    query_token_id: Option<String>,
    doc_token_id: Option<String>,
    query_maxlen: Option<usize>,
    doc_maxlen: Option<usize>,
    attend_to_mask_tokens: Option<bool>,
    mask_punctuation: Option<bool>,
}

/// colbert-ai's defaults (`ColBERTConfig`).
const STANFORD_QUERY_MARKER: &str = "[unused0]";
const STANFORD_DOC_MARKER: &str = "[unused1]";
const STANFORD_QUERY_LENGTH: usize = 32;
const STANFORD_DOC_LENGTH: usize = 220;

/// PyLate's defaults for fields a checkpoint leaves out.
const DEFAULT_QUERY_PREFIX: &str = "[Q] ";
const DEFAULT_DOCUMENT_PREFIX: &str = "[D] ";
const DEFAULT_QUERY_LENGTH: usize = 32;
const DEFAULT_DOCUMENT_LENGTH: usize = 180;
/// Python's `string.punctuation`, PyLate's default skiplist (one word per character).
const DEFAULT_SKIPLIST: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

#[derive(Deserialize)]
struct StConfig {
    query_prefix: Option<String>,
    document_prefix: Option<String>,
    query_length: Option<usize>,
    document_length: Option<usize>,
    do_query_expansion: Option<bool>,
    attend_to_expansion_tokens: Option<bool>,
    skiplist_words: Option<Vec<String>>,
}

/// How a ColBERT checkpoint tokenises and which vectors it keeps.
#[derive(Debug, Clone)]
pub(crate) struct Colbert {
    /// Inserted after [CLS] (`None`: the checkpoint's prefix is empty).
    pub query_prefix: Option<u32>,
    pub document_prefix: Option<u32>,
    /// Tokens of a query and of a document, prefix included.
    pub query_length: usize,
    pub document_length: usize,
    /// Pad queries with [MASK] to `query_length` and return every position.
    pub expansion: bool,
    /// Let every query token attend to the [MASK] padding.
    pub attend_to_expansion: bool,
    /// The padding of expanded queries: [MASK].
    pub mask: u32,
    /// Token ids whose vectors a document drops.
    pub skiplist: HashSet<u32>,
}

impl Colbert {
    /// The ColBERT settings of the checkpoint in `dir`, if it is one: a
    /// `config_sentence_transformers.json` with PyLate's fields (a query prefix or length).
    /// `id_of` maps a token to its id in the checkpoint's tokenizer.
    pub fn find(dir: &Path, id_of: impl Fn(&str) -> Option<u32>) -> Result<Option<Colbert>> {
        let path = dir.join(ST_CONFIG);
        if !path.is_file() {
            return Colbert::stanford(dir, id_of);
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| model_err(&path, format!("cannot read: {e}")))?;
        let cfg: StConfig = serde_json::from_str(&text).map_err(|e| model_err(&path, e.to_string()))?;
        if cfg.query_prefix.is_none() && cfg.query_length.is_none() && cfg.document_prefix.is_none() {
            return Ok(None);
        }
        let prefix = |given: Option<String>, default: &str| -> Result<Option<u32>> {
            let prefix = given.unwrap_or_else(|| default.to_string());
            if prefix.is_empty() {
                return Ok(None);
            }
            id_of(&prefix).map(Some).ok_or_else(|| {
                model_err(&path, format!("the prefix {prefix:?} is not a token of the tokenizer"))
            })
        };
        let mask = id_of("[MASK]")
            .ok_or_else(|| model_err(&path, "the tokenizer has no [MASK] token to expand queries with"))?;
        let unknown = id_of("[UNK]");
        let words =
            cfg.skiplist_words.unwrap_or_else(|| DEFAULT_SKIPLIST.chars().map(String::from).collect());
        let skiplist = words.iter().filter_map(|w| id_of(w).or(unknown)).collect();
        let colbert = Colbert {
            query_prefix: prefix(cfg.query_prefix, DEFAULT_QUERY_PREFIX)?,
            document_prefix: prefix(cfg.document_prefix, DEFAULT_DOCUMENT_PREFIX)?,
            query_length: cfg.query_length.unwrap_or(DEFAULT_QUERY_LENGTH),
            document_length: cfg.document_length.unwrap_or(DEFAULT_DOCUMENT_LENGTH),
            expansion: cfg.do_query_expansion.unwrap_or(true),
            attend_to_expansion: cfg.attend_to_expansion_tokens.unwrap_or(false),
            mask,
            skiplist,
        };
        colbert.check(&path)?;
        Ok(Some(colbert))
    }

    /// The settings of a Stanford colbert-ai checkpoint (`artifact.metadata`), if `dir` is one.
    fn stanford(dir: &Path, id_of: impl Fn(&str) -> Option<u32>) -> Result<Option<Colbert>> {
        let path = dir.join(STANFORD_METADATA);
        if !path.is_file() {
            return Ok(None);
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| model_err(&path, format!("cannot read: {e}")))?;
        let meta: StanfordMetadata =
            serde_json::from_str(&text).map_err(|e| model_err(&path, e.to_string()))?;
        let marker = |given: Option<String>, default: &str| -> Result<u32> {
            let token = given.unwrap_or_else(|| default.to_string());
            id_of(&token).ok_or_else(|| {
                model_err(&path, format!("the marker {token:?} is not a token of the tokenizer"))
            })
        };
        let mask = id_of("[MASK]")
            .ok_or_else(|| model_err(&path, "the tokenizer has no [MASK] token to expand queries with"))?;
        // colbert-ai skips `tokenizer.encode(symbol)[0]` of each symbol: its id, or [UNK].
        let unknown = id_of("[UNK]");
        let skiplist = match meta.mask_punctuation.unwrap_or(true) {
            true => DEFAULT_SKIPLIST.chars().filter_map(|c| id_of(&c.to_string()).or(unknown)).collect(),
            false => HashSet::new(),
        };
        let colbert = Colbert {
            query_prefix: Some(marker(meta.query_token_id, STANFORD_QUERY_MARKER)?),
            document_prefix: Some(marker(meta.doc_token_id, STANFORD_DOC_MARKER)?),
            query_length: meta.query_maxlen.unwrap_or(STANFORD_QUERY_LENGTH),
            document_length: meta.doc_maxlen.unwrap_or(STANFORD_DOC_LENGTH),
            expansion: true,
            attend_to_expansion: meta.attend_to_mask_tokens.unwrap_or(false),
            mask,
            skiplist,
        };
        colbert.check(&path)?;
        Ok(Some(colbert))
    }

    fn check(&self, path: &Path) -> Result<()> {
        for (what, n) in [("query_length", self.query_length), ("document_length", self.document_length)] {
            if n < 4 {
                return Err(model_err(path, format!("{what} {n} leaves no room for a token")));
            }
        }
        Ok(())
    }

    /// The tokenizer's truncation limit for queries and documents: the length less the prefix.
    pub fn limits(&self) -> (usize, usize) {
        let less = |n: usize, prefix: Option<u32>| n - usize::from(prefix.is_some());
        (less(self.query_length, self.query_prefix), less(self.document_length, self.document_prefix))
    }

    /// A tokenised query or document (`ids` as the tokenizer gave them, [CLS] first) made
    /// PyLate's: the prefix inserted, a query expanded. Returns the ids, how many of them
    /// other tokens attend to, and which positions' vectors are kept.
    pub fn shape(&self, mut ids: Vec<u32>, query: bool) -> (Vec<u32>, usize, Vec<bool>) {
        let prefix = if query { self.query_prefix } else { self.document_prefix };
        if let Some(prefix) = prefix {
            ids.insert(1.min(ids.len()), prefix);
        }
        if !query {
            let keep: Vec<bool> = ids.iter().map(|id| !self.skiplist.contains(id)).collect();
            let attend = ids.len();
            return (ids, attend, keep);
        }
        let real = ids.len();
        if self.expansion && ids.len() < self.query_length {
            ids.resize(self.query_length, self.mask);
        }
        let attend = if self.attend_to_expansion { ids.len() } else { real };
        let keep = vec![true; if self.expansion { ids.len() } else { real }];
        (ids, attend, keep)
    }
}
