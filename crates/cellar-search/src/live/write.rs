//! Writes to an index: the one request type of every front end (`WriteRequest`: HTTP, Python,
//! the CLI) and `Index::write`, which applies a batch all or nothing. Texts are encoded in chunks
//! of [`ENCODE_CHUNK_DOCS`], between which `Index::write_checked`'s caller may stop the write
//! (the server, at its deadline): nothing is logged then.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cellar_core::io::wait::waiting_on_io;
use cellar_core::stats::ms_since;
use cellar_core::{CellarError, DocId, Result};
use cellar_encode::Encoded;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::corpus::Document;
use crate::doc::{doc_key, key_error, DocIn};
use crate::filter::Filter;
use crate::index::Index;
use crate::vectors::project_tokens;
use crate::written::batch::{LiveDoc, LogBatch, LogOp};
use crate::written::state::StagedBatch;

/// Operations one write request may hold.
pub const MAX_WRITE_OPS: usize = 4096;
/// Documents whose texts a write encodes in one call: between chunks its caller may stop it
/// (`Index::write_checked`), and it holds the full-precision vectors of one chunk at a time.
pub const ENCODE_CHUNK_DOCS: usize = 32;

/// How far a write's encoding has come, as [`Index::write_checked`]'s caller sees it before
/// each chunk of texts and once they are all encoded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EncodeProgress {
    /// Texts encoded so far, of `docs`.
    pub done: usize,
    pub docs: usize,
    /// Bytes (title and text) of the texts encoded so far, of `bytes`.
    pub done_bytes: usize,
    pub bytes: usize,
    /// Time spent encoding so far.
    pub elapsed: Duration,
}

/// One change: `{"add": doc}` (the id must be new), `{"update": doc}` (the id must exist; the
/// new version replaces the old everywhere), `{"put": doc}` (added, or replacing the document of
/// its id), `{"delete": "id"}` (the id must exist), `{"delete_in_group": {"group": .., "id":
/// ..}}` (a grouped index's delete: the document must exist) or `{"delete_where": filter}`
/// (every document the filter matches when the write starts; none is not an error). In a
/// grouped index a document's id is unique within its group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WriteOp {
    Add(DocIn),
    Update(DocIn),
    Put(DocIn),
    Delete(String),
    DeleteInGroup(GroupKey),
    DeleteWhere(Filter),
}

/// A document of a grouped index: its group and its id there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupKey {
    pub group: String,
    pub id: String,
}

/// A batch of changes, applied all or nothing, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteRequest {
    #[schemars(length(min = 1, max = MAX_WRITE_OPS))]
    pub ops: Vec<WriteOp>,
}

/// What a write did; once returned, the batch is durable and the next search sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WriteReport {
    /// The batch's sequence number in the index's log.
    pub seq: u64,
    pub added: usize,
    pub updated: usize,
    pub deleted: usize,
    /// Searchable documents after the batch.
    pub docs: u64,
    /// The internal id the next written document gets: every document this batch wrote has a
    /// smaller one (a grouped index's stream calls it the documents' sequence number).
    #[serde(default)]
    pub next_id: u32,
    /// Encoding the documents' text (0 when all came with vectors).
    pub encode_ms: f64,
    /// Writing the batch's log record (to the page cache).
    pub log_ms: f64,
    /// Until the batch is durable (one `fdatasync` of the log for every batch logged
    /// meanwhile), committed to BM25 (one tantivy commit for them all: group commit) and
    /// published to searches.
    pub bm25_ms: f64,
    /// Everything after the encoding: ids resolved, log, BM25, the view published (and a
    /// flush, when the batch filled the memtable).
    pub commit_ms: f64,
    pub total_ms: f64,
}

impl WriteOp {
    /// The document an add, update or put writes.
    pub fn document(&self) -> Option<&DocIn> {
        match self {
            WriteOp::Add(doc) | WriteOp::Update(doc) | WriteOp::Put(doc) => Some(doc),
            WriteOp::Delete(_) | WriteOp::DeleteInGroup(_) | WriteOp::DeleteWhere(_) => None,
        }
    }
}

/// How an error names a document: its id, and its group in a grouped index.
fn named(group: Option<&str>, id: &str) -> String {
    match group {
        Some(group) => format!("{id:?} in group {group:?}"),
        None => format!("{id:?}"),
    }
}

/// A document ready to be logged: encoded by the index's codec.
struct Prepared {
    doc: Document,
    n_tokens: u32,
    tokens: Vec<u8>,
    pooled: Vec<u8>,
}

