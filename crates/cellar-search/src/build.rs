//! `Index::build`: streams a corpus through the encoder into the vector store, the pooled
//! vectors, the text store and the BM25 index, then writes `index.json` as the commit point.
//!
//! Nothing but one batch (and, for int8 or PCA, a fitting sample) is held in memory, so corpora
//! larger than RAM index fine. An interrupted build leaves a `.cellar-building` marker and no
//! `index.json`; the next build into that directory clears it and starts again. The build holds
//! the directory's exclusive lock (`lock`) from before it clears anything until it returns, the
//! IVF (`BuildOptions::ivf`) included, so no reader opens the index half built.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cellar_core::codec::{check_stored_vector, fit_codec, CodecKind};
use cellar_core::format::fsio::{DirLock, LOCK_FILE};
use cellar_core::format::FileKind;
use cellar_core::store::StoreWriter;
use cellar_core::{CellarError, IoContext, Result};
use cellar_encode::{Encoded, Encoder, EncoderConfig, Overflow, Pca};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::bm25::Bm25Writer;
use crate::config::{
    BuildReport, EncoderSettings, IndexConfig, LongDocs, SearchDefaults, INDEX_FORMAT_VERSION,
};
use crate::corpus::{BeirPaths, CorpusReader, Document};
use crate::disk::dir_bytes;
use crate::index::{Index, BM25_DIR, PCA_FILE, VECTORS_DIR};
use crate::ivf::{build_ivf_over, IvfBuildOptions};
use crate::lock::{self, BUILDING_MARKER};
use crate::meta::Metadata;
use crate::pooled::PooledWriter;
use crate::texts::TextsWriter;
use crate::vectors::project_tokens;

/// Everything `Index::build` needs.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// A BEIR folder or a `corpus.jsonl`.
    pub collection: PathBuf,
    pub out: PathBuf,
    /// Model directory (Hugging Face layout); default: `CELLAR_MODEL`, then the installed package.
    pub model_dir: Option<PathBuf>,
    pub query_max_tokens: usize,
    pub doc_max_tokens: usize,
    /// A document past `doc_max_tokens`: cut, or encoded in overlapping windows.
    pub doc_overflow: Overflow,
    pub skip_special: bool,
    pub skip_punctuation: bool,
    pub codec: CodecKind,
    /// Project token vectors to this many dimensions with a PCA fitted on a sample.
    pub pca_dim: Option<usize>,
    /// Intra-op threads for corpus encoding (all cores by default: indexing runs alone).
    pub encode_threads: usize,
    pub batch_docs: usize,
    /// Token vectors buffered to fit PCA or int8 scales before anything is written.
    pub sample_tokens: usize,
    pub max_docs: Option<usize>,
    pub progress: bool,
    /// Also build the IVF (the dense first stage), under the same lock as the rest.
    pub ivf: Option<IvfBuildOptions>,
    /// An index whose codec (and PCA) this build takes instead of fitting its own: the shards
    /// of one collection share one, so a document's MaxSim is the same on whichever shard holds
    /// it. Its codec kind and PCA dimension must be the ones asked for.
    pub codec_from: Option<PathBuf>,
    /// A grouped index (`IndexConfig::grouped`): only an empty one (`Index::create_empty`).
    pub grouped: bool,
}

impl BuildOptions {
    pub fn new(collection: impl Into<PathBuf>, out: impl Into<PathBuf>) -> BuildOptions {
        BuildOptions {
            collection: collection.into(),
            out: out.into(),
            model_dir: None,
            query_max_tokens: 64,
            doc_max_tokens: 256,
            doc_overflow: Overflow::default(),
            skip_special: true,
            skip_punctuation: true,
            codec: CodecKind::DEFAULT,
            pca_dim: None,
            encode_threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            batch_docs: 32,
            sample_tokens: 100_000,
            max_docs: None,
            progress: false,
            ivf: None,
            codec_from: None,
            grouped: false,
        }
    }

    fn needs_sample(&self) -> bool {
        self.codec_from.is_none() && (self.pca_dim.is_some() || self.codec.needs_sample())
    }
}

