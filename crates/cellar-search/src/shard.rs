//! A collection split over shards (`cellar.cluster`): the phases of one search a router runs
//! over its shards, so that the merged answer ranks as one index of all their documents would.
//!
//! 1. [`Index::shard_prepare`], on every shard: the request checked and its parameters
//!    resolved, BM25's statistics for the query's terms, and — from the one shard asked — the
//!    query's vectors, encoded once for all shards.
//! 2. [`Index::shard_candidates`], on every shard: each first-stage list with its raw scores,
//!    BM25 scored with the statistics summed over the shards ([`Bm25Stats::merge`]), so a
//!    document scores what it would in one index.
//! 3. [`Gather::new`], on the router: each list merged over the shards and cut where one index
//!    cuts it, the lists joined as [`crate::rank`] joins them; the global best `rerank_k` are
//!    re-scored by their own shards ([`Index::shard_maxsim`]) and [`Gather::fuse`] fuses them
//!    over the global candidate list (z-normalised over all shards' candidates, not each
//!    shard's).
//! 4. [`Index::shard_hits`]: each shard names (and gives the text of) its hits;
//!    [`Gather::respond`] answers in the shape of [`SearchResponse`].
//!
//! Rankings equal one index's up to ties (documents of equal score may come in another
//! order) wherever the first stage is exact: BM25, SPLADE, the pooled scan; the IVF is an
//! approximation per shard (each shard has its own clusters), equal only when its probe is
//! exhaustive. A filter is evaluated on every shard in phase 1 and its matches counted over
//! the collection, so the choice one index makes on its count (rank every match exactly when
//! no more than `filter_exact_max` matched) is made on the collection's count.

use std::collections::HashMap;
use std::time::Instant;

use cellar_core::stats::ms_since;
use cellar_core::{CellarError, DocId, Result};
use serde::{Deserialize, Serialize};

use crate::bm25::Bm25Stats;
use crate::fusion::{self, Fused, Stage};
use crate::index::Index;
use crate::mode::{Lexical, Mode};
use crate::params::SearchParams;
use crate::query::QueryEncoding;
use crate::rank::ranks_count_exactly;
use crate::request::{QueryVectorsIn, SearchRequest, VectorDtype};
use crate::scored::{better, Scored};
use crate::search::{FilterReport, Hit, IoReport, SearchResponse, Timings};
use crate::stages::{first_stage, stage_reads, Searchable};

/// One candidate of a shard's list: the shard's internal id and its raw first-stage score.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardScored {
    pub doc: u32,
    pub score: f32,
}

/// Phase 1's answer from the shard asked to prepare the query (phase 0 in the module's list).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    /// The request's settings resolved against the shard's defaults (the same on every shard
    /// of a collection built in one go).
    pub params: SearchParams,
    /// BM25's statistics for the query's terms in this shard; `None` when BM25 does not run.
    pub stats: Option<Bm25Stats>,
    /// The query's vectors in the model's space, when asked for and the mode needs them.
    pub query_vectors: Option<QueryVectorsIn>,
    /// How the text was encoded, when it was.
    pub query: Option<QueryEncoding>,
    pub encode_ms: f64,
    /// Documents of this shard the request's filter matched, when it has one.
    pub matched: Option<usize>,
    /// Evaluating the filter.
    pub filter_ms: f64,
}

/// A shard's first-stage lists for one query, best first, each as deep as one index's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardCandidates {
    pub bm25: Option<Vec<ShardScored>>,
    pub splade: Option<Vec<ShardScored>>,
    /// The IVF's list, or the pooled scan's (dense-exact).
    pub dense: Option<Vec<ShardScored>>,
    pub first_stage_ms: f64,
    /// The IVF probe's reads.
    pub io: IoReport,
    /// Under a filter ranked exactly: the matching documents no first-stage list holds,
    /// ascending (each ranked with the lowest first-stage score of the collection's list).
    pub rest: Option<Vec<u32>>,
}

