//! `index.json`: what an index was built with, its search defaults and its build report. It is
//! written last, so a directory without it is an interrupted build.

use std::path::{Path, PathBuf};

use cellar_core::format::fsio::write_atomic;
use cellar_core::format::versioned::{parse_versioned_json, VersionRange, FORMAT_VERSION_FIELD};
use cellar_core::{CellarError, IoContext, Result};
use cellar_encode::{Encoded, Overflow};
use serde::{Deserialize, Serialize};

use crate::fusion::Fusion;
use crate::mode::{Lexical, Mode};

/// Version of the index directory layout (`index.json` and the files beside it).
pub const INDEX_FORMAT_VERSION: u32 = 1;
/// The versions of `index.json` this build reads.
pub const INDEX_READABLE_VERSIONS: VersionRange = VersionRange::only(INDEX_FORMAT_VERSION);
pub const CONFIG_FILE: &str = "index.json";

/// Encoder settings an index was built with; queries must be encoded the same way.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EncoderSettings {
    pub model: String,
    /// Where the model was found at build time (used again at open unless overridden).
    pub model_dir: PathBuf,
    /// Dimension of the model's output (before any PCA).
    pub model_dim: usize,
    pub query_max_tokens: usize,
    pub doc_max_tokens: usize,
    /// What a document past `doc_max_tokens` became (indexes from before it was recorded cut
    /// them).
    #[serde(default)]
    pub doc_overflow: Overflow,
    pub skip_special: bool,
    pub skip_punctuation: bool,
    /// The token vectors were the caller's (`Index::build_from_embeddings`): no model encoded
    /// them, and text queries need the one named at build or open time (`model_dir`), never
    /// the default model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
}

/// What a tuning run chose, and on what it measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TuneRecord {
    pub qrels: String,
    pub queries: usize,
    pub metric: String,
    pub value: f64,
    /// When the judgments were the test split: the k-fold cross-validated estimate of the
    /// choice (`cellar tune --cv K`), the figure to report instead of `value`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<CvRecord>,
}

/// A cross-validated estimate of a tuning run.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct CvRecord {
    pub folds: usize,
    pub value: f64,
}

/// Search parameters used when a request does not give them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SearchDefaults {
    pub mode: Mode,
    pub candidates: usize,
    pub rerank_k: usize,
    pub alpha: f32,
    /// How hybrid fuses its two scores (indexes from before it was a setting used z).
    #[serde(default)]
    pub fusion: Fusion,
    /// The sparse first stage (indexes from before it was a setting used BM25).
    #[serde(default)]
    pub lexical: Lexical,
    pub tuned: Option<TuneRecord>,
}

impl Default for SearchDefaults {
    fn default() -> Self {
        SearchDefaults {
            mode: Mode::Hybrid,
            candidates: 200,
            rerank_k: 200,
            // The safest fixed weight without judgments (issue 18.2, bench/results/fusion-t256.md):
            // on SciFact, cranfield and cisi z fusion at 0.4 beats the better of BM25 and rerank
            // by at least 0.029 nDCG@10, more than any other fixed setting measured.
            alpha: 0.4,
            fusion: Fusion::default(),
            lexical: Lexical::default(),
            tuned: None,
        }
    }
}

/// Sizes and times of a build.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BuildReport {
    pub docs: u64,
    pub tokens: u64,
    pub encode_secs: f64,
    /// Fitting the PCA and the codec on the sample (absent from indexes built before it was
    /// reported).
    #[serde(default)]
    pub fit_secs: f64,
    pub bm25_secs: f64,
    pub write_secs: f64,
    pub total_secs: f64,
    pub bm25_bytes: u64,
    pub vectors_bytes: u64,
    pub pooled_bytes: u64,
    pub texts_bytes: u64,
    /// Documents past the token limit, and what became of them (`None`: an index built before
    /// they were counted).
    #[serde(default)]
    pub long_docs: Option<LongDocs>,
}

