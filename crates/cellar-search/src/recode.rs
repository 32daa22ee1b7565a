//! `recode`: a new index whose token vectors are those of an f16 index, re-encoded with another
//! codec (and optionally a PCA) without running the model again. Everything else (BM25, texts,
//! pooled vectors, the IVF) is hard-linked from the source (copied across file systems), and
//! the source's tuned search defaults are kept, so the two differ only in their vectors.
//!
//! The source vectors are f16 (11-bit mantissas): a codec recoded from them sees the encoder's
//! output rounded to f16 first, a difference far below any codec's own error.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cellar_core::codec::{fit_codec_with, CodecKind, FitOptions};
use cellar_core::format::fsio::LOCK_FILE;
use cellar_core::io::{ReaderKind, ReaderOptions};
use cellar_core::store::{StoreWriter, VectorStore};
use cellar_core::{CellarError, DocId, IoContext, Result};
use cellar_encode::Pca;

use crate::build::prepare_out_dir;
use crate::config::IndexConfig;
use crate::disk::dir_bytes;
use crate::index::{PCA_FILE, VECTORS_DIR};
use crate::lock::{self, BUILDING_MARKER};
use crate::vectors::project_tokens;

/// Records read per batch while recoding.
const BATCH_DOCS: usize = 256;

#[derive(Clone, Debug)]
pub struct RecodeOptions {
    /// An index whose vectors are f16 without PCA.
    pub from: PathBuf,
    pub out: PathBuf,
    pub codec: CodecKind,
    pub pca_dim: Option<usize>,
    /// Token vectors the PCA and the codec are fitted on, taken from documents spread over
    /// the whole index.
    pub sample_tokens: usize,
    /// How the codec is fitted (the defaults, as a build fits it, unless a benchmark says).
    pub fit: FitOptions,
}

/// Writes the recoded index into `options.out` (new or empty) and returns its configuration.
pub fn recode(options: &RecodeOptions) -> Result<IndexConfig> {
    let started = Instant::now();
    let _source_lock = lock::shared(&options.from)?;
    crate::written::refuse_written(&options.from, "recode")?;
    let mut config = IndexConfig::load(&options.from)?;
    if config.codec != CodecKind::F16.name() || config.pca_dim.is_some() {
        return Err(CellarError::invalid(format!(
            "{}: recode reads f16 vectors without PCA; this index holds {}{}",
            options.from.display(),
            config.codec,
            config.pca_dim.map_or(String::new(), |d| format!(" after a PCA to {d}")),
        )));
    }
    let model_dim = config.encoder.model_dim;
    if let Some(d) = options.pca_dim.filter(|d| *d == 0 || *d > model_dim) {
        return Err(CellarError::invalid(format!("pca_dim {d} is out of range 1..={model_dim}")));
    }
    let _lock = prepare_out_dir(&options.out)?;
    link_tree(&options.from, &options.out, true)?;
    let source = VectorStore::open(&options.from.join(VECTORS_DIR), &ReaderOptions::new(ReaderKind::Mmap))?;
    let sample = sample_tokens(&source, options.sample_tokens)?;
    let pca = match options.pca_dim {
        Some(out_dim) => Some(Pca::fit(&sample, model_dim, out_dim)?),
        None => None,
    };
    let project = |tokens: Vec<f32>| match &pca {
        Some(pca) => project_tokens(pca, &tokens, tokens.len() / model_dim),
        None => tokens,
    };
    let dim = options.pca_dim.unwrap_or(model_dim);
    let codec = fit_codec_with(options.codec, dim, &project(sample), &options.fit)?;
    if let Some(pca) = &pca {
        pca.save(&options.out.join(PCA_FILE))?;
    }
    let mut writer = StoreWriter::create(&options.out.join(VECTORS_DIR), Arc::clone(&codec), false)?;
    let ids: Vec<DocId> = (0..source.len() as u32).map(DocId).collect();
    for chunk in ids.chunks(BATCH_DOCS) {
        let batch = source.read_batch(chunk)?;
        for i in 0..chunk.len() {
            let record = batch.record(i);
            let mut tokens = Vec::new();
            source.codec().decode(record.tokens, &mut tokens);
            // A record of passages keeps them.
            let ends: Vec<u32> = record
                .passages()
                .skip_while(|_| record.passage_ends.is_none())
                .map(|p| p.end as u32)
                .collect();
            writer.add_passages(&project(tokens), None, &ends)?;
        }
    }
    writer.finish()?;
    config.codec = options.codec.name().to_string();
    config.pca_dim = options.pca_dim;
    config.created_by =
        format!("cellar {} (recoded from {})", env!("CARGO_PKG_VERSION"), options.from.display());
    config.build.write_secs = started.elapsed().as_secs_f64();
    config.build.vectors_bytes =
        dir_bytes(&options.out.join(VECTORS_DIR)) + dir_bytes(&options.out.join(PCA_FILE));
    config.save(&options.out)?;
    let marker = options.out.join(BUILDING_MARKER);
    std::fs::remove_file(&marker).at(&marker)?;
    Ok(config)
}

/// About `target` token vectors (decoded) from documents spread evenly over `store`.
fn sample_tokens(store: &VectorStore, target: usize) -> Result<Vec<f32>> {
    let tokens = store.manifest().counts.tokens.max(1) as usize;
    let stride = (tokens / target.max(1)).max(1);
    let ids: Vec<DocId> = (0..store.len() as u32).step_by(stride).map(DocId).collect();
    let mut sample = Vec::new();
    for chunk in ids.chunks(BATCH_DOCS) {
        let batch = store.read_batch(chunk)?;
        for i in 0..chunk.len() {
            store.codec().decode(batch.record(i).tokens, &mut sample);
        }
    }
    Ok(sample)
}

/// Hard-links (or copies, across file systems) every file under `from` into `to`, but at the
/// top level not the vectors, the PCA, `index.json`, the lock or the build marker.
fn link_tree(from: &Path, to: &Path, top: bool) -> Result<()> {
    let skipped = [VECTORS_DIR, PCA_FILE, crate::config::CONFIG_FILE, LOCK_FILE, BUILDING_MARKER];
    for entry in from.read_dir().at(from)? {
        let entry = entry.at(from)?;
        let name = entry.file_name();
        if top && skipped.iter().any(|s| name == *s) {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        if entry.file_type().at(&src)?.is_dir() {
            std::fs::create_dir_all(&dst).at(&dst)?;
            link_tree(&src, &dst, false)?;
        } else if std::fs::hard_link(&src, &dst).is_err() {
            std::fs::copy(&src, &dst).at(&dst)?;
        }
    }
    Ok(())
}
