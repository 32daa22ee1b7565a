//! What a search answers: the ranking (`Ranking`), and the response with ids, text, the
//! parameters used, per-stage timings and bytes read (`SearchResponse`).

use std::time::Instant;

use cellar_core::io::ReadStats;
use cellar_core::stats::ms_since;
use cellar_core::{DocId, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::fusion::{Fused, Stage};
use crate::index::Index;
use crate::ivf::ProbeStats;
use crate::meta::Metadata;
use crate::params::SearchParams;
use crate::prefetch::PrefetchStats;
use crate::query::{PreparedQuery, QueryEncoding};

/// Milliseconds spent in each stage of one search (a stage left out of a JSON form is 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Timings {
    pub encode_ms: f64,
    pub first_stage_ms: f64,
    /// Time the candidates' records took to read, wherever it was spent.
    pub read_ms: f64,
    /// The part of `read_ms` that overlapped other work, so not on the query's path: the query's
    /// encoding (BM25's candidates are read before the encoder runs) and the scoring of earlier
    /// chunks (the pipeline of `reads`; the IVF prefetch counts only this part, not its overlap
    /// with the probe).
    pub read_hidden_ms: f64,
    pub maxsim_ms: f64,
    pub fuse_ms: f64,
    pub text_ms: f64,
    pub total_ms: f64,
    /// Wait for a server worker before the search started (set by `cellar serve`; 0 elsewhere,
    /// and not part of `total_ms`).
    pub queue_ms: f64,
}

impl Timings {
    /// The stages of [`Timings::stages`], in order.
    pub const STAGES: [&'static str; 9] =
        ["queue", "encode", "first_stage", "read", "read_hidden", "maxsim", "fuse", "text", "total"];

    /// Every stage by name, as the server's metrics, the CLI and Python show them.
    pub fn stages(&self) -> [(&'static str, f64); 9] {
        let ms = [
            self.queue_ms,
            self.encode_ms,
            self.first_stage_ms,
            self.read_ms,
            self.read_hidden_ms,
            self.maxsim_ms,
            self.fuse_ms,
            self.text_ms,
            self.total_ms,
        ];
        std::array::from_fn(|i| (Self::STAGES[i], ms[i]))
    }
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
    /// What the token stage did, when the search ran it.
    pub tokens: Option<crate::tokens::TokenStats>,
    /// What the filter did, when the search had one.
    pub filter: Option<FilterReport>,
}

/// What a search's filter did.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FilterReport {
    /// Documents the filter matched (before the deletes of writes since the last BM25 commit).
    pub matched: usize,
    /// Every match was ranked exactly (no more than `filter_exact_max` matched) instead of the
    /// first stage running.
    pub exact: bool,
    /// Finding the matching documents (part of `first_stage_ms`).
    pub ms: f64,
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
            tokens: None,
            filter: None,
        }
    }
}

/// One result, as shown to a user.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Hit {
    pub id: String,
    pub internal_id: u32,
    pub score: f32,
    pub stage: Stage,
    pub first_stage_score: f32,
    pub maxsim: Option<f32>,
    pub title: String,
    pub text: String,
    /// The document's metadata (left out when it has none).
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
}

/// Reads and bytes of a search, in a serialisable form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IoReport {
    pub read_calls: u64,
    pub pages: u64,
    pub bytes_read: u64,
    /// Records served from the hot-record cache instead of read (`--cache-mib`).
    #[serde(default)]
    pub records_cached: u64,
}

impl From<cellar_core::io::ReadStats> for IoReport {
    fn from(io: cellar_core::io::ReadStats) -> Self {
        IoReport {
            read_calls: io.read_calls,
            pages: io.pages,
            bytes_read: io.bytes,
            records_cached: io.cached,
        }
    }
}

/// A full answer: hits with text, parameters used, timings and bytes read.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
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
    /// What the token stage did, when the search ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<crate::tokens::TokenStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<FilterReport>,
    /// How the query's text was encoded, when it was: its tokens, the windows a long one took,
    /// and any tokens cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<QueryEncoding>,
}

impl Index {
    /// Ranks a prepared query and attaches each hit's id, and its title and text when
    /// `include_text` (otherwise they are left empty).
    pub fn respond(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        include_text: bool,
    ) -> Result<SearchResponse> {
        self.answer(self.rank(query, params)?, query.encoding, params, include_text)
    }

    /// A ranking with each hit's id, and its title and text when `include_text`.
    pub(crate) fn answer(
        &self,
        mut ranking: Ranking,
        encoding: Option<QueryEncoding>,
        params: &SearchParams,
        include_text: bool,
    ) -> Result<SearchResponse> {
        let text_start = Instant::now();
        // A document deleted while this search ran is not answered.
        let view = self.live_view();
        ranking.hits.retain(|f| !view.is_deleted(f.id));
        let hits = ranking.hits.iter().map(|f| self.hit(f, include_text)).collect::<Result<Vec<Hit>>>()?;
        ranking.timings.text_ms = ms_since(text_start);
        ranking.timings.total_ms += ranking.timings.text_ms;
        let io = IoReport::from(ranking.io);
        Ok(SearchResponse {
            hits,
            params: *params,
            candidates: ranking.candidates,
            reranked: ranking.reranked,
            timings: ranking.timings,
            io,
            ivf: ranking.ivf.map(Box::new),
            prefetch: ranking.prefetch.map(Box::new),
            tokens: ranking.tokens,
            filter: ranking.filter,
            query: encoding,
        })
    }

    /// Document `id`'s collection id, title and text, wherever it is stored.
    pub fn document(&self, id: DocId) -> Result<crate::corpus::Document> {
        match self.live_view().document(id)? {
            Some(doc) => Ok(doc),
            None => self.texts.get(id),
        }
    }

    pub(crate) fn hit(&self, fused: &Fused, include_text: bool) -> Result<Hit> {
        let mut doc = self.document(fused.id)?;
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
            metadata: doc.metadata,
        })
    }
}
