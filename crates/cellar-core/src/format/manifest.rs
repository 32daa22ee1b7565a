//! `manifest.json`: the commit point and table of contents of an index directory.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::versioned::{parse_versioned_json, FORMAT_VERSION_FIELD};
use super::{fsio, PAGE_BYTES, READABLE_VERSIONS};
use crate::codec::CodecKind;
use crate::codec::MAX_DIM;
use crate::error::{CellarError, IoContext, Result};

pub const MANIFEST_FILE: &str = "manifest.json";

/// One binary file listed by the manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub kind: String,
    pub bytes: u64,
    pub body_crc32c: u32,
}

/// Counts that a reader can check its files against.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub docs: u64,
    pub tokens: u64,
    pub pages: u64,
}

/// The manifest of a vector-store directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    pub dim: usize,
    pub codec: CodecKind,
    pub bytes_per_token: usize,
    pub has_pooled: bool,
    pub page_bytes: usize,
    pub counts: Counts,
    pub files: Vec<FileEntry>,
    pub created_by: String,
}

impl Manifest {
    pub fn write(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self).expect("manifest serialises");
        fsio::write_atomic(&dir.join(MANIFEST_FILE), &json)
    }

    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST_FILE);
        if !path.exists() && dir.is_dir() {
            return Err(CellarError::InvalidInput(format!(
                "{} has no {MANIFEST_FILE}: not an index, or its build was interrupted",
                dir.display()
            )));
        }
        let bytes = std::fs::read(&path).at(&path)?;
        let manifest: Manifest =
            parse_versioned_json(&path, &bytes, FORMAT_VERSION_FIELD, READABLE_VERSIONS)?;
        manifest.check_consistent(&path)?;
        Ok(manifest)
    }

    /// Fields that parse but contradict each other are corruption, not the caller's input.
    fn check_consistent(&self, path: &Path) -> Result<()> {
        let problem = if !(1..=MAX_DIM).contains(&self.dim) {
            format!("dim {} is outside 1..={MAX_DIM}", self.dim)
        } else if self.page_bytes != PAGE_BYTES {
            format!("page_bytes {} but this format uses {PAGE_BYTES}", self.page_bytes)
        } else if !self.codec.allows_bytes_per_vector(self.dim, self.bytes_per_token) {
            format!(
                "bytes_per_token {} but codec {} at dim {} takes {}",
                self.bytes_per_token,
                self.codec.name(),
                self.dim,
                self.codec.bytes_per_vector(self.dim)
            )
        } else {
            return Ok(());
        };
        Err(CellarError::corrupted(path, 0, format!("inconsistent manifest: {problem}")))
    }

    pub fn file(&self, name: &str) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.name == name)
    }
}
