//! The BM25 first stage, on tantivy.
//!
//! One indexed text field (`body`: title + text, English analyzer with stop words and stemming,
//! frequencies but no positions) and one fast field (`doc`: Cellar's dense internal id, which is
//! also the record number in the vector store). Scoring is tantivy's BM25 (k1 = 1.2, b = 0.75,
//! fixed by tantivy). Indexes built since metadata came also hold the JSON field `meta`: each
//! document's metadata, strings as exact terms (the `raw` tokenizer), numbers and booleans as
//! terms and, for ranges, fast columns. Filters (`crate::filter`) run on it; an index built
//! before has no `meta` field and refuses both filters and metadata with a clear error.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cellar_core::{CellarError, DocId, IoContext, Result};
use serde::{Deserialize, Serialize};
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::collector::{FilterCollector, TopDocs};
use tantivy::query::{BooleanQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, JsonObjectOptions, Schema, TextFieldIndexing, TextOptions, FAST,
};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
    TokenStream,
};
use tantivy::{Index, IndexReader, IndexSettings, IndexWriter, ReloadPolicy, TantivyDocument};

use crate::filter::{Allowed, Filter};
use crate::meta::Metadata;
use crate::scored::Scored;
use crate::written::batch::{LogBatch, LogOp};

/// Name under which the analyzer is registered on every opened index.
const ANALYZER: &str = "cellar_en";
/// tantivy's commit point in the BM25 directory.
pub const META_FILE: &str = "meta.json";
/// Writer memory budget: bounds RAM while indexing corpora larger than memory.
const WRITER_BUDGET_BYTES: usize = 64 << 20;

/// Maps a tantivy error into ours, naming the BM25 directory: an error the OS gave (a full disk
/// while opening writes its lock or meta file, too many open files) is `Io` on the directory;
/// anything else is the index found damaged.
fn tantivy_error(path: &Path, error: tantivy::TantivyError) -> CellarError {
    match io_of(&error).filter(|io| io.raw_os_error().is_some()) {
        Some(source) => {
            log::error!("{}: bm25 index: {error}", path.display());
            CellarError::io(path, source)
        }
        None => CellarError::corrupted(path, 0, format!("bm25 index: {error}")),
    }
}

/// The OS error inside a tantivy error, if it is one (a full disk, too many open files).
fn io_of(error: &tantivy::TantivyError) -> Option<std::io::Error> {
    use tantivy::directory::error::{LockError, OpenDirectoryError, OpenReadError, OpenWriteError};
    use tantivy::TantivyError as T;
    let io: &std::io::Error = match error {
        T::IoError(e) => e,
        T::OpenWriteError(OpenWriteError::IoError { io_error, .. }) => io_error,
        T::OpenReadError(OpenReadError::IoError { io_error, .. }) => io_error,
        T::OpenDirectoryError(OpenDirectoryError::IoError { io_error, .. }) => io_error,
        T::LockFailure(LockError::IoError(e), _) => e,
        _ => return None,
    };
    // Only the OS error: tantivy's message names files by their whole path.
    Some(match io.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(io.kind(), "bm25 index: an I/O call failed"),
    })
}

/// Maps a tantivy error of a write (adding, deleting, committing, reloading) into ours: an I/O
/// failure is `Io` on the BM25 directory (`disk_full` on a full disk), anything else
/// `Internal`; never `Corrupted`, as nothing was found damaged. The whole error is logged.
fn write_error(path: &Path, error: tantivy::TantivyError) -> CellarError {
    log::error!("{}: bm25 index: a write failed: {error}", path.display());
    match io_of(&error) {
        Some(source) => CellarError::io(path, source),
        None => CellarError::internal("bm25 index: tantivy refused a write (logged)"),
    }
}

