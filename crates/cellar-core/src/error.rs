//! The one error type of the core library.
//!
//! Variants are structured so that the server, the Python package and the CLI can map them
//! exhaustively (HTTP status, exception class, exit code) without parsing messages.

use std::path::{Path, PathBuf};

/// Every fallible operation in `cellar-core` returns this.
#[derive(Debug, thiserror::Error)]
pub enum CellarError {
    /// The caller handed us something unusable (NaN vector, empty document, bad option).
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// A vector's length does not match the store's dimension.
    #[error("wrong vector dimension: expected {expected}, received {received}")]
    WrongDimension { expected: usize, received: usize },

    /// A document id beyond the end of the store.
    #[error("document id {id} out of range: the store holds {count} documents")]
    DocOutOfRange { id: u64, count: u64 },

    /// A named thing (a streaming collection, a group, a document id) does not exist.
    #[error("not found: {0}")]
    NotFound(String),

    /// Bytes on disk are not what the writer wrote.
    #[error("{}: corrupted at byte offset {offset}: {detail}", path.display())]
    Corrupted { path: PathBuf, offset: u64, detail: String },

    /// A file written by a format version this build cannot read.
    #[error("{}: format version {found} is not supported (this build reads versions {oldest}..={newest})", path.display())]
    Incompatible { path: PathBuf, found: u32, oldest: u32, newest: u32 },

    /// A model checkpoint (config, weights, tokenizer) is missing or unusable.
    #[error("{}: model: {detail}", path.display())]
    Model { path: PathBuf, detail: String },

    /// Another opener holds the directory (a collection or index being written elsewhere): two
    /// writers would lose each other's acknowledged writes.
    #[error("{}: {detail}", path.display())]
    Locked { path: PathBuf, detail: String },

    /// The platform refuses a capability that was explicitly asked for (e.g. O_DIRECT).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// A broken invariant or a worker that vanished: a bug or a dying process, never the caller's
    /// input nor the platform's refusal. The message says what was expected.
    #[error("internal error: {0}")]
    Internal(String),

    /// An I/O call failed; `path` says on what.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Result alias used throughout the core.
pub type Result<T> = std::result::Result<T, CellarError>;

impl CellarError {
    /// Short stable identifier, used as the `code` of JSON errors and in logs.
    pub fn code(&self) -> &'static str {
        match self {
            CellarError::InvalidInput(_) => "invalid_input",
            CellarError::WrongDimension { .. } => "wrong_dimension",
            CellarError::DocOutOfRange { .. } => "doc_out_of_range",
            CellarError::NotFound(_) => "not_found",
            CellarError::Corrupted { .. } => "corrupted",
            CellarError::Incompatible { .. } => "incompatible_version",
            CellarError::Model { .. } => "model",
            CellarError::Locked { .. } => "locked",
            CellarError::Unsupported(_) => "unsupported",
            CellarError::Internal(_) => "internal",
            CellarError::Io { .. } if self.is_disk_full() => "disk_full",
            CellarError::Io { .. } => "io",
        }
    }

    /// An `Io` error saying the disk (or the user's quota) is full: nothing was written, and
    /// a retry succeeds once space is freed. The OS error (`ENOSPC`, `EDQUOT`), or an error
    /// of its kind carrying Cellar's own explanation (a living index's memtable that cannot be
    /// flushed).
    pub fn is_disk_full(&self) -> bool {
        match self {
            CellarError::Io { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
                    || matches!(
                        source.kind(),
                        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                    )
            }
            _ => false,
        }
    }

    /// A copy whose paths went through `f` (a server shows clients no absolute paths).
    pub fn map_paths(&self, f: impl Fn(&Path) -> PathBuf) -> CellarError {
        let mut copy = self.clone();
        match &mut copy {
            CellarError::Corrupted { path, .. }
            | CellarError::Incompatible { path, .. }
            | CellarError::Model { path, .. }
            | CellarError::Locked { path, .. }
            | CellarError::Io { path, .. } => *path = f(path),
            CellarError::InvalidInput(_)
            | CellarError::WrongDimension { .. }
            | CellarError::DocOutOfRange { .. }
            | CellarError::NotFound(_)
            | CellarError::Unsupported(_)
            | CellarError::Internal(_) => {}
        }
        copy
    }

