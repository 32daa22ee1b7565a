//! A query's first stages over a live view of the index: what a search may return
//! ([`Searchable`]: alive, and under a filter matching it), BM25 and SPLADE (`lexical_search`),
//! the IVF probe, the exact pooled scan and the token stage's candidates, each leaving out what
//! a search may not return; and how two first-stage lists are joined ([`first_stage`]).
//! `rank` orders them into a search.

use std::collections::HashMap;
use std::sync::Arc;

use cellar_core::io::ReadStats;
use cellar_core::kernels::dot_f16;
use cellar_core::{CellarError, DocId, Result};

use crate::filter::Allowed;
use crate::fusion;
use crate::index::Index;
use crate::ivf::{Ivf, LiveMembers, Probe, ProbeParams};
use crate::mode::Lexical;
use crate::scored::{better, Scored};
use crate::tokens::{EarlyGuess, TokenQuery, TokenStats};
use crate::topk::TopK;
use crate::written::state::{LiveView, Located};

/// What a search may return: the documents alive in a view of the index and, under a filter,
/// matching it. The IVF probe takes it as its `LiveMembers`.
pub(crate) struct Searchable<'a> {
    view: &'a LiveView,
    allowed: Option<&'a Allowed>,
}

impl<'a> Searchable<'a> {
    pub(crate) fn new(view: &'a LiveView, allowed: Option<&'a Allowed>) -> Searchable<'a> {
        Searchable { view, allowed }
    }

    fn skips(&self, id: DocId) -> bool {
        self.view.is_deleted(id) || self.allowed.is_some_and(|a| !a.contains(id))
    }
}

impl LiveMembers for Searchable<'_> {
    fn excluded(&self, id: u32) -> bool {
        self.skips(DocId(id))
    }

    fn visit(&self, cluster: u32, found: &mut dyn FnMut(DocId, &[u8])) {
        self.view.visit(cluster, &mut |id, row| {
            if self.allowed.is_none_or(|a| a.contains(id)) {
                found(id, row)
            }
        });
    }
}

impl Index {
    /// The token stage's `query.depth` best searchable documents for `tokens` (store space),
    /// under `allowed` when given; written documents the stage has not seen are assigned first.
    pub(crate) fn token_candidates(
        &self,
        tokens: &[f32],
        allowed: Option<&Allowed>,
        query: TokenQuery,
        early: Option<EarlyGuess<'_>>,
    ) -> Result<(Vec<Scored>, TokenStats)> {
        let stage = self.current_tokens().ok_or_else(|| {
            CellarError::internal("a token-stage search was planned on an index without one")
        })?;
        let view = self.live_view();
        let searchable = Searchable::new(&view, allowed);
        stage.catch_up(self.isa, view.next_id, &|id| self.written_tokens(&view, id))?;
        let restricted = view.has_deletes() || allowed.is_some();
        let skip = |id| searchable.skips(DocId(id));
        stage.candidates(self.isa, tokens, query, view.next_id, restricted, &skip, early)
    }

    /// A written document's token vectors in the store's space, `None` when it is deleted.
    fn written_tokens(&self, view: &LiveView, id: DocId) -> Result<Option<Vec<f32>>> {
        if view.is_deleted(id) {
            return Ok(None);
        }
        let codec = self.store.codec();
        let mut out = Vec::new();
        match view.locate(id)? {
            Located::Memtable(doc) => codec.decode(&doc.tokens, &mut out),
            Located::Segment(segment, local) => {
                let batch = segment.store.read_batch(&[local])?;
                codec.decode(batch.record(0).tokens, &mut out);
            }
            Located::Base => {
                return Err(CellarError::internal(format!("document {} is in the base, not written", id.0)))
            }
        }
        Ok(Some(out))
    }

    /// BM25's `n` best searchable documents (deleted ones, and under a filter the ones it did
    /// not match, left out as tantivy collects).
    pub(crate) fn bm25_search(
        &self,
        text: &str,
        n: usize,
        allowed: Option<&Arc<Allowed>>,
    ) -> Result<Vec<Scored>> {
        self.bm25_search_scored(text, n, allowed, None)
    }

    /// [`Index::bm25_search`], scored with a sharded collection's statistics when given.
    pub(crate) fn bm25_search_scored(
        &self,
        text: &str,
        n: usize,
        allowed: Option<&Arc<Allowed>>,
        stats: Option<&crate::bm25::Bm25Stats>,
    ) -> Result<Vec<Scored>> {
        let view = self.live_view();
        // BM25 commits a batch just before its view is published (by this process, or by a
        // writer this one follows): a document the view does not hold yet is left out.
        let known = view.next_id;
        let mut hits = if !view.has_deletes() && allowed.is_none() {
            self.bm25.search_scored_by(text, n, None, stats)?
        } else {
            let allowed = allowed.cloned();
            let accept = move |id| !view.is_deleted(id) && allowed.as_ref().is_none_or(|a| a.contains(id));
            self.bm25.search_scored_by(text, n, Some(Arc::new(accept)), stats)?
        };
        hits.retain(|s| s.id.0 < known);
        Ok(hits)
    }

    /// The sparse first stage's `n` best for `text`: BM25's, SPLADE's, or both lists joined.
    pub(crate) fn lexical_search(
        &self,
        text: &str,
        n: usize,
        allowed: Option<&Arc<Allowed>>,
        lexical: Lexical,
    ) -> Result<Vec<Scored>> {
        match lexical {
            Lexical::Bm25 => self.bm25_search(text, n, allowed),
            Lexical::Splade => self.splade_search(text, n, allowed),
            Lexical::Both => {
                let bm25 = self.bm25_search(text, n, allowed)?;
                Ok(first_stage(Some(&bm25), &self.splade_search(text, n, allowed)?))
            }
        }
    }

