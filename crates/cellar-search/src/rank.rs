//! `Index::rank`: one query's first stage(s), the MaxSim re-rank of the best `rerank_k`
//! candidates, and the fusion of the two.
//!
//! - bm25, rerank, hybrid (BM25 only): BM25 top-N → read → MaxSim → fuse;
//! - a text query of rerank or hybrid runs BM25 *before* its encoding and reads BM25's best
//!   `rerank_k` records while the encoder runs ([`EarlyReads`], made by `Index::execute`), so
//!   that read is off the query's path; the candidates it did not cover (the IVF's, known only
//!   after the encoding) are read while those early records are scored;
//! - every read goes through the pipeline of `reads` (chunks read on an I/O thread, each scored
//!   as it arrives); `timings.read_hidden_ms` adds up the read time it overlapped with other work;
//! - dense-exact: a scan of the pooled vectors in RAM; ivf: the IVF alone;
//! - dense, hybrid with `hybrid_candidates` > 0: the IVF probe or the token stage (joined with
//!   BM25 for hybrid), with the prefetcher reading the likely candidates' records while the
//!   first stage runs (the token stage's in dense mode only);
//! - under a filter, every first stage takes only the matching documents (`stages::Searchable`), and
//!   a filter that matched at most `filter_exact_max` documents skips the first stage: every
//!   match is read and scored (`rank_matches`), so a selective filter loses nothing.

use std::collections::hash_map::Entry;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use cellar_core::io::ReadStats;
use cellar_core::stats::ms_since;
use cellar_core::{CellarError, DocId, Result};

use crate::filter::Allowed;
use crate::fusion::{self, Fused, Stage};
use crate::index::Index;
use crate::ivf::ProbeStats;
use crate::mode::Mode;
use crate::params::{IvfParams, SearchParams, TokenParams};
use crate::prefetch::{PrefetchStats, ScoredRecords};
use crate::query::PreparedQuery;
use crate::reads::Reads;
use crate::scored::Scored;
use crate::search::{FilterReport, Ranking, Timings};
use crate::stages::{first_stage, stage_reads, Searchable};
use crate::tokens::EarlyGuess;

/// BM25's list of a text query, made before the query was encoded, and the reads of its best
/// `rerank_k` candidates, started before it was.
pub(crate) struct EarlyReads {
    pub bm25: Vec<Scored>,
    pub bm25_ms: f64,
    pub reads: Reads,
}

/// What the probe-based path produced besides the hits.
struct Probed {
    hits: Vec<Fused>,
    io: ReadStats,
    candidates: usize,
    reranked: usize,
    probe: ProbeStats,
    prefetch: Option<PrefetchStats>,
}

/// Reads started while a first stage ran: the documents guessed, read and scored on a thread.
struct Prefetch<'scope> {
    /// The IVF's clusters probed when it started (0 for the token stage).
    after: usize,
    guessed: HashSet<DocId>,
    handle: std::thread::ScopedJoinHandle<'scope, Result<ScoredRecords>>,
}

/// MaxSim of the first stage's best, in its order, and what reading them cost.
struct Reranked {
    maxsim: Vec<f32>,
    io: ReadStats,
    prefetch: Option<PrefetchStats>,
}

impl Index {
    /// Ranks documents for a prepared query (no text is fetched).
    pub fn rank(&self, query: &PreparedQuery, params: &SearchParams) -> Result<Ranking> {
        self.rank_with(query, params, None)
    }