/// The documents of a build longer than its document limit.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LongDocs {
    /// Documents cut at the limit, and the tokens cut off them.
    pub cut: u64,
    pub tokens_cut: u64,
    /// Documents encoded in more than one window.
    pub windowed: u64,
    /// Windows those took in all.
    pub windows: u64,
}

impl LongDocs {
    /// Counts one encoded document.
    pub fn count(&mut self, encoded: &Encoded) {
        if encoded.tokens_cut > 0 {
            self.cut += 1;
            self.tokens_cut += encoded.tokens_cut as u64;
        }
        if encoded.windows > 1 {
            self.windowed += 1;
            self.windows += encoded.windows as u64;
        }
    }
}

/// The whole `index.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct IndexConfig {
    pub format_version: u32,
    pub created_by: String,
    pub encoder: EncoderSettings,
    /// Dimension the token vectors were projected to by PCA (`pca.bin`), if any.
    pub pca_dim: Option<usize>,
    pub codec: String,
    pub search: SearchDefaults,
    pub build: BuildReport,
    /// A grouped index (a streaming collection): every document has a group, the written
    /// documents' segments keep each group's records together, and a search is exact inside one
    /// group (`Index::search_group`), with no first stage. Created empty only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grouped: bool,
}

impl IndexConfig {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(CONFIG_FILE)
    }

    /// What opening `dir` without an `index.json` is: `InvalidInput` saying whether the directory
    /// is there at all.
    pub fn not_an_index(dir: &Path) -> CellarError {
        let detail = if dir.is_dir() {
            "no index.json: not a Cellar index, or its build was interrupted"
        } else {
            "no such index directory"
        };
        CellarError::InvalidInput(format!("{}: {detail}", dir.display()))
    }

    pub fn load(dir: &Path) -> Result<IndexConfig> {
        let path = Self::path(dir);
        if !path.is_file() {
            return Err(Self::not_an_index(dir));
        }
        let bytes = std::fs::read(&path).at(&path)?;
        let config: IndexConfig =
            parse_versioned_json(&path, &bytes, FORMAT_VERSION_FIELD, INDEX_READABLE_VERSIONS)?;
        Ok(config)
    }

    /// Writes `index.json` atomically (temp file, fsync, rename, fsync of the directory).
    pub fn save(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| CellarError::internal(format!("index.json does not serialise: {e}")))?;
        write_atomic(&Self::path(dir), &json)
    }

    /// Dimension of the stored token vectors.
    pub fn token_dim(&self) -> usize {
        self.pca_dim.unwrap_or(self.encoder.model_dim)
    }
}

/// The commit point `config_file` of an optional part of an index in `dir` (the IVF's, the
/// token stage's), parsed at its versions: `None` when neither it nor any of the part's binary
/// `kinds` is there. One of them without the commit point is `Corrupted` naming the missing
/// file (`hint` says how to rebuild): a build swaps all of them in at once, and reading the
/// index as one without the part would silently change what its modes answer.
pub(crate) fn load_committed<T: serde::de::DeserializeOwned>(
    dir: &Path,
    config_file: &str,
    kinds: &[cellar_core::format::FileKind],
    versions: VersionRange,
    hint: impl Fn() -> String,
) -> Result<Option<T>> {
    let path = dir.join(config_file);
    if !path.is_file() {
        return match kinds.iter().find(|k| dir.join(k.file_name()).exists()) {
            None => Ok(None),
            Some(kind) => Err(CellarError::corrupted(
                &path,
                0,
                format!(
                    "missing: the {} is there but not its commit point {config_file}; {}",
                    kind.file_name(),
                    hint()
                ),
            )),
        };
    }
    let bytes = std::fs::read(&path).at(&path)?;
    Ok(Some(parse_versioned_json(&path, &bytes, FORMAT_VERSION_FIELD, versions)?))
}
