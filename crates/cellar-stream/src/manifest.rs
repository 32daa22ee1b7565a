//! `stream.json` (the collection's fixed settings, written once) and `MANIFEST.json` (the commit
//! point: live segments, oldest first, and the highest sequence number they hold). Both are
//! replaced atomically (temporary, fsync, rename, fsync of the directory).

use std::path::Path;

use cellar_core::format::fsio::write_atomic;
use cellar_core::format::versioned::{parse_versioned_json, VersionRange};
use cellar_core::{CellarError, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub const SETTINGS_FILE: &str = "stream.json";
pub const MANIFEST_FILE: &str = "MANIFEST.json";
pub const WAL_FILE: &str = "wal.log";
pub const MANIFEST_VERSION: u32 = 1;
/// The versions of `stream.json` and `MANIFEST.json` this build reads.
pub const READABLE_VERSIONS: VersionRange = VersionRange::only(MANIFEST_VERSION);
/// The field of both files read first, on its own.
pub const VERSION_FIELD: &str = "version";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Settings {
    pub version: u32,
    /// Dimension of token and pooled vectors.
    pub dim: usize,
    /// The encoder that made the vectors when the writer encoded text (informational).
    #[serde(default)]
    pub encoder: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SegmentRef {
    pub file: String,
    pub min_seq: u64,
    pub max_seq: u64,
    pub entries: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub version: u32,
    /// Live segments, oldest first; their sequence ranges do not overlap.
    pub segments: Vec<SegmentRef>,
    /// Every log record with a sequence number up to this one is in a segment.
    pub flushed_seq: u64,
    /// Number of the next segment file.
    pub next_segment: u64,
}

/// The parsed file, or `None` when it does not exist; its `version` is checked before the rest
/// is parsed, so a newer file is `Incompatible` whatever shape its other fields have.
fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CellarError::io(path, e)),
    };
    parse_versioned_json(path, &bytes, VERSION_FIELD, READABLE_VERSIONS).map(Some)
}

impl Settings {
    pub fn load(dir: &Path) -> Result<Option<Settings>> {
        read_json(&dir.join(SETTINGS_FILE))
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        write_atomic(&dir.join(SETTINGS_FILE), &serde_json::to_vec_pretty(self).expect("serializable"))
    }
}

impl Manifest {
    pub fn load(dir: &Path) -> Result<Manifest> {
        let manifest: Option<Manifest> = read_json(&dir.join(MANIFEST_FILE))?;
        Ok(manifest.unwrap_or(Manifest { version: MANIFEST_VERSION, next_segment: 1, ..Default::default() }))
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        write_atomic(&dir.join(MANIFEST_FILE), &serde_json::to_vec_pretty(self).expect("serializable"))
    }
}

/// File name of segment number `n`.
pub fn segment_file(n: u64) -> String {
    format!("seg-{n:08}.seg")
}