/// A shard's MaxSim scores of the documents it was asked for, in their order.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ShardMaxsim {
    pub scores: Vec<f32>,
    /// The documents as hits (internal id, hit), when asked for; deleted ones left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits: Option<Vec<(u32, Hit)>>,
    pub read_ms: f64,
    pub maxsim_ms: f64,
    pub io: IoReport,
}

/// One hit of a sharded ranking: the shard holding it and its place in the fused order.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardHit {
    pub shard: u32,
    pub doc: u32,
    pub score: f32,
    pub first_stage: f32,
    pub maxsim: Option<f32>,
    pub stage: Stage,
}

impl ShardHit {
    fn fused(&self) -> Fused {
        Fused {
            id: DocId(self.doc),
            score: self.score,
            first_stage: self.first_stage,
            maxsim: self.maxsim,
            stage: self.stage,
        }
    }
}

fn shard_list(list: Vec<Scored>) -> Vec<ShardScored> {
    list.into_iter().map(|s| ShardScored { doc: s.id.0, score: s.score }).collect()
}

/// Whether the mode's first stage is the sparse one (BM25, SPLADE or both).
fn uses_lexical(mode: Mode) -> bool {
    matches!(mode, Mode::Bm25 | Mode::Rerank | Mode::Hybrid)
}

impl Index {
    /// Phase 1: checks `request` as a search of this shard would, and returns its resolved
    /// parameters, BM25's statistics for its terms and, when `encode` (one shard of the
    /// collection is asked), the query's vectors for every shard's later phases.
    pub fn shard_prepare(&self, request: SearchRequest, encode: bool) -> Result<Prepared> {
        let given = request.query_vectors.is_some();
        let (filter, terms) = (request.filter.clone(), request.require_terms.clone());
        let plan = self.plan(self.fitted(request))?;
        let params = *plan.params();
        let stats = (uses_lexical(params.mode) && params.lexical != Lexical::Splade)
            .then(|| self.bm25.stats(plan.text()))
            .transpose()?;
        let (allowed, filter_ms) = self.evaluate(filter.as_ref(), terms.as_deref())?;
        let mut prepared = Prepared {
            params,
            stats,
            query_vectors: None,
            query: None,
            encode_ms: 0.0,
            matched: allowed.map(|a| a.count()),
            filter_ms,
        };
        if encode && !given && params.mode.needs_encoder() {
            let start = Instant::now();
            let encoded = self.encoder()?.encode_query(plan.text())?;
            prepared.query = Some(QueryEncoding::of(&encoded));
            prepared.query_vectors =
                Some(QueryVectorsIn::compact(&encoded.tokens, Some(&encoded.pooled), VectorDtype::F32));
            prepared.encode_ms = ms_since(start);
        }
        Ok(prepared)
    }

