//! The indexes of a data directory (`cellar serve --data-dir DIR`), by name: opened on first
//! use and kept open, created from their first documents, dropped, and followed on disk (a
//! directory copied under DIR is an index at its next use; one removed is gone). The HTTP side
//! is `indexes`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use cellar_core::codec::CodecKind;
use cellar_core::ids::check_name;
use cellar_core::{CellarError, IoContext, Result};
use cellar_search::config::CONFIG_FILE as INDEX_FILE;
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::live::write::MAX_WRITE_OPS;
use cellar_search::{BuildOptions, DocIn, Index, OpenOptions};
use schemars::JsonSchema;
use serde::Deserialize;

/// Prefix of a dropped index's directory until it is removed (never a valid index name).
const DROPPED_PREFIX: &str = ".dropped-";

/// The indexes under a data directory.
pub struct Indexes {
    root: PathBuf,
    options: OpenOptions,
    open: Mutex<HashMap<String, Arc<Index>>>,
}

/// `PUT /v1/indexes/{name}`: a new index of its first documents.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateIndex {
    /// 1 to 4096 documents as writes take them: all with `vectors` (an index of the caller's
    /// embeddings) or none (their text is encoded by the server's model).
    #[schemars(length(min = 1, max = MAX_WRITE_OPS))]
    pub docs: Vec<DocIn>,
    /// Codec of the token vectors: f16, int8, residual1, residual2 or residual4 (default: the
    /// build's).
    #[serde(default)]
    pub codec: Option<String>,
    /// Also build the IVF first stage (the dense and ivf modes); default false.
    #[serde(default)]
    pub ivf: bool,
}

impl Indexes {
    /// The indexes under `root` (created when missing), opened with `options` on first use.
    /// What a crash left of a drop is removed.
    pub fn open(root: &Path, options: OpenOptions) -> Result<Indexes> {
        std::fs::create_dir_all(root).at(root)?;
        for entry in std::fs::read_dir(root).at(root)?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(DROPPED_PREFIX) {
                let path = entry.path();
                std::fs::remove_dir_all(&path).at(&path)?;
            }
        }
        Ok(Indexes { root: root.to_path_buf(), options, open: Mutex::new(HashMap::new()) })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Index>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dir(&self, name: &str) -> Result<PathBuf> {
        check_name("index name", name)?;
        Ok(self.root.join(name))
    }

    /// The index `name`: opened now if it is on disk and not open yet; `NotFound` when its
    /// directory holds no index (never created, dropped, or removed on disk).
    pub fn get(&self, name: &str) -> Result<Arc<Index>> {
        if let Some(index) = self.get_open(name)? {
            return Ok(index);
        }
        // Opened without the registry's lock, so requests to the other indexes go on meanwhile;
        // of two opening it at once, the first to register wins.
        let index = Arc::new(Index::open(&self.root.join(name), self.options.clone())?);
        Ok(self.lock().entry(name.to_string()).or_insert(index).clone())
    }

    /// The index `name` when it is open (`None`: on disk but not open yet); `NotFound` when its
    /// directory holds no index. Costs a `stat`, never an open.
    pub fn get_open(&self, name: &str) -> Result<Option<Arc<Index>>> {
        let dir = self.dir(name)?;
        if !dir.join(INDEX_FILE).is_file() {
            self.lock().remove(name);
            return Err(CellarError::NotFound(format!("no index {name:?} in {}", self.root.display())));
        }
        Ok(self.lock().get(name).cloned())
    }

    /// The indexes open now.
    pub fn opened(&self) -> Vec<Arc<Index>> {
        self.lock().values().cloned().collect()
    }

    /// Names of the indexes on disk, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.root)
            .map(|d| d.flatten().filter(|e| e.path().join(INDEX_FILE).is_file()).collect())
            .unwrap_or_else(|_| Vec::new())
            .into_iter()
            .map(|e: std::fs::DirEntry| e.file_name().to_string_lossy().into_owned())
            .filter(|name| check_name("index name", name).is_ok())
            .collect();
        names.sort();
        names
    }

    /// Builds the index `name` of `request`'s documents and opens it; refused when the name is
    /// taken.
    pub fn create(&self, name: &str, request: CreateIndex) -> Result<Arc<Index>> {
        let dir = self.dir(name)?;
        if dir.exists() {
            return Err(CellarError::invalid(format!("index {name:?} exists; drop it first")));
        }
        let mut options = BuildOptions::new("", &dir);
        options.model_dir = self.options.model_dir.clone();
        options.encode_threads = 1;
        if let Some(codec) = &request.codec {
            options.codec = codec.parse::<CodecKind>()?;
        }
        options.ivf = request.ivf.then(IvfBuildOptions::default);
        Index::create(&options, request.docs)?;
        self.get(name)
    }

    /// Drops the index `name`: its directory is renamed aside at once, then removed.
    pub fn drop_index(&self, name: &str) -> Result<()> {
        let dir = self.dir(name)?;
        let mut open = self.lock();
        if !dir.join(INDEX_FILE).is_file() {
            open.remove(name);
            return Err(CellarError::NotFound(format!("no index {name:?} in {}", self.root.display())));
        }
        let aside = self.root.join(format!("{DROPPED_PREFIX}{name}-{}", std::process::id()));
        std::fs::rename(&dir, &aside).at(&dir)?;
        open.remove(name);
        drop(open);
        std::fs::remove_dir_all(&aside).at(&aside)
    }
}
