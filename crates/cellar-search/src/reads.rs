//! The one read-and-score pipeline every mode re-ranks through.
//!
//! A query's candidate records are split into chunks of at most the store's chunk size of pages
//! (`VectorStore::chunks`, `cellar_core::io::chunk_bytes`: about 8 records, 256 KiB to 2 MiB)
//! and read chunk after chunk on an I/O thread (`cellar-read`), each handed over the moment it
//! is read; the query's own thread scores a chunk with MaxSim while the next ones are in flight.
//! Direct reads land in the reader's pooled buffers (no mapping, page fault or unmapping per
//! query), and at most [`AHEAD_BYTES`] of read chunks wait to be scored ([`EARLY_AHEAD_BYTES`]
//! for the early reads made while its text is encoded, when nothing can be scored yet), so a
//! query holds a bounded number of buffers. While the query's thread waits
//! for a chunk it gives its CPU slot back (`cellar_core::io::wait`): in the server another
//! search computes on that core meanwhile.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::Scope;
use std::time::Instant;

use cellar_core::io::wait::waiting_on_io;
use cellar_core::io::{ReaderKind, RecordBatch};
use cellar_core::stats::ms_since;
use cellar_core::store::VectorStore;
use cellar_core::{CellarError, DocId, Result};

use crate::index::Index;
use crate::prefetch::ScoredRecords;
use crate::query::PreparedQuery;
use crate::written::state::Located;

/// Bytes of read chunks that may wait to be scored, besides the one being scored and the one
/// being read (at least one chunk).
pub const AHEAD_BYTES: usize = 512 << 10;
/// Bytes of read chunks that may wait while the query is encoded (early reads): enough to hide
/// the reads of a typical re-rank under the encoding (8 MiB: 128 SciFact records at residual2,
/// ~45 at f16), few enough that a query's buffers stay bounded under a memory cap; the rest is
/// read while the first chunks are scored.
pub const EARLY_AHEAD_BYTES: usize = 8 << 20;

/// Chunks of a written segment's records from which they are read on an I/O thread while the
/// query's thread scores: below, they are read inline (the kernel reads the run ahead all the
/// same), since starting a thread costs more than the overlap saves on cached pages (a warm
/// 200-document group of two chunks took 0.29 ms with the thread, 0.08 ms for 100 documents
/// in one).
pub const SEGMENT_THREAD_CHUNKS: usize = 4;

/// One chunk, read.
struct Chunk {
    range: Range<usize>,
    batch: RecordBatch,
    read_ms: f64,
}

/// Reads under way on an I/O thread, to be scored with [`Index::score_reads`].
pub(crate) struct Reads {
    /// Shared with the I/O thread, which reads them chunk by chunk.
    ids: Arc<[DocId]>,
    chunks: Receiver<Result<Chunk>>,
    /// Written documents (not in the base's store), read and scored after the chunks.
    live: Vec<DocId>,
}

impl Reads {
    /// The records these reads cover (a set: callers ask once per candidate).
    pub(crate) fn covered(&self) -> HashSet<DocId> {
        self.ids.iter().chain(&self.live).copied().collect()
    }

    /// Hands each chunk to `score` as it arrives, until the I/O thread is done (or a read
    /// failed); the time waited for chunks goes to `out.wait_ms`.
    fn each_chunk(
        &self,
        out: &mut ScoredRecords,
        mut score: impl FnMut(Chunk, &mut ScoredRecords),
    ) -> Result<()> {
        loop {
            let wait_start = Instant::now();
            let Ok(chunk) = waiting_on_io(|| self.chunks.recv()) else { return Ok(()) };
            out.wait_ms += ms_since(wait_start);
            score(chunk?, out);
        }
    }
}

