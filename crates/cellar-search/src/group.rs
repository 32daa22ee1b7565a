//! A grouped index's search: a `SearchRequest` scoped to one group, exact inside it, with no
//! first stage. The group's documents are its runs in the segments (`written::groups`: one run
//! of records each, read through the one read pipeline, `reads.rs`) and its memtable entries;
//! deleted ones are skipped. Every live document that passes the filter and the text match is
//! scored (MaxSim over token vectors with the index's codec, or the dot product of pooled
//! vectors) and the exact top-k is kept: higher score first, then smaller id.
//!
//! Text match (`require_terms`): the text and the query terms are split on every character that
//! is not alphanumeric and lowercased; a document matches when it holds every query term.

use std::collections::HashSet;
use std::time::Instant;

use cellar_core::kernels::dot_f16;
use cellar_core::stats::ms_since;
use cellar_core::{CellarError, DocId, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::corpus::Document;
use crate::doc::check_key;
use crate::index::Index;
use crate::meta::Metadata;
use crate::mode::Mode;
use crate::plan::{check_query, check_query_values, check_terms, flatten};
use crate::query::PreparedQuery;
use crate::request::{SearchRequest, MAX_QUERY_VECTORS};
use crate::vectors::mean_normalized;
use crate::written::state::{LiveView, Located};

/// One document found in a group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GroupHit {
    pub id: String,
    pub score: f32,
    /// Its title (left out when it has none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// Its text, unless the request said `include_text: false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
}

/// What a search of one group read and scored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScanStats {
    /// Live documents of the group examined (before filters).
    pub docs_scanned: u64,
    /// Documents that passed filters and text match, hence scored.
    pub docs_scored: u64,
    pub bytes_read: u64,
    pub read_calls: u64,
    /// Segments holding a run of the group.
    pub segments_read: u64,
    /// The group's documents not yet in a segment.
    pub memtable_entries: u64,
    pub total_ms: f64,
}

/// The exact top-k of a group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GroupResult {
    pub hits: Vec<GroupHit>,
    pub stats: ScanStats,
}

/// Lowercased alphanumeric terms of `text`.
pub fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_lowercase).collect()
}

/// The fields of a search request that tune an index's stages, which a group's exact scan does
/// not have: each is refused when set, never ignored. The destructuring is exhaustive, so a field
/// added to `SearchRequest` does not compile here until it is placed.
fn index_knobs(r: &SearchRequest) -> [(&'static str, bool); 14] {
    let SearchRequest {
        query: _,
        k: _,
        mode: _,
        query_vectors: _,
        filter: _,
        include_text: _,
        require_terms: _,
        alpha,
        lexical,
        fusion,
        rerank_k,
        candidates,
        dense_stage,
        nprobe,
        oversample,
        rescore,
        prefetch,
        prefetch_step,
        hybrid_candidates,
        early_read,
        filter_exact_max,
    } = r;
    [
        ("alpha", alpha.is_some()),
        ("lexical", lexical.is_some()),
        ("fusion", fusion.is_some()),
        ("rerank_k", rerank_k.is_some()),
        ("candidates", candidates.is_some()),
        ("dense_stage", dense_stage.is_some()),
        ("nprobe", nprobe.is_some()),
        ("oversample", oversample.is_some()),
        ("rescore", rescore.is_some()),
        ("prefetch", prefetch.is_some()),
        ("prefetch_step", prefetch_step.is_some()),
        ("hybrid_candidates", hybrid_candidates.is_some()),
        ("early_read", early_read.is_some()),
        ("filter_exact_max", filter_exact_max.is_some()),
    ]
}

/// Whether a group's search of `mode` scores MaxSim (`dense`, the default) or pooled vectors
/// (`dense-exact`); other modes are refused.
pub fn scores_maxsim(mode: Option<Mode>) -> Result<bool> {
    match mode.unwrap_or(Mode::Dense) {
        Mode::Dense => Ok(true),
        Mode::DenseExact => Ok(false),
        other => Err(CellarError::InvalidInput(format!(
            "mode {other}: a group is searched exactly, by dense (MaxSim over token vectors) or dense-exact (pooled vectors)"
        ))),
    }
}

/// A group's search checked against the index, its query vectors ready.
struct Prepared<'r> {
    query: PreparedQuery,
    maxsim: bool,
    k: usize,
    terms: Vec<String>,
    request: &'r SearchRequest,
}