    /// Phase 2: this shard's first-stage lists for `request` (with the query's vectors when
    /// the mode needs them), BM25 scored with `stats`, the whole collection's; under a filter,
    /// `matched` is the collection's count of matches (the sum of phase 1's).
    pub fn shard_candidates(
        &self,
        request: SearchRequest,
        stats: Option<&Bm25Stats>,
        matched: Option<usize>,
    ) -> Result<ShardCandidates> {
        let plan = self.plan(self.fitted(request))?;
        let params = *plan.params();
        let query = self.prepare(plan)?;
        let text = query.text.as_str();
        let start = Instant::now();
        let allowed = query.allowed.as_ref();
        if allowed.is_some() && matched.is_none() {
            return Err(CellarError::invalid(
                "a sharded search under a filter needs the collection's count of matches",
            ));
        }
        if let (Some(allowed), Some(total)) = (allowed, matched) {
            if ranks_count_exactly(&params, total) {
                return self.shard_matches(text, &query, &params, allowed, stats, start);
            }
        }
        let mut out = ShardCandidates::default();
        if uses_lexical(params.mode) {
            let depth = if params.mode == Mode::Bm25 { params.k } else { params.candidates };
            self.lexical_lists(text, depth, allowed, params.lexical, stats, &mut out)?;
        }
        let dense_stage = params.ivf.is_some() || params.tokens.is_some();
        let depth = match (params.mode, dense_stage) {
            (Mode::DenseExact, _) => {
                out.dense =
                    Some(shard_list(self.dense_scan(&query.pooled, params.k, allowed.map(|a| &**a))?));
                None
            }
            (Mode::Ivf, true) => Some(params.k),
            (Mode::Dense, true) => Some(params.candidates),
            (Mode::Hybrid, true) => params.hybrid_dense(),
            _ => None,
        };
        if let (Some(depth), Some(tokens)) = (depth, params.tokens) {
            let (hits, stats) =
                self.token_candidates(&query.store_tokens, allowed.map(|a| &**a), tokens.query(depth), None)?;
            out.io = IoReport::from(stage_reads(stats.read_calls, stats.bytes_read));
            out.dense = Some(shard_list(hits));
        } else if let (Some(depth), Some(ivf)) = (depth, params.ivf) {
            let view = self.live_view();
            let searchable = Searchable::new(&view, allowed.map(|a| &**a));
            let index_ivf = self.ivf()?;
            let (hits, probe) =
                self.ivf_probe(&index_ivf, &searchable, &query.pooled, ivf.probe(depth)).finish()?;
            out.io = IoReport::from(stage_reads(probe.read_calls, probe.bytes_read));
            out.dense = Some(shard_list(hits));
        }
        out.first_stage_ms = ms_since(start);
        Ok(out)
    }

    /// The sparse first stage's lists into `out`: BM25's (scored with `stats`, which must
    /// cover this shard's own), SPLADE's, or both, `depth` deep, over the documents `allowed`.
    fn lexical_lists(
        &self,
        text: &str,
        depth: usize,
        allowed: Option<&std::sync::Arc<crate::filter::Allowed>>,
        lexical: Lexical,
        stats: Option<&Bm25Stats>,
        out: &mut ShardCandidates,
    ) -> Result<()> {
        if lexical != Lexical::Splade {
            let stats = stats.ok_or_else(|| {
                CellarError::invalid("a sharded BM25 search needs the collection's statistics")
            })?;
            check_stats(stats, &self.bm25.stats(text)?)?;
            out.bm25 = Some(shard_list(self.bm25_search_scored(text, depth, allowed, Some(stats))?));
        }
        if lexical.needs_splade() {
            out.splade = Some(shard_list(self.splade_search(text, depth, allowed)?));
        }
        Ok(())
    }

    /// Phase 2 under a filter that matched few enough documents over the collection: as
    /// `rank_matches` ranks them in one index, every match is a candidate — those of the
    /// lexical list with their scores (none for dense), the rest (`rest`) at the list's lowest.
    fn shard_matches(
        &self,
        text: &str,
        query: &crate::query::PreparedQuery,
        params: &SearchParams,
        allowed: &std::sync::Arc<crate::filter::Allowed>,
        stats: Option<&Bm25Stats>,
        start: Instant,
    ) -> Result<ShardCandidates> {
        let mut out = ShardCandidates::default();
        if params.mode == Mode::Ivf {
            out.dense = Some(shard_list(self.dense_scan(&query.pooled, params.k, Some(allowed))?));
            out.first_stage_ms = ms_since(start);
            return Ok(out);
        }
        if params.mode != Mode::Dense {
            self.lexical_lists(text, allowed.count(), Some(allowed), params.lexical, stats, &mut out)?;
        }
        let listed: std::collections::HashSet<u32> =
            out.bm25.iter().chain(&out.splade).flatten().map(|c| c.doc).collect();
        let view = self.live_view();
        out.rest = Some(
            allowed
                .ids()
                .filter(|id| !listed.contains(&id.0) && !view.is_deleted(*id))
                .map(|id| id.0)
                .collect(),
        );
        out.first_stage_ms = ms_since(start);
        Ok(out)
    }