    /// `rank`, given BM25's list and the records read while the query was encoded.
    pub(crate) fn rank_with(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        early: Option<EarlyReads>,
    ) -> Result<Ranking> {
        let start = Instant::now();
        let mut timings = Timings { encode_ms: query.encode_ms, ..Timings::default() };
        let early_bm25_ms = early.as_ref().map(|e| e.bm25_ms);
        let (bm25, early) = match early {
            Some(e) => {
                timings.first_stage_ms = e.bm25_ms;
                (Some(e.bm25), Some(e.reads))
            }
            None => (None, None),
        };
        if early_bm25_ms.is_none() {
            timings.first_stage_ms += query.filter_ms;
        }
        let exact = query.allowed.as_ref().filter(|a| ranks_matches_exactly(params, a));
        let mut ranking = match (params.mode, params.ivf) {
            _ if exact.is_some() => {
                self.rank_matches(query, params, exact.expect("matched"), bm25, &mut timings)?
            }
            (Mode::DenseExact, _) => self.rank_exact(query, params, &mut timings)?,
            (Mode::Dense | Mode::Hybrid, _) if params.tokens.is_some() => {
                let tokens = params.tokens.expect("checked");
                self.rank_tokens(query, params, tokens, bm25, early, &mut timings)?
            }
            (Mode::Ivf, Some(ivf)) => self.rank_ivf_only(query, params, ivf, &mut timings)?,
            (Mode::Dense, Some(ivf)) => self.rank_probed(query, params, ivf, None, None, &mut timings)?,
            (Mode::Hybrid, Some(ivf)) if ivf.hybrid_candidates > 0 => {
                self.rank_probed(query, params, ivf, bm25, early, &mut timings)?
            }
            (Mode::Ivf | Mode::Dense, None) => {
                return Err(CellarError::internal(format!(
                    "mode {} was planned without IVF parameters",
                    params.mode
                )));
            }
            _ => self.rank_bm25_first(query, params, bm25, early, &mut timings)?,
        };
        ranking.timings.total_ms = timings.encode_ms + ms_since(start);
        if early_bm25_ms.is_none() {
            ranking.timings.total_ms += query.filter_ms;
        }
        ranking.filter = query.allowed.as_deref().map(|a| FilterReport {
            matched: a.count(),
            exact: exact.is_some(),
            ms: query.filter_ms,
        });
        Ok(ranking)
    }

    /// A selective filter's ranking: every matching document read and scored with MaxSim (fused
    /// with BM25's score of it, where the mode fuses: documents BM25 did not find count its
    /// lowest score), or, for the ivf mode, the pooled scan of the matching documents.
    fn rank_matches(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        allowed: &Arc<Allowed>,
        bm25: Option<Vec<Scored>>,
        timings: &mut Timings,
    ) -> Result<Ranking> {
        let start = Instant::now();
        if params.mode == Mode::Ivf {
            let hits: Vec<Fused> = self
                .dense_scan(&query.pooled, params.k, Some(allowed))?
                .iter()
                .map(first_stage_hit)
                .collect();
            timings.first_stage_ms += ms_since(start);
            return Ok(Ranking::first_stage_only(hits, *timings, allowed.count()));
        }
        let view = self.live_view();
        let lexical = match (params.mode, bm25) {
            (Mode::Dense, _) => Vec::new(),
            (_, Some(list)) => list,
            (_, None) => self.lexical_search(&query.text, allowed.count(), Some(allowed), params.lexical)?,
        };
        let floor = lexical.iter().map(|s| s.score).reduce(f32::min).unwrap_or(0.0);
        let found: HashSet<DocId> = lexical.iter().map(|s| s.id).collect();
        let mut candidates = lexical;
        candidates.extend(
            allowed
                .ids()
                .filter(|id| !found.contains(id) && !view.is_deleted(*id))
                .map(|id| Scored { id, score: floor }),
        );
        timings.first_stage_ms += ms_since(start);
        let ids: Vec<DocId> = candidates.iter().map(|c| c.id).collect();
        let scored = self.read_and_score(query, &ids)?;
        timings.read_ms += scored.read_ms;
        timings.read_hidden_ms += scored.hidden_ms();
        timings.maxsim_ms += scored.score_ms;
        let maxsim: Vec<f32> = ids.iter().map(|id| score_of(id, &[&scored])).collect();
        Ok(fused(&candidates, &maxsim, params, timings, scored.io))
    }

    fn rank_exact(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        timings: &mut Timings,
    ) -> Result<Ranking> {
        let start = Instant::now();
        let hits: Vec<Fused> = self
            .dense_scan(&query.pooled, params.k, query.allowed.as_deref())?
            .iter()
            .map(first_stage_hit)
            .collect();
        timings.first_stage_ms = ms_since(start);
        Ok(Ranking::first_stage_only(hits, *timings, self.len()))
    }