impl Index {
    fn prepare_group_search<'r>(&self, request: &'r SearchRequest) -> Result<Prepared<'r>> {
        let invalid = |m: String| Err(CellarError::InvalidInput(m));
        if !self.config.grouped {
            return invalid("this index has no groups: search it without one".into());
        }
        if let Some((field, _)) = index_knobs(request).into_iter().find(|(_, set)| *set) {
            return invalid(format!(
                "{field}: a group's search is exact, with no first stage or fusion to tune"
            ));
        }
        let k = request.checked_k()?;
        let maxsim = scores_maxsim(request.mode)?;
        let dim = self.config.encoder.model_dim;
        if !request.query.trim().is_empty() {
            check_query(&request.query)?;
        }
        let (tokens, n_tokens, pooled, text) = match &request.query_vectors {
            Some(given) => {
                let flat = flatten(given, dim, "query_vectors", MAX_QUERY_VECTORS)?;
                check_query_values(&flat)?;
                (flat.tokens, flat.n_tokens, flat.pooled, request.query.clone())
            }
            None if !request.query.trim().is_empty() => {
                let encoded = self.encoder()?.encode_query(&request.query)?;
                (encoded.tokens, encoded.n_tokens, Some(encoded.pooled), request.query.clone())
            }
            None => return invalid("the search has neither query text nor query vectors".into()),
        };
        if n_tokens == 0 && (maxsim || pooled.is_none()) {
            return invalid(format!("the query has 0 token vectors; 1 to {MAX_QUERY_VECTORS} allowed"));
        }
        let pooled = match (maxsim, pooled) {
            (true, _) => Vec::new(),
            (false, Some(p)) => p,
            (false, None) => mean_normalized(&tokens, dim).unwrap_or_else(|| vec![0.0; dim]),
        };
        if let Some(given) = &request.require_terms {
            check_terms(given)?;
        }
        let terms = request.require_terms.as_deref().map(terms).unwrap_or_default();
        if request.require_terms.is_some() && terms.is_empty() {
            return invalid("require_terms holds no term".into());
        }
        if let Some(filter) = &request.filter {
            filter.check("filter")?;
        }
        let query = PreparedQuery {
            text,
            tokens: if maxsim {
                self.store.codec().prepare_query(&self.project(tokens, n_tokens))
            } else {
                Vec::new()
            },
            store_tokens: Vec::new(),
            n_tokens,
            pooled,
            encode_ms: 0.0,
            allowed: None,
            filter_ms: 0.0,
            encoding: None,
        };
        Ok(Prepared { query, maxsim, k, terms, request })
    }

    /// The exact top-k of `request` among the live documents of `group`; `NotFound` when the
    /// index holds nothing of the group. `request` carries query vectors, or query text the
    /// index's model encodes; it may filter on metadata (the whole grammar) and require terms.
    pub fn search_group(&self, group: &str, request: &SearchRequest) -> Result<GroupResult> {
        let start = Instant::now();
        check_key("group", group)?;
        let q = self.prepare_group_search(request)?;
        let view = self.live_view();
        let mut stats = ScanStats::default();
        // The group's records where they lie: no id is looked up again to find its record.
        let mut members: Vec<Member> = Vec::new();
        let mut present = false;
        for (s, segment) in view.segments.iter().enumerate() {
            let Some(run) = segment.groups.as_ref().and_then(|g| g.run(group)) else { continue };
            present = true;
            stats.segments_read += 1;
            members.extend(
                run.map(|local| Member { id: DocId(segment.ids[local as usize]), at: At::Segment(s, local) }),
            );
        }
        let before = members.len();
        members.extend(
            view.memtable.in_group(group).map(|p| Member { id: view.memtable[p].id, at: At::Memtable(p) }),
        );
        stats.memtable_entries = (members.len() - before) as u64;
        present |= stats.memtable_entries > 0;
        if !present {
            return Err(CellarError::NotFound(format!("no group {group:?} in this index")));
        }
        members.retain(|m| !view.is_deleted(m.id));
        stats.docs_scanned = members.len() as u64;
        // Documents read for the filter or the text match, kept for the hits.
        let mut docs: std::collections::HashMap<DocId, Document> = std::collections::HashMap::new();
        if q.request.filter.is_some() || !q.terms.is_empty() {
            let mut kept = Vec::with_capacity(members.len());
            for (m, doc) in members.iter().zip(documents(&view, &members)?) {
                if q.request.filter.as_ref().is_some_and(|f| !f.matches(&doc.metadata)) {
                    continue;
                }
                if !q.terms.is_empty() {
                    let have: HashSet<String> =
                        terms(&doc.title).into_iter().chain(terms(&doc.text)).collect();
                    if !q.terms.iter().all(|t| have.contains(t)) {
                        continue;
                    }
                }
                docs.insert(m.id, doc);
                kept.push(*m);
            }
            members = kept;
        }
        stats.docs_scored = members.len() as u64;
        if members.len() <= q.k && docs.is_empty() {
            // Every member is a hit: the disk reads their texts while their vectors are scored.
            advise_texts(&view, &members)?;
        }
        let mut scored: Vec<(Member, f32)> = if q.maxsim {
            let scores = self.score_members(&view, &q.query, &members, &mut stats)?;
            members.into_iter().zip(scores).collect()
        } else {
            advise_pooled(&view, &members)?;
            members.into_iter().map(|m| (m, dot_f16(self.isa, &q.query.pooled, m.pooled(&view)))).collect()
        };
        // The k best, and every document tied with the k-th: ties are broken by collection id.
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        let cut = match scored.get(q.k.saturating_sub(1)) {
            Some(kth) => scored.iter().position(|s| s.1 < kth.1).unwrap_or(scored.len()),
            None => scored.len(),
        };
        scored.truncate(cut);
        // In the order they lie in, so a segment's are read together.
        let mut unread: Vec<Member> =
            scored.iter().map(|(m, _)| *m).filter(|m| !docs.contains_key(&m.id)).collect();
        unread.sort_unstable_by_key(|m| m.at);
        docs.extend(unread.iter().map(|m| m.id).zip(documents(&view, &unread)?));
        let mut hits = scored
            .into_iter()
            .map(|(m, score)| {
                let doc = docs.remove(&m.id).expect("every hit's document was read");
                let text = request.include_text.unwrap_or(true).then_some(doc.text);
                GroupHit { id: doc.id, score, title: doc.title, text, metadata: doc.metadata }
            })
            .collect::<Vec<GroupHit>>();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
        hits.truncate(q.k);
        stats.total_ms = ms_since(start);
        Ok(GroupResult { hits, stats })
    }

    /// MaxSim of every member, in order: each segment's members read in one batch, the
    /// memtable's scored from RAM.
    fn score_members(
        &self,
        view: &LiveView,
        query: &PreparedQuery,
        members: &[Member],
        stats: &mut ScanStats,
    ) -> Result<Vec<f32>> {
        let mut out = crate::prefetch::ScoredRecords::default();
        let mut scores = Vec::with_capacity(members.len());
        let codec = self.store.codec();
        for run in runs(members) {
            match run[0].at {
                At::Segment(s, _) => {
                    scores.extend(self.score_segment(query, &view.segments[s], &locals(run), &mut out)?)
                }
                At::Memtable(p) => {
                    scores.push(codec.maxsim(self.isa, &query.tokens, &view.memtable[p].tokens))
                }
            }
        }
        stats.bytes_read = out.io.bytes;
        stats.read_calls = out.io.read_calls;
        Ok(scores)
    }
}