    /// True when the error is the caller's fault (bad input), not the system's.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            CellarError::InvalidInput(_)
                | CellarError::WrongDimension { .. }
                | CellarError::DocOutOfRange { .. }
                | CellarError::NotFound(_)
        )
    }

    /// `Io` naming `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        CellarError::Io { path: path.to_path_buf(), source }
    }

    /// `Corrupted` at byte `offset` of `path`.
    pub fn corrupted(path: &Path, offset: u64, detail: impl Into<String>) -> Self {
        CellarError::Corrupted { path: path.to_path_buf(), offset, detail: detail.into() }
    }

    /// `InvalidInput`.
    pub fn invalid(detail: impl Into<String>) -> Self {
        CellarError::InvalidInput(detail.into())
    }

    /// `Internal`: a broken invariant or a vanished worker.
    pub fn internal(detail: impl Into<String>) -> Self {
        CellarError::Internal(detail.into())
    }
}

/// A copy for each of several callers that failed together (a group commit, a shared load).
/// `std::io::Error` is not `Clone`: the copy keeps its OS error code, or else its kind and message.
impl Clone for CellarError {
    fn clone(&self) -> Self {
        match self {
            CellarError::InvalidInput(m) => CellarError::InvalidInput(m.clone()),
            CellarError::WrongDimension { expected, received } => {
                CellarError::WrongDimension { expected: *expected, received: *received }
            }
            CellarError::DocOutOfRange { id, count } => CellarError::DocOutOfRange { id: *id, count: *count },
            CellarError::NotFound(m) => CellarError::NotFound(m.clone()),
            CellarError::Corrupted { path, offset, detail } => {
                CellarError::corrupted(path, *offset, detail.clone())
            }
            CellarError::Incompatible { path, found, oldest, newest } => CellarError::Incompatible {
                path: path.clone(),
                found: *found,
                oldest: *oldest,
                newest: *newest,
            },
            CellarError::Model { path, detail } => {
                CellarError::Model { path: path.clone(), detail: detail.clone() }
            }
            CellarError::Locked { path, detail } => {
                CellarError::Locked { path: path.clone(), detail: detail.clone() }
            }
            CellarError::Unsupported(m) => CellarError::Unsupported(m.clone()),
            CellarError::Internal(m) => CellarError::Internal(m.clone()),
            CellarError::Io { path, source } => {
                let source = match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                };
                CellarError::io(path, source)
            }
        }
    }
}

/// Adds the path to a raw `std::io::Result`, so no I/O error reaches a user without naming its file.
pub trait IoContext<T> {
    /// The error as [`CellarError::Io`] naming `path`.
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| CellarError::io(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cloned_io_error_keeps_its_os_code_or_its_kind_and_message() {
        let path = Path::new("dir/wal.log");
        let os = CellarError::io(path, std::io::Error::from_raw_os_error(libc::ENOSPC)).clone();
        match &os {
            CellarError::Io { path: p, source } => {
                assert_eq!((p.as_path(), source.raw_os_error()), (path, Some(libc::ENOSPC)))
            }
            other => panic!("{other:?}"),
        }
        let plain = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "cut short");
        let copy = CellarError::io(path, plain).clone();
        assert!(
            matches!(&copy, CellarError::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof)
        );
        assert_eq!(copy.to_string(), "dir/wal.log: cut short");
    }

    #[test]
    fn a_clone_keeps_the_variant_and_its_fields() {
        let errors = [
            CellarError::corrupted(Path::new("a.seg"), 68, "header checksum mismatch"),
            CellarError::Incompatible { path: "MANIFEST.json".into(), found: 2, oldest: 1, newest: 1 },
            CellarError::WrongDimension { expected: 8, received: 4 },
            CellarError::internal("a worker vanished"),
        ];
        for error in errors {
            let copy = error.clone();
            assert_eq!((copy.code(), copy.to_string()), (error.code(), error.to_string()));
        }
    }
}
