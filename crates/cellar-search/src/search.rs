//! The query pipeline: first stage → read the candidates' records → MaxSim → fusion → top-k.

use std::time::Instant;

use cellar_core::io::ReadStats;
use cellar_core::{CellarError, Result};
use serde::Serialize;

use crate::fusion::{Fused, Stage};
use crate::index::Index;
use crate::ivf::ProbeStats;
use crate::params::{check_query, Mode, SearchOptions, SearchParams};
use crate::prefetch::PrefetchStats;

/// A query ready to rank: its text and, when the mode needs them, its vectors.
pub struct PreparedQuery {
    pub text: String,
    /// Token vectors in the store's space (PCA applied), prepared for the codec's kernel.
    pub tokens: Vec<f32>,
    pub n_tokens: usize,
    /// Pooled vector in the model's space.
    pub pooled: Vec<f32>,
    pub encode_ms: f64,
}

/// Query vectors a caller computed itself, in the model's output space (before any PCA), used
/// instead of encoding the query's text. Token vectors are used as given (the encoder's are
/// L2-normalised).
#[derive(Clone, Debug, Default)]
pub struct QueryVectors {
    /// `n_tokens` rows of the model's dimension, row after row.
    pub tokens: Vec<f32>,
    pub n_tokens: usize,
    /// Needed by the dense mode only.
    pub pooled: Option<Vec<f32>>,
}

/// Most query token vectors a caller may supply.
pub const MAX_QUERY_VECTORS: usize = 512;

/// Milliseconds spent in each stage of one search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Timings {
    pub encode_ms: f64,
    pub first_stage_ms: f64,
    pub read_ms: f64,
    pub maxsim_ms: f64,
    pub fuse_ms: f64,
    pub text_ms: f64,
    pub total_ms: f64,
    /// Wait for a server worker before the search started (set by `cellar serve`; 0 elsewhere,
    /// and not part of `total_ms`).
    pub queue_ms: f64,
}

/// The ranked documents of one search, without their text.
pub struct Ranking {
    pub hits: Vec<Fused>,
    pub timings: Timings,
    pub io: ReadStats,
    /// First-stage candidates considered.
    pub candidates: usize,
    /// Candidates read and re-scored with MaxSim.
    pub reranked: usize,
    /// What the IVF probe did, when the mode probes it.
    pub ivf: Option<ProbeStats>,
    /// What the prefetcher did, when it ran.
    pub prefetch: Option<PrefetchStats>,
}

impl Ranking {
    /// A ranking made by a first stage alone (nothing re-ranked).
    pub fn first_stage_only(hits: Vec<Fused>, timings: Timings, candidates: usize) -> Ranking {
        Ranking {
            hits,
            timings,
            io: ReadStats::default(),
            candidates,
            reranked: 0,
            ivf: None,
            prefetch: None,
        }
    }
}

/// One result, as shown to a user.
#[derive(Clone, Debug, Serialize)]
pub struct Hit {
    pub id: String,
    pub internal_id: u32,
    pub score: f32,
    pub stage: Stage,
    pub first_stage_score: f32,
    pub maxsim: Option<f32>,
    pub title: String,
    pub text: String,
}

/// Reads and bytes of a search, in a serialisable form.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct IoReport {
    pub read_calls: u64,
    pub pages: u64,
    pub bytes_read: u64,
}

/// A full answer: hits with text, parameters used, timings and bytes read.
#[derive(Clone, Debug, Serialize)]
pub struct SearchResponse {
    pub hits: Vec<Hit>,
    pub params: SearchParams,
    pub candidates: usize,
    pub reranked: usize,
    pub timings: Timings,
    pub io: IoReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ivf: Option<Box<ProbeStats>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<Box<PrefetchStats>>,
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

impl Index {
    /// Checks the query and encodes it when `mode` needs vectors.
    pub fn prepare(&self, text: &str, mode: Mode) -> Result<PreparedQuery> {
        check_query(text)?;
        let mut query = PreparedQuery {
            text: text.to_string(),
            tokens: Vec::new(),
            n_tokens: 0,
            pooled: Vec::new(),
            encode_ms: 0.0,
        };
        if !mode.needs_encoder() {
            return Ok(query);
        }
        let start = Instant::now();
        let encoded = self.encoder()?.encode_query(text)?;
        let tokens = match &self.pca {
            Some(pca) => crate::build::project_tokens(pca, &encoded.tokens, encoded.n_tokens),
            None => encoded.tokens,
        };
        query.tokens = self.store.codec().prepare_query(&tokens);
        query.n_tokens = encoded.n_tokens;
        query.pooled = encoded.pooled;
        query.encode_ms = ms_since(start);
        Ok(query)
    }

    /// Like [`Index::prepare`], with the caller's vectors instead of the encoder's: checks their
    /// count, dimension and values, then projects them like encoded ones. The dense mode needs
    /// `pooled` and may have an empty `text`; every other mode needs the text for BM25.
    pub fn prepare_vectors(&self, text: &str, mode: Mode, vectors: QueryVectors) -> Result<PreparedQuery> {
        self.check_input(text, mode, Some(&vectors))?;
        Ok(self.project_vectors(text, vectors))
    }

