//! Golden files, shared by the format tests of cellar-core, cellar-search and cellar-stream
//! (each includes this file with `#[path]`): a directory under `testdata/` that this build must
//! write again byte for byte from the test's fixed input, and read back.
//!
//! `CELLAR_BLESS=1` rewrites the directory from that input, once per test binary and before any
//! test reads it: the deliberate way to record an intended format change (with a version bump).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// True when `CELLAR_BLESS=1` asks for the golden files to be rewritten.
pub fn bless_requested() -> bool {
    std::env::var_os("CELLAR_BLESS").is_some_and(|v| v == "1")
}

/// `testdata/<name>` of the workspace; when blessing, first emptied and rewritten by `write`
/// (`cell` makes that happen once, whichever test asks first).
pub fn dir(cell: &'static OnceLock<PathBuf>, name: &str, write: fn(&Path)) -> &'static Path {
    cell.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(name);
        if bless_requested() {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            write(&dir);
        }
        dir
    })
}

/// Asserts that each of `files` (relative paths) has the same bytes under `golden` and `fresh`;
/// `bump` says which version a deliberate change must raise.
pub fn assert_same_bytes<P: AsRef<Path>>(golden: &Path, fresh: &Path, files: &[P], bump: &str) {
    for file in files {
        let file = file.as_ref();
        let old = std::fs::read(golden.join(file))
            .unwrap_or_else(|e| panic!("{}: {e}", golden.join(file).display()));
        let new =
            std::fs::read(fresh.join(file)).unwrap_or_else(|e| panic!("{}: {e}", fresh.join(file).display()));
        assert!(
            old == new,
            "{} differs from its golden copy in {}: a format change must bump {bump} and keep the old \
             directory; `CELLAR_BLESS=1` writes the new one",
            file.display(),
            golden.display()
        );
    }
}