/// Every segment holds `max_doc` documents (as `meta.json` says) in its `doc` column and its
/// field norms: a count that does not match its files would send tantivy past their ends.
fn check_segments(dir: &Path, searcher: &tantivy::Searcher, fields: &Fields) -> Result<()> {
    for segment in searcher.segment_readers() {
        let max_doc = segment.max_doc();
        let column = segment.fast_fields().u64("doc").map_err(|e| tantivy_error(dir, e))?;
        let norms = segment.get_fieldnorms_reader(fields.body).map_err(|e| tantivy_error(dir, e))?;
        if column.num_docs() != max_doc || norms.num_docs() != max_doc {
            return Err(CellarError::corrupted(
                dir,
                0,
                format!(
                    "bm25 index: {META_FILE} gives segment {} {max_doc} documents, its files hold {} ids and {} field norms",
                    segment.segment_id().uuid_string(),
                    column.num_docs(),
                    norms.num_docs()
                ),
            ));
        }
    }
    Ok(())
}

fn analyzer() -> TextAnalyzer {
    let mut builder = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .dynamic();
    if let Some(stop_words) = StopWordFilter::new(Language::English) {
        builder = builder.filter_dynamic(stop_words);
    }
    builder.filter_dynamic(Stemmer::new(Language::English)).build()
}

/// The JSON field of documents' metadata.
pub const META_FIELD: &str = "meta";

struct Fields {
    body: Field,
    doc: Field,
    /// `None` in an index built before metadata came.
    meta: Option<Field>,
}

/// The schema a build writes (`with_meta`: since metadata came; without: what older builds
/// wrote, still opened).
fn schema(with_meta: bool) -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let indexing =
        TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs);
    let body = builder.add_text_field("body", TextOptions::default().set_indexing_options(indexing));
    let doc = builder.add_u64_field("doc", FAST);
    let meta = with_meta.then(|| {
        let exact =
            TextFieldIndexing::default().set_tokenizer("raw").set_index_option(IndexRecordOption::Basic);
        let options = JsonObjectOptions::default().set_indexing_options(exact).set_fast("raw");
        builder.add_json_field(META_FIELD, options)
    });
    (builder.build(), Fields { body, doc, meta })
}

fn fields_of(schema: &Schema, path: &Path) -> Result<Fields> {
    let get = |name: &str| {
        schema
            .get_field(name)
            .map_err(|_| CellarError::corrupted(path, 0, format!("bm25 index has no field {name:?}")))
    };
    Ok(Fields { body: get("body")?, doc: get("doc")?, meta: schema.get_field(META_FIELD).ok() })
}

impl Fields {
    /// tantivy's document of one of ours: its BM25 text, internal id and metadata.
    fn document(&self, id: DocId, content: &str, meta: &Metadata) -> TantivyDocument {
        let mut document = TantivyDocument::new();
        document.add_text(self.body, content);
        document.add_u64(self.doc, u64::from(id.0));
        if let (Some(field), false) = (self.meta, meta.is_empty()) {
            document.add_field_value(field, &meta.to_tantivy());
        }
        document
    }
}

/// The error of metadata or a filter given to an index built before metadata came.
pub fn no_metadata_field(path: &Path) -> CellarError {
    CellarError::invalid(format!(
        "{}: this index was built before documents had metadata (its BM25 index has no {META_FIELD:?} \
         field), so it can neither store metadata nor filter on it; rebuild it with this version",
        path.display()
    ))
}

/// Collects the internal ids of the documents a query matches (no scores), each segment's into
/// a list and the lists straight into one bitmap.
struct IdsCollector;

struct SegmentIds {
    column: tantivy::columnar::Column<u64>,
    ids: Vec<u32>,
}

impl Collector for IdsCollector {
    type Fruit = Allowed;
    type Child = SegmentIds;

    fn for_segment(
        &self,
        _ord: tantivy::SegmentOrdinal,
        segment: &tantivy::SegmentReader,
    ) -> tantivy::Result<SegmentIds> {
        Ok(SegmentIds { column: segment.fast_fields().u64("doc")?, ids: Vec::new() })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(&self, fruits: Vec<Vec<u32>>) -> tantivy::Result<Allowed> {
        Ok(Allowed::from_ids(fruits.into_iter().flatten()))
    }
}

impl SegmentCollector for SegmentIds {
    type Fruit = Vec<u32>;