    /// Phase 3: the MaxSim scores of `docs` (this shard's internal ids) for `request`'s query.
    ///
    /// With `describe` (`Some(include_text)`), also each document as a hit (its fused fields
    /// left for the router to fill): the re-ranked hold the best `k` whenever `k` is at most
    /// their number, so the router then needs no fourth round trip for the hits.
    pub fn shard_maxsim(
        &self,
        request: SearchRequest,
        docs: &[u32],
        describe: Option<bool>,
    ) -> Result<ShardMaxsim> {
        let plan = self.plan(self.fitted(request))?;
        let query = self.prepare_vectors(plan)?;
        let ids: Vec<DocId> = docs.iter().map(|d| DocId(*d)).collect();
        let scored = self.read_and_score(&query, &ids)?;
        let scores = ids.iter().map(|id| scored.scores.get(id).copied().unwrap_or(0.0)).collect();
        // Named as re-ranked hits; the router fills in their fused fields.
        let reranked = docs.iter().map(|&doc| Fused {
            id: DocId(doc),
            score: 0.0,
            first_stage: 0.0,
            maxsim: None,
            stage: Stage::Reranked,
        });
        let hits = describe.map(|include_text| self.hits_of(reranked, include_text)).transpose()?;
        Ok(ShardMaxsim {
            hits,
            scores,
            read_ms: scored.read_ms,
            maxsim_ms: scored.score_ms,
            io: IoReport::from(scored.io),
        })
    }

    /// `request` with its `nprobe` at most this shard's IVF clusters: in a sharded collection
    /// it is a count per shard, and a shard may hold fewer clusters than the request names
    /// (an exhaustive probe of the whole collection probes every cluster of every shard).
    fn fitted(&self, mut request: SearchRequest) -> SearchRequest {
        if let (Some(nprobe), Some(ivf)) = (request.nprobe, self.current_ivf()) {
            request.nprobe = Some(nprobe.min(ivf.config().clusters.min(crate::request::MAX_NPROBE)).max(1));
        }
        request
    }

    /// Phase 4: each of `hits` (this shard's) with its collection id, and its title and text
    /// when `include_text`; a document deleted since phase 2 is left out.
    pub fn shard_hits(&self, hits: &[ShardHit], include_text: bool) -> Result<Vec<(u32, Hit)>> {
        self.hits_of(hits.iter().map(ShardHit::fused), include_text)
    }

    /// `fused` as (internal id, hit), deleted documents left out.
    fn hits_of(&self, fused: impl Iterator<Item = Fused>, include_text: bool) -> Result<Vec<(u32, Hit)>> {
        let view = self.live_view();
        fused.filter(|f| !view.is_deleted(f.id)).map(|f| Ok((f.id.0, self.hit(&f, include_text)?))).collect()
    }
}

/// Refuses statistics that do not cover this shard's own: each term's count over the
/// collection is at least the shard's, as are the document and token counts.
fn check_stats(global: &Bm25Stats, local: &Bm25Stats) -> Result<()> {
    let short = |what: String| {
        CellarError::invalid(format!(
            "the collection's BM25 statistics do not cover this shard's ({what}): sum every shard's for this query"
        ))
    };
    if global.docs < local.docs || global.tokens < local.tokens {
        return Err(short(format!(
            "{} documents and {} tokens against its {} and {}",
            global.docs, global.tokens, local.docs, local.tokens
        )));
    }
    for (term, df) in &local.doc_freq {
        match global.doc_freq.get(term) {
            Some(g) if g >= df && *g <= global.docs => {}
            found => return Err(short(format!("term {term:?}: {found:?} documents against its {df}"))),
        }
    }
    Ok(())
}