/// The codec and PCA of the index in `from`, checked against what `options` asks for.
fn shared_codec(
    from: &Path,
    options: &BuildOptions,
    model_dim: usize,
) -> Result<(Option<Pca>, std::sync::Arc<dyn cellar_core::codec::Codec>)> {
    let reader = cellar_core::io::ReaderOptions::new(cellar_core::io::ReaderKind::Mmap);
    let store = cellar_core::store::VectorStore::open(&from.join(VECTORS_DIR), &reader)?;
    let codec = std::sync::Arc::clone(store.codec());
    let pca_path = from.join(PCA_FILE);
    let pca = pca_path.is_file().then(|| Pca::load(&pca_path)).transpose()?;
    let refuse = |what: String| {
        CellarError::invalid(format!("codec_from {}: {what}; build with the same settings", from.display()))
    };
    if codec.kind() != options.codec {
        return Err(refuse(format!(
            "its codec is {}, this build asks for {}",
            codec.kind().name(),
            options.codec.name()
        )));
    }
    if pca.as_ref().map(Pca::out_dim) != options.pca_dim {
        return Err(refuse(format!(
            "its PCA is {:?}, this build asks for {:?}",
            pca.as_ref().map(Pca::out_dim),
            options.pca_dim
        )));
    }
    let in_dim = pca.as_ref().map_or(codec.dim(), Pca::in_dim);
    if in_dim != model_dim {
        return Err(refuse(format!("its vectors have {in_dim} dimensions, this model's {model_dim}")));
    }
    Ok((pca, codec))
}

impl Index {
    /// Builds an index from `options.collection` into `options.out`, and its IVF when
    /// `options.ivf` asks for one (its report: `ivf::IvfConfig::load`).
    pub fn build(options: &BuildOptions) -> Result<IndexConfig> {
        let started = Instant::now();
        check_options(options)?;
        refuse_grouped(options)?;
        let collection = BeirPaths::locate(&options.collection)?;
        let _lock = prepare_out_dir(&options.out)?;
        let encoder = load_encoder(options)?;
        check_pca_dim(options, encoder.dim())?;
        let total = count_lines(&collection.corpus)?;
        let mut run = BuildRun::new(options, encoder.dim(), &collection.corpus, total, "encoding");
        run.stream(CorpusReader::open(&collection.corpus)?, &encoder)?;
        let report = run.finish()?;
        commit(options, encoder_settings(options, &encoder), report, started)
    }

    /// Builds an index from the caller's token vectors (`docs`, each `n * dim` values, with its
    /// id and optional text) instead of encoding a corpus: the same files as [`Index::build`],
    /// BM25 over the texts given. `total` (when known) sizes the progress bar. No model is
    /// loaded unless `options.model_dir` names one for text queries (its dimension must be
    /// `dim`). Every document is checked before it is written (shape, finite values, a unique
    /// non-empty id); on any error the partial build is removed and nothing is left behind.
    pub fn build_from_embeddings(
        options: &BuildOptions,
        dim: usize,
        total: Option<u64>,
        docs: impl IntoIterator<Item = Result<EmbeddedDoc>>,
    ) -> Result<IndexConfig> {
        build_embeddings(options, dim, total, docs, false)
    }
}