    fn collect(&mut self, doc: tantivy::DocId, _score: tantivy::Score) {
        if let Some(id) = self.column.first(doc).and_then(|id| u32::try_from(id).ok()) {
            self.ids.push(id);
        }
    }

    fn harvest(self) -> Vec<u32> {
        self.ids
    }
}

/// The collection statistics BM25 scores with, for one query's terms: what a sharded
/// collection's shards sum so that each scores its documents as one index of them all would.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bm25Stats {
    /// Documents (tantivy's `max_doc`: deleted ones count until their segment is merged).
    pub docs: u64,
    /// Tokens of the `body` field over all documents.
    pub tokens: u64,
    /// Documents holding each analyzed term of the query.
    pub doc_freq: std::collections::BTreeMap<String, u64>,
}

impl Bm25Stats {
    /// Adds another shard's statistics for the same query.
    pub fn merge(&mut self, other: &Bm25Stats) {
        self.docs += other.docs;
        self.tokens += other.tokens;
        for (term, df) in &other.doc_freq {
            *self.doc_freq.entry(term.clone()).or_default() += df;
        }
    }
}

impl tantivy::query::Bm25StatisticsProvider for Bm25Stats {
    fn total_num_tokens(&self, _field: Field) -> tantivy::Result<u64> {
        Ok(self.tokens)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.docs)
    }

    fn doc_freq(&self, term: &tantivy::Term) -> tantivy::Result<u64> {
        let value = term.value();
        let text = value.as_str().unwrap_or_default();
        let df = self.doc_freq.get(text).copied().ok_or_else(|| {
            tantivy::TantivyError::InvalidArgument(format!(
                "the collection statistics have no document frequency for the term {text:?}"
            ))
        })?;
        if df > self.docs {
            return Err(tantivy::TantivyError::InvalidArgument(format!(
                "the collection statistics give the term {text:?} {df} documents of {}",
                self.docs
            )));
        }
        Ok(df)
    }
}

/// Streams documents into a new BM25 index.
pub struct Bm25Writer {
    path: PathBuf,
    writer: IndexWriter,
    fields: Fields,
}

impl Bm25Writer {
    /// Creates an empty index in `dir` (which must not exist yet or be empty). Its errors, and
    /// those of `add` and `finish`, are writes' (`write_error`: a full disk is `disk_full`, never
    /// `Corrupted`).
    pub fn create(dir: &Path) -> Result<Bm25Writer> {
        std::fs::create_dir_all(dir).at(dir)?;
        let (schema, fields) = schema(true);
        let index = Index::create_in_dir(dir, schema).map_err(|e| write_error(dir, e))?;
        index.tokenizers().register(ANALYZER, analyzer());
        let writer =
            index.writer_with_num_threads(1, WRITER_BUDGET_BYTES).map_err(|e| write_error(dir, e))?;
        Ok(Bm25Writer { path: dir.to_path_buf(), writer, fields })
    }

    pub fn add(&mut self, id: DocId, content: &str, meta: &Metadata) -> Result<()> {
        let document = self.fields.document(id, content, meta);
        self.writer.add_document(document).map_err(|e| write_error(&self.path, e))?;
        Ok(())
    }

    /// Commits and waits for background merges, so the directory is complete on return.
    pub fn finish(mut self) -> Result<()> {
        self.writer.commit().map_err(|e| write_error(&self.path, e))?;
        self.writer.wait_merging_threads().map_err(|e| write_error(&self.path, e))
    }
}

/// Which documents (by internal id) a filtered search takes; tantivy's collector owns it.
pub type Accept = std::sync::Arc<dyn Fn(DocId) -> bool + Send + Sync>;

/// An open BM25 index.
pub struct Bm25Index {
    path: PathBuf,
    index: Index,
    reader: IndexReader,
    fields: Fields,
    analyzer: TextAnalyzer,
    /// tantivy's writer, opened by the first write to a living index.
    writer: Mutex<Option<IndexWriter>>,
}