/// The dense list of a shard's candidates (the IVF's or the pooled scan's).
fn dense(c: &ShardCandidates) -> Option<&Vec<ShardScored>> {
    c.dense.as_ref()
}

/// Merges one kind of list over the shards, giving each document one global id (its row of
/// `table`), the same in every list it is in, so the lists join on it.
struct Merger<'a> {
    shards: &'a [ShardCandidates],
    table: Vec<(u32, u32)>,
    ids: HashMap<(u32, u32), u32>,
}

impl Merger<'_> {
    /// The global id of shard `s`'s document `doc`, given on first sight.
    fn lift(&mut self, s: usize, doc: u32) -> DocId {
        let next = self.table.len() as u32;
        let id = *self.ids.entry((s as u32, doc)).or_insert(next);
        if id == next {
            self.table.push((s as u32, doc));
        }
        DocId(id)
    }

    /// The best `depth` of every shard's list `pick` takes, best first.
    fn merge(
        &mut self,
        pick: fn(&ShardCandidates) -> Option<&Vec<ShardScored>>,
        depth: usize,
    ) -> Vec<Scored> {
        let mut all = Vec::new();
        let shards = self.shards;
        for (s, shard) in shards.iter().enumerate() {
            for c in pick(shard).into_iter().flatten() {
                all.push(Scored { id: self.lift(s, c.doc), score: c.score });
            }
        }
        all.sort_by(better);
        all.truncate(depth);
        all
    }
}

/// The router's side of a sharded search: the shards' lists merged into the candidate list
/// one index would have made, the re-ranked candidates' MaxSim gathered, the fusion.
#[derive(Clone, Debug)]
pub struct Gather {
    params: SearchParams,
    /// (shard, internal id) of each global id.
    table: Vec<(u32, u32)>,
    /// Global candidates, best first-stage first.
    candidates: Vec<Scored>,
    /// How many of them are re-scored with MaxSim.
    rerank: usize,
    filter: Option<FilterReport>,
}

impl Gather {
    /// Merges the shards' lists (`shards[s]` from shard `s`) as one index's search with
    /// `params` would have ranked them; under a filter, `matched` is its matches summed over
    /// the shards (phase 1's) and `filter_ms` the longest evaluation of it.
    pub fn new(
        params: SearchParams,
        shards: &[ShardCandidates],
        matched: Option<usize>,
        filter_ms: f64,
    ) -> Gather {
        let filter = matched.map(|matched| FilterReport {
            matched,
            exact: ranks_count_exactly(&params, matched),
            ms: filter_ms,
        });
        let mut merger = Merger { shards, table: Vec::new(), ids: HashMap::new() };
        let lexical = |merger: &mut Merger, depth| match params.lexical {
            Lexical::Bm25 => merger.merge(|c| c.bm25.as_ref(), depth),
            Lexical::Splade => merger.merge(|c| c.splade.as_ref(), depth),
            Lexical::Both => {
                let bm25 = merger.merge(|c| c.bm25.as_ref(), depth);
                first_stage(Some(&bm25), &merger.merge(|c| c.splade.as_ref(), depth))
            }
        };
        let exact = filter.filter(|f| f.exact && params.mode != Mode::Ivf);
        let candidates = match (params.mode, params.hybrid_dense(), exact) {
            (Mode::Dense | Mode::Rerank | Mode::Hybrid, _, Some(f)) => {
                // Every match: the lexical list's with their scores, the rest at its lowest.
                let mut listed = match params.mode {
                    Mode::Dense => Vec::new(),
                    _ => lexical(&mut merger, f.matched),
                };
                let floor = listed.iter().map(|s| s.score).reduce(f32::min).unwrap_or(0.0);
                for (s, shard) in shards.iter().enumerate() {
                    for doc in shard.rest.iter().flatten() {
                        listed.push(Scored { id: merger.lift(s, *doc), score: floor });
                    }
                }
                listed
            }
            (Mode::DenseExact | Mode::Ivf, _, _) => merger.merge(dense, params.k),
            (Mode::Bm25, _, _) => lexical(&mut merger, params.k),
            (Mode::Dense, _, None) => merger.merge(dense, params.candidates),
            (Mode::Hybrid, Some(joined), None) => {
                let lexical = lexical(&mut merger, params.candidates);
                first_stage(Some(&lexical), &merger.merge(dense, joined))
            }
            (Mode::Rerank, _, None) | (Mode::Hybrid, None, None) => lexical(&mut merger, params.candidates),
        };
        let rerank = match params.mode {
            Mode::DenseExact | Mode::Ivf | Mode::Bm25 => 0,
            _ if exact.is_some() => candidates.len(),
            _ => params.rerank_k.min(candidates.len()),
        };
        Gather { params, table: merger.table, candidates, rerank, filter }
    }