impl Index {
    /// Starts reading the records of `ids` on an I/O thread of `scope`, chunk by chunk, with at
    /// most `ahead_bytes` of read chunks (at least one) waiting to be scored.
    pub(crate) fn start_reads<'scope>(
        &'scope self,
        scope: &'scope Scope<'scope, '_>,
        ids: &[DocId],
        ahead_bytes: usize,
    ) -> Result<Reads> {
        let (base, live) = self.split_base(ids);
        let chunk_bytes = self.store.chunk_bytes();
        let chunks = self.store.chunks(&base, chunk_bytes)?;
        let ahead = (ahead_bytes / chunk_bytes).max(1);
        let mut reads = spawn_reads(scope, &self.store, Arc::from(&base[..]), chunks, ahead)?;
        reads.live = live;
        Ok(reads)
    }

    /// `ids` split into the base's and the written documents' (the base's borrowed, nothing
    /// copied, when none is written: the common case of a search).
    fn split_base<'a>(&self, ids: &'a [DocId]) -> (Cow<'a, [DocId]>, Vec<DocId>) {
        let base = self.store.len() as u32;
        if ids.iter().all(|id| id.0 < base) {
            return (Cow::Borrowed(ids), Vec::new());
        }
        let (base, written) = ids.iter().partition(|id| id.0 < base);
        (Cow::Owned(base), written)
    }

    /// Scores every chunk of `reads` as it arrives. `wait_ms` is the time this thread waited for
    /// chunks: the rest of `read_ms` overlapped with other work.
    pub(crate) fn score_reads(&self, query: &PreparedQuery, reads: Reads) -> Result<ScoredRecords> {
        let mut out =
            ScoredRecords { scores: HashMap::with_capacity(reads.ids.len()), ..ScoredRecords::default() };
        reads.each_chunk(&mut out, |chunk, out| self.score_chunk(query, &reads.ids, chunk, out))?;
        self.score_live(query, &reads.live, &mut out)?;
        Ok(out)
    }

    /// Scores the reads started before the query was encoded (`early`) and reads and scores
    /// `missing` (records they do not cover). On a disk reader the reads of `missing` are
    /// submitted first, so they are in flight while the early records — read under the
    /// encoding — are scored: the candidates known only after the encoding (the IVF's) are read
    /// under that MaxSim instead of after it.
    pub(crate) fn score_early_and_late(
        &self,
        query: &PreparedQuery,
        early: Option<Reads>,
        missing: &[DocId],
    ) -> Result<(ScoredRecords, ScoredRecords)> {
        let Some(early) = early else {
            return Ok((ScoredRecords::default(), self.read_and_score(query, missing)?));
        };
        if missing.is_empty() || self.store.reader_kind() == ReaderKind::Ram {
            let early = self.score_reads(query, early)?;
            return Ok((early, self.read_and_score(query, missing)?));
        }
        std::thread::scope(|scope| {
            let late = self.start_reads(scope, missing, AHEAD_BYTES)?;
            let early = self.score_reads(query, early)?;
            Ok((early, self.score_reads(query, late)?))
        })
    }

    /// [`Index::score_early_and_late`] with early reads of `early` started first (tests check
    /// the split against one read of both sets through it).
    #[doc(hidden)]
    pub fn read_early_then_late(
        &self,
        query: &PreparedQuery,
        early: &[DocId],
        missing: &[DocId],
    ) -> Result<(ScoredRecords, ScoredRecords)> {
        std::thread::scope(|scope| {
            let reads = self.start_reads(scope, early, EARLY_AHEAD_BYTES)?;
            self.score_early_and_late(query, Some(reads), missing)
        })
    }

    /// Reads and scores written documents: a segment's records through its own store (one
    /// batch per segment), the memtable's from RAM.
    fn score_live(&self, query: &PreparedQuery, ids: &[DocId], out: &mut ScoredRecords) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        let view = self.live_view();
        let codec = self.store.codec();
        let mut by_segment: Vec<(&crate::written::segment::Segment, Vec<DocId>, Vec<DocId>)> = Vec::new();
        for id in ids {
            match view.locate(*id)? {
                Located::Base => {
                    return Err(CellarError::internal(format!(
                        "document {} is in the base, not written",
                        id.0
                    )))
                }
                Located::Memtable(doc) => {
                    out.scores.insert(*id, codec.maxsim(self.isa, &query.tokens, &doc.tokens));
                }
                Located::Segment(segment, local) => {
                    match by_segment.iter_mut().find(|(s, _, _)| std::ptr::eq(*s, segment)) {
                        Some((_, globals, locals)) => {
                            globals.push(*id);
                            locals.push(local);
                        }
                        None => by_segment.push((segment, vec![*id], vec![local])),
                    }
                }
            }
        }
        // The memtable's scoring; each segment's reads and scoring count their own time.
        out.score_ms += ms_since(start);
        for (segment, globals, locals) in by_segment {
            let scores = self.score_segment(query, segment, &locals, out)?;
            out.scores.extend(globals.into_iter().zip(scores));
        }
        Ok(())
    }

    /// Reads records `locals` of a segment and scores each with MaxSim, in order; the reads'
    /// time and bytes go to `out`. Read in the segment store's chunks: on a disk reader, more
    /// than one chunk is read on an I/O thread while the chunks read before are scored (a
    /// grouped index's group of thousands of records is one such run), so a query holds at
    /// most [`AHEAD_BYTES`] of them at a time.
    pub(crate) fn score_segment(
        &self,
        query: &PreparedQuery,
        segment: &crate::written::segment::Segment,
        locals: &[DocId],
        out: &mut ScoredRecords,
    ) -> Result<Vec<f32>> {
        let store = &segment.store;
        let chunk_bytes = store.chunk_bytes();
        let chunks = store.chunks(locals, chunk_bytes)?;
        let mut scores = vec![0.0; locals.len()];
        let mut score = |chunk: Chunk, out: &mut ScoredRecords| {
            self.score_chunk_with(query, chunk, out, &mut |_, at, score| scores[at] = score);
        };
        if chunks.len() > 1 && store.reader_kind() != ReaderKind::Ram {
            // A group's run: the kernel reads all of it at once, ahead of the chunks' reads.
            store.will_need(locals)?;
        }
        if chunks.len() >= SEGMENT_THREAD_CHUNKS && store.reader_kind() != ReaderKind::Ram {
            std::thread::scope(|scope| -> Result<()> {
                let ahead = (AHEAD_BYTES / chunk_bytes).max(1);
                spawn_reads(scope, store, locals.into(), chunks, ahead)?.each_chunk(out, &mut score)
            })?;
        } else {
            for range in chunks {
                let start = Instant::now();
                let batch = store.read_batch(&locals[range.clone()])?;
                let read_ms = ms_since(start);
                out.wait_ms += read_ms;
                score(Chunk { range, batch, read_ms }, out);
            }
        }
        Ok(scores)
    }

    fn score_chunk(&self, query: &PreparedQuery, ids: &[DocId], chunk: Chunk, out: &mut ScoredRecords) {
        self.score_chunk_with(query, chunk, out, &mut |out, at, score| {
            out.scores.insert(ids[at], score);
        });
    }

    /// Scores every record of `chunk` with MaxSim, handing `put` each one's position among the
    /// ids the chunk's range indexes and its score; counts the chunk's read and scoring in `out`.
    fn score_chunk_with(
        &self,
        query: &PreparedQuery,
        chunk: Chunk,
        out: &mut ScoredRecords,
        put: &mut dyn FnMut(&mut ScoredRecords, usize, f32),
    ) {
        let start = Instant::now();
        let codec = self.store.codec();
        for (i, at) in chunk.range.clone().enumerate() {
            put(out, at, chunk.batch.record(i).score(codec.as_ref(), self.isa, &query.tokens));
        }
        out.read_ms += chunk.read_ms;
        out.io += chunk.batch.stats();
        out.score_ms += ms_since(start);
    }

    /// Reads the records of `ids` and scores each with MaxSim: through the pipeline when there
    /// is more than one chunk to read from disk, inline otherwise (the ram reader has nothing
    /// to overlap).
    pub fn read_and_score(&self, query: &PreparedQuery, ids: &[DocId]) -> Result<ScoredRecords> {
        self.read_and_score_in(query, ids, self.store.chunk_bytes())
    }

    /// [`Index::read_and_score`] with chunks of `chunk_bytes` (tests drive the pipeline with
    /// small chunks through it).
    #[doc(hidden)]
    pub fn read_and_score_in(
        &self,
        query: &PreparedQuery,
        ids: &[DocId],
        chunk_bytes: usize,
    ) -> Result<ScoredRecords> {
        if ids.is_empty() {
            return Ok(ScoredRecords::default());
        }
        let (base, live) = self.split_base(ids);
        let ids: &[DocId] = &base;
        let chunks = self.store.chunks(ids, chunk_bytes)?;
        if chunks.len() > 1 && self.store.reader_kind() != ReaderKind::Ram {
            return std::thread::scope(|scope| {
                let ahead = (AHEAD_BYTES / chunk_bytes).max(1);
                let mut reads = spawn_reads(scope, &self.store, ids.into(), chunks, ahead)?;
                reads.live = live;
                self.score_reads(query, reads)
            });
        }
        let mut out = ScoredRecords { scores: HashMap::with_capacity(ids.len()), ..ScoredRecords::default() };
        for range in chunks {
            let start = Instant::now();
            let batch = self.store.read_batch(&ids[range.clone()])?;
            let read_ms = ms_since(start);
            out.wait_ms += read_ms;
            self.score_chunk(query, ids, Chunk { range, batch, read_ms }, &mut out);
        }
        self.score_live(query, &live, &mut out)?;
        Ok(out)
    }
}

/// Reads `chunks` (ranges of `ids`) of `store` on an I/O thread of `scope`, one after the other,
/// at most `ahead` read chunks waiting to be scored.
fn spawn_reads<'scope>(
    scope: &'scope Scope<'scope, '_>,
    store: &'scope VectorStore,
    ids: Arc<[DocId]>,
    chunks: Vec<Range<usize>>,
    ahead: usize,
) -> Result<Reads> {
    let (tx, rx) = sync_channel(ahead.min(chunks.len()));
    let reading = Arc::clone(&ids);
    let io = std::thread::Builder::new().name("cellar-read".into()).spawn_scoped(scope, move || {
        for range in chunks {
            let start = Instant::now();
            let read = store.read_batch(&reading[range.clone()]);
            let failed = read.is_err();
            let sent = tx.send(read.map(|batch| Chunk { range, batch, read_ms: ms_since(start) }));
            // A failed read ends the reads; so does a scorer that stopped listening.
            if failed || sent.is_err() {
                return;
            }
        }
    });
    io.map_err(|e| CellarError::internal(format!("starting an I/O thread: {e}")))?;
    Ok(Reads { ids, chunks: rx, live: Vec::new() })
}
