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

use cellar_core::codec::{fit_codec, CodecKind};
use cellar_core::format::fsio::{DirLock, LOCK_FILE};
use cellar_core::format::FileKind;
use cellar_core::store::StoreWriter;
use cellar_core::{CellarError, IoContext, Result};
use cellar_encode::{Encoded, Encoder, EncoderConfig, Pca};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::bm25::Bm25Writer;
use crate::config::{BuildReport, EncoderSettings, IndexConfig, SearchDefaults, INDEX_FORMAT_VERSION};
use crate::corpus::{Collection, CorpusReader, Document};
use crate::disk::dir_bytes;
use crate::index::{Index, BM25_DIR, PCA_FILE, VECTORS_DIR};
use crate::ivf::{build_ivf_over, IvfBuildOptions};
use crate::lock::{self, BUILDING_MARKER};
use crate::pooled::PooledWriter;
use crate::texts::TextsWriter;

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
}

impl BuildOptions {
    pub fn new(collection: impl Into<PathBuf>, out: impl Into<PathBuf>) -> BuildOptions {
        BuildOptions {
            collection: collection.into(),
            out: out.into(),
            model_dir: None,
            query_max_tokens: 64,
            doc_max_tokens: 256,
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
        }
    }

    fn needs_sample(&self) -> bool {
        self.pca_dim.is_some() || self.codec.needs_sample()
    }
}

/// Projects `n` token vectors with `pca` and L2-normalises each.
pub fn project_tokens(pca: &Pca, tokens: &[f32], n: usize) -> Vec<f32> {
    pca.project_normalized(&tokens[..(n * pca.in_dim()).min(tokens.len())])
}

impl Index {
    /// Builds an index from `options.collection` into `options.out`, and its IVF when
    /// `options.ivf` asks for one (its report: `ivf::IvfConfig::load`).
    pub fn build(options: &BuildOptions) -> Result<IndexConfig> {
        let started = Instant::now();
        check_options(options)?;
        let collection = Collection::locate(&options.collection)?;
        let _lock = prepare_out_dir(&options.out)?;
        let encoder = load_encoder(options)?;
        let mut run = BuildRun::new(options, &encoder, &collection.corpus)?;
        run.stream(CorpusReader::open(&collection.corpus)?)?;
        let mut report = run.finish()?;
        report.total_secs = started.elapsed().as_secs_f64();
        let config = IndexConfig {
            format_version: INDEX_FORMAT_VERSION,
            created_by: format!("cellar {}", env!("CARGO_PKG_VERSION")),
            encoder: encoder_settings(options, &encoder),
            pca_dim: options.pca_dim,
            codec: options.codec.name().to_string(),
            search: SearchDefaults::default(),
            build: report,
        };
        config.save(&options.out)?;
        let _ = std::fs::remove_file(options.out.join(BUILDING_MARKER));
        if let Some(ivf) = &options.ivf {
            let pooled = options.out.join(FileKind::Pooled.file_name());
            build_ivf_over(&options.out, &pooled, config.encoder.model_dim, config.build.docs as usize, ivf)?;
        }
        Ok(config)
    }
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

fn load_encoder(options: &BuildOptions) -> Result<Encoder> {
    let model_dir = match &options.model_dir {
        Some(dir) => dir.clone(),
        None => cellar_encode::default_model_dir()?,
    };
    let mut config = EncoderConfig::new(model_dir);
    config.query_max_tokens = options.query_max_tokens;
    config.doc_max_tokens = options.doc_max_tokens;
    config.skip_special = options.skip_special;
    config.skip_punctuation = options.skip_punctuation;
    config.threads = options.encode_threads.max(1);
    config.batch_size = options.batch_docs;
    let encoder = Encoder::load(config)?;
    if let Some(pca_dim) = options.pca_dim {
        if pca_dim > encoder.dim() {
            return Err(CellarError::InvalidInput(format!(
                "pca_dim {pca_dim} is larger than the model's dimension {}",
                encoder.dim()
            )));
        }
    }
    Ok(encoder)
}

fn encoder_settings(options: &BuildOptions, encoder: &Encoder) -> EncoderSettings {
    let model_dir = encoder.config().model_dir.clone();
    EncoderSettings {
        model: encoder.model_name(),
        model_dir: std::fs::canonicalize(&model_dir).unwrap_or(model_dir),
        model_dim: encoder.dim(),
        query_max_tokens: options.query_max_tokens,
        doc_max_tokens: options.doc_max_tokens,
        skip_special: options.skip_special,
        skip_punctuation: options.skip_punctuation,
    }
}

/// The writers of one build, created once the codec (and PCA) can be fitted.
struct Sinks {
    store: StoreWriter,
    pooled: PooledWriter,
    texts: TextsWriter,
    bm25: Bm25Writer,
    pca: Option<Pca>,
}

/// State of one build while the corpus streams through.
struct BuildRun<'a> {
    options: &'a BuildOptions,
    encoder: &'a Encoder,
    corpus: PathBuf,
    seen: HashMap<String, usize>,
    sample: Vec<(Document, Encoded)>,
    sample_tokens: usize,
    sinks: Option<Sinks>,
    report: BuildReport,
    bar: ProgressBar,
}

