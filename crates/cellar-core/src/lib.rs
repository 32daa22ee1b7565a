//! Cellar core: the on-disk index format, the token-vector store, its readers and the MaxSim
//! kernels. Modules follow the data path: `format` (bytes on disk) → `codec` (vector encodings)
//! → `store` (records in pages) → `io` (readers) → `kernels` (scoring); `synth` makes
//! clustered synthetic stores for scale tests without a model.

pub mod cluster;
pub mod codec;
pub mod error;
pub mod failpoint;
pub mod format;
pub mod ids;
pub mod io;
pub mod kernels;
pub mod stats;
pub mod store;
pub mod synth;

pub use error::{CellarError, IoContext, Result};
pub use ids::DocId;
