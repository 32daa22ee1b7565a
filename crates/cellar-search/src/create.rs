//! An index from its first documents, stated as writes state them (`DocIn`): what a server's
//! `PUT /v1/indexes/{name}` builds. All of them carry vectors (an index of the caller's
//! embeddings, `Index::build_from_embeddings`) or none does (their text is encoded by the model,
//! `Index::build` over a corpus file written beside the index and removed after). Later
//! documents arrive as writes (`Index::write`). An index can also start with no documents at all
//! (`Index::create_empty`): its dimension given, or its model's.

use std::path::PathBuf;

use cellar_core::codec::MAX_DIM;
use cellar_core::{CellarError, IoContext, Result};

use crate::build::{build_embeddings, BuildOptions, EmbeddedDoc};
use crate::config::IndexConfig;
use crate::doc::DocIn;
use crate::index::Index;
use crate::live::write::MAX_WRITE_OPS;

impl Index {
    /// Builds `options.out` from `docs` (1 to 4096 documents with unique ids), with the codec,
    /// IVF and model of `options` (`options.collection` is not read).
    pub fn create(options: &BuildOptions, docs: Vec<DocIn>) -> Result<IndexConfig> {
        if docs.is_empty() || docs.len() > MAX_WRITE_OPS {
            return Err(CellarError::invalid(format!(
                "docs must hold 1 to {MAX_WRITE_OPS} documents, got {}",
                docs.len()
            )));
        }
        for (i, doc) in docs.iter().enumerate() {
            doc.check_for_index(&format!("docs[{i}]"), options.grouped)?;
        }
        let with_vectors = docs.iter().filter(|d| d.vectors.is_some()).count();
        match with_vectors {
            0 => create_from_text(options, docs),
            n if n == docs.len() => create_from_vectors(options, docs),
            n => Err(CellarError::invalid(format!(
                "{n} of the {} documents carry vectors: give vectors for all of them or none",
                docs.len()
            ))),
        }
    }
}

impl Index {
    /// Builds `options.out` with no documents: every document arrives later as a write. Its
    /// dimension is `dim`, else the model's (`options.model_dir`, else the default model); a
    /// `dim` that differs from the model's is refused. What is fitted on documents cannot be
    /// fitted on none, so each is refused with what to do instead: a codec that learns from
    /// vectors (an empty index stores f16, or takes a fitted codec with `codec_from`), PCA and
    /// the IVF (`Index::retrain_ivf` trains its first once writes have filled the index).
    pub fn create_empty(options: &BuildOptions, dim: Option<usize>) -> Result<IndexConfig> {
        if options.codec.needs_sample() && options.codec_from.is_none() {
            return Err(CellarError::invalid(format!(
                "codec {}: it is fitted on document vectors and an empty index has none; create it \
                 with codec f16, or with its first documents",
                options.codec.name()
            )));
        }
        if options.pca_dim.is_some() && options.codec_from.is_none() {
            return Err(CellarError::invalid(
                "pca_dim: PCA is fitted on document vectors and an empty index has none (or takes it from codec_from)",
            ));
        }
        if options.ivf.is_some() {
            return Err(CellarError::invalid(
                "ivf: an empty index has no documents to cluster: create it with its first documents, \
                 or train its IVF once writes have filled it (`cellar ivf retrain`)",
            ));
        }
        let (dim, model_dir) = match dim {
            Some(dim) if dim == 0 || dim > MAX_DIM => {
                return Err(CellarError::invalid(format!("dim {dim}: 1 to {MAX_DIM} allowed")))
            }
            // The caller's embeddings: a model named by the options is checked against `dim` by
            // the build (text queries), none is loaded otherwise.
            Some(dim) => (dim, options.model_dir.clone()),
            None => {
                let config = options.encoder_config()?;
                let model_dir = config.model_dir.clone();
                let encoder = cellar_encode::Encoder::load(config)?;
                (encoder.dim(), Some(model_dir))
            }
        };
        let options = BuildOptions { model_dir, ..options.clone() };
        build_embeddings(&options, dim, Some(0), std::iter::empty(), true)
    }
}

fn create_from_vectors(options: &BuildOptions, docs: Vec<DocIn>) -> Result<IndexConfig> {
    let first = docs[0].vectors.as_ref().expect("every document has vectors");
    let dim = first.tokens.first().or(first.pooled.as_ref()).map(Vec::len).ok_or_else(|| {
        CellarError::invalid(
            "docs[0].vectors: the first document gives its vectors as rows (tokens), which set the dimension",
        )
    })?;
    if dim == 0 || dim > MAX_DIM {
        return Err(CellarError::invalid(format!(
            "docs[0].vectors: a vector of {dim} values; the dimension is 1 to {MAX_DIM}"
        )));
    }
    let embedded: Vec<Result<EmbeddedDoc>> = docs
        .into_iter()
        .enumerate()
        .map(|(i, doc)| doc.into_embedded(dim, &format!("docs[{i}].vectors")))
        .collect();
    Index::build_from_embeddings(options, dim, None, embedded)
}

fn create_from_text(options: &BuildOptions, docs: Vec<DocIn>) -> Result<IndexConfig> {
    let mut lines = String::new();
    for doc in &docs {
        let line = serde_json::json!({"_id": doc.id, "title": doc.title, "text": doc.text, "metadata": doc.metadata});
        lines.push_str(&line.to_string());
        lines.push('\n');
    }
    let name = options.out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let corpus: PathBuf = options.out.with_file_name(format!(".{name}.corpus-{}.jsonl", std::process::id()));
    std::fs::write(&corpus, lines).at(&corpus)?;
    let built = Index::build(&BuildOptions { collection: corpus.clone(), ..options.clone() });
    let _ = std::fs::remove_file(&corpus);
    built
}