    fn rank_ivf_only(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        ivf: IvfParams,
        timings: &mut Timings,
    ) -> Result<Ranking> {
        let start = Instant::now();
        let view = self.live_view();
        let searchable = Searchable::new(&view, query.allowed.as_deref());
        let index_ivf = self.ivf()?;
        let (hits, stats) =
            self.ivf_probe(&index_ivf, &searchable, &query.pooled, ivf.probe(params.k)).finish()?;
        timings.first_stage_ms = ms_since(start);
        let hits: Vec<Fused> = hits.iter().map(first_stage_hit).collect();
        let mut ranking = Ranking::first_stage_only(hits, *timings, stats.codes);
        ranking.io = stage_reads(stats.read_calls, stats.bytes_read);
        ranking.ivf = Some(stats);
        Ok(ranking)
    }

    /// BM25 (or its list made before the encoding) → MaxSim of the best `rerank_k` (those read
    /// early scored while the rest are read) → fusion.
    fn rank_bm25_first(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        bm25: Option<Vec<Scored>>,
        early: Option<Reads>,
        timings: &mut Timings,
    ) -> Result<Ranking> {
        let candidates = match bm25 {
            Some(list) => list,
            None => {
                let start = Instant::now();
                let depth = if params.mode == Mode::Bm25 { params.k } else { params.candidates };
                let list = self.lexical_search(&query.text, depth, query.allowed.as_ref(), params.lexical)?;
                timings.first_stage_ms = ms_since(start);
                list
            }
        };
        let rerank_k = if params.mode == Mode::Bm25 { 0 } else { params.rerank_k.min(candidates.len()) };
        self.rerank_list(query, params, candidates, rerank_k, early, timings)
    }

    /// MaxSim of the best `rerank_k` of `candidates` (those read early scored while the rest
    /// are read), fused with the first stage's scores.
    fn rerank_list(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        candidates: Vec<Scored>,
        rerank_k: usize,
        early: Option<Reads>,
        timings: &mut Timings,
    ) -> Result<Ranking> {
        let covered = early.as_ref().map(Reads::covered).unwrap_or_default();
        let reranked =
            self.rerank_prefetched(query, &candidates, rerank_k, early, &covered, None, timings)?;
        Ok(fused(&candidates, &reranked.maxsim, params, timings, reranked.io))
    }

    /// The sparse list a hybrid search joins (the one made before the encoding, or made now);
    /// `None` for the other modes.
    fn hybrid_lexical(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        bm25: Option<Vec<Scored>>,
    ) -> Result<Option<Vec<Scored>>> {
        Ok(match (params.mode, bm25) {
            (Mode::Hybrid, None) => Some(self.lexical_search(
                &query.text,
                params.candidates,
                query.allowed.as_ref(),
                params.lexical,
            )?),
            (_, given) => given,
        })
    }

    /// The token stage's path: its candidates (joined with BM25's list for hybrid), then the
    /// best `rerank_k` read and scored with MaxSim, then fusion.
    fn rank_tokens(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        tokens: TokenParams,
        bm25: Option<Vec<Scored>>,
        early: Option<Reads>,
        timings: &mut Timings,
    ) -> Result<Ranking> {
        let start = Instant::now();
        let bm25 = self.hybrid_lexical(query, params, bm25)?;
        let depth = if bm25.is_some() { tokens.hybrid_candidates } else { params.candidates };
        let covered = early.as_ref().map(Reads::covered).unwrap_or_default();
        std::thread::scope(|scope| {
            // Dense mode reads the best documents of the windows already scored while the
            // stage scores the rest (hybrid's candidates are fused with BM25's, known only
            // after it).
            let mut prefetch = None;
            let mut take = |guess: Vec<Scored>| {
                let ids: Vec<DocId> = guess.iter().map(|s| s.id).filter(|id| !covered.contains(id)).collect();
                let guessed = ids.iter().copied().collect();
                let handle = scope.spawn(move || self.read_and_score(query, &ids));
                prefetch = Some(Prefetch { after: 0, guessed, handle });
            };
            let asked = bm25.is_none() && tokens.prefetch && params.rerank_k > 0;
            let guess = asked.then_some(EarlyGuess {
                step: tokens.prefetch_step,
                wanted: params.rerank_k,
                take: &mut take,
            });
            let (dense, stats) = self.token_candidates(
                &query.store_tokens,
                query.allowed.as_deref(),
                tokens.query(depth),
                guess,
            )?;
            let candidates = first_stage(bm25.as_deref(), &dense);
            timings.first_stage_ms += ms_since(start);
            let rerank_k = params.rerank_k.min(candidates.len());
            let reranked =
                self.rerank_prefetched(query, &candidates, rerank_k, early, &covered, prefetch, timings)?;
            let mut ranking = fused(&candidates, &reranked.maxsim, params, timings, reranked.io);
            ranking.io += stage_reads(stats.read_calls, stats.bytes_read);
            ranking.tokens = Some(stats);
            ranking.prefetch = reranked.prefetch;
            Ok(ranking)
        })
    }