    /// SPLADE's `n` best, skipping deleted documents and those a filter excludes: the build's
    /// documents from the stage's files, the view's written ones from their texts (encoded on
    /// first sight, `crate::splade`).
    pub(crate) fn splade_search(
        &self,
        text: &str,
        n: usize,
        allowed: Option<&Arc<Allowed>>,
    ) -> Result<Vec<Scored>> {
        let splade = self.splade.as_ref().ok_or_else(|| {
            CellarError::invalid(
                "this index has no SPLADE stage: build one with `cellar splade build --index DIR`",
            )
        })?;
        let view = self.live_view();
        let content = |id: DocId| -> Result<Option<String>> {
            if view.is_deleted(id) {
                return Ok(None);
            }
            Ok(view.document(id)?.map(|doc| doc.content()))
        };
        let written = crate::splade::Written { end: view.next_id, content: &content };
        splade
            .search(text, n, &written, &|id| view.is_deleted(id) || allowed.is_some_and(|a| !a.contains(id)))
    }

    /// A probe of the IVF that also visits the view's written documents and skips the
    /// documents a search may not return.
    pub(crate) fn ivf_probe<'a>(
        &'a self,
        ivf: &'a Ivf,
        searchable: &'a Searchable<'a>,
        query: &[f32],
        params: ProbeParams,
    ) -> Probe<'a> {
        let view = searchable.view;
        let restricted = view.written() > 0 || view.has_deletes() || searchable.allowed.is_some();
        ivf.probe_live(query, params, restricted.then_some(searchable as &dyn LiveMembers))
    }

    /// The exact dense scan: every searchable document's pooled vector against `query` (under a
    /// filter, the matching ones').
    pub(crate) fn dense_scan(
        &self,
        query: &[f32],
        k: usize,
        allowed: Option<&Allowed>,
    ) -> Result<Vec<Scored>> {
        let view = self.live_view();
        let searchable = Searchable::new(&view, allowed);
        let mut top = TopK::new(k);
        let excluded = |id: DocId| searchable.skips(id);
        self.pooled()?.score_into(query, &|i| DocId(i as u32), &excluded, &mut top);
        for segment in &view.segments {
            segment.pooled.will_need(0..segment.len())?;
            segment.pooled.score_into(query, &|i| DocId(segment.ids[i]), &excluded, &mut top);
        }
        for doc in view.memtable.iter().filter(|d| !searchable.skips(d.id)) {
            top.push(doc.id, dot_f16(self.isa, query, &doc.pooled));
        }
        Ok(top.into_sorted())
    }
}

/// What a first stage read from its own files (the IVF's blocks, the token stage's lists), as
/// a search's read statistics.
pub(crate) fn stage_reads(read_calls: u64, bytes: u64) -> ReadStats {
    ReadStats { read_calls, pages: bytes / 4096, bytes, cached: 0 }
}

/// The first-stage list: the IVF's alone, or BM25's joined with the IVF's. A joined document's
/// score is the sum of its z-scores in both lists, where a list it is missing from counts its
/// lowest z-score.
pub(crate) fn first_stage(bm25: Option<&[Scored]>, ivf: &[Scored]) -> Vec<Scored> {
    let Some(bm25) = bm25 else {
        return ivf.to_vec();
    };
    let (zb, zi) = (z_scores(bm25), z_scores(ivf));
    // A list that found nothing (BM25 on a misspelt or stop-word-only query) counts 0 for
    // every document, so the other list's z-scores order them alone (never inf - inf = NaN).
    let floor = |z: &HashMap<DocId, f32>| z.values().copied().reduce(f32::min).unwrap_or(0.0);
    let (floor_b, floor_i) = (floor(&zb), floor(&zi));
    let mut joined: Vec<Scored> = zb
        .keys()
        .chain(zi.keys().filter(|id| !zb.contains_key(id)))
        .map(|id| {
            let score = zb.get(id).copied().unwrap_or(floor_b) + zi.get(id).copied().unwrap_or(floor_i);
            Scored { id: *id, score }
        })
        .collect();
    joined.sort_by(better);
    joined
}

fn z_scores(list: &[Scored]) -> HashMap<DocId, f32> {
    let scores: Vec<f32> = list.iter().map(|s| s.score).collect();
    list.iter().map(|s| s.id).zip(fusion::z_scores(&scores)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: u32, score: f32) -> Scored {
        Scored { id: DocId(id), score }
    }

    #[test]
    fn joined_list_holds_each_document_once_best_first() {
        let bm25 = [s(1, 10.0), s(2, 5.0), s(3, 1.0)];
        let ivf = [s(2, 0.9), s(4, 0.8), s(1, 0.1)];
        let joined = first_stage(Some(&bm25), &ivf);
        let ids: Vec<u32> = joined.iter().map(|s| s.id.0).collect();
        assert_eq!(ids.len(), 4);
        assert_eq!(ids[0], 2, "high in both lists beats high in one: {joined:?}");
        assert!(joined.windows(2).all(|w| w[0].score >= w[1].score));
        assert_eq!(first_stage(None, &ivf), ivf.to_vec());
    }

    #[test]
    fn an_empty_list_leaves_the_other_to_order_the_join_with_finite_scores() {
        let ivf = [s(4, 0.9), s(2, 0.5), s(7, 0.1)];
        for joined in [first_stage(Some(&[]), &ivf), first_stage(Some(&ivf), &[])] {
            assert!(joined.iter().all(|s| s.score.is_finite()), "{joined:?}");
            let ids: Vec<u32> = joined.iter().map(|s| s.id.0).collect();
            assert_eq!(ids, [4, 2, 7]);
        }
        assert!(first_stage(Some(&[]), &[]).is_empty());
    }
}
