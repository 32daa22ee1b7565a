//! The indexes of a data directory (`cellar serve --data-dir DIR`), by name: opened on first
//! use, created from their first documents, dropped, and followed on disk (a directory copied
//! under DIR is an index at its next use; one removed is gone). The HTTP side is `indexes`.
//!
//! - One process owns DIR: [`Indexes::open`] takes DIR's exclusive lock (`DIR/LOCK`, a
//!   [`DirLock`]), so a second server on the same DIR is refused with `Locked` naming the first's
//!   pid. Other processes may still open one index of it (`cellar search`, `cellar add`, Python).
//! - At most `max_open` indexes stay open (each holds its lock, its files and maps): opening one
//!   more closes the least recently used ones that no request, merge or write holds (an `Arc`
//!   held elsewhere keeps its index open until it is let go, and such an index is never closed
//!   under it; if all are held, the bound is passed rather than a request refused, and the
//!   requests are bounded by the server's pools). Closing is safe at any time nothing holds the
//!   index: every acknowledged write is in its log, and the next open replays it.
//! - At most `max_indexes` indexes exist: a PUT past it is refused ([`CreateError::TooMany`]).
//! - A drop holds the index exclusively: it stops new requests to it (409), waits for this
//!   process's own requests on it to finish (at most [`DROP_WAIT`]), then takes the index's
//!   exclusive lock, which is refused with `Locked` (409, nothing removed) while any other
//!   process has the index open; then it renames the directory aside (the name is free at
//!   once) and removes it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use cellar_core::codec::CodecKind;
use cellar_core::format::fsio::{sync_dir, DirLock};
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

/// Indexes kept open at once by default (`cellar serve --max-open-indexes`).
pub const DEFAULT_MAX_OPEN_INDEXES: usize = 64;

/// Indexes a data directory may hold by default (`cellar serve --max-indexes`).
pub const DEFAULT_MAX_INDEXES: usize = 1024;

/// Longest a drop waits for this process's own requests on the index to finish before it is
/// refused (409): a request's deadline is 10 s by default.
pub const DROP_WAIT: Duration = Duration::from_secs(30);

/// What `DirLock` messages call the data directory.
const WHAT: &str = "data directory";

/// The indexes under a data directory.
pub struct Indexes {
    root: PathBuf,
    options: OpenOptions,
    max_open: usize,
    max_indexes: usize,
    open: Mutex<Open>,
    /// The data directory's exclusive lock, held while this value lives.
    _lock: DirLock,
}

/// The registry's state, under one mutex.
#[derive(Default)]
struct Open {
    /// The open indexes and when each was last used (a tick of `clock`).
    indexes: HashMap<String, (Arc<Index>, u64)>,
    clock: u64,
    /// Opens under way (outside the mutex), by name: a drop waits for them.
    opening: HashMap<String, usize>,
    /// Indexes being dropped: requests to them are refused until the drop ends.
    dropping: std::collections::HashSet<String>,
    /// Creations under way, counted against `max_indexes`.
    creating: usize,
}

/// Why a PUT did not create an index.
#[derive(Debug)]
pub enum CreateError {
    /// The data directory holds `max` indexes already (`--max-indexes`).
    TooMany {
        max: usize,
    },
    Cellar(CellarError),
}

impl From<CellarError> for CreateError {
    fn from(e: CellarError) -> Self {
        CreateError::Cellar(e)
    }
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::TooMany { max } => {
                write!(f, "the data directory holds {max} indexes, its most (--max-indexes): drop one first")
            }
            CreateError::Cellar(e) => e.fmt(f),
        }
    }
}

/// `NotFound` for `name`, naming no path.
fn no_index(name: &str) -> CellarError {
    CellarError::NotFound(format!("no index {name:?}"))
}

/// `Locked` for `name` (a path relative to the data directory, which clients may see).
fn locked(name: &str, detail: impl Into<String>) -> CellarError {
    CellarError::Locked { path: PathBuf::from(name), detail: detail.into() }
}

fn being_dropped(name: &str) -> CellarError {
    locked(name, "the index is being dropped")
}

