//! Sizes on disk.

use std::path::Path;

/// Total bytes of the regular files under `path` (recursively); 0 for what cannot be read.
pub fn dir_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else { return 0 };
    if meta.is_file() {
        return meta.len();
    }
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries.filter_map(|e| e.ok()).map(|e| dir_bytes(&e.path())).sum()
}
