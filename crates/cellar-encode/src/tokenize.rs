//! Tokenisation (Hugging Face `tokenizer.json`) and the per-token keep/skip decision.

use std::path::Path;

use cellar_core::Result;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};
use unicode_categories::UnicodeCategories;

use crate::errors::model_err;

/// Which input kind is being tokenised; each has its own length limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A search query: `query_max_tokens`.
    Query,
    /// A document: `doc_max_tokens`.
    Doc,
}

/// One tokenised input.
#[derive(Debug, Clone)]
pub(crate) struct TokenSeq {
    /// Token ids, [CLS] and [SEP] included, already truncated.
    pub ids: Vec<u32>,
    /// How many of `ids`, from the first, other tokens attend to (all but a ColBERT query's
    /// [MASK] expansion).
    pub attend: usize,
    /// Whether each token's vector goes into the output (never all false).
    pub keep: Vec<bool>,
}

/// What to drop from the output token vectors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SkipRules {
    /// Drop special tokens ([CLS], [SEP]).
    pub special: bool,
    /// Drop tokens made only of punctuation and symbols.
    pub punctuation: bool,
}

/// The checkpoint's tokenizer, twice: truncating at the query limit and at the document limit.
pub(crate) struct Tokenizers {
    /// Truncates at `query_max_tokens`.
    query: Tokenizer,
    /// Truncates at `doc_max_tokens`.
    doc: Tokenizer,
}

impl Tokenizers {
    /// Loads `dir/tokenizer.json` and sets truncation (special tokens included in the limits).
    pub fn load(dir: &Path, query_max: usize, doc_max: usize) -> Result<Tokenizers> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(model_err(&path, "missing (a model directory needs tokenizer.json)"));
        }
        let base = Tokenizer::from_file(&path).map_err(|e| model_err(&path, format!("unreadable: {e}")))?;
        let with_limit = |max_length: usize| -> Result<Tokenizer> {
            let mut t = base.clone();
            let params = TruncationParams {
                max_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            };
            t.with_padding(None)
                .with_truncation(Some(params))
                .map_err(|e| model_err(&path, format!("cannot truncate at {max_length}: {e}")))?;
            Ok(t)
        };
        Ok(Tokenizers { query: with_limit(query_max)?, doc: with_limit(doc_max)? })
    }

    /// Largest id the tokenizer can produce, plus one.
    pub fn vocab_size(&self) -> usize {
        self.doc.get_vocab_size(true)
    }

    /// Tokenises `text` as `kind`, deciding per token whether its vector is kept.
    pub fn encode(&self, text: &str, kind: Kind, skip: SkipRules) -> Result<TokenSeq> {
        let tok = match kind {
            Kind::Query => &self.query,
            Kind::Doc => &self.doc,
        };
        let enc = tok
            .encode(text, true)
            .map_err(|e| cellar_core::CellarError::InvalidInput(format!("cannot tokenise text: {e}")))?;
        let special = enc.get_special_tokens_mask();
        let mut keep: Vec<bool> = enc
            .get_tokens()
            .iter()
            .zip(special)
            .map(|(t, &s)| !((skip.special && s != 0) || (skip.punctuation && is_punctuation(t))))
            .collect();
        if !keep.contains(&true) {
            keep.fill(true);
        }
        let ids = enc.get_ids().to_vec();
        Ok(TokenSeq { attend: ids.len(), ids, keep })
    }

    /// The id of `token` (added tokens included), as `convert_tokens_to_ids` finds it.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.doc.token_to_id(token)
    }
}

/// True when the token's text, less a leading `##`, is only Unicode punctuation or symbols.
pub(crate) fn is_punctuation(token: &str) -> bool {
    let s = token.strip_prefix("##").unwrap_or(token);
    !s.is_empty() && s.chars().all(|c| c.is_punctuation() || c.is_symbol())
}

#[cfg(test)]
mod tests {
    use super::is_punctuation;

    #[test]
    fn punctuation_tokens() {
        for t in [".", ",", "##!", "(", "$", "+", "…", "—", "«"] {
            assert!(is_punctuation(t), "{t}");
        }
        for t in ["a", "##s", "1", "[CLS]", "##", "é", "a."] {
            assert!(!is_punctuation(t), "{t}");
        }
    }
}