    /// The IVF path: probe (joined with BM25's list for hybrid), prefetching the likely
    /// candidates' records after `prefetch_step` of the clusters; then the misses; then fusion.
    fn rank_probed(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        ivf: IvfParams,
        bm25: Option<Vec<Scored>>,
        early: Option<Reads>,
        timings: &mut Timings,
    ) -> Result<Ranking> {
        let start = Instant::now();
        let bm25 = self.hybrid_lexical(query, params, bm25)?;
        timings.first_stage_ms += ms_since(start);
        let probed = self.probe_and_rerank(query, params, ivf, bm25.as_deref(), early, timings)?;
        let mut hits = probed.hits;
        hits.truncate(params.k);
        Ok(Ranking {
            hits,
            timings: *timings,
            io: probed.io,
            candidates: probed.candidates,
            reranked: probed.reranked,
            ivf: Some(probed.probe),
            prefetch: probed.prefetch,
            tokens: None,
            filter: None,
        })
    }

    fn probe_and_rerank(
        &self,
        query: &PreparedQuery,
        params: &SearchParams,
        ivf: IvfParams,
        bm25: Option<&[Scored]>,
        early: Option<Reads>,
        timings: &mut Timings,
    ) -> Result<Probed> {
        let start = Instant::now();
        let depth = if bm25.is_some() { ivf.hybrid_candidates } else { params.candidates };
        let view = self.live_view();
        let searchable = Searchable::new(&view, query.allowed.as_deref());
        let index_ivf = self.ivf()?;
        let mut probe = self.ivf_probe(&index_ivf, &searchable, &query.pooled, ivf.probe(depth));
        let rerank_k = params.rerank_k;
        let covered = early.as_ref().map(Reads::covered).unwrap_or_default();
        std::thread::scope(|scope| {
            let mut prefetch = None;
            if ivf.prefetch && rerank_k > 0 {
                let first =
                    ((ivf.prefetch_step * probe.total() as f32).ceil() as usize).clamp(1, probe.total());
                probe.scan(first)?;
                let guess = first_stage(bm25, &probe.current(depth));
                let ids: Vec<DocId> =
                    guess.iter().take(rerank_k).map(|s| s.id).filter(|id| !covered.contains(id)).collect();
                let guessed: HashSet<DocId> = ids.iter().copied().collect();
                let after = probe.probed();
                prefetch = Some(Prefetch {
                    after,
                    guessed,
                    handle: scope.spawn(move || self.read_and_score(query, &ids)),
                });
            }
            let (ivf_hits, probe_stats) = probe.finish()?;
            let candidates = first_stage(bm25, &ivf_hits);
            timings.first_stage_ms += ms_since(start);
            let reranked =
                self.rerank_prefetched(query, &candidates, rerank_k, early, &covered, prefetch, timings)?;
            let fuse_start = Instant::now();
            let maxsim = &reranked.maxsim;
            let hits = fusion::fuse(&candidates, maxsim, params.alpha, params.fusion);
            timings.fuse_ms = ms_since(fuse_start);
            let mut io = reranked.io;
            io += stage_reads(probe_stats.read_calls, probe_stats.bytes_read);
            Ok(Probed {
                hits,
                io,
                candidates: candidates.len(),
                reranked: maxsim.len(),
                probe: probe_stats,
                prefetch: reranked.prefetch,
            })
        })
    }

