//! Search modes and per-request parameters, with their validation.

use std::fmt;
use std::str::FromStr;

use cellar_core::{CellarError, Result};
use serde::{Deserialize, Serialize};

use crate::config::SearchDefaults;

/// Longest query accepted, in bytes (queries are cut at `query_max_tokens` tokens anyway).
pub const MAX_QUERY_BYTES: usize = 4096;
/// Most results one request may ask for.
pub const MAX_K: usize = 10_000;

/// How a query is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// BM25 only.
    Bm25,
    /// Exact single-vector search over every document's pooled vector.
    Dense,
    /// BM25 candidates re-ranked by MaxSim alone (alpha = 0).
    Rerank,
    /// BM25 candidates re-ranked by `alpha * z(BM25) + (1 - alpha) * z(MaxSim)`.
    Hybrid,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Bm25, Mode::Dense, Mode::Rerank, Mode::Hybrid];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Bm25 => "bm25",
            Mode::Dense => "dense",
            Mode::Rerank => "rerank",
            Mode::Hybrid => "hybrid",
        }
    }

    /// True when the mode needs the query's token vectors.
    pub fn needs_encoder(self) -> bool {
        self != Mode::Bm25
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = CellarError;

    fn from_str(s: &str) -> Result<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            CellarError::InvalidInput(format!(
                "unknown mode {s:?}: expected one of bm25, dense, rerank, hybrid"
            ))
        })
    }
}

/// What a request may set; `None` takes the index's default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SearchOptions {
    pub k: usize,
    pub mode: Option<Mode>,
    pub candidates: Option<usize>,
    pub rerank_k: Option<usize>,
    pub alpha: Option<f32>,
}

/// Fully resolved, validated parameters of one search.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SearchParams {
    pub mode: Mode,
    pub k: usize,
    /// First-stage depth N (at least `k`).
    pub candidates: usize,
    /// How many of the N candidates are read and re-scored (at most N).
    pub rerank_k: usize,
    pub alpha: f32,
}

impl SearchParams {
    /// Fills `options` from `defaults` and checks every value.
    pub fn resolve(options: &SearchOptions, defaults: &SearchDefaults) -> Result<SearchParams> {
        let k = options.k;
        if k == 0 || k > MAX_K {
            return Err(CellarError::InvalidInput(format!("k must be between 1 and {MAX_K}, got {k}")));
        }
        let mode = options.mode.unwrap_or(defaults.mode);
        let candidates = options.candidates.unwrap_or(defaults.candidates);
        if candidates == 0 {
            return Err(CellarError::InvalidInput("candidates must be at least 1".into()));
        }
        let candidates = candidates.max(k);
        let rerank_k = options.rerank_k.unwrap_or(defaults.rerank_k).min(candidates);
        let alpha = match mode {
            Mode::Rerank => 0.0,
            _ => options.alpha.unwrap_or(defaults.alpha),
        };
        if !(0.0..=1.0).contains(&alpha) {
            return Err(CellarError::InvalidInput(format!("alpha must be within [0, 1], got {alpha}")));
        }
        Ok(SearchParams { mode, k, candidates, rerank_k, alpha })
    }
}

/// Checks a query's text: not empty, not over-long.
pub fn check_query(text: &str) -> Result<()> {
    if text.trim().is_empty() {
        return Err(CellarError::InvalidInput("the query is empty".into()));
    }
    if text.len() > MAX_QUERY_BYTES {
        return Err(CellarError::InvalidInput(format!(
            "the query is {} bytes long; the limit is {MAX_QUERY_BYTES}",
            text.len()
        )));
    }
    Ok(())
}