/// `PUT /v1/indexes/{name}`: a new index of its first documents, or an empty one (no `docs`)
/// whose documents all arrive as writes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateIndex {
    /// 1 to 4096 documents as writes take them: all with `vectors` (an index of the caller's
    /// embeddings) or none (their text is encoded by the server's model). Left out: the index
    /// starts empty.
    #[serde(default)]
    #[schemars(length(min = 1, max = MAX_WRITE_OPS))]
    pub docs: Option<Vec<DocIn>>,
    /// An empty index (no `docs`) of the caller's embeddings: the dimension of their vectors (as
    /// with documents that carry vectors, a server started with `--model-dir` checks its model
    /// gives that dimension; without one the index has no model, and searches give
    /// `query_vectors` or search BM25). Left out, an empty index takes the server's model and
    /// its dimension, and writes may carry text alone.
    #[serde(default)]
    #[schemars(range(min = 1, max = cellar_core::codec::MAX_DIM))]
    pub dim: Option<usize>,
    /// Codec of the token vectors: f16, int8, residual1, residual2 or residual4 (default: the
    /// build's; f16 for an empty index, which has no vectors to fit another on).
    #[serde(default)]
    pub codec: Option<String>,
    /// Also build the IVF first stage (the dense and ivf modes); default false.
    #[serde(default)]
    pub ivf: bool,
}

