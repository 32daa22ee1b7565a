//! What a reader last loaded of `live/` (the live manifest and log, by identity, size and
//! modification time): data the open index holds, compared by `live::follow` to tell whether
//! another process committed since.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::written::state::{LIVE_MANIFEST, WAL_FILE};

/// What a reader last loaded of `live/`: its manifest's and its log's identity, size and
/// modification time (`None`: missing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) manifest: Option<FileStamp>,
    pub(crate) wal: Option<FileStamp>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        let meta = std::fs::metadata(path).ok()?;
        let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
        Some(FileStamp { dev: meta.dev(), ino: meta.ino(), len: meta.len(), mtime_ns })
    }
}

impl Stamp {
    /// The stamp of the `live/` directory `live` now (two `stat` calls).
    pub(crate) fn of(live: &Path) -> Stamp {
        Stamp { manifest: FileStamp::of(&live.join(LIVE_MANIFEST)), wal: FileStamp::of(&live.join(WAL_FILE)) }
    }

    /// Whether a load between `self` and `later` read one manifest and one log: the same
    /// manifest, and the same log file (grown, perhaps), not one a flush rotated in.
    pub(crate) fn same_files(&self, later: &Stamp) -> bool {
        let file = |s: &Option<FileStamp>| s.map(|f| (f.dev, f.ino));
        self.manifest == later.manifest && file(&self.wal) == file(&later.wal)
    }
}
