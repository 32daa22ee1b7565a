//! Cellar core: the on-disk index format, the token-vector store, its readers and the MaxSim
//! kernels. Modules follow the data path: `format` (bytes on disk) → `codec` (vector encodings)
//! → `store` (records in pages) → `io` (readers) → `kernels` (scoring).

pub mod error;
pub mod ids;
pub mod kernels;

pub use error::{CellarError, Result};
pub use ids::DocId;
