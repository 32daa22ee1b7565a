//! The lock of an index directory (`LOCK`, a [`DirLock`]): what writes an index holds it
//! exclusively — a build (`Index::build`, into its output directory) and an IVF build
//! (`build_ivf`) — and every open index (`Index::open`: serve, search, eval, tune, Python) holds
//! it shared for as long as it lives. So a build is refused with `Locked` while the index is open
//! anywhere, and an open is refused while a build runs. `cellar tune` only reads the index and
//! replaces `index.json` atomically: the shared lock is all it takes, and a server keeps the
//! defaults it loaded until it is restarted.

use std::path::Path;

use cellar_core::format::fsio::{DirLock, LOCK_FILE};
use cellar_core::Result;

use crate::config::IndexConfig;

/// Marker of a build in progress; its presence without `index.json` means an interrupted build.
pub const BUILDING_MARKER: &str = ".cellar-building";

/// What the lock's messages call the directory.
const WHAT: &str = "index";

/// Whether `dir` is an index or one being built: it holds `index.json`, a build's marker or the
/// lock file. Only such a directory gets a lock file: a wrong path is refused without one.
pub fn is_index_dir(dir: &Path) -> bool {
    [IndexConfig::path(dir), dir.join(BUILDING_MARKER), dir.join(LOCK_FILE)].iter().any(|p| p.exists())
}

/// The shared lock of the index in `dir`, taken before anything of it is read.
pub fn shared(dir: &Path) -> Result<DirLock> {
    if !is_index_dir(dir) {
        return Err(IndexConfig::not_an_index(dir));
    }
    DirLock::shared(dir, WHAT)
}

/// The exclusive lock of the index in `dir` (which must exist), taken before anything of it is
/// written.
pub fn exclusive(dir: &Path) -> Result<DirLock> {
    if !is_index_dir(dir) {
        return Err(IndexConfig::not_an_index(dir));
    }
    DirLock::exclusive(dir, WHAT)
}

/// The exclusive lock of `dir` as the output of a new build (which creates its marker next).
pub(crate) fn exclusive_new(dir: &Path) -> Result<DirLock> {
    DirLock::exclusive(dir, WHAT)
}
