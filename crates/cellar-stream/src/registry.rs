//! Named collections under one root directory (`ROOT/NAME/`), opened once and shared: what
//! `cellar serve --streams ROOT`, `cellar feed` and the Python package use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cellar_core::{CellarError, IoContext, Result};

use crate::collection::{Collection, Options};

/// Longest collection name; names are ASCII letters, digits, `-` and `_`.
pub const MAX_NAME_BYTES: usize = 64;

pub struct Streams {
    root: PathBuf,
    options: Options,
    open: Mutex<HashMap<String, Arc<Collection>>>,
}

/// Checks a collection name (it becomes a directory name).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        return Err(CellarError::InvalidInput(format!(
            "stream name {name:?}: 1 to {MAX_NAME_BYTES} ASCII letters, digits, '-' or '_'"
        )));
    }
    Ok(())
}

impl Streams {
    /// Opens (creating it if needed) the root directory.
    pub fn open(root: &Path, options: Options) -> Result<Streams> {
        std::fs::create_dir_all(root).at(root)?;
        Ok(Streams { root: root.to_path_buf(), options, open: Mutex::new(HashMap::new()) })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The collection `name`; with `create_dim`, created with that dimension when missing.
    pub fn get(&self, name: &str, create_dim: Option<usize>) -> Result<Arc<Collection>> {
        check_name(name)?;
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = open.get(name) {
            return Ok(c.clone());
        }
        let dir = self.root.join(name);
        let collection = match Collection::open(&dir, create_dim, self.options.clone()) {
            Err(CellarError::NotFound(_)) => {
                return Err(CellarError::NotFound(format!("no stream named {name:?}")));
            }
            other => Arc::new(other?),
        };
        open.insert(name.to_string(), collection.clone());
        Ok(collection)
    }

    /// Names of the collections on disk.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.root)
            .map(|d| d.flatten().filter(|e| e.path().join(crate::manifest::SETTINGS_FILE).exists()).collect())
            .unwrap_or_else(|_| Vec::new())
            .into_iter()
            .map(|e: std::fs::DirEntry| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}
