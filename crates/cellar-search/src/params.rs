//! A request's settings resolved against the index's defaults and checked: `SearchParams`
//! (and its IVF part, `IvfParams`), what a response reports as the parameters it ran with.

use cellar_core::{CellarError, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::SearchDefaults;
use crate::filter::DEFAULT_FILTER_EXACT_MAX;
use crate::fusion::Fusion;
use crate::ivf::{IvfConfig, IvfDefaults, ProbeParams};
use crate::mode::{DenseStage, Lexical, Mode};
use crate::request::{SearchRequest, MAX_CANDIDATES, MAX_K, MAX_NPROBE};
use crate::tokens::{TokenQuery, TokensConfig};

/// Fully resolved, validated parameters of one search.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchParams {
    pub mode: Mode,
    pub k: usize,
    /// First-stage depth N (at least `k`).
    pub candidates: usize,
    /// How many of the N candidates are read and re-scored (at most N).
    pub rerank_k: usize,
    pub alpha: f32,
    /// How hybrid fuses the first stage's and MaxSim's scores.
    pub fusion: Fusion,
    /// The sparse first stage of bm25, rerank and hybrid.
    pub lexical: Lexical,
    /// Rerank and hybrid text queries read BM25's best `rerank_k` records while the text is
    /// encoded.
    pub early_read: bool,
    /// IVF settings; `None` when the search does not probe the IVF.
    pub ivf: Option<IvfParams>,
    /// Token-stage settings; `None` when the search does not run it (then dense and hybrid
    /// use the IVF, when they use a dense stage at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenParams>,
    /// A filter matching at most this many documents ranks them all exactly.
    pub filter_exact_max: usize,
}

/// The IVF part of a search's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    pub fn probe(&self, depth: usize) -> ProbeParams {
        ProbeParams { nprobe: self.nprobe, depth, oversample: self.oversample, rescore: self.rescore }
    }
}

/// The token stage's part of a search's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TokenParams {
    /// Leaves probed per query token.
    pub nprobe: usize,
    /// Groups of leaves scored per query token.
    pub route: usize,
    /// The rank of the leaf whose score a query token imputes to documents it did not meet.
    pub impute: usize,
    /// Hybrid: token-stage candidates joined to BM25's; dense: the stage's depth is `candidates`.
    pub hybrid_candidates: usize,
    /// Dense mode: read the best documents found so far while the stage scores the rest.
    pub prefetch: bool,
    /// Share of the postings scored before the prefetch starts, in (0, 1].
    pub prefetch_step: f32,
}

impl TokenParams {
    /// The stage's query for `depth` documents.
    pub fn query(&self, depth: usize) -> TokenQuery {
        TokenQuery { nprobe: self.nprobe, route: self.route, impute: self.impute, depth }
    }
}

/// `nprobe` if it is between 1 and the stage's `most` (the IVF's clusters, the token stage's
/// leaves) and `MAX_NPROBE`.
fn check_nprobe(nprobe: usize, most: usize, whose: &str, what: &str) -> Result<usize> {
    if nprobe == 0 || nprobe > most.min(MAX_NPROBE) {
        return Err(CellarError::InvalidInput(format!(
            "nprobe must be between 1 and {whose} {most} {what} (at most {MAX_NPROBE}), got {nprobe}"
        )));
    }
    Ok(nprobe)
}

fn check_hybrid_candidates(n: usize) -> Result<()> {
    if n > MAX_K {
        return Err(CellarError::InvalidInput(format!("hybrid_candidates must be at most {MAX_K}, got {n}")));
    }
    Ok(())
}

/// Fills the token stage's settings from its defaults and checks them against its leaves.
fn resolve_tokens(options: &SearchRequest, tokens: &TokensConfig) -> Result<TokenParams> {
    let d = tokens.search;
    let nprobe =
        check_nprobe(options.nprobe.unwrap_or(d.nprobe), tokens.leaves, "the token stage's", "leaves")?;
    let hybrid_candidates = options.hybrid_candidates.unwrap_or(d.hybrid_candidates);
    check_hybrid_candidates(hybrid_candidates)?;
    let prefetch_step = options.prefetch_step.unwrap_or(crate::tokens::PREFETCH_STEP);
    IvfDefaults::check_prefetch_step(prefetch_step)?;
    Ok(TokenParams {
        nprobe,
        route: d.route.min(tokens.groups).max(1),
        impute: tokens.impute(),
        hybrid_candidates,
        prefetch: options.prefetch.unwrap_or(crate::tokens::PREFETCH),
        prefetch_step,
    })
}