/// [`Index::build_from_embeddings`]; `empty_ok`: no documents at all builds an empty index (its
/// codec then needs no sample: `Index::create_empty` checks that) instead of an error.
pub(crate) fn build_embeddings(
    options: &BuildOptions,
    dim: usize,
    total: Option<u64>,
    docs: impl IntoIterator<Item = Result<EmbeddedDoc>>,
    empty_ok: bool,
) -> Result<IndexConfig> {
    let started = Instant::now();
    check_options(options)?;
    if !empty_ok {
        refuse_grouped(options)?;
    }
    if dim == 0 {
        return Err(CellarError::invalid("embeddings need a dimension of at least 1"));
    }
    check_pca_dim(options, dim)?;
    let model = match &options.model_dir {
        Some(_) => Some(load_encoder(options)?),
        None => None,
    };
    if let Some(encoder) = &model {
        if encoder.dim() != dim {
            return Err(CellarError::invalid(format!(
                "the model for text queries gives {}-d vectors but the embeddings have {dim}",
                encoder.dim()
            )));
        }
    }
    let lock = prepare_out_dir(&options.out)?;
    let built = (|| {
        let source = PathBuf::from("embeddings");
        let mut run = BuildRun::new(options, dim, &source, total.unwrap_or(0), "writing");
        run.empty_ok = empty_ok;
        let limit = options.max_docs.unwrap_or(usize::MAX);
        for (i, doc) in docs.into_iter().take(limit).enumerate() {
            let (doc, encoded) = doc.and_then(|doc| doc.checked(i, dim))?;
            run.check_unique(&doc.id, "document", i as u64)?;
            run.bar.inc(1);
            run.accept(doc, encoded)?;
        }
        let report = run.finish()?;
        let settings = match &model {
            Some(encoder) => encoder_settings(options, encoder),
            None => EncoderSettings {
                model: String::new(),
                model_dir: PathBuf::new(),
                model_dim: dim,
                query_max_tokens: options.query_max_tokens,
                doc_max_tokens: options.doc_max_tokens,
                doc_overflow: options.doc_overflow,
                skip_special: options.skip_special,
                skip_punctuation: options.skip_punctuation,
                external: true,
            },
        };
        commit(options, EncoderSettings { external: true, ..settings }, report, started)
    })();
    if built.is_err() {
        remove_partial_build(&options.out, lock);
    }
    built
}

/// One document of [`Index::build_from_embeddings`].
#[derive(Clone, Debug, Default)]
pub struct EmbeddedDoc {
    /// The collection's id (unique, not empty).
    pub id: String,
    /// Title and text, shown with hits and indexed by BM25 ("" when the caller has none).
    pub title: String,
    pub text: String,
    /// Scalar values filters run on (empty: none).
    pub metadata: Metadata,
    /// `n * dim` values (n >= 1), token after token.
    pub tokens: Vec<f32>,
    /// The document's single vector (IVF, dense modes); when absent, the L2-normalised mean of
    /// its token vectors.
    pub pooled: Option<Vec<f32>>,
}

impl EmbeddedDoc {
    /// The document as the build's writers take it, after every check of its vectors; `i` is
    /// its position, which errors name with its id.
    pub(crate) fn checked(self, i: usize, dim: usize) -> Result<(Document, Encoded)> {
        let what = || format!("document {i} ({:?})", self.id);
        if self.id.is_empty() {
            return Err(CellarError::invalid(format!("document {i}: its id is empty")));
        }
        if self.tokens.is_empty() || !self.tokens.len().is_multiple_of(dim) {
            return Err(CellarError::invalid(format!(
                "{}: {} values are not whole {dim}-d token vectors (at least one)",
                what(),
                self.tokens.len()
            )));
        }
        for (t, row) in self.tokens.chunks_exact(dim).enumerate() {
            check_stored_vector(row, dim, || format!("{} token {t}", what()))?;
        }
        let n_tokens = self.tokens.len() / dim;
        let pooled = match self.pooled {
            Some(pooled) => {
                if pooled.len() != dim {
                    return Err(CellarError::invalid(format!(
                        "{} pooled vector: {} values, expected {dim}",
                        what(),
                        pooled.len()
                    )));
                }
                check_stored_vector(&pooled, dim, || format!("{} pooled vector", what()))?;
                pooled
            }
            None => crate::vectors::mean_normalized(&self.tokens, dim).ok_or_else(|| {
                CellarError::invalid(format!(
                    "{}: its token vectors average to zero; give its pooled vector",
                    what()
                ))
            })?,
        };
        let doc = Document {
            id: self.id,
            title: self.title,
            text: self.text,
            metadata: self.metadata,
            group: None,
        };
        let encoded = Encoded {
            tokens: self.tokens,
            n_tokens,
            pooled,
            text_tokens: n_tokens,
            windows: 1,
            tokens_cut: 0,
            passages: Vec::new(),
        };
        Ok((doc, encoded))
    }
}