/// Where a group's document lies in a view: a segment's record, or a memtable entry (ordered as
/// a group's members are gathered: segment by segment, then the memtable).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum At {
    Segment(usize, u32),
    Memtable(usize),
}

/// One live document of the group being searched.
#[derive(Clone, Copy)]
struct Member {
    id: DocId,
    at: At,
}

/// `members` (in their `At` order) cut into runs: each segment's members together, each
/// memtable entry alone.
fn runs(members: &[Member]) -> impl Iterator<Item = &[Member]> {
    members.chunk_by(|a, b| matches!((a.at, b.at), (At::Segment(s, _), At::Segment(t, _)) if s == t))
}

/// The record numbers of a segment's run of members.
fn locals(run: &[Member]) -> Vec<DocId> {
    run.iter()
        .map(|m| match m.at {
            At::Segment(_, local) => DocId(local),
            At::Memtable(_) => unreachable!("a segment's run"),
        })
        .collect()
}

/// Tells the kernel the texts of `members` (in their `At` order) in segments will be read soon
/// (a segment's as one span: a group's texts lie side by side).
fn advise_texts(view: &LiveView, members: &[Member]) -> Result<()> {
    for run in runs(members) {
        if let At::Segment(s, _) = run[0].at {
            view.segments[s].texts.will_need(&locals(run))?;
        }
    }
    Ok(())
}

