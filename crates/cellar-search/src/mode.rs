//! `Mode`: how a query is answered, from BM25 alone to the fused hybrid.

use std::fmt;
use std::str::FromStr;

use cellar_core::{CellarError, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// How a query is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// BM25 only.
    Bm25,
    /// Exact single-vector search: a scan of every document's pooled vector (in RAM).
    DenseExact,
    /// The IVF alone: approximate single-vector search on disk, no re-ranking.
    Ivf,
    /// Dense first-stage candidates (the token stage's, or the IVF's) re-ranked by MaxSim
    /// alone (alpha = 0).
    Dense,
    /// BM25 candidates re-ranked by MaxSim alone (alpha = 0).
    Rerank,
    /// BM25 candidates (joined by the dense stage's when `hybrid_candidates` > 0) re-ranked by
    /// `alpha * z(first stage) + (1 - alpha) * z(MaxSim)`.
    Hybrid,
}

impl Mode {
    pub const ALL: [Mode; 6] =
        [Mode::Bm25, Mode::DenseExact, Mode::Ivf, Mode::Dense, Mode::Rerank, Mode::Hybrid];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Bm25 => "bm25",
            Mode::DenseExact => "dense-exact",
            Mode::Ivf => "ivf",
            Mode::Dense => "dense",
            Mode::Rerank => "rerank",
            Mode::Hybrid => "hybrid",
        }
    }

    /// True when the mode needs the query encoded.
    pub fn needs_encoder(self) -> bool {
        self != Mode::Bm25
    }

    /// True when the mode scores documents with MaxSim (needs query token vectors).
    pub fn needs_tokens(self) -> bool {
        matches!(self, Mode::Dense | Mode::Rerank | Mode::Hybrid)
    }

    /// True when the first stage is the pooled vector alone (no BM25, so the text may be empty
    /// when the caller supplies vectors).
    pub fn is_single_vector_first(self) -> bool {
        matches!(self, Mode::DenseExact | Mode::Ivf | Mode::Dense)
    }

    /// True when the mode always runs a dense first stage (the IVF, or for dense the token
    /// stage where there is one).
    pub fn needs_dense_stage(self) -> bool {
        matches!(self, Mode::Ivf | Mode::Dense)
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
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| CellarError::InvalidInput(unknown(s)))
    }
}

/// Parsed by [`FromStr`], so every front end (JSON, Python, CLI) gets the same message.
impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Mode, D::Error> {
        let name = String::deserialize(deserializer)?;
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| serde::de::Error::custom(unknown(&name)))
    }
}

/// Which sparse first stage feeds the bm25, rerank and hybrid modes: BM25 (tantivy), the
/// learned-sparse SPLADE stage (`cellar splade build`), or both joined (each document's
/// z-scores in the two lists summed, as the IVF's candidates join BM25's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Lexical {
    #[default]
    Bm25,
    Splade,
    Both,
}

impl Lexical {
    pub const ALL: [Lexical; 3] = [Lexical::Bm25, Lexical::Splade, Lexical::Both];

    pub fn name(self) -> &'static str {
        match self {
            Lexical::Bm25 => "bm25",
            Lexical::Splade => "splade",
            Lexical::Both => "both",
        }
    }

    /// Whether it needs the SPLADE stage.
    pub fn needs_splade(self) -> bool {
        self != Lexical::Bm25
    }
}

impl fmt::Display for Lexical {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Lexical {
    type Err = CellarError;

    fn from_str(s: &str) -> Result<Lexical> {
        Lexical::ALL.into_iter().find(|l| l.name() == s).ok_or_else(|| {
            CellarError::InvalidInput(format!(
                "unknown lexical stage {s:?}: expected one of bm25, splade, both"
            ))
        })
    }
}

/// Which dense first stage feeds the dense mode and joins BM25 in hybrid: the token-level stage
/// (`cellar tokens build`: each query token's nearest leaves, the documents holding them) or
/// the IVF over one pooled vector per document (`cellar ivf build`). By default dense takes the
/// token stage where the index has one, and hybrid the IVF where there is one (then the token
/// stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DenseStage {
    Tokens,
    Pooled,
}

impl DenseStage {
    pub const ALL: [DenseStage; 2] = [DenseStage::Tokens, DenseStage::Pooled];

    pub fn name(self) -> &'static str {
        match self {
            DenseStage::Tokens => "tokens",
            DenseStage::Pooled => "pooled",
        }
    }
}

impl fmt::Display for DenseStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DenseStage {
    type Err = CellarError;

    fn from_str(s: &str) -> Result<DenseStage> {
        DenseStage::ALL.into_iter().find(|l| l.name() == s).ok_or_else(|| {
            CellarError::InvalidInput(format!("unknown dense stage {s:?}: expected one of tokens, pooled"))
        })
    }
}

fn unknown(name: &str) -> String {
    format!("unknown mode {name:?}: expected one of bm25, dense-exact, ivf, dense, rerank, hybrid")
}