impl Index {
    /// Applies `request` all or nothing: every document is checked and encoded first, then
    /// every id against the index (an add's must be new, an update's and a delete's must
    /// exist, counting the batch's own earlier operations), then the batch is logged durably
    /// and made visible to searches at once.
    pub fn write(&self, request: WriteRequest) -> Result<WriteReport> {
        let report = self.write_checked(request, &mut |_| true)?;
        Ok(report.expect("a write its caller never stops finishes"))
    }

    /// [`Index::write`], asking `go_on` before each chunk of [`ENCODE_CHUNK_DOCS`] texts is
    /// encoded and once they all are: when it answers false the write stops there, before
    /// anything is logged, and returns `None`.
    pub fn write_checked(
        &self,
        request: WriteRequest,
        go_on: &mut dyn FnMut(&EncodeProgress) -> bool,
    ) -> Result<Option<WriteReport>> {
        let start = Instant::now();
        let mut ops = request.ops;
        if ops.is_empty() || ops.len() > MAX_WRITE_OPS {
            return Err(CellarError::invalid(format!(
                "ops must hold 1 to {MAX_WRITE_OPS} operations, got {}",
                ops.len()
            )));
        }
        let encodes = ops.iter().any(|op| op.document().is_some_and(|d| d.vectors.is_none()));
        let encode_start = Instant::now();
        let Some(mut prepared) = self.prepare_docs(&mut ops, go_on)? else {
            return Ok(None);
        };
        let encode_ms = if encodes { ms_since(encode_start) } else { 0.0 };
        let commit_start = Instant::now();
        let matched = self.resolve_filters(&ops)?;
        let mut slot = self.writer()?;
        let writer = slot.as_mut().expect("the writer was just loaded");
        let (view, epoch) = self.ready_to_log(writer)?;
        let mut changed: HashMap<String, Option<DocId>> = HashMap::new();
        let current = |changed: &HashMap<String, Option<DocId>>, key: &str| match changed.get(key) {
            Some(now) => *now,
            None => writer.ids.get(key).copied(),
        };
        let mut next_id = view.next_id;
        let mut log_ops = Vec::with_capacity(ops.len());
        let mut report = WriteReport::default();
        for (i, op) in ops.iter().enumerate() {
            let (key, old, put) = match op {
                WriteOp::Add(doc) => {
                    let key = doc_key(doc.group.as_deref(), &doc.id);
                    if current(&changed, &key).is_some() {
                        return Err(CellarError::invalid(format!(
                            "ops[{i}].add: document {} exists; update it instead",
                            named(doc.group.as_deref(), &doc.id)
                        )));
                    }
                    report.added += 1;
                    (key, None, true)
                }
                WriteOp::Update(doc) => {
                    let key = doc_key(doc.group.as_deref(), &doc.id);
                    let old = current(&changed, &key).ok_or_else(|| {
                        CellarError::NotFound(format!(
                            "ops[{i}].update: no document {}",
                            named(doc.group.as_deref(), &doc.id)
                        ))
                    })?;
                    report.updated += 1;
                    (key, Some(old), true)
                }
                WriteOp::Put(doc) => {
                    let key = doc_key(doc.group.as_deref(), &doc.id);
                    let old = current(&changed, &key);
                    match old {
                        Some(_) => report.updated += 1,
                        None => report.added += 1,
                    }
                    (key, old, true)
                }
                WriteOp::Delete(id) => {
                    let old = current(&changed, id).ok_or_else(|| {
                        CellarError::NotFound(format!("ops[{i}].delete: no document {id:?}"))
                    })?;
                    report.deleted += 1;
                    (id.clone(), Some(old), false)
                }
                WriteOp::DeleteInGroup(GroupKey { group, id }) => {
                    let key = doc_key(Some(group), id);
                    let old = current(&changed, &key).ok_or_else(|| {
                        CellarError::NotFound(format!(
                            "ops[{i}].delete_in_group: no document {}",
                            named(Some(group), id)
                        ))
                    })?;
                    report.deleted += 1;
                    (key, Some(old), false)
                }
                WriteOp::DeleteWhere(_) => {
                    // Each matched version still current (not updated or deleted since) goes.
                    for (id, internal) in &matched[i] {
                        if current(&changed, id) == Some(*internal) {
                            log_ops.push(LogOp::Delete(*internal));
                            changed.insert(id.clone(), None);
                            report.deleted += 1;
                        }
                    }
                    continue;
                }
            };
            if let Some(old) = old {
                log_ops.push(LogOp::Delete(old));
            }
            if put {
                let p = prepared[i].take().expect("every add, update and put was prepared");
                let doc = LiveDoc {
                    id: DocId(next_id),
                    doc: p.doc,
                    n_tokens: p.n_tokens,
                    tokens: p.tokens,
                    pooled: p.pooled,
                };
                log_ops.push(LogOp::Put(Arc::new(doc)));
                changed.insert(key, Some(DocId(next_id)));
                next_id = next_id
                    .checked_add(1)
                    .ok_or_else(|| CellarError::invalid("an index holds at most 2^32 - 1 documents"))?;
            } else {
                changed.insert(key, None);
            }
        }
        prepared.clear();
        let batch = LogBatch { seq: view.seq + 1, ops: log_ops };
        let payload = batch.encode();
        let log_start = Instant::now();
        let log_at = writer.wal.len();
        // Written, not yet synced: the commit that publishes it syncs every batch logged by
        // then at once (group commit). The sync and the BM25 commit wait on the disk: a server's
        // CPU slot is given back meanwhile (`cellar_core::io::wait`).
        waiting_on_io(|| writer.wal.append_unsynced(&[&payload]))?;
        report.log_ms = ms_since(log_start);
        let mut next = view;
        next.apply(&batch, &self.assigner(), writer.wal.path())?;
        let (alive, seq) = (next.alive(), batch.seq);
        let undo = changed.keys().map(|key| (key.clone(), writer.ids.get(key).copied())).collect();
        self.live.stage(StagedBatch { batch, log_at, undo }, next);
        for (key, now) in changed {
            match now {
                Some(doc) => writer.ids.insert(key, doc),
                None => writer.ids.remove(&key),
            };
        }
        drop(slot);
        let bm25_start = Instant::now();
        // Answered with an error only when the batch was taken back out of the log.
        waiting_on_io(|| self.await_commit(seq, epoch))?;
        report.bm25_ms = ms_since(bm25_start);
        // Durable and published: a flush that fails now is not this batch's to report.
        self.flush_after_write();
        report.seq = seq;
        report.docs = alive;
        report.next_id = next_id;
        report.encode_ms = encode_ms;
        report.commit_ms = ms_since(commit_start);
        report.total_ms = ms_since(start);
        Ok(Some(report))
    }