/// Tells the kernel the pooled vectors of `members` (in their `At` order) in segments will be
/// read now (a segment's run of rows, first to last, at once).
fn advise_pooled(view: &LiveView, members: &[Member]) -> Result<()> {
    for run in runs(members) {
        if let (At::Segment(s, first), At::Segment(_, last)) = (run[0].at, run[run.len() - 1].at) {
            view.segments[s].pooled.will_need(first as usize..last as usize + 1)?;
        }
    }
    Ok(())
}

/// The text, metadata and collection id of each of `members` (in their `At` order), in order:
/// a segment's read together (`TextsReader::get_many`: a group's texts lie side by side).
fn documents(view: &LiveView, members: &[Member]) -> Result<Vec<Document>> {
    let mut out = Vec::with_capacity(members.len());
    for run in runs(members) {
        match run[0].at {
            At::Segment(s, _) => out.extend(view.segments[s].texts.get_many(&locals(run))?),
            At::Memtable(p) => out.push(view.memtable[p].doc.clone()),
        }
    }
    Ok(out)
}

impl Member {
    /// Its pooled vector, f16 little-endian.
    fn pooled<'v>(&self, view: &'v LiveView) -> &'v [u8] {
        match self.at {
            At::Segment(s, local) => view.segments[s].pooled.row_bytes(local as usize),
            At::Memtable(p) => &view.memtable[p].pooled,
        }
    }
}

/// A document of a grouped index as stored: its text and metadata, its token vectors as its
/// codec decodes them, its pooled vector.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupDoc {
    pub group: String,
    pub id: String,
    /// Its version: the internal id of this write of it, plus one (a later write of the same
    /// id has a higher one).
    pub seq: u64,
    pub title: String,
    pub text: String,
    pub n_tokens: usize,
    pub tokens: Vec<f32>,
    pub pooled: Vec<f32>,
    pub metadata: Metadata,
}

/// What a grouped index's segments hold of its groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Sum over segments of the groups each holds.
    pub segment_groups: u64,
    /// RAM of the segments' group directories and of their records' id order.
    pub directory_bytes: u64,
}

impl Index {
    /// The live document `id` of `group`; `NotFound` when there is none.
    pub fn get_in_group(&self, group: &str, id: &str) -> Result<GroupDoc> {
        check_key("group", group)?;
        check_key("document id", id)?;
        let missing = || CellarError::NotFound(format!("no document {id:?} in group {group:?}"));
        let internal = self.lookup(&crate::doc::doc_key(Some(group), id))?.ok_or_else(missing)?;
        let view = self.live_view();
        let codec = self.store.codec();
        let mut tokens = Vec::new();
        let (doc, n_tokens, pooled) = match view.locate(internal)? {
            Located::Segment(segment, local) => {
                let batch = segment.store.read_batch(&[local])?;
                let record = batch.record(0);
                codec.decode(record.tokens, &mut tokens);
                let pooled = crate::written::state::f16_row(segment.pooled.row_bytes(local.0 as usize));
                (segment.texts.get(local)?, record.n_tokens, pooled)
            }
            Located::Memtable(doc) => {
                codec.decode(&doc.tokens, &mut tokens);
                let pooled = crate::written::state::f16_row(&doc.pooled);
                (doc.doc.clone(), doc.n_tokens as usize, pooled)
            }
            Located::Base => return Err(CellarError::internal("a grouped index has no base documents")),
        };
        Ok(GroupDoc {
            group: group.to_string(),
            id: doc.id,
            seq: u64::from(internal.0) + 1,
            title: doc.title,
            text: doc.text,
            n_tokens,
            tokens,
            pooled,
            metadata: doc.metadata,
        })
    }

    /// What the segments hold of the groups, and the RAM it takes.
    pub fn group_stats(&self) -> GroupStats {
        let view = self.live_view();
        let mut stats = GroupStats::default();
        for segment in &view.segments {
            if let Some(groups) = &segment.groups {
                stats.segment_groups += groups.len() as u64;
                stats.directory_bytes += groups.ram_bytes() as u64 + 4 * segment.len() as u64;
            }
        }
        stats
    }
}