    /// The documents each shard re-scores with MaxSim (`[s]`: shard `s`'s internal ids), in
    /// the global candidate order; `shards` is the collection's shard count.
    pub fn rerank(&self, shards: usize) -> Vec<Vec<u32>> {
        let mut out = vec![Vec::new(); shards];
        for c in &self.candidates[..self.rerank] {
            let (s, doc) = self.table[c.id.0 as usize];
            if let Some(list) = out.get_mut(s as usize) {
                list.push(doc);
            }
        }
        out
    }

    /// The fused ranking's best `k`, given each shard's MaxSim scores of the documents
    /// [`Gather::rerank`] gave it, in that order.
    pub fn fuse(&self, maxsim: &[Vec<f32>]) -> Result<Vec<ShardHit>> {
        let wanted = self.rerank(maxsim.len());
        if let Some(s) = (0..maxsim.len()).find(|&s| maxsim[s].len() != wanted[s].len()) {
            return Err(CellarError::invalid(format!(
                "shard {s} sent {} MaxSim scores for {} documents",
                maxsim[s].len(),
                wanted[s].len()
            )));
        }
        let mut next = vec![0usize; maxsim.len()];
        let scores: Vec<f32> = self.candidates[..self.rerank]
            .iter()
            .map(|c| {
                let s = self.table[c.id.0 as usize].0 as usize;
                next[s] += 1;
                maxsim[s][next[s] - 1]
            })
            .collect();
        let mut hits = fusion::fuse(&self.candidates, &scores, self.params.alpha, self.params.fusion);
        hits.truncate(self.params.k);
        Ok(hits
            .iter()
            .map(|f| {
                let (shard, doc) = self.table[f.id.0 as usize];
                ShardHit {
                    shard,
                    doc,
                    score: f.score,
                    first_stage: f.first_stage,
                    maxsim: f.maxsim,
                    stage: f.stage,
                }
            })
            .collect())
    }

    /// First-stage candidates considered, over all shards.
    pub fn candidates(&self) -> usize {
        self.candidates.len()
    }