    /// The checks of a query's input: its text (which the single-vector-first modes with vectors
    /// may leave empty) and, when given, the caller's vectors (count, the model's dimension,
    /// finite).
    pub fn check_input(&self, text: &str, mode: Mode, vectors: Option<&QueryVectors>) -> Result<()> {
        if vectors.is_none() || !(mode.is_single_vector_first() && text.is_empty()) {
            check_query(text)?;
        }
        match vectors {
            Some(vectors) => check_vectors(vectors, self.config.encoder.model_dim, mode),
            None => Ok(()),
        }
    }

    /// [`Index::prepare_vectors`] for vectors that already passed [`Index::check_input`].
    pub fn project_vectors(&self, text: &str, vectors: QueryVectors) -> PreparedQuery {
        let tokens = match &self.pca {
            Some(pca) => crate::build::project_tokens(pca, &vectors.tokens, vectors.n_tokens),
            None => vectors.tokens,
        };
        PreparedQuery {
            text: text.to_string(),
            tokens: self.store.codec().prepare_query(&tokens),
            n_tokens: vectors.n_tokens,
            pooled: vectors.pooled.unwrap_or_default(),
            encode_ms: 0.0,
        }
    }

    /// Answers `text`: validates, encodes, ranks and attaches each hit's id and text.
    pub fn search(&self, text: &str, options: &SearchOptions) -> Result<SearchResponse> {
        let params = self.resolve(options)?;
        let query = self.prepare(text, params.mode)?;
        self.respond(&query, &params, true)
    }

    /// Resolves `options` against the index's defaults.
    pub fn resolve(&self, options: &SearchOptions) -> Result<SearchParams> {
        SearchParams::resolve(options, &self.config.search, self.ivf_config())
    }

    /// Ranks a prepared query and attaches each hit's id, and its title and text when
    /// `include_text` (otherwise they are left empty).
    pub fn respond(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        include_text: bool,
    ) -> Result<SearchResponse> {
        let mut ranking = self.rank(query, params)?;
        let text_start = Instant::now();
        let hits = ranking.hits.iter().map(|f| self.hit(f, include_text)).collect::<Result<Vec<Hit>>>()?;
        ranking.timings.text_ms = ms_since(text_start);
        ranking.timings.total_ms += ranking.timings.text_ms;
        let io = IoReport {
            read_calls: ranking.io.read_calls,
            pages: ranking.io.pages,
            bytes_read: ranking.io.bytes,
        };
        Ok(SearchResponse {
            hits,
            params: *params,
            candidates: ranking.candidates,
            reranked: ranking.reranked,
            timings: ranking.timings,
            io,
            ivf: ranking.ivf.map(Box::new),
            prefetch: ranking.prefetch.map(Box::new),
        })
    }

    fn hit(&self, fused: &Fused, include_text: bool) -> Result<Hit> {
        let mut doc = self.texts.get(fused.id)?;
        if !include_text {
            doc.title.clear();
            doc.text.clear();
        }
        Ok(Hit {
            id: doc.id,
            internal_id: fused.id.0,
            score: fused.score,
            stage: fused.stage,
            first_stage_score: fused.first_stage,
            maxsim: fused.maxsim,
            title: doc.title,
            text: doc.text,
        })
    }
}

/// Checks caller-supplied vectors: count within bounds, rows of the model's dimension, finite.
fn check_vectors(vectors: &QueryVectors, dim: usize, mode: Mode) -> Result<()> {
    let n = vectors.n_tokens;
    if (n == 0 && mode.needs_tokens()) || n > MAX_QUERY_VECTORS {
        return Err(CellarError::InvalidInput(format!(
            "query_vectors.tokens must hold 1 to {MAX_QUERY_VECTORS} vectors, got {n}"
        )));
    }
    if vectors.tokens.len() != n * dim {
        let received = vectors.tokens.len().checked_div(n).unwrap_or(vectors.tokens.len());
        return Err(CellarError::WrongDimension { expected: dim, received });
    }
    if let Some(i) = vectors.tokens.iter().position(|v| !v.is_finite()) {
        return Err(CellarError::InvalidInput(format!(
            "query_vectors.tokens[{}][{}] is not a finite number",
            i / dim,
            i % dim
        )));
    }
    match &vectors.pooled {
        None if mode.is_single_vector_first() => {
            Err(CellarError::InvalidInput(format!("mode {mode} needs query_vectors.pooled")))
        }
        Some(pooled) if pooled.len() != dim => {
            Err(CellarError::WrongDimension { expected: dim, received: pooled.len() })
        }
        Some(pooled) if pooled.iter().any(|v| !v.is_finite()) => {
            Err(CellarError::InvalidInput("query_vectors.pooled holds a value that is not finite".into()))
        }
        _ => Ok(()),
    }
}