/// Fills the IVF settings from the IVF's defaults and checks them against its cluster count.
fn resolve_ivf(options: &SearchRequest, mode: Mode, ivf: &IvfConfig) -> Result<IvfParams> {
    let d = ivf.search;
    let nprobe = check_nprobe(options.nprobe.unwrap_or(d.nprobe), ivf.clusters, "the IVF's", "clusters")?;
    let oversample = options.oversample.unwrap_or(d.oversample);
    if !(1.0..=100.0).contains(&oversample) {
        return Err(CellarError::InvalidInput(format!(
            "oversample must be within [1, 100], got {oversample}"
        )));
    }
    let prefetch_step = options.prefetch_step.unwrap_or(d.prefetch_step);
    IvfDefaults::check_prefetch_step(prefetch_step)?;
    let hybrid_candidates = options.hybrid_candidates.unwrap_or(d.hybrid_candidates);
    check_hybrid_candidates(hybrid_candidates)?;
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
    /// Hybrid's dense candidates joined to BM25's, from whichever dense stage the search runs
    /// (`None`: BM25's alone).
    pub fn hybrid_dense(&self) -> Option<usize> {
        self.tokens.map(|t| t.hybrid_candidates).or(self.ivf.map(|i| i.hybrid_candidates)).filter(|n| *n > 0)
    }

    /// Fills the settings of `options` from `defaults` (and the IVF's, when the index has one)
    /// and checks every value. The query itself is checked by [`crate::Index::plan`].
    pub fn resolve(
        options: &SearchRequest,
        defaults: &SearchDefaults,
        ivf: Option<&IvfConfig>,
        tokens: Option<&TokensConfig>,
        has_splade: bool,
    ) -> Result<SearchParams> {
        let k = options.checked_k()?;
        let mode = options.mode.unwrap_or(defaults.mode);
        let dense_stage = match (options.dense_stage, tokens) {
            (Some(DenseStage::Tokens), None) => {
                return Err(CellarError::InvalidInput(
                    "dense_stage tokens needs a token stage and this index has none: build one with `cellar tokens build --index DIR` (the build's documents) or `cellar tokens retrain --index DIR` (written ones too)".into(),
                ))
            }
            (Some(stage), _) => stage,
            // Hybrid keeps the IVF where there is one: joined to BM25, the token stage's
            // candidates gave 0.611 nDCG@10 on the 2M synthetic collection against the IVF's
            // 0.637 (SciFact 0.731 against 0.730, 200k 0.748 against 0.744;
            // bench/results/tokens-quality.md).
            (None, Some(_)) if mode == Mode::Hybrid && ivf.is_some() => DenseStage::Pooled,
            (None, Some(_)) => DenseStage::Tokens,
            (None, None) => DenseStage::Pooled,
        };
        let uses_tokens = dense_stage == DenseStage::Tokens && matches!(mode, Mode::Dense | Mode::Hybrid);
        // Dense mode over the token stage re-ranks the stage's own depth unless told otherwise.
        let (default_candidates, default_rerank_k) = match tokens {
            Some(config) if uses_tokens && mode == Mode::Dense => (config.depth(), config.depth()),
            _ => (defaults.candidates, defaults.rerank_k),
        };
        let candidates = options.candidates.unwrap_or(default_candidates);
        if candidates == 0 || candidates > MAX_CANDIDATES {
            return Err(CellarError::InvalidInput(format!(
                "candidates must be between 1 and {MAX_CANDIDATES}, got {candidates}"
            )));
        }
        let candidates = candidates.max(k);
        let rerank_k = options.rerank_k.unwrap_or(default_rerank_k);
        if rerank_k > MAX_CANDIDATES {
            return Err(CellarError::InvalidInput(format!(
                "rerank_k must be at most {MAX_CANDIDATES}, got {rerank_k}"
            )));
        }
        let rerank_k = rerank_k.min(candidates);
        let alpha = match mode {
            Mode::Rerank | Mode::Dense => 0.0,
            _ => options.alpha.unwrap_or(defaults.alpha),
        };
        if !(0.0..=1.0).contains(&alpha) {
            return Err(CellarError::InvalidInput(format!("alpha must be within [0, 1], got {alpha}")));
        }
        let fusion = options.fusion.unwrap_or(defaults.fusion);
        let lexical = options.lexical.unwrap_or(defaults.lexical);
        if lexical.needs_splade() && !has_splade {
            return Err(CellarError::InvalidInput(format!(
                "lexical stage {lexical} needs a SPLADE stage and this index has none: build one with `cellar splade build --index DIR`"
            )));
        }
        let tokens = match tokens {
            Some(config) if uses_tokens => Some(resolve_tokens(options, config)?),
            _ => None,
        };
        let tokens = tokens.filter(|p| mode != Mode::Hybrid || p.hybrid_candidates > 0);
        let ivf = match ivf {
            Some(config) if !uses_tokens && (mode.needs_dense_stage() || mode == Mode::Hybrid) => {
                Some(resolve_ivf(options, mode, config)?)
            }
            _ => None,
        };
        // A hybrid search that joins no IVF candidates does not use the IVF.
        let ivf = ivf.filter(|p| mode != Mode::Hybrid || p.hybrid_candidates > 0);
        let hybrid_dense = options.hybrid_candidates.is_some_and(|n| n > 0);
        if !uses_tokens
            && ivf.is_none()
            && (mode.needs_dense_stage() || (mode == Mode::Hybrid && hybrid_dense))
        {
            let what =
                if mode == Mode::Ivf { "an IVF" } else { "a dense first stage (an IVF or a token stage)" };
            return Err(CellarError::InvalidInput(format!(
                "mode {mode} needs {what} and this index has none: build one with `cellar ivf build --index DIR`{} \
                 (the build's documents), or train one over written documents too with `cellar ivf retrain`{}",
                if mode == Mode::Ivf { "" } else { " or `cellar tokens build --index DIR`" },
                if mode == Mode::Ivf { "" } else { " or `cellar tokens retrain`" }
            )));
        }
        let early_read = options.early_read.unwrap_or(true);
        let filter_exact_max = options.filter_exact_max.unwrap_or(DEFAULT_FILTER_EXACT_MAX);
        if filter_exact_max > MAX_CANDIDATES {
            return Err(CellarError::InvalidInput(format!(
                "filter_exact_max must be at most {MAX_CANDIDATES}, got {filter_exact_max}"
            )));
        }
        Ok(SearchParams {
            mode,
            k,
            candidates,
            rerank_k,
            alpha,
            fusion,
            lexical,
            early_read,
            ivf,
            tokens,
            filter_exact_max,
        })
    }
}