    /// The documents each `delete_where` of `ops` matches (collection id and internal id), once
    /// every batch logged so far is in BM25; empty for the other operations.
    fn resolve_filters(&self, ops: &[WriteOp]) -> Result<Vec<Vec<(String, DocId)>>> {
        if !ops.iter().any(|op| matches!(op, WriteOp::DeleteWhere(_))) {
            return Ok(vec![Vec::new(); ops.len()]);
        }
        let (seq, epoch) = self.live.latest_seq();
        waiting_on_io(|| self.await_commit(seq, epoch))?;
        ops.iter()
            .map(|op| match op {
                WriteOp::DeleteWhere(filter) => {
                    self.matching(filter)?.into_iter().map(|id| Ok((self.document(id)?.id, id))).collect()
                }
                _ => Ok(Vec::new()),
            })
            .collect()
    }

    /// Checks every document of `ops` and encodes it: the caller's vectors, or its text through
    /// the index's model (the batch's texts in chunks, `go_on` asked before each and at the
    /// end: `None` when it says stop). `None` in the list for deletes. A document's contents
    /// move into what is returned: its id and group stay in `ops`.
    fn prepare_docs(
        &self,
        ops: &mut [WriteOp],
        go_on: &mut dyn FnMut(&EncodeProgress) -> bool,
    ) -> Result<Option<Vec<Option<Prepared>>>> {
        let dim = self.config.encoder.model_dim;
        let mut out: Vec<Option<Prepared>> = Vec::with_capacity(ops.len());
        let mut to_encode: Vec<(usize, Document)> = Vec::new();
        for (i, op) in ops.iter_mut().enumerate() {
            let grouped = self.config.grouped;
            let (doc, at) = match op {
                WriteOp::Add(doc) => (doc, format!("ops[{i}].add")),
                WriteOp::Update(doc) => (doc, format!("ops[{i}].update")),
                WriteOp::Put(doc) => (doc, format!("ops[{i}].put")),
                WriteOp::Delete(id) => {
                    if id.is_empty() {
                        return Err(CellarError::invalid(format!("ops[{i}].delete: the id is empty")));
                    }
                    if grouped {
                        return Err(CellarError::invalid(format!(
                            "ops[{i}].delete: this index is grouped: delete_in_group names the document's group"
                        )));
                    }
                    out.push(None);
                    continue;
                }
                WriteOp::DeleteInGroup(GroupKey { group, id }) => {
                    if !grouped {
                        return Err(CellarError::invalid(format!(
                            "ops[{i}].delete_in_group: this index has no groups; delete names the document"
                        )));
                    }
                    if let Some(e) = key_error("group", group).or_else(|| key_error("document id", id)) {
                        return Err(CellarError::invalid(format!("ops[{i}].delete_in_group: {e}")));
                    }
                    out.push(None);
                    continue;
                }
                WriteOp::DeleteWhere(filter) => {
                    if grouped {
                        return Err(CellarError::Unsupported(format!(
                            "ops[{i}].delete_where: a grouped index matches filters inside one group's \
                             search only; delete its documents with delete_in_group"
                        )));
                    }
                    self.check_filter(filter, &format!("ops[{i}].delete_where"))?;
                    out.push(None);
                    continue;
                }
            };
            doc.check_for_index(&at, grouped)?;
            if !grouped && !doc.metadata.is_empty() && !self.bm25.has_metadata() {
                return Err(crate::bm25::no_metadata_field(&self.dir));
            }
            let contents = DocIn {
                id: doc.id.clone(),
                group: None,
                title: std::mem::take(&mut doc.title),
                text: std::mem::take(&mut doc.text),
                metadata: std::mem::take(&mut doc.metadata),
                vectors: doc.vectors.take(),
            };
            if contents.vectors.is_some() {
                let at = format!("{at}.vectors");
                let (mut document, encoded) = contents
                    .into_embedded(dim, &at)?
                    .checked(i, dim)
                    .map_err(|e| CellarError::invalid(format!("{at}: {e}")))?;
                document.group = doc.group.clone();
                out.push(Some(self.encode_for_store(document, &encoded)));
            } else {
                let document = Document {
                    id: contents.id,
                    title: contents.title,
                    text: contents.text,
                    metadata: contents.metadata,
                    group: doc.group.clone(),
                };
                to_encode.push((i, document));
                out.push(None);
            }
        }
        if !to_encode.is_empty() {
            let encoder = self.encoder()?;
            let text_bytes = |d: &Document| d.title.len() + d.text.len();
            let mut progress = EncodeProgress {
                done: 0,
                docs: to_encode.len(),
                done_bytes: 0,
                bytes: to_encode.iter().map(|(_, d)| text_bytes(d)).sum(),
                elapsed: Duration::ZERO,
            };
            let start = Instant::now();
            let mut rest = to_encode.into_iter();
            loop {
                progress.elapsed = start.elapsed();
                if !go_on(&progress) {
                    return Ok(None);
                }
                let chunk: Vec<(usize, Document)> = rest.by_ref().take(ENCODE_CHUNK_DOCS).collect();
                if chunk.is_empty() {
                    break;
                }
                let contents: Vec<String> = chunk.iter().map(|(_, d)| d.content()).collect();
                let refs: Vec<&str> = contents.iter().map(String::as_str).collect();
                let encoded = encoder.encode_docs(&refs)?;
                if let Some(((_, document), _)) =
                    chunk.iter().zip(&encoded).find(|(_, e)| !e.passages.is_empty())
                {
                    return Err(CellarError::Unsupported(format!(
                        "document {:?} is longer than this index's {}-token limit, and it splits long documents into passages: written documents are not kept as passages yet; shorten it, send its vectors, or rebuild the index with it",
                        document.id, self.config.encoder.doc_max_tokens
                    )));
                }
                for ((i, document), encoded) in chunk.into_iter().zip(encoded) {
                    progress.done += 1;
                    progress.done_bytes += text_bytes(&document);
                    out[i] = Some(self.encode_for_store(document, &encoded));
                }
            }
        }
        Ok(Some(out))
    }

    /// A document's vectors as the index stores them: projected by its PCA, encoded by its
    /// codec; the pooled vector as f16.
    fn encode_for_store(&self, doc: Document, encoded: &Encoded) -> Prepared {
        let projected = self.pca.as_ref().map(|pca| project_tokens(pca, &encoded.tokens, encoded.n_tokens));
        let mut tokens = Vec::new();
        self.store.codec().encode_many(projected.as_deref().unwrap_or(&encoded.tokens), &mut tokens);
        let pooled = encoded.pooled.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
        Prepared { doc, n_tokens: encoded.n_tokens as u32, tokens, pooled }
    }
}
