//! `cellar._cellar`, the native half of the `cellar` Python package (the pure-Python half in
//! `python/cellar` re-exports it and defines the exception classes).
//!
//! - `index`: `Index.build`, `Index.from_embeddings`, `Index.open`, `search`, `evaluate`, with
//!   the GIL released; `embeddings`: the caller's arrays read one document at a time
//! - `result`: `SearchResult`
//! - `stream`: `Stream`, a streaming collection (put, get, delete, exact per-group search)
//! - `shard`: the phases of a sharded search, a shard's and the router's (`Gather`), for
//!   `cellar.cluster`
//! - `evaluate`: scoring judged queries with `cellar-search`'s evaluation code
//! - `args`, `convert`, `errors`: Python ⇄ Rust conversions and exception mapping
//!
//! Build and install with maturin; see `python/README.md`.

mod args;
mod convert;
mod embeddings;
mod errors;
mod evaluate;
mod index;
mod result;
mod shard;
mod stream;
mod writes;

use pyo3::prelude::*;

/// Panics inside the engine's error boundary, for tests that a Rust panic becomes a
/// `CellarError` (code ``"panic"``) instead of taking the interpreter down.
#[pyfunction]
fn _panic_for_tests(py: Python<'_>, message: &str) -> PyResult<()> {
    errors::without_gil(py, || -> cellar_core::Result<()> { panic!("{message}") })
}

/// Native module of the `cellar` package; import `cellar` instead.
#[pymodule]
fn _cellar(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add_class::<index::PyIndex>()?;
    m.add_class::<result::PySearchResult>()?;
    m.add_class::<stream::PyStream>()?;
    m.add_class::<shard::PyGather>()?;
    m.add_function(wrap_pyfunction!(shard::merge_stats, m)?)?;
    m.add_function(wrap_pyfunction!(writes::_documents_from_columns, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_K", cellar_search::request::MAX_K)?;
    m.add("MAX_BATCH", cellar_search::request::MAX_BATCH)?;
    let codecs: Vec<&str> = cellar_core::codec::CodecKind::ALL.iter().map(|c| c.name()).collect();
    m.add("CODECS", pyo3::types::PyTuple::new(m.py(), codecs)?)?;
    m.add("MAX_QUERY_BYTES", cellar_search::request::MAX_QUERY_BYTES)?;
    m.add("SEARCH_REQUEST_SCHEMA", convert::to_python(m.py(), &cellar_search::SearchRequest::schema())?)?;
    Ok(())
}
