//! Named collections under one root directory (`ROOT/NAME/`), opened on use and shared: what
//! `cellar serve --streams ROOT`, `cellar feed` and the Python package use.
//!
//! At most `max_open` collections stay open (each holds a few files: its lock, its log, its
//! segments). Opening one more closes the least recently used collections nobody is using; their
//! writes are in their logs, and the next use replays them. A root with many streams therefore
//! costs a bounded number of files and no thread per stream.
//!
//! Deleting a stream renames its directory to `.deleted-NAME-N` (atomic, so the name is free at
//! once) and then removes it; a crash in between leaves a `.deleted-*` directory that the next
//! `open` removes. A write racing with the delete of its stream may be acknowledged and then
//! deleted with it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cellar_core::format::fsio::sync_dir;
use cellar_core::{CellarError, IoContext, Result};

use crate::collection::{Collection, Options};
use cellar_search::DocIn;

/// Prefix of a deleted stream's directory until it is removed (never a valid stream name).
const DELETED_PREFIX: &str = ".deleted-";

/// Files an open collection may hold, for sizing `max_open` from the process's file limit: its
/// locks, its log, its empty base's files (vectors, texts, BM25) and about `compact_after + 1`
/// segments of a few files each.
const FILES_PER_COLLECTION: u64 = 32;

pub struct Streams {
    root: PathBuf,
    options: Options,
    max_open: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    collections: HashMap<String, (Arc<Collection>, u64)>,
    /// Use counter: the entry with the smallest stamp is the least recently used.
    clock: u64,
}

/// Checks a collection name (it becomes a directory name): `cellar_core::ids::check_name`.
pub fn check_name(name: &str) -> Result<()> {
    cellar_core::ids::check_name("stream name", name)
}

/// The default `max_open`: a quarter of the process's open-file limit, at `FILES_PER_COLLECTION`
/// files a collection, between 4 and 1024.
pub fn default_max_open() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we pass and nothing else.
    let files =
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 { limit.rlim_cur } else { 1024 };
    (files / 4 / FILES_PER_COLLECTION).clamp(4, 1024) as usize
}

/// Whether `dir` holds a collection: a grouped index, or one of the first format.
fn is_collection(dir: &Path) -> bool {
    dir.join(cellar_search::config::CONFIG_FILE).is_file() || crate::legacy::is_legacy(dir)
}

fn no_stream(name: &str) -> CellarError {
    CellarError::NotFound(format!("no stream named {name:?}"))
}

impl Streams {
    /// Opens the root directory, creating it if needed (writers: the server, `feed`, Python),
    /// and removes what an interrupted delete left.
    pub fn open(root: &Path, options: Options) -> Result<Streams> {
        std::fs::create_dir_all(root).at(root)?;
        Self::at(root, options)
    }

    /// Opens an existing root directory (readers: `stream-search`); `NotFound` when it is missing.
    pub fn open_existing(root: &Path, options: Options) -> Result<Streams> {
        if !root.is_dir() {
            return Err(CellarError::NotFound(format!("no streams root at {}", root.display())));
        }
        Self::at(root, options)
    }

    fn at(root: &Path, options: Options) -> Result<Streams> {
        let streams = Streams {
            root: root.to_path_buf(),
            options,
            max_open: default_max_open(),
            open: Mutex::new(Open::default()),
        };
        for entry in std::fs::read_dir(root).at(root)?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(DELETED_PREFIX) {
                let path = entry.path();
                std::fs::remove_dir_all(&path).at(&path)?;
            }
        }
        Ok(streams)
    }

    /// Keeps at most `max_open` (at least 1) collections open; see the module's notes.
    pub fn with_max_open(mut self, max_open: usize) -> Streams {
        self.max_open = max_open.max(1);
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Collections open now.
    pub fn open_count(&self) -> usize {
        self.lock().collections.len()
    }

    /// The collection `name`; with `create_dim`, created with that dimension when missing.
    pub fn get(&self, name: &str, create_dim: Option<usize>) -> Result<Arc<Collection>> {
        check_name(name)?;
        let mut open = self.lock();
        open.clock += 1;
        let now = open.clock;
        if let Some((c, used)) = open.collections.get_mut(name) {
            *used = now;
            return Ok(c.clone());
        }
        self.close_idle(&mut open);
        let dir = self.root.join(name);
        let collection = match Collection::open(&dir, create_dim, self.options.clone()) {
            Err(CellarError::NotFound(_)) => return Err(no_stream(name)),
            other => Arc::new(other?),
        };
        open.collections.insert(name.to_string(), (collection.clone(), now));
        Ok(collection)
    }

    /// Closes least recently used collections nobody else holds and no compaction is busy
    /// with, until one more fits.
    fn close_idle(&self, open: &mut Open) {
        while open.collections.len() >= self.max_open {
            let idle = open
                .collections
                .iter()
                .filter(|(_, (c, _))| Arc::strong_count(c) == 1 && c.is_idle())
                .min_by_key(|(_, (_, used))| *used)
                .map(|(name, _)| name.clone());
            // All in use: go over the bound rather than refuse; callers are bounded by the pools.
            let Some(name) = idle else { return };
            open.collections.remove(&name);
        }
    }

    /// Writes `docs` (vectors of dimension `dim`) to `name`, creating the stream with `dim` only
    /// when the batch is valid: a rejected first write leaves no stream behind. A `Vec` moves
    /// into the write; a slice is copied.
    pub fn put_batch(
        &self,
        name: &str,
        dim: usize,
        docs: impl Into<Vec<DocIn>>,
    ) -> Result<(Arc<Collection>, u64)> {
        let docs: Vec<DocIn> = docs.into();
        let collection = match self.get(name, None) {
            Err(CellarError::NotFound(_)) => {
                Collection::check_batch(&docs, dim)?;
                self.get(name, Some(dim))?
            }
            other => other?,
        };
        let seq = collection.put_batch(docs)?;
        Ok((collection, seq))
    }

    /// Deletes the stream `name` and everything in it; `NotFound` when there is none, `Locked`
    /// when another process has it open.
    pub fn delete(&self, name: &str) -> Result<()> {
        static DELETES: AtomicU64 = AtomicU64::new(0);
        check_name(name)?;
        let mut open = self.lock();
        let dir = self.root.join(name);
        // Held (opened here if need be) so no other process writes it while it goes.
        let collection = match open.collections.remove(name) {
            Some((c, _)) => c,
            None => match Collection::open(&dir, None, self.options.clone()) {
                Err(CellarError::NotFound(_)) => return Err(no_stream(name)),
                other => Arc::new(other?),
            },
        };
        let n = DELETES.fetch_add(1, Ordering::Relaxed);
        let trash = self.root.join(format!("{DELETED_PREFIX}{name}-{}-{n}", std::process::id()));
        std::fs::rename(&dir, &trash).at(&dir)?;
        sync_dir(&self.root)?;
        drop(open);
        drop(collection);
        std::fs::remove_dir_all(&trash).at(&trash)
    }

    /// Names of the collections on disk.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.root)
            .map(|d| d.flatten().filter(|e| is_collection(&e.path())).collect())
            .unwrap_or_else(|_| Vec::new())
            .into_iter()
            .map(|e: std::fs::DirEntry| e.file_name().to_string_lossy().into_owned())
            .filter(|name| check_name(name).is_ok())
            .collect();
        names.sort();
        names
    }
}