/// Writes `index.json` (the commit point), clears the interrupted-build marker, then builds the
/// IVF when asked.
fn commit(
    options: &BuildOptions,
    encoder: EncoderSettings,
    mut report: BuildReport,
    started: Instant,
) -> Result<IndexConfig> {
    report.total_secs = started.elapsed().as_secs_f64();
    let config = IndexConfig {
        format_version: INDEX_FORMAT_VERSION,
        created_by: format!("cellar {}", env!("CARGO_PKG_VERSION")),
        encoder,
        pca_dim: options.pca_dim,
        codec: options.codec.name().to_string(),
        search: SearchDefaults::default(),
        build: report,
        grouped: options.grouped,
    };
    config.save(&options.out)?;
    let _ = std::fs::remove_file(options.out.join(BUILDING_MARKER));
    if let Some(ivf) = &options.ivf {
        let pooled = options.out.join(FileKind::Pooled.file_name());
        build_ivf_over(&options.out, &pooled, config.encoder.model_dim, config.build.docs as usize, ivf)?;
    }
    Ok(config)
}

/// Removes what a failed build wrote (all but the lock file, then the lock and the directory
/// once empty): a build from embeddings that is refused leaves nothing behind.
fn remove_partial_build(out: &Path, lock: DirLock) {
    if let Ok(entries) = out.read_dir() {
        for path in entries.flatten().map(|e| e.path()) {
            if path.file_name().is_some_and(|n| n == LOCK_FILE) {
                continue;
            }
            let _ = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        }
    }
    let _ = std::fs::remove_file(out.join(LOCK_FILE));
    drop(lock);
    let _ = std::fs::remove_dir(out);
}

fn check_options(options: &BuildOptions) -> Result<()> {
    let bad = |what: String| Err(CellarError::InvalidInput(what));
    if options.batch_docs == 0 {
        return bad("batch_docs must be at least 1".into());
    }
    if options.query_max_tokens < 3 || options.doc_max_tokens < 3 {
        return bad("query and document max lengths must be at least 3 tokens".into());
    }
    if options.pca_dim == Some(0) {
        return bad("pca_dim must be at least 1".into());
    }
    Ok(())
}

/// A grouped index starts empty (`Index::create_empty`): its documents arrive as writes, each
/// with its group, and the segments they are flushed to keep each group's records together.
fn refuse_grouped(options: &BuildOptions) -> Result<()> {
    if options.grouped {
        return Err(CellarError::invalid(
            "grouped: a grouped index starts empty and takes its documents as writes (create it empty)",
        ));
    }
    Ok(())
}

/// The output directory must be new, empty, or an interrupted build (which is cleared). Its
/// exclusive lock is taken before anything in it is touched, so a build into an index that is
/// open (or being built) elsewhere is `Locked`; a foreign directory is refused before a lock file
/// is put in it.
pub(crate) fn prepare_out_dir(out: &Path) -> Result<DirLock> {
    if out.exists() && !lock::is_index_dir(out) && out.read_dir().at(out)?.next().is_some() {
        return Err(not_empty(out));
    }
    std::fs::create_dir_all(out).at(out)?;
    let lock = lock::exclusive_new(out)?;
    if IndexConfig::path(out).exists() {
        return Err(not_empty(out));
    }
    let interrupted = out.join(BUILDING_MARKER).exists();
    let mut cleared = false;
    for entry in out.read_dir().at(out)? {
        let path = entry.at(out)?.path();
        if path.file_name().is_some_and(|n| n == LOCK_FILE) {
            continue;
        }
        if !interrupted {
            return Err(not_empty(out));
        }
        if !cleared {
            log::warn!("{}: clearing an interrupted build", out.display());
            cleared = true;
        }
        // The lock file stays: removing it would let a second builder lock a new one.
        let removed =
            if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        removed.at(&path)?;
    }
    let marker = out.join(BUILDING_MARKER);
    std::fs::write(&marker, b"").at(&marker)?;
    Ok(lock)
}

fn not_empty(out: &Path) -> CellarError {
    CellarError::InvalidInput(format!(
        "{}: already exists and is not empty; choose a new directory or remove it",
        out.display()
    ))
}

