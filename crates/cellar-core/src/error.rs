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
            CellarError::Io { .. } => "io",
        }
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