    /// The answer, in the shape one index's search gives: `hits` in ranked order, the
    /// parameters, the candidate counts, and the timings and reads the router summed.
    pub fn respond(
        &self,
        hits: Vec<Hit>,
        timings: Timings,
        io: IoReport,
        query: Option<QueryEncoding>,
    ) -> SearchResponse {
        SearchResponse {
            hits,
            params: self.params,
            candidates: self.candidates.len(),
            reranked: self.rerank,
            timings,
            io,
            ivf: None,
            prefetch: None,
            tokens: None,
            filter: self.filter,
            query,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SearchDefaults;
    use crate::params::IvfParams;

    fn list(items: &[(u32, f32)]) -> Option<Vec<ShardScored>> {
        Some(items.iter().map(|&(doc, score)| ShardScored { doc, score }).collect())
    }

    fn params(mode: Mode, hybrid_candidates: usize) -> SearchParams {
        let request = SearchRequest { mode: Some(mode), k: Some(3), rerank_k: Some(2), ..Default::default() };
        let mut params =
            SearchParams::resolve(&request, &SearchDefaults::default(), None, None, false).unwrap();
        params.ivf = (hybrid_candidates > 0).then_some(IvfParams {
            nprobe: 1,
            oversample: 1.0,
            rescore: true,
            prefetch: false,
            prefetch_step: 0.5,
            hybrid_candidates,
        });
        params
    }

    #[test]
    fn a_document_in_two_lists_is_one_candidate_and_each_shard_scores_its_own() {
        let shards = [
            ShardCandidates {
                bm25: list(&[(7, 9.0), (3, 2.0)]),
                dense: list(&[(7, 0.9)]),
                ..Default::default()
            },
            ShardCandidates {
                bm25: list(&[(7, 5.0)]),
                dense: list(&[(1, 0.8), (7, 0.1)]),
                ..Default::default()
            },
        ];
        let gather = Gather::new(params(Mode::Hybrid, 10), &shards, None, 0.0);
        // (0,7), (0,3), (1,7), (1,1): four documents, whatever lists they are in.
        assert_eq!(gather.candidates(), 4);
        let rerank = gather.rerank(2);
        assert_eq!(rerank.iter().map(Vec::len).sum::<usize>(), 2);
        assert_eq!(rerank[0], vec![7], "shard 0's doc 7 leads both of its lists: {rerank:?}");
        let maxsim: Vec<Vec<f32>> = rerank.iter().map(|docs| docs.iter().map(|_| 1.0).collect()).collect();
        let hits = gather.fuse(&maxsim).unwrap();
        assert_eq!(hits.len(), 3);
        assert!(hits.iter().any(|h| (h.shard, h.doc) == (0, 7)));
        let bad = vec![vec![1.0; rerank[0].len() + 1], vec![1.0; rerank[1].len()]];
        assert!(gather.fuse(&bad).is_err(), "a shard sending the wrong count is refused");
    }

    #[test]
    fn bm25_lists_merge_to_the_global_top_and_rerank_in_global_order() {
        let shards = [
            ShardCandidates { bm25: list(&[(1, 9.0), (2, 1.0)]), ..Default::default() },
            ShardCandidates { bm25: list(&[(5, 8.0), (6, 7.0)]), ..Default::default() },
        ];
        let gather = Gather::new(params(Mode::Rerank, 0), &shards, None, 0.0);
        assert_eq!(gather.rerank(2), vec![vec![1], vec![5]]);
        let hits = gather.fuse(&[vec![0.2], vec![0.9]]).unwrap();
        let order: Vec<(u32, u32)> = hits.iter().map(|h| (h.shard, h.doc)).collect();
        assert_eq!(
            order,
            [(1, 5), (0, 1), (1, 6)],
            "MaxSim orders the re-ranked, the rest keep BM25's order"
        );
        assert_eq!(hits[2].stage, Stage::FirstStage);
    }

    #[test]
    fn statistics_that_do_not_cover_a_shard_are_refused() {
        let local = Bm25Stats { docs: 10, tokens: 100, doc_freq: [("vitamin".to_string(), 3)].into() };
        let mut global = local.clone();
        global.merge(&Bm25Stats { docs: 5, tokens: 40, doc_freq: [("vitamin".to_string(), 1)].into() });
        assert_eq!((global.docs, global.tokens, global.doc_freq["vitamin"]), (15, 140, 4));
        check_stats(&global, &local).unwrap();
        let short = Bm25Stats { doc_freq: [("vitamin".to_string(), 2)].into(), ..global.clone() };
        assert!(check_stats(&short, &local).is_err());
        let missing = Bm25Stats { doc_freq: Default::default(), ..global };
        assert!(check_stats(&missing, &local).is_err());
    }
}