fn check_pca_dim(options: &BuildOptions, dim: usize) -> Result<()> {
    match options.pca_dim {
        Some(pca_dim) if pca_dim > dim => Err(CellarError::InvalidInput(format!(
            "pca_dim {pca_dim} is larger than the vectors' dimension {dim}"
        ))),
        _ => Ok(()),
    }
}

fn load_encoder(options: &BuildOptions) -> Result<Encoder> {
    Encoder::load(options.encoder_config()?)
}

impl BuildOptions {
    /// The encoder a build of these options runs (its model: `model_dir`, else the default one),
    /// for whoever must encode exactly as it does (benchmarks encoding queries or corpora).
    pub fn encoder_config(&self) -> Result<EncoderConfig> {
        let model_dir = match &self.model_dir {
            Some(dir) => dir.clone(),
            None => cellar_encode::default_model_dir()?,
        };
        let mut config = EncoderConfig::new(model_dir);
        config.query_max_tokens = self.query_max_tokens;
        config.doc_max_tokens = self.doc_max_tokens;
        config.doc_overflow = self.doc_overflow;
        config.skip_special = self.skip_special;
        config.skip_punctuation = self.skip_punctuation;
        config.threads = self.encode_threads.max(1);
        config.batch_size = self.batch_docs;
        Ok(config)
    }
}

fn encoder_settings(options: &BuildOptions, encoder: &Encoder) -> EncoderSettings {
    let model_dir = encoder.config().model_dir.clone();
    EncoderSettings {
        model: encoder.model_name(),
        model_dir: std::fs::canonicalize(&model_dir).unwrap_or(model_dir),
        model_dim: encoder.dim(),
        query_max_tokens: options.query_max_tokens,
        doc_max_tokens: options.doc_max_tokens,
        doc_overflow: options.doc_overflow,
        skip_special: options.skip_special,
        skip_punctuation: options.skip_punctuation,
        external: false,
    }
}

/// Tokens of the documents a build writes together (`BuildRun::flush`): enough to spread a
/// costly codec's encoding over the cores with one thread started per core per batch, instead
/// of per document; 12 MiB of f32 at 384 dimensions.
const WRITE_BATCH_TOKENS: usize = 8_192;

/// The writers of one build, created once the codec (and PCA) can be fitted.
struct Sinks {
    store: StoreWriter,
    pooled: PooledWriter,
    texts: TextsWriter,
    bm25: Bm25Writer,
    pca: Option<Pca>,
}

/// Two independent 64-bit SipHashes of `id`: a collision of distinct ids is a 2^-128 event.
fn id_hash(id: &str) -> [u64; 2] {
    use std::hash::{Hash, Hasher};
    let one = |salt: u8| {
        let mut hasher = std::hash::DefaultHasher::new();
        salt.hash(&mut hasher);
        id.hash(&mut hasher);
        hasher.finish()
    };
    [one(0), one(1)]
}

/// State of one build while the documents stream through.
struct BuildRun<'a> {
    options: &'a BuildOptions,
    /// Dimension of the token and pooled vectors (before any PCA).
    model_dim: usize,
    corpus: PathBuf,
    /// Every id so far, by a 128-bit hash, with where it was read: 24 bytes a document (the
    /// ids themselves cost ~120 at 2M documents, the most RAM a large build grew by).
    seen: HashMap<[u64; 2], u64>,
    sample: Vec<(Document, Encoded)>,
    sample_tokens: usize,
    /// Documents accepted once the sinks are open, not yet written: written together (the
    /// store encodes them on the cores at once) when they hold [`WRITE_BATCH_TOKENS`] tokens,
    /// and at the end.
    pending: Vec<(Document, Encoded)>,
    pending_tokens: usize,
    sinks: Option<Sinks>,
    report: BuildReport,
    bar: ProgressBar,
    /// No documents at all makes an empty index, not an error (`Index::create_empty`).
    empty_ok: bool,
}

