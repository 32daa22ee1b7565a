//! `cellar.SearchResult`: what `Index.search` returns.

use cellar_search::SearchResponse;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::{f32_to_python, to_python};

/// The answer to one query, best hit first.
///
/// ``ids``, ``scores``, ``titles`` and ``texts`` are parallel lists; ``hits`` has one dict per
/// hit with every field (``id``, ``internal_id``, ``score``, ``stage``, ``first_stage_score``,
/// ``maxsim``, ``title``, ``text``). ``timings`` maps each stage to milliseconds, ``params``
/// holds the resolved search parameters, ``io`` the reads made.
#[pyclass(frozen, module = "cellar", name = "SearchResult")]
pub struct PySearchResult {
    response: SearchResponse,
}

impl PySearchResult {
    pub fn new(response: SearchResponse) -> PySearchResult {
        PySearchResult { response }
    }
}

#[pymethods]
impl PySearchResult {
    /// A result from the JSON body of ``POST /v1/search`` (what :class:`Client` returns).
    #[staticmethod]
    fn _from_json(py: Python<'_>, body: &str) -> PyResult<PySearchResult> {
        let response = serde_json::from_str(body)
            .map_err(|e| crate::errors::invalid(py, format!("not a search answer: {e}")))?;
        Ok(PySearchResult { response })
    }

    /// Collection ids of the hits (``_id`` in ``corpus.jsonl``).
    #[getter]
    fn ids(&self) -> Vec<String> {
        self.response.hits.iter().map(|h| h.id.clone()).collect()
    }

    /// Final scores (higher is better; hybrid scores are fused z-scores).
    #[getter]
    fn scores(&self) -> Vec<f64> {
        self.response.hits.iter().map(|h| f32_to_python(h.score)).collect()
    }

    /// Document texts.
    #[getter]
    fn texts(&self) -> Vec<String> {
        self.response.hits.iter().map(|h| h.text.clone()).collect()
    }

    /// Document titles (empty strings where the corpus has none).
    #[getter]
    fn titles(&self) -> Vec<String> {
        self.response.hits.iter().map(|h| h.title.clone()).collect()
    }

    /// One dict per hit with every field.
    #[getter]
    fn hits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.response.hits)
    }

    /// Milliseconds per stage: queue, encode, first_stage, read, read_hidden (the part of read
    /// spent under the encoding), maxsim, fuse, text, total.
    #[getter]
    fn timings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = &self.response.timings;
        let dict = PyDict::new(py);
        for (stage, ms) in t.stages() {
            dict.set_item(stage, ms)?;
        }
        Ok(dict)
    }

    /// The resolved parameters: mode, k, candidates, rerank_k, alpha.
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.response.params)
    }

    /// Reads made for this query: read_calls, pages, bytes_read, and records_cached (records
    /// served from the hot-record cache instead of read).
    #[getter]
    fn io<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.response.io)
    }

    /// Bytes of token vectors read from the store for this query.
    #[getter]
    fn bytes_read(&self) -> u64 {
        self.response.io.bytes_read
    }

    /// First-stage candidates considered.
    #[getter]
    fn candidates(&self) -> usize {
        self.response.candidates
    }

    /// Candidates read and re-scored with MaxSim.
    #[getter]
    fn reranked(&self) -> usize {
        self.response.reranked
    }

    /// The whole result as a plain dict (JSON-serialisable).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.response)
    }

    fn __len__(&self) -> usize {
        self.response.hits.len()
    }

    fn __repr__(&self) -> String {
        let top: Vec<String> =
            self.response.hits.iter().take(3).map(|h| format!("{:?}: {:.3}", h.id, h.score)).collect();
        let more = if self.response.hits.len() > 3 { ", ..." } else { "" };
        format!(
            "SearchResult(mode={}, hits={}, top={{{}{more}}}, total_ms={:.2})",
            self.response.params.mode,
            self.response.hits.len(),
            top.join(", "),
            self.response.timings.total_ms
        )
    }
}
