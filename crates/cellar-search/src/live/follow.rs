//! A reader beside a writer follows its commits. A process that opened an index without
//! becoming its writer (another process wrote it then, or nothing was written yet) holds the
//! live view it loaded at open; another process (`cellar add`, a server, Python) may write the
//! index later, through `live/wal.log` and `live/MANIFEST.json`. [`Index::behind`] tells, at the
//! cost of one `stat` of each, whether either changed since this process last loaded them, and
//! [`Index::follow`] then loads the live view again, read-only (the log replayed without
//! touching it, as at open), after reloading BM25's searcher, and publishes it.
//!
//! Consistency: the writer logs a batch before it commits it to BM25, so BM25 reloaded first
//! holds no document the log read after it lacks. A flush rotates the log (a new file; the old
//! one is read first, as `wal.frozen.log`) and, once its segment is written, replaces the
//! manifest (a new file: `write_atomic`); a merge replaces the manifest. A load that straddles
//! either saw the manifest or the log's file change under it and is made again, up to
//! [`FOLLOW_TRIES`] times. A change is told by each file's inode, size and modification time:
//! a log file only grows, and each manifest is a new file.

use std::sync::TryLockError;

use cellar_core::Result;

use crate::index::Index;
use crate::written::stamp::Stamp;

/// Loads made again when the writer flushed or merged during one.
pub const FOLLOW_TRIES: usize = 4;

impl Index {
    /// Whether another process committed writes to this index since this one loaded them: two
    /// `stat` calls. Always false in the process that writes the index (its view is the newest).
    pub fn behind(&self) -> bool {
        if self.writes_here() {
            return false;
        }
        let followed = *self.followed.lock().unwrap_or_else(|p| p.into_inner());
        Stamp::of(&self.live.dir) != followed
    }

    /// Loads what another process committed to this index since this one last loaded it (see
    /// the module's notes), and publishes it to the searches that start from then on; true
    /// when it loaded anything. Searches under way finish with the view they hold. Nothing is
    /// done in the process that writes the index. On an error the view stays as it was, and
    /// the next call tries again.
    pub fn follow(&self) -> Result<bool> {
        // One follower at a time; one that waited here finds the stamp it would load loaded.
        let mut followed = self.followed.lock().unwrap_or_else(|p| p.into_inner());
        let mut slot = match self.live.writer.try_lock() {
            Ok(slot) => slot,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // A write of this process holds it: it reloads under the writer's lock itself.
            Err(TryLockError::WouldBlock) => return Ok(false),
        };
        if slot.is_some() {
            return Ok(false);
        }
        for _ in 0..FOLLOW_TRIES {
            let before = Stamp::of(&self.live.dir);
            if before == *followed {
                return Ok(false);
            }
            if before.manifest.is_none() {
                // Nothing written (or `live/` being created: its manifest comes first).
                *followed = before;
                return Ok(false);
            }
            self.bm25.reload()?;
            let loaded = self.load_live(None, &mut slot);
            if before.same_files(&Stamp::of(&self.live.dir)) {
                loaded?;
                *followed = before;
                return Ok(true);
            }
            // The writer flushed or merged meanwhile: what was read may straddle two manifests.
        }
        Ok(false)
    }

    /// Whether this process writes the index, or a write of it is under way here.
    fn writes_here(&self) -> bool {
        match self.live.writer.try_lock() {
            Ok(slot) => slot.is_some(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().is_some(),
            Err(TryLockError::WouldBlock) => true,
        }
    }
}