impl<'a> BuildRun<'a> {
    fn new(
        options: &'a BuildOptions,
        model_dim: usize,
        corpus: &Path,
        total: u64,
        stage: &'static str,
    ) -> Self {
        let total = options.max_docs.map_or(total, |m| total.min(m as u64));
        BuildRun {
            options,
            model_dim,
            corpus: corpus.to_path_buf(),
            seen: HashMap::new(),
            sample: Vec::new(),
            sample_tokens: 0,
            pending: Vec::new(),
            pending_tokens: 0,
            sinks: None,
            report: BuildReport::default(),
            bar: progress_bar(total, options.progress, stage),
            empty_ok: false,
        }
    }

    fn stream(&mut self, mut reader: CorpusReader, encoder: &Encoder) -> Result<()> {
        let limit = self.options.max_docs.unwrap_or(usize::MAX);
        let mut taken = 0usize;
        loop {
            let mut batch = Vec::with_capacity(self.options.batch_docs);
            while batch.len() < self.options.batch_docs && taken < limit {
                let Some(doc) = reader.next() else { break };
                let doc = doc?;
                self.check_unique(&doc.id, "line", reader.line_no() as u64)?;
                batch.push(doc);
                taken += 1;
            }
            if batch.is_empty() {
                return Ok(());
            }
            self.encode_batch(batch, encoder)?;
        }
    }

    /// The id was read at `kind` `at` ("line 7", "document 6"), which the error names.
    fn check_unique(&mut self, id: &str, kind: &str, at: u64) -> Result<()> {
        if let Some(first) = self.seen.insert(id_hash(id), at) {
            return Err(CellarError::InvalidInput(format!(
                "{} {kind} {at}: duplicate id {id:?} (first seen at {kind} {first})",
                self.corpus.display()
            )));
        }
        Ok(())
    }

    fn encode_batch(&mut self, batch: Vec<Document>, encoder: &Encoder) -> Result<()> {
        let start = Instant::now();
        let contents: Vec<String> = batch.iter().map(Document::content).collect();
        let refs: Vec<&str> = contents.iter().map(String::as_str).collect();
        let encoded = encoder.encode_docs(&refs)?;
        self.report.encode_secs += start.elapsed().as_secs_f64();
        self.bar.inc(batch.len() as u64);
        for (doc, enc) in batch.into_iter().zip(encoded) {
            self.accept(doc, enc)?;
        }
        Ok(())
    }

    fn accept(&mut self, doc: Document, encoded: Encoded) -> Result<()> {
        self.report.long_docs.get_or_insert_with(LongDocs::default).count(&encoded);
        if self.sinks.is_some() {
            return self.write(doc, encoded);
        }
        self.sample_tokens += encoded.n_tokens;
        self.sample.push((doc, encoded));
        if !self.options.needs_sample() || self.sample_tokens >= self.options.sample_tokens {
            self.open_sinks()?;
        }
        Ok(())
    }

    fn open_sinks(&mut self) -> Result<()> {
        let fit_start = Instant::now();
        let model_dim = self.model_dim;
        let (pca, codec) = match &self.options.codec_from {
            Some(from) => shared_codec(from, self.options, model_dim)?,
            None => {
                let tokens: Vec<f32> =
                    self.sample.iter().flat_map(|(_, e)| e.tokens.iter().copied()).collect();
                let pca = match self.options.pca_dim {
                    Some(out_dim) => Some(Pca::fit(&tokens, model_dim, out_dim)?),
                    None => None,
                };
                let dim = self.options.pca_dim.unwrap_or(model_dim);
                let fitted = match &pca {
                    Some(pca) => project_tokens(pca, &tokens, tokens.len() / model_dim),
                    None => tokens,
                };
                (pca, fit_codec(self.options.codec, dim, &fitted)?)
            }
        };
        self.report.fit_secs = fit_start.elapsed().as_secs_f64();
        let out = &self.options.out;
        if let Some(pca) = &pca {
            pca.save(&out.join(PCA_FILE))?;
        }
        let store = StoreWriter::create(&out.join(VECTORS_DIR), codec, false)?;
        self.sinks = Some(Sinks {
            store: if self.empty_ok { store.allow_empty() } else { store },
            pooled: PooledWriter::create(out, model_dim)?,
            texts: TextsWriter::create(out)?,
            bm25: Bm25Writer::create(&out.join(BM25_DIR))?,
            pca,
        });
        for (doc, encoded) in std::mem::take(&mut self.sample) {
            self.write(doc, encoded)?;
        }
        Ok(())
    }

