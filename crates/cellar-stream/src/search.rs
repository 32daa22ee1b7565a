//! Exact search inside one group: no index. The group's entries are read from the memtable and
//! from each segment's extent of that group (in chunks of `Options::chunk_bytes`), newest source
//! first, so the first version of an id seen is its newest; tombstones hide older versions.
//! Every live document passing the filters and the text match is scored (MaxSim over token
//! vectors, or the dot product of pooled vectors) and the exact top-k is kept.
//!
//! Text match: the text and the query terms are split on every character that is not
//! alphanumeric and lowercased; a document matches when it holds every query term.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};
use std::sync::Arc;

use cellar_core::codec::{Codec, F16Codec};
use cellar_core::kernels::{dot_f16, Isa};
use cellar_core::{CellarError, Result};
use cellar_search::request::MAX_QUERY_VECTORS;
use cellar_search::{Filter, Metadata, Mode, SearchRequest};

use crate::collection::Collection;
use crate::doc::{flat_vectors, mean_or_zero, EntryView};

#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub id: String,
    pub score: f32,
    pub text: Option<String>,
    pub metadata: Metadata,
}

/// What a search read and scored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Live documents of the group examined (after newest-wins, before filters).
    pub docs_scanned: u64,
    /// Documents that passed filters and text match, hence scored.
    pub docs_scored: u64,
    pub bytes_read: u64,
    pub read_calls: u64,
    pub segments_read: u64,
    pub memtable_entries: u64,
}

#[derive(Clone, Debug)]
pub struct SearchResult {
    pub hits: Vec<Hit>,
    pub stats: ScanStats,
}

/// Lowercased alphanumeric terms of `text`.
pub fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_lowercase).collect()
}

/// A search checked against the collection, with its scoring vector ready: `dense` scores
/// MaxSim over the token vectors, `dense-exact` the dot product of pooled vectors.
struct Prepared<'r> {
    /// The query's token vectors in the codec's form (`Codec::prepare_query`), or its pooled
    /// vector.
    vector: Vec<f32>,
    /// The codec of a stream's token vectors (f16), whose MaxSim is the one an index's records
    /// are scored with (`Codec::maxsim`).
    codec: F16Codec,
    maxsim: bool,
    dim: usize,
    k: usize,
    terms: Vec<String>,
    /// The request's filter, borrowed (a filter may hold thousands of values).
    filter: Option<&'r Filter>,
    include_text: bool,
    isa: Isa,
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

/// Whether a stream's search of `mode` scores MaxSim (`dense`, the default) or pooled vectors
/// (`dense-exact`); other modes are refused.
pub fn scores_maxsim(mode: Option<Mode>) -> Result<bool> {
    match mode.unwrap_or(Mode::Dense) {
        Mode::Dense => Ok(true),
        Mode::DenseExact => Ok(false),
        other => Err(CellarError::InvalidInput(format!(
            "mode {other}: a stream is searched exactly inside one group, by dense (MaxSim over token vectors) or dense-exact (pooled vectors)"
        ))),
    }
}

fn prepare(request: &SearchRequest, dim: usize) -> Result<Prepared<'_>> {
    let invalid = |m: String| Err(CellarError::InvalidInput(m));
    if let Some((field, _)) = index_knobs(request).into_iter().find(|(_, set)| *set) {
        return invalid(format!(
            "{field}: a stream's search is exact inside one group, with no first stage or fusion to tune"
        ));
    }
    let k = request.checked_k()?;
    let maxsim = scores_maxsim(request.mode)?;
    let Some(given) = &request.query_vectors else {
        return invalid("the search has neither query text nor query vectors".into());
    };
    let (tokens, pooled) = flat_vectors(given, dim, "query_vectors", MAX_QUERY_VECTORS)?;
    let n = tokens.len() / dim.max(1);
    if n == 0 && (maxsim || pooled.is_none()) {
        return invalid(format!("the query has {n} token vectors; 1 to {MAX_QUERY_VECTORS} allowed"));
    }
    if tokens.iter().chain(pooled.iter().flat_map(|p| p.iter())).any(|v| !v.is_finite()) {
        return invalid("the query holds a value that is not finite".into());
    }
    let codec = F16Codec::new(dim)?;
    let vector = match (maxsim, pooled) {
        (true, _) => codec.prepare_query_vec(tokens.into_owned()),
        (false, Some(p)) => p.into_owned(),
        (false, None) => mean_or_zero(&tokens, dim),
    };
    let terms = request.require_terms.as_deref().map(terms).unwrap_or_default();
    if request.require_terms.is_some() && terms.is_empty() {
        return invalid("require_terms holds no term".into());
    }
    if let Some(filter) = &request.filter {
        filter.check("filter")?;
    }
    Ok(Prepared {
        vector,
        codec,
        maxsim,
        dim,
        k,
        terms,
        filter: request.filter.as_ref(),
        include_text: request.include_text.unwrap_or(true),
        isa: Isa::detected(),
    })
}