impl<'a> BuildRun<'a> {
    fn new(options: &'a BuildOptions, encoder: &'a Encoder, corpus: &Path) -> Result<BuildRun<'a>> {
        let total = count_lines(corpus)?;
        let total = options.max_docs.map_or(total, |m| total.min(m as u64));
        Ok(BuildRun {
            options,
            encoder,
            corpus: corpus.to_path_buf(),
            seen: HashMap::new(),
            sample: Vec::new(),
            sample_tokens: 0,
            sinks: None,
            report: BuildReport::default(),
            bar: progress_bar(total, options.progress),
        })
    }

    fn stream(&mut self, mut reader: CorpusReader) -> Result<()> {
        let limit = self.options.max_docs.unwrap_or(usize::MAX);
        let mut taken = 0usize;
        loop {
            let mut batch = Vec::with_capacity(self.options.batch_docs);
            while batch.len() < self.options.batch_docs && taken < limit {
                let Some(doc) = reader.next() else { break };
                let doc = doc?;
                self.check_unique(&doc.id, reader.line_no())?;
                batch.push(doc);
                taken += 1;
            }
            if batch.is_empty() {
                return Ok(());
            }
            self.encode_batch(batch)?;
        }
    }

    fn check_unique(&mut self, id: &str, line_no: usize) -> Result<()> {
        if let Some(first) = self.seen.insert(id.to_string(), line_no) {
            return Err(CellarError::InvalidInput(format!(
                "{} line {line_no}: duplicate id {id:?} (first seen on line {first})",
                self.corpus.display()
            )));
        }
        Ok(())
    }

    fn encode_batch(&mut self, batch: Vec<Document>) -> Result<()> {
        let start = Instant::now();
        let contents: Vec<String> = batch.iter().map(Document::content).collect();
        let refs: Vec<&str> = contents.iter().map(String::as_str).collect();
        let encoded = self.encoder.encode_docs(&refs)?;
        self.report.encode_secs += start.elapsed().as_secs_f64();
        self.bar.inc(batch.len() as u64);
        for (doc, enc) in batch.into_iter().zip(encoded) {
            self.accept(doc, enc)?;
        }
        Ok(())
    }

    fn accept(&mut self, doc: Document, encoded: Encoded) -> Result<()> {
        if self.sinks.is_some() {
            return self.write(&doc, &encoded);
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
        let model_dim = self.encoder.dim();
        let tokens: Vec<f32> = self.sample.iter().flat_map(|(_, e)| e.tokens.iter().copied()).collect();
        let pca = match self.options.pca_dim {
            Some(out_dim) => Some(Pca::fit(&tokens, model_dim, out_dim)?),
            None => None,
        };
        let dim = self.options.pca_dim.unwrap_or(model_dim);
        let fitted = match &pca {
            Some(pca) => project_tokens(pca, &tokens, tokens.len() / model_dim),
            None => tokens,
        };
        let codec = fit_codec(self.options.codec, dim, &fitted)?;
        self.report.fit_secs = fit_start.elapsed().as_secs_f64();
        let out = &self.options.out;
        if let Some(pca) = &pca {
            pca.save(&out.join(PCA_FILE))?;
        }
        self.sinks = Some(Sinks {
            store: StoreWriter::create(&out.join(VECTORS_DIR), codec, false)?,
            pooled: PooledWriter::create(out, model_dim)?,
            texts: TextsWriter::create(out)?,
            bm25: Bm25Writer::create(&out.join(BM25_DIR))?,
            pca,
        });
        for (doc, encoded) in std::mem::take(&mut self.sample) {
            self.write(&doc, &encoded)?;
        }
        Ok(())
    }

    fn write(&mut self, doc: &Document, encoded: &Encoded) -> Result<()> {
        let sinks = self.sinks.as_mut().expect("sinks are open before any write");
        let start = Instant::now();
        let projected = sinks.pca.as_ref().map(|pca| project_tokens(pca, &encoded.tokens, encoded.n_tokens));
        let id = sinks.store.add(projected.as_deref().unwrap_or(&encoded.tokens), None)?;
        sinks.pooled.add(&encoded.pooled)?;
        sinks.texts.add(doc)?;
        self.report.write_secs += start.elapsed().as_secs_f64();
        let bm25_start = Instant::now();
        sinks.bm25.add(id, &doc.content())?;
        self.report.bm25_secs += bm25_start.elapsed().as_secs_f64();
        self.report.docs += 1;
        self.report.tokens += encoded.n_tokens as u64;
        Ok(())
    }

    fn finish(mut self) -> Result<BuildReport> {
        if self.sinks.is_none() {
            if self.sample.is_empty() {
                return Err(CellarError::InvalidInput(format!(
                    "{}: the corpus has no documents",
                    self.corpus.display()
                )));
            }
            self.open_sinks()?;
        }
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

fn progress_bar(total: u64, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new(total);
    let template = "{msg:>9} [{bar:40}] {pos}/{len} docs ({per_sec}, eta {eta})";
    bar.set_style(ProgressStyle::with_template(template).expect("valid template").progress_chars("=> "));
    bar.set_message("encoding");
    bar
}
