//! Exact search inside one group: no index. The group's entries are read from the memtable and
//! from each segment's extent of that group (in chunks of `Options::chunk_bytes`), newest source
//! first, so the first version of an id seen is its newest; tombstones hide older versions.
//! Every live document passing the filters and the text match is scored (MaxSim over token
//! vectors, or the dot product of pooled vectors) and the exact top-k is kept.
//!
//! Text match: the text and the query terms are split on every character that is not
//! alphanumeric and lowercased; a document matches when it holds every query term.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::sync::Arc;

use cellar_core::kernels::{dot_f16, maxsim_f16, Isa};
use cellar_core::{CellarError, Result};

use crate::collection::Collection;
use crate::doc::{EntryView, MetaValue};

/// Most hits one search returns, and most query token vectors.
pub const MAX_K: usize = 1000;
pub const MAX_QUERY_TOKENS: usize = 1024;

/// How documents are scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Sum over query tokens of the best dot product with a document token.
    MaxSim,
    /// Dot product of the pooled vectors (nearest neighbour by inner product).
    Pooled,
}

impl std::str::FromStr for Mode {
    type Err = CellarError;
    fn from_str(s: &str) -> Result<Mode> {
        match s {
            "maxsim" => Ok(Mode::MaxSim),
            "pooled" => Ok(Mode::Pooled),
            other => Err(CellarError::InvalidInput(format!("unknown mode {other:?}: maxsim or pooled"))),
        }
    }
}

/// One search. `tokens` is `n * dim` f32 (MaxSim); `pooled` defaults to the normalised mean of
/// `tokens` (Pooled mode).
#[derive(Clone, Debug)]
pub struct Query {
    pub tokens: Vec<f32>,
    pub pooled: Option<Vec<f32>>,
    pub mode: Mode,
    pub k: usize,
    /// Documents must contain every term of this text (see the module notes).
    pub require_terms: Option<String>,
    /// Metadata equality filters, all required.
    pub filters: BTreeMap<String, MetaValue>,
    pub include_text: bool,
}

impl Query {
    pub fn new(tokens: Vec<f32>, k: usize) -> Query {
        Query {
            tokens,
            pooled: None,
            mode: Mode::MaxSim,
            k,
            require_terms: None,
            filters: BTreeMap::new(),
            include_text: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub id: String,
    pub score: f32,
    pub text: Option<String>,
    pub metadata: BTreeMap<String, MetaValue>,
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

/// A query checked against the collection, with its scoring vector ready.
struct Prepared {
    vector: Vec<f32>,
    mode: Mode,
    dim: usize,
    k: usize,
    terms: Vec<String>,
    filters: BTreeMap<String, MetaValue>,
    include_text: bool,
    isa: Isa,
}

fn mean_normalised(tokens: &[f32], dim: usize) -> Vec<f32> {
    let mut mean = vec![0f32; dim];
    tokens.chunks_exact(dim).for_each(|row| mean.iter_mut().zip(row).for_each(|(m, v)| *m += v));
    let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
    mean.iter_mut().for_each(|v| *v /= norm.max(f32::MIN_POSITIVE));
    mean
}

fn prepare(query: &Query, dim: usize) -> Result<Prepared> {
    let invalid = |m: String| Err(CellarError::InvalidInput(m));
    if query.k == 0 || query.k > MAX_K {
        return invalid(format!("k must be 1 to {MAX_K}, got {}", query.k));
    }
    if !query.tokens.len().is_multiple_of(dim) {
        return Err(CellarError::WrongDimension { expected: dim, received: query.tokens.len() % dim });
    }
    let n = query.tokens.len() / dim;
    if n > MAX_QUERY_TOKENS || (n == 0 && (query.mode == Mode::MaxSim || query.pooled.is_none())) {
        return invalid(format!("the query has {n} token vectors; 1 to {MAX_QUERY_TOKENS} allowed"));
    }
    if query.tokens.iter().chain(query.pooled.iter().flatten()).any(|v| !v.is_finite()) {
        return invalid("the query holds a value that is not finite".into());
    }
    let vector = match (query.mode, &query.pooled) {
        (Mode::MaxSim, _) => query.tokens.clone(),
        (Mode::Pooled, Some(p)) if p.len() != dim => {
            return Err(CellarError::WrongDimension { expected: dim, received: p.len() })
        }
        (Mode::Pooled, Some(p)) => p.clone(),
        (Mode::Pooled, None) => mean_normalised(&query.tokens, dim),
    };
    let terms = query.require_terms.as_deref().map(terms).unwrap_or_default();
    if query.require_terms.is_some() && terms.is_empty() {
        return invalid("require_terms holds no term".into());
    }
    let (mode, k, filters, include_text) = (query.mode, query.k, query.filters.clone(), query.include_text);
    Ok(Prepared { vector, mode, dim, k, terms, filters, include_text, isa: Isa::detected() })
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
    query: &'q Prepared,
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
        let metadata = if q.filters.is_empty() { None } else { Some(view.metadata()?) };
        if let Some(meta) = &metadata {
            if !q.filters.iter().all(|(k, v)| meta.get(k).is_some_and(|m| m.matches(v))) {
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
        let score = match q.mode {
            Mode::MaxSim => maxsim_f16(q.isa, &q.vector, q.dim, view.tokens),
            Mode::Pooled => dot_f16(q.isa, &q.vector, view.pooled),
        };
        self.keep(view, score, metadata)
    }

    fn keep(
        &mut self,
        view: &EntryView<'_>,
        score: f32,
        metadata: Option<BTreeMap<String, MetaValue>>,
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
    /// The exact top-k of `query` among the live documents of `group`; `NotFound` when the
    /// collection holds nothing for the group.
    pub fn search(&self, group: &str, query: &Query) -> Result<SearchResult> {
        crate::doc::check_key("group", group)?;
        let prepared = prepare(query, self.dim())?;
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
