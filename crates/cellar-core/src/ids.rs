//! Identifier newtypes, and the one rule for names users give things (streams, indexes served
//! from a data directory, metadata keys).

use std::fmt;

use crate::{CellarError, Result};

/// Bytes of a name: a stream's, an index's under `--data-dir`, a metadata key.
pub const MAX_NAME_BYTES: usize = 64;

/// A name is 1 to 64 ASCII letters, digits, `-` or `_`: safe as a file name and in a URL path,
/// never `.` or `..`. `what` ("stream name", "metadata key") is what the error calls it.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        return Err(CellarError::InvalidInput(format!(
            "{what} {name:?}: 1 to {MAX_NAME_BYTES} ASCII letters, digits, '-' or '_'"
        )));
    }
    Ok(())
}

/// Dense internal document id: the position of the document's record in the vector store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DocId(pub u32);

impl DocId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for DocId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