    /// MaxSim of the best `rerank_k` candidates: those the early reads (under the encoding) or
    /// the prefetch (under the first stage) covered are scored from them, the misses are read
    /// at once, while the prefetch may still be reading its records and while the early reads
    /// are scored.
    #[allow(clippy::too_many_arguments)]
    fn rerank_prefetched(
        &self,
        query: &PreparedQuery,
        candidates: &[Scored],
        rerank_k: usize,
        early: Option<Reads>,
        covered: &HashSet<DocId>,
        prefetch: Option<Prefetch<'_>>,
        timings: &mut Timings,
    ) -> Result<Reranked> {
        let needed: Vec<DocId> = candidates.iter().take(rerank_k).map(|s| s.id).collect();
        let wait_start = Instant::now();
        let guessed = prefetch.as_ref().map(|p| &p.guessed);
        let missing: Vec<DocId> = needed
            .iter()
            .filter(|id| !guessed.is_some_and(|g| g.contains(id)) && !covered.contains(id))
            .copied()
            .collect();
        let (before, late) = self.score_early_and_late(query, early, &missing)?;
        let (prefetched, after) = match prefetch {
            Some(p) => {
                let joined = cellar_core::io::wait::waiting_on_io(|| p.handle.join());
                (joined.expect("prefetch thread panicked")?, Some(p.after))
            }
            None => (ScoredRecords::default(), None),
        };
        let wait_ms = ms_since(wait_start);
        timings.read_ms += before.read_ms + prefetched.read_ms + late.read_ms;
        timings.read_hidden_ms += before.hidden_ms() + prefetched.hidden_ms() + late.hidden_ms();
        timings.maxsim_ms += before.score_ms + prefetched.score_ms + late.score_ms;
        let prefetch = after.map(|after_clusters| {
            let mut stats = PrefetchStats { after_clusters, wait_ms, ..PrefetchStats::default() };
            stats.account(&before, &prefetched, &needed, &late);
            stats
        });
        let maxsim = needed.iter().map(|id| score_of(id, &[&before, &prefetched, &late])).collect();
        let mut io = before.io;
        io += prefetched.io;
        io += late.io;
        Ok(Reranked { maxsim, io, prefetch })
    }

    /// The default hybrid search's first-stage candidates — the first `n` of BM25, joined by the
    /// token stage's or the IVF's (whichever a hybrid search of the index joins) when its
    /// `hybrid_candidates` default is above 0 — and the MaxSim score of every one
    /// (for tuning, which then fuses them many ways with [`fusion::fuse`], exactly as
    /// [`Index::rank`] does).
    pub fn candidates_with_maxsim(&self, query: &PreparedQuery, n: usize) -> Result<(Vec<Scored>, Vec<f32>)> {
        let request = crate::request::SearchRequest { mode: Some(Mode::Hybrid), ..Default::default() };
        let params = self.params(&request)?;
        // The dense stage a served hybrid joins: the token stage's candidates where the
        // parameters take it (an index with a token stage and no IVF), else the IVF's.
        if let Some(tokens) = params.tokens {
            let mut one = self.hybrid_depths_with_maxsim(query, &[(n, tokens.hybrid_candidates)])?;
            return Ok(one.remove(0));
        }
        let bm25 = self.lexical_search(&query.text, n, None, params.lexical)?;
        let candidates = match params.ivf.filter(|p| p.hybrid_candidates > 0) {
            Some(ivf) => {
                let probe = ivf.probe(ivf.hybrid_candidates);
                let view = self.live_view();
                let (index_ivf, searchable) = (self.ivf()?, Searchable::new(&view, None));
                let (ivf_hits, _) = self.ivf_probe(&index_ivf, &searchable, &query.pooled, probe).finish()?;
                first_stage(Some(&bm25), &ivf_hits)
            }
            None => bm25,
        };
        let ids: Vec<DocId> = candidates.iter().map(|c| c.id).collect();
        let scored = self.read_and_score(query, &ids)?;
        let maxsim = ids.iter().map(|id| score_of(id, &[&scored])).collect();
        Ok((candidates, maxsim))
    }