    /// Queues a document for writing; writes the queue once it holds [`WRITE_BATCH_TOKENS`].
    fn write(&mut self, doc: Document, encoded: Encoded) -> Result<()> {
        self.pending_tokens += encoded.n_tokens;
        self.pending.push((doc, encoded));
        if self.pending_tokens >= WRITE_BATCH_TOKENS {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the queued documents: their token records together, then each one's pooled
    /// vector, text and BM25 entry.
    fn flush(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_tokens = 0;
        if pending.is_empty() {
            return Ok(());
        }
        let sinks = self.sinks.as_mut().expect("sinks are open before any write");
        let start = Instant::now();
        let projected: Vec<Option<Vec<f32>>> = pending
            .iter()
            .map(|(_, e)| sinks.pca.as_ref().map(|pca| project_tokens(pca, &e.tokens, e.n_tokens)))
            .collect();
        let docs: Vec<(&[f32], &[u32])> = pending
            .iter()
            .zip(&projected)
            .map(|((_, e), p)| (p.as_deref().unwrap_or(&e.tokens), &e.passages[..]))
            .collect();
        let ids = sinks.store.add_many(&docs)?;
        for (doc, encoded) in &pending {
            sinks.pooled.add(&encoded.pooled)?;
            sinks.texts.add(doc)?;
        }
        self.report.write_secs += start.elapsed().as_secs_f64();
        let bm25_start = Instant::now();
        for ((doc, encoded), id) in pending.iter().zip(ids) {
            sinks.bm25.add(id, &doc.content(), &doc.metadata)?;
            self.report.docs += 1;
            self.report.tokens += encoded.n_tokens as u64;
        }
        self.report.bm25_secs += bm25_start.elapsed().as_secs_f64();
        Ok(())
    }

    fn finish(mut self) -> Result<BuildReport> {
        if self.sinks.is_none() {
            if self.sample.is_empty() && !self.empty_ok {
                return Err(CellarError::InvalidInput(format!(
                    "{}: the corpus has no documents",
                    self.corpus.display()
                )));
            }
            self.open_sinks()?;
        }
        self.flush()?;
        let sinks = self.sinks.take().expect("sinks were just opened");
        let start = Instant::now();
        sinks.store.finish()?;
        sinks.pooled.finish()?;
        sinks.texts.finish()?;
        self.report.write_secs += start.elapsed().as_secs_f64();
        let bm25_start = Instant::now();
        sinks.bm25.finish()?;
        self.report.bm25_secs += bm25_start.elapsed().as_secs_f64();
        self.bar.finish_and_clear();
        let out = &self.options.out;
        self.report.bm25_bytes = dir_bytes(&out.join(BM25_DIR));
        self.report.vectors_bytes = dir_bytes(&out.join(VECTORS_DIR)) + dir_bytes(&out.join(PCA_FILE));
        self.report.pooled_bytes = dir_bytes(&out.join(cellar_core::format::FileKind::Pooled.file_name()));
        self.report.texts_bytes = dir_bytes(&out.join(cellar_core::format::FileKind::Texts.file_name()))
            + dir_bytes(&out.join(cellar_core::format::FileKind::TextOffsets.file_name()));
        Ok(self.report)
    }
}

fn count_lines(path: &Path) -> Result<u64> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).at(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut lines = 0u64;
    loop {
        let n = file.read(&mut buf).at(path)?;
        if n == 0 {
            return Ok(lines);
        }
        lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
    }
}

/// The build's progress bar; `total` 0 is unknown (a count without a bar's end).
fn progress_bar(total: u64, visible: bool, stage: &'static str) -> ProgressBar {
    let total = (total > 0).then_some(total);
    if !visible {
        return ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
    }
    let bar = total.map_or_else(ProgressBar::no_length, ProgressBar::new);
    let template = "{msg:>9} [{bar:40}] {pos}/{len} docs ({per_sec}, eta {eta})";
    bar.set_style(ProgressStyle::with_template(template).expect("valid template").progress_chars("=> "));
    bar.set_message(stage);
    bar
}