impl Bm25Index {
    /// Opens the BM25 index in `dir`, checking first what can be checked: `meta.json` is there,
    /// and once tantivy has parsed it, its schema and settings are the ones a Cellar build writes,
    /// no segment has deletes unless `written` (an index that was written to after its build
    /// deletes through tantivy; a build never does), and every segment's `doc` column and field
    /// norms hold the documents `meta.json` counts. Every tantivy error is `Corrupted` naming
    /// `dir`, and so, as a last line, is a panic inside tantivy while it opens the index.
    pub fn open(dir: &Path, written: bool) -> Result<Bm25Index> {
        let meta = dir.join(META_FILE);
        if !meta.is_file() {
            let detail = format!("bm25 index: missing {META_FILE}");
            return Err(CellarError::corrupted(dir, 0, detail));
        }
        let opened =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Self::open_checked(dir, written)));
        opened.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            Err(CellarError::corrupted(dir, 0, format!("bm25 index: tantivy failed opening it: {what}")))
        })
    }

    fn open_checked(dir: &Path, written: bool) -> Result<Bm25Index> {
        let index = Index::open_in_dir(dir).map_err(|e| tantivy_error(dir, e))?;
        let corrupted =
            |detail: String| CellarError::corrupted(dir, 0, format!("bm25 index: {META_FILE}: {detail}"));
        if index.schema() != schema(true).0 && index.schema() != schema(false).0 {
            return Err(corrupted("its schema is not the one a Cellar build writes".into()));
        }
        if index.settings() != &IndexSettings::default() {
            return Err(corrupted("its settings are not the ones a Cellar build writes".into()));
        }
        let segments = index.searchable_segment_metas().map_err(|e| tantivy_error(dir, e))?;
        if let Some(segment) = segments.iter().find(|s| !written && s.delete_opstamp().is_some()) {
            return Err(corrupted(format!(
                "segment {} has deletes; a Cellar build deletes nothing",
                segment.id().uuid_string()
            )));
        }
        index.tokenizers().register(ANALYZER, analyzer());
        let fields = fields_of(&index.schema(), dir)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| tantivy_error(dir, e))?;
        check_segments(dir, &reader.searcher(), &fields)?;
        Ok(Bm25Index {
            path: dir.to_path_buf(),
            index,
            reader,
            fields,
            analyzer: analyzer(),
            writer: Mutex::new(None),
        })
    }

    /// Opens the index in `dir` as [`Bm25Index::open`] does, then reads each of its files through
    /// its footer checksum (`cellar inspect --verify`); returns the number of documents.
    pub fn verify(dir: &Path) -> Result<u64> {
        let docs = Self::open(dir, true)?.num_docs();
        let index = Index::open_in_dir(dir).map_err(|e| tantivy_error(dir, e))?;
        let damaged = index.validate_checksum().map_err(|e| tantivy_error(dir, e))?;
        match damaged.into_iter().min() {
            None => Ok(docs),
            Some(file) => Err(CellarError::corrupted(
                &dir.join(file),
                0,
                "bm25 index: the file fails its footer checksum",
            )),
        }
    }

    pub fn num_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// The analyzed terms of `text` (lower-cased, stop words removed, stemmed).
    pub fn terms(&self, text: &str) -> Vec<String> {
        let mut analyzer = self.analyzer.clone();
        let mut stream = analyzer.token_stream(text);
        let mut terms = Vec::new();
        while stream.advance() {
            terms.push(stream.token().text.clone());
        }
        terms
    }

    /// The `n` best documents for `text`, best first. A query with no indexable term returns none.
    pub fn search(&self, text: &str, n: usize) -> Result<Vec<Scored>> {
        self.search_accepting(text, n, None)
    }

    /// [`Bm25Index::search`] over the documents `accept` takes (by internal id), applied as
    /// tantivy collects them (a fast-field filter), so `n` accepted documents come back when
    /// there are that many.
    pub fn search_accepting(&self, text: &str, n: usize, accept: Option<Accept>) -> Result<Vec<Scored>> {
        self.search_scored_by(text, n, accept, None)
    }

    /// The collection statistics BM25 scores `text` with in this index: its document and token
    /// counts and the document frequency of each of the query's terms (a sharded collection's
    /// router sums them over its shards, [`Bm25Stats::merge`]).
    pub fn stats(&self, text: &str) -> Result<Bm25Stats> {
        use tantivy::query::Bm25StatisticsProvider;
        let searcher = self.reader.searcher();
        let error = |e| tantivy_error(&self.path, e);
        let mut doc_freq = std::collections::BTreeMap::new();
        for term in self.terms(text) {
            let df =
                searcher.doc_freq(&tantivy::Term::from_field_text(self.fields.body, &term)).map_err(error)?;
            doc_freq.insert(term, df);
        }
        Ok(Bm25Stats {
            docs: searcher.total_num_docs().map_err(error)?,
            tokens: searcher.total_num_tokens(self.fields.body).map_err(error)?,
            doc_freq,
        })
    }

    /// [`Bm25Index::search_accepting`], scored with `stats` (a whole sharded collection's, which
    /// must cover every term of `text`) instead of this index's own, when given.
    pub fn search_scored_by(
        &self,
        text: &str,
        n: usize,
        accept: Option<Accept>,
        stats: Option<&Bm25Stats>,
    ) -> Result<Vec<Scored>> {
        let terms = self.terms(text);
        if terms.is_empty() || n == 0 {
            return Ok(Vec::new());
        }
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms
            .iter()
            .map(|t| {
                let term = tantivy::Term::from_field_text(self.fields.body, t);
                (
                    Occur::Should,
                    Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)) as Box<dyn Query>,
                )
            })
            .collect();
        let searcher = self.reader.searcher();
        let query = BooleanQuery::new(clauses);
        let top_docs = TopDocs::with_limit(n).order_by_score();
        let provider: &dyn tantivy::query::Bm25StatisticsProvider = match stats {
            Some(stats) => stats,
            None => &searcher,
        };
        let top = match accept {
            None => searcher.search_with_statistics_provider(&query, &top_docs, provider),
            Some(accept) => {
                let filter = FilterCollector::new(
                    "doc".to_string(),
                    move |doc: u64| u32::try_from(doc).is_ok_and(|d| accept(DocId(d))),
                    top_docs,
                );
                searcher.search_with_statistics_provider(&query, &filter, provider)
            }
        };
        let top = top.map_err(|e| tantivy_error(&self.path, e))?;
        // One internal-id column per segment, opened once per search, not once per hit.
        let columns = searcher
            .segment_readers()
            .iter()
            .map(|segment| segment.fast_fields().u64("doc").map_err(|e| tantivy_error(&self.path, e)))
            .collect::<Result<Vec<_>>>()?;
        top.into_iter()
            .map(|(score, address)| {
                let column = &columns[address.segment_ord as usize];
                Ok(Scored { id: self.internal_id(column, address)?, score })
            })
            .collect()
    }

    /// Whether this index stores metadata (built since metadata came).
    pub fn has_metadata(&self) -> bool {
        self.fields.meta.is_some()
    }

    /// The internal ids of the documents `filter` matches (deleted ones left out as tantivy
    /// deletes them). The filter must have passed [`Filter::check`].
    pub fn matching(&self, filter: &Filter) -> Result<Allowed> {
        self.matching_all(Some(filter), None)
    }

    /// The internal ids of the documents `filter` matches (when given) that hold every term of
    /// `terms` (when given) as this index analyses its text (lowercased, stemmed; stop words,
    /// which it does not index, are not required). `terms` with no term it indexes is refused.
    pub fn matching_all(&self, filter: Option<&Filter>, terms: Option<&str>) -> Result<Allowed> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        if let Some(filter) = filter {
            let meta = self.fields.meta.ok_or_else(|| no_metadata_field(&self.path))?;
            clauses.push((Occur::Must, filter.to_query(meta)));
        }
        if let Some(text) = terms {
            let terms = self.terms(text);
            if terms.is_empty() {
                return Err(CellarError::invalid(format!(
                    "require_terms {text:?} holds no term this index keeps (stop words are not indexed)"
                )));
            }
            for t in terms {
                let term = tantivy::Term::from_field_text(self.fields.body, &t);
                clauses.push((Occur::Must, Box::new(TermQuery::new(term, IndexRecordOption::Basic))));
            }
        }
        self.reader
            .searcher()
            .search(&BooleanQuery::new(clauses), &IdsCollector)
            .map_err(|e| tantivy_error(&self.path, e))
    }

    /// The sequence number of the last write batch tantivy committed (0: none since the build).
    pub fn applied_seq(&self) -> Result<u64> {
        let metas = self.index.load_metas().map_err(|e| match io_of(&e) {
            Some(source) => CellarError::io(&self.path.join(META_FILE), source),
            None => tantivy_error(&self.path, e),
        })?;
        match metas.payload {
            None => Ok(0),
            Some(p) => p.parse().map_err(|_| {
                CellarError::corrupted(
                    &self.path,
                    0,
                    format!("bm25 index: commit payload {p:?} is not a batch number"),
                )
            }),
        }
    }

    /// Adds and deletes the documents of `batches` (in order), commits them with the last
    /// batch's sequence number as the commit's payload, and reloads the searcher, so the next
    /// search sees them.
    /// A failure is `Io` (`disk_full` on a full disk) or `Internal`, never `Corrupted`: the
    /// caller drops what tantivy holds uncommitted ([`Bm25Index::abandon_writer`]).
    pub(crate) fn apply(&self, batches: &[&LogBatch]) -> Result<()> {
        let Some(last) = batches.last() else { return Ok(()) };
        let error = |e| write_error(&self.path, e);
        let mut slot = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(self.index.writer_with_num_threads(1, WRITER_BUDGET_BYTES / 2).map_err(error)?);
        }
        let writer = slot.as_mut().expect("just opened");
        for batch in batches {
            for op in &batch.ops {
                match op {
                    LogOp::Put(doc) => {
                        let document = self.fields.document(doc.id, &doc.doc.content(), &doc.doc.metadata);
                        writer.add_document(document).map_err(error)?;
                    }
                    LogOp::Delete(id) => {
                        let term = |v: u32| tantivy::Term::from_field_u64(self.fields.doc, u64::from(v));
                        let range = RangeQuery::new(
                            std::ops::Bound::Included(term(id.0)),
                            std::ops::Bound::Included(term(id.0)),
                        );
                        writer.delete_query(Box::new(range)).map_err(error)?;
                    }
                }
            }
        }
        cellar_core::failpoint::check(cellar_core::failpoint::FailPoint::Bm25Commit, &self.path)
            .map_err(|e| CellarError::io(&self.path, e))?;
        let mut commit = writer.prepare_commit().map_err(error)?;
        commit.set_payload(&last.seq.to_string());
        commit.commit().map_err(error)?;
        self.reader.reload().map_err(error)?;
        Ok(())
    }

    /// Drops tantivy's writer and whatever it holds uncommitted (after a failed
    /// [`Bm25Index::apply`]): the next write opens a new one on the last commit.
    pub(crate) fn abandon_writer(&self) {
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(writer);
    }

    /// Makes searches see tantivy's last commit.
    pub(crate) fn reload(&self) -> Result<()> {
        self.reader.reload().map_err(|e| write_error(&self.path, e))
    }

    fn internal_id(
        &self,
        column: &tantivy::columnar::Column<u64>,
        address: tantivy::DocAddress,
    ) -> Result<DocId> {
        let id = column.first(address.doc_id).ok_or_else(|| {
            CellarError::corrupted(&self.path, 0, format!("bm25 document {address:?} has no internal id"))
        })?;
        u32::try_from(id).map(DocId).map_err(|_| {
            CellarError::corrupted(&self.path, 0, format!("internal id {id} does not fit in 32 bits"))
        })
    }
}