/// A hit in the running top-k; ordered best first (higher score, then smaller id).
struct Ranked(Hit);

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.score.total_cmp(&self.0.score).then_with(|| self.0.id.cmp(&other.0.id))
    }
}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Ranked {}

/// The scan's running state: ids seen (only when several sources hold the group), the top-k.
struct Scan<'q> {
    query: &'q Prepared<'q>,
    seen: Option<HashSet<String>>,
    /// Max-heap on "worse": its top is the worst hit kept.
    top: BinaryHeap<Ranked>,
    stats: ScanStats,
}

impl Scan<'_> {
    fn offer(&mut self, view: &EntryView<'_>) -> std::result::Result<(), String> {
        if let Some(seen) = &mut self.seen {
            if !seen.insert(view.id.to_string()) {
                return Ok(());
            }
        }
        if view.is_tombstone() {
            return Ok(());
        }
        self.stats.docs_scanned += 1;
        let q = self.query;
        if view.dim != q.dim {
            return Err(format!(
                "document {:?} has dim {} in a collection of dim {}",
                view.id, view.dim, q.dim
            ));
        }
        let metadata = if q.filter.is_none() { None } else { Some(view.metadata()?) };
        if let (Some(filter), Some(meta)) = (q.filter, &metadata) {
            if !filter.matches(meta) {
                return Ok(());
            }
        }
        if !q.terms.is_empty() {
            let have: HashSet<String> = terms(view.text).into_iter().collect();
            if !q.terms.iter().all(|t| have.contains(t)) {
                return Ok(());
            }
        }
        self.stats.docs_scored += 1;
        let score = if q.maxsim {
            q.codec.maxsim(q.isa, &q.vector, view.tokens)
        } else {
            dot_f16(q.isa, &q.vector, view.pooled)
        };
        self.keep(view, score, metadata)
    }

    fn keep(
        &mut self,
        view: &EntryView<'_>,
        score: f32,
        metadata: Option<Metadata>,
    ) -> std::result::Result<(), String> {
        if self.top.len() == self.query.k {
            let worst = &self.top.peek().expect("k >= 1").0;
            let better = score > worst.score || (score == worst.score && view.id < worst.id.as_str());
            if !better {
                return Ok(());
            }
            self.top.pop();
        }
        let metadata = match metadata {
            Some(m) => m,
            None => view.metadata()?,
        };
        let text = self.query.include_text.then(|| view.text.to_string());
        self.top.push(Ranked(Hit { id: view.id.to_string(), score, text, metadata }));
        Ok(())
    }
}

impl Collection {
    /// The exact top-k of `request` among the live documents of `group`; `NotFound` when the
    /// collection holds nothing for the group. The request carries its query vectors (a
    /// front end encodes the text first: `encoding::request_with_vectors`).
    pub fn search(&self, group: &str, request: &SearchRequest) -> Result<SearchResult> {
        cellar_search::doc::check_key("group", group)?;
        let prepared = prepare(request, self.dim())?;
        let inner = &self.inner;
        let (buffered, segments) = {
            let state = inner.read();
            let segments: Vec<_> =
                state.segments.iter().filter(|s| s.extent(group).is_some()).cloned().collect();
            (state.memtable.group(group), segments)
        };
        if buffered.is_empty() && segments.is_empty() {
            return Err(CellarError::NotFound(format!("no group {group:?} in this collection")));
        }
        let sources = segments.len() + usize::from(!buffered.is_empty());
        let mut scan = Scan {
            query: &prepared,
            seen: (sources > 1).then(HashSet::new),
            top: BinaryHeap::new(),
            stats: ScanStats { memtable_entries: buffered.len() as u64, ..Default::default() },
        };
        let memtable_path = inner.dir.join("memtable");
        for entry in &buffered {
            let view = EntryView::parse_at(&memtable_path, entry)?;
            scan.offer(&view).map_err(|d| CellarError::corrupted(&memtable_path, 0, d))?;
        }
        for segment in segments.iter().rev() {
            scan_segment(&mut scan, segment, group, inner.options.chunk_bytes)?;
        }
        let mut hits: Vec<Hit> = scan.top.into_vec().into_iter().map(|r| r.0).collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
        Ok(SearchResult { hits, stats: scan.stats })
    }
}

fn scan_segment(
    scan: &mut Scan<'_>,
    segment: &Arc<crate::segment::Segment>,
    group: &str,
    chunk: usize,
) -> Result<()> {
    let Some(mut cursor) = segment.cursor(group, chunk) else { return Ok(()) };
    while let Some(entry) = cursor.next_entry()? {
        let view = EntryView::parse_at(&segment.path, entry)?;
        scan.offer(&view).map_err(|d| CellarError::corrupted(&segment.path, 0, d))?;
    }
    scan.stats.bytes_read += cursor.bytes_read;
    scan.stats.read_calls += cursor.read_calls;
    scan.stats.segments_read += 1;
    Ok(())
}
