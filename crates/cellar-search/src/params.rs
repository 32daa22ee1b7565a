//! Search modes and per-request parameters, with their validation.

use std::fmt;
use std::str::FromStr;

use cellar_core::{CellarError, Result};
use serde::{Deserialize, Serialize};

use crate::config::SearchDefaults;
use crate::ivf::IvfConfig;

/// Longest query accepted, in bytes (queries are cut at `query_max_tokens` tokens anyway).
pub const MAX_QUERY_BYTES: usize = 4096;
/// Most results one request may ask for.
pub const MAX_K: usize = 10_000;

/// How a query is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// BM25 only.
    Bm25,
    /// Exact single-vector search: a scan of every document's pooled vector (in RAM).
    DenseExact,
    /// The IVF alone: approximate single-vector search on disk, no re-ranking.
    Ivf,
    /// IVF candidates re-ranked by MaxSim alone (alpha = 0).
    Dense,
    /// BM25 candidates re-ranked by MaxSim alone (alpha = 0).
    Rerank,
    /// BM25 candidates (joined by IVF candidates when `hybrid_candidates` > 0) re-ranked by
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

    /// True when the mode always probes the IVF.
    pub fn needs_ivf(self) -> bool {
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
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            CellarError::InvalidInput(format!(
                "unknown mode {s:?}: expected one of bm25, dense-exact, ivf, dense, rerank, hybrid"
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
    /// IVF clusters probed.
    pub nprobe: Option<usize>,
    /// IVF shortlist size as a multiple of the depth asked for.
    pub oversample: Option<f32>,
    /// Rescore the IVF shortlist with full-precision vectors.
    pub rescore: Option<bool>,
    /// Read likely candidates' records while the IVF probe runs.
    pub prefetch: Option<bool>,
    /// Fraction of `nprobe` probed before prefetching, in (0, 1].
    pub prefetch_step: Option<f32>,
    /// Hybrid: IVF candidates joined to BM25's.
    pub hybrid_candidates: Option<usize>,
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
    /// IVF settings; `None` when the search does not probe the IVF.
    pub ivf: Option<IvfParams>,
}

/// The IVF part of a search's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct IvfParams {
    pub nprobe: usize,
    pub oversample: f32,
    pub rescore: bool,
    pub prefetch: bool,
    pub prefetch_step: f32,
    /// Hybrid: IVF candidates joined to BM25's; other modes: the IVF's depth.
    pub hybrid_candidates: usize,
}

impl IvfParams {
    /// The probe of these settings for `depth` documents.
    pub fn probe(&self, depth: usize) -> crate::ivf::ProbeParams {
        crate::ivf::ProbeParams {
            nprobe: self.nprobe,
            depth,
            oversample: self.oversample,
            rescore: self.rescore,
        }
    }
}

/// Checks a prefetch step: a fraction of `nprobe` in (0, 1].
pub fn check_prefetch_step(step: f32) -> Result<()> {
    if step > 0.0 && step <= 1.0 {
        Ok(())
    } else {
        Err(CellarError::InvalidInput(format!("prefetch_step must be within (0, 1], got {step}")))
    }
}

/// Fills the IVF settings from the IVF's defaults and checks them against its cluster count.
fn resolve_ivf(options: &SearchOptions, mode: Mode, ivf: &IvfConfig) -> Result<IvfParams> {
    let d = ivf.search;
    let nprobe = options.nprobe.unwrap_or(d.nprobe);
    if nprobe == 0 || nprobe > ivf.clusters {
        return Err(CellarError::InvalidInput(format!(
            "nprobe must be between 1 and the IVF's {} clusters, got {nprobe}",
            ivf.clusters
        )));
    }
    let oversample = options.oversample.unwrap_or(d.oversample);
    if !(1.0..=100.0).contains(&oversample) {
        return Err(CellarError::InvalidInput(format!(
            "oversample must be within [1, 100], got {oversample}"
        )));
    }
    let prefetch_step = options.prefetch_step.unwrap_or(d.prefetch_step);
    check_prefetch_step(prefetch_step)?;
    let hybrid_candidates = options.hybrid_candidates.unwrap_or(d.hybrid_candidates);
    if hybrid_candidates > MAX_K {
        return Err(CellarError::InvalidInput(format!(
            "hybrid_candidates must be at most {MAX_K}, got {hybrid_candidates}"
        )));
    }
    Ok(IvfParams {
        nprobe,
        oversample,
        rescore: options.rescore.unwrap_or(if mode == Mode::Ivf {
            d.rescore
        } else {
            d.rescore_before_rerank
        }),
        prefetch: options.prefetch.unwrap_or(d.prefetch),
        prefetch_step,
        hybrid_candidates,
    })
}

impl SearchParams {
    /// Fills `options` from `defaults` (and the IVF's, when the index has one) and checks every
    /// value.
    pub fn resolve(
        options: &SearchOptions,
        defaults: &SearchDefaults,
        ivf: Option<&IvfConfig>,
    ) -> Result<SearchParams> {
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
            Mode::Rerank | Mode::Dense => 0.0,
            _ => options.alpha.unwrap_or(defaults.alpha),
        };
        if !(0.0..=1.0).contains(&alpha) {
            return Err(CellarError::InvalidInput(format!("alpha must be within [0, 1], got {alpha}")));
        }
        let ivf = match ivf {
            Some(config) if mode.needs_ivf() || mode == Mode::Hybrid => {
                Some(resolve_ivf(options, mode, config)?)
            }
            _ => None,
        };
        // A hybrid search that joins no IVF candidates does not use the IVF.
        let ivf = ivf.filter(|p| mode != Mode::Hybrid || p.hybrid_candidates > 0);
        let hybrid_ivf = options.hybrid_candidates.is_some_and(|n| n > 0);
        if ivf.is_none() && (mode.needs_ivf() || (mode == Mode::Hybrid && hybrid_ivf)) {
            return Err(CellarError::InvalidInput(format!(
                "mode {mode} needs an IVF and this index has none: build one with `cellar ivf build --index DIR`"
            )));
        }
        Ok(SearchParams { mode, k, candidates, rerank_k, alpha, ivf })
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