    /// [`Index::candidates_with_maxsim`] of a hybrid search over the token stage at each of
    /// `depths` — `(candidates, joined)`: BM25's candidates and the stage's `hybrid_candidates`
    /// joined to them, each list searched at that depth as a served search does — with every
    /// document read and scored once for all of them (for tuning the depths).
    pub fn hybrid_depths_with_maxsim(
        &self,
        query: &PreparedQuery,
        depths: &[(usize, usize)],
    ) -> Result<Vec<(Vec<Scored>, Vec<f32>)>> {
        let request = crate::request::SearchRequest { mode: Some(Mode::Hybrid), ..Default::default() };
        let params = self.params(&request)?;
        let tokens = params.tokens.ok_or_else(|| {
            CellarError::invalid("this index's hybrid search joins no token stage: its depths are not swept")
        })?;
        let mut lexical = std::collections::HashMap::new();
        let mut dense = std::collections::HashMap::new();
        for &(candidates, joined) in depths {
            if let Entry::Vacant(list) = lexical.entry(candidates) {
                list.insert(self.lexical_search(&query.text, candidates, None, params.lexical)?);
            }
            if let Entry::Vacant(list) = dense.entry(joined) {
                list.insert(self.token_candidates(&query.store_tokens, None, tokens.query(joined), None)?.0);
            }
        }
        let joined: Vec<Vec<Scored>> =
            depths.iter().map(|(c, j)| first_stage(Some(&lexical[c]), &dense[j])).collect();
        let mut ids: Vec<DocId> = joined.iter().flatten().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        let scored = self.read_and_score(query, &ids)?;
        Ok(joined
            .into_iter()
            .map(|candidates| {
                let maxsim = candidates.iter().map(|c| score_of(&c.id, &[&scored])).collect();
                (candidates, maxsim)
            })
            .collect())
    }
}

/// Whether a search ranks every document its filter matched exactly (MaxSim of each, or the
/// pooled scan for ivf) instead of running its first stage: few enough matched, and the mode has
/// a first stage that could miss them (BM25 filters exhaustively, the dense-exact scan is exact).
pub(crate) fn ranks_matches_exactly(params: &SearchParams, allowed: &Allowed) -> bool {
    ranks_count_exactly(params, allowed.count())
}

/// [`ranks_matches_exactly`] for a filter that matched `matched` documents (a sharded
/// collection decides on the count over all its shards).
pub fn ranks_count_exactly(params: &SearchParams, matched: usize) -> bool {
    matched <= params.filter_exact_max && !matches!(params.mode, Mode::Bm25 | Mode::DenseExact)
}

/// The ranking of `candidates` (best first-stage first) whose first `maxsim.len()` were re-scored:
/// fused with their MaxSim, cut at `k`, the fusion timed.
fn fused(
    candidates: &[Scored],
    maxsim: &[f32],
    params: &SearchParams,
    timings: &mut Timings,
    io: ReadStats,
) -> Ranking {
    let fuse_start = Instant::now();
    let mut hits = fusion::fuse(candidates, maxsim, params.alpha, params.fusion);
    hits.truncate(params.k);
    timings.fuse_ms = ms_since(fuse_start);
    Ranking {
        hits,
        timings: *timings,
        io,
        candidates: candidates.len(),
        reranked: maxsim.len(),
        ivf: None,
        prefetch: None,
        tokens: None,
        filter: None,
    }
}

/// The MaxSim score of `id` in the first of `sets` that holds it (every re-ranked id is in one).
fn score_of(id: &DocId, sets: &[&ScoredRecords]) -> f32 {
    sets.iter().find_map(|set| set.scores.get(id)).copied().unwrap_or(0.0)
}

pub(crate) fn first_stage_hit(scored: &Scored) -> Fused {
    Fused {
        id: scored.id,
        score: scored.score,
        first_stage: scored.score,
        maxsim: None,
        stage: Stage::FirstStage,
    }
}