impl Indexes {
    /// The indexes under `root` (created when missing), opened with `options` on first use,
    /// under `root`'s exclusive lock (`Locked` while another process serves it). What a crash
    /// left of a drop is removed.
    pub fn open(root: &Path, options: OpenOptions) -> Result<Indexes> {
        std::fs::create_dir_all(root).at(root)?;
        let lock = DirLock::exclusive(root, WHAT)?;
        for entry in std::fs::read_dir(root).at(root)?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(DROPPED_PREFIX) {
                let path = entry.path();
                std::fs::remove_dir_all(&path).at(&path)?;
            }
        }
        Ok(Indexes {
            root: root.to_path_buf(),
            options,
            max_open: DEFAULT_MAX_OPEN_INDEXES,
            max_indexes: DEFAULT_MAX_INDEXES,
            open: Mutex::new(Open::default()),
            _lock: lock,
        })
    }

    /// Keeps at most `max_open` (at least 1) indexes open; see the module's notes.
    pub fn with_max_open(mut self, max_open: usize) -> Indexes {
        self.max_open = max_open.max(1);
        self
    }

    /// Creates no index past `max_indexes` in the data directory.
    pub fn with_max_indexes(mut self, max_indexes: usize) -> Indexes {
        self.max_indexes = max_indexes;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dir(&self, name: &str) -> Result<PathBuf> {
        check_name("index name", name)?;
        Ok(self.root.join(name))
    }

    /// The index `name`: opened now if it is on disk and not open yet; `NotFound` when its
    /// directory holds no index (never created, dropped, or removed on disk).
    pub fn get(&self, name: &str) -> Result<Arc<Index>> {
        if let Some(index) = self.find(name, true)? {
            return Ok(index);
        }
        // Opened without the registry's lock, so requests to the other indexes go on meanwhile;
        // of two opening it at once, the first to register wins. `find` counted this open.
        let opened = Index::open(&self.root.join(name), self.options.clone());
        let mut open = self.lock();
        if let Some(n) = open.opening.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                open.opening.remove(name);
            }
        }
        let opened = Arc::new(opened.map_err(|e| self.unless_gone(name, e))?);
        if open.dropping.contains(name) {
            return Err(being_dropped(name));
        }
        open.clock += 1;
        let now = open.clock;
        let entry = open.indexes.entry(name.to_string()).or_insert((opened, now));
        entry.1 = now;
        let index = entry.0.clone();
        let closed = self.close_idle(&mut open);
        drop(open);
        // Closed outside the registry's lock (a tantivy writer joins its threads).
        drop(closed);
        Ok(index)
    }

    /// Takes out of `open` the least recently used indexes nothing else holds, until at most
    /// `max_open` are open (or all that are left are held).
    fn close_idle(&self, open: &mut Open) -> Vec<Arc<Index>> {
        let mut closed = Vec::new();
        while open.indexes.len() > self.max_open {
            let idle = open
                .indexes
                .iter()
                .filter(|(_, (index, _))| Arc::strong_count(index) == 1)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(name, _)| name.clone());
            let Some(name) = idle else { break };
            closed.extend(open.indexes.remove(&name).map(|(index, _)| index));
        }
        closed
    }

    /// The index `name` when it is open (`None`: on disk but not open yet); `NotFound` when its
    /// directory holds no index. Costs a `stat`, never an open.
    pub fn get_open(&self, name: &str) -> Result<Option<Arc<Index>>> {
        self.find(name, false)
    }

    /// `get_open`; with `opening`, a `None` also counts an open of `name` as under way (which
    /// the caller ends), in the same hold of the lock, so a drop cannot slip in between.
    fn find(&self, name: &str, opening: bool) -> Result<Option<Arc<Index>>> {
        let dir = self.dir(name)?;
        let on_disk = dir.join(INDEX_FILE).is_file();
        let mut open = self.lock();
        if open.dropping.contains(name) {
            return Err(being_dropped(name));
        }
        if !on_disk {
            open.indexes.remove(name);
            return Err(no_index(name));
        }
        open.clock += 1;
        let now = open.clock;
        let found = open.indexes.get_mut(name).map(|(index, used)| {
            *used = now;
            index.clone()
        });
        if found.is_none() && opening {
            *open.opening.entry(name.to_string()).or_default() += 1;
        }
        Ok(found)
    }

    /// The indexes open now.
    pub fn opened(&self) -> Vec<Arc<Index>> {
        self.lock().indexes.values().map(|(index, _)| index.clone()).collect()
    }

    /// How many indexes are open now.
    pub fn open_count(&self) -> usize {
        self.lock().indexes.len()
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
    /// taken, and when the data directory holds `max_indexes` indexes (those being created
    /// counted).
    pub fn create(&self, name: &str, request: CreateIndex) -> std::result::Result<Arc<Index>, CreateError> {
        let dir = self.dir(name)?;
        if dir.exists() {
            return Err(CellarError::invalid(format!("index {name:?} exists; drop it first")).into());
        }
        {
            let mut open = self.lock();
            if self.names().len() + open.creating >= self.max_indexes {
                return Err(CreateError::TooMany { max: self.max_indexes });
            }
            open.creating += 1;
        }
        let built = self.build(&dir, request);
        self.lock().creating -= 1;
        built?;
        Ok(self.get(name)?)
    }

    fn build(&self, dir: &Path, request: CreateIndex) -> Result<()> {
        let mut options = BuildOptions::new("", dir);
        options.model_dir = self.options.model_dir.clone();
        options.encode_threads = 1;
        if let Some(codec) = &request.codec {
            options.codec = codec.parse::<CodecKind>()?;
        }
        options.ivf = request.ivf.then(IvfBuildOptions::default);
        match (request.docs, request.dim) {
            (Some(docs), None) => Index::create(&options, docs)?,
            (Some(_), Some(_)) => {
                return Err(CellarError::invalid(
                    "dim is for an empty index (no docs): documents set the dimension",
                ))
            }
            (None, dim) => {
                if request.codec.is_none() {
                    options.codec = CodecKind::F16;
                }
                Index::create_empty(&options, dim)?
            }
        };
        Ok(())
    }

    /// Drops the index `name` (see the module's notes): `Locked` while another process has it
    /// open, and nothing is removed then.
    pub fn drop_index(&self, name: &str) -> Result<()> {
        let dir = self.dir(name)?;
        let held: Option<Weak<Index>> = {
            let mut open = self.lock();
            if open.dropping.contains(name) {
                return Err(being_dropped(name));
            }
            if !dir.join(INDEX_FILE).is_file() {
                open.indexes.remove(name);
                return Err(no_index(name));
            }
            open.dropping.insert(name.to_string());
            open.indexes.remove(name).map(|(index, _)| Arc::downgrade(&index))
        };
        let dropped = self.drop_unused(name, &dir, held);
        self.lock().dropping.remove(name);
        dropped
    }

    /// `error`, or `NotFound` when the index was removed on disk meanwhile (what opening a
    /// missing index says names its whole path).
    fn unless_gone(&self, name: &str, error: CellarError) -> CellarError {
        match self.root.join(name).join(INDEX_FILE).is_file() {
            true => error,
            false => no_index(name),
        }
    }

    /// `drop_index` once no new request can take the index: waits for this process's own
    /// holders, then holds it exclusively while it goes.
    fn drop_unused(&self, name: &str, dir: &Path, held: Option<Weak<Index>>) -> Result<()> {
        let until = Instant::now() + DROP_WAIT;
        let lock = loop {
            let ours =
                held.as_ref().is_some_and(|w| w.strong_count() > 0) || self.lock().opening.contains_key(name);
            if !ours {
                match cellar_search::lock::exclusive(dir) {
                    Ok(lock) => break lock,
                    Err(CellarError::Locked { .. }) => {
                        return Err(locked(name, "another process holds the index; close it there first"))
                    }
                    Err(e) => return Err(self.unless_gone(name, e)),
                }
            }
            if Instant::now() >= until {
                return Err(locked(
                    name,
                    format!("requests on the index still ran after {} s; drop it again", DROP_WAIT.as_secs()),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let aside = self.root.join(format!("{DROPPED_PREFIX}{name}-{}", std::process::id()));
        std::fs::rename(dir, &aside).at(dir)?;
        sync_dir(&self.root)?;
        drop(lock);
        std::fs::remove_dir_all(&aside).at(&aside)
    }
}
