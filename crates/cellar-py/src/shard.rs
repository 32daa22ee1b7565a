//! The phases of a sharded search (`cellar_search::shard`) for `cellar.cluster`: a shard's side
//! as private methods of `Index` (`_shard_prepare`, `_shard_candidates`, `_shard_maxsim`,
//! `_shard_hits`), the router's as `Gather` and `merge_stats`. Everything crosses as JSON
//! text, the form a router sends over Ray or HTTP; the GIL is released while an index works.

use cellar_core::{CellarError, Result};
use cellar_search::bm25::Bm25Stats;
use cellar_search::search::{Hit, IoReport, Timings};
use cellar_search::shard::{Gather, ShardCandidates, ShardHit};
use cellar_search::{Index, SearchParams, SearchRequest};
use pyo3::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::errors::{to_py, without_gil};

/// `text` as a `T`; `what` names it in the error (an `InvalidInputError`).
fn parse<T: DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text)
        .map_err(|e| CellarError::invalid(format!("{what}: not valid JSON of its kind: {e}")))
}

fn json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| CellarError::internal(format!("cannot serialise: {e}")))
}

fn request(text: &str) -> Result<SearchRequest> {
    SearchRequest::from_value(parse(text, "request")?).map_err(|e| CellarError::invalid(e.to_string()))
}

pub(crate) fn prepare(py: Python<'_>, index: &Index, request_json: &str, encode: bool) -> PyResult<String> {
    without_gil(py, || json(&index.shard_prepare(request(request_json)?, encode)?))
}

pub(crate) fn candidates(
    py: Python<'_>,
    index: &Index,
    request_json: &str,
    stats: Option<&str>,
    matched: Option<usize>,
) -> PyResult<String> {
    without_gil(py, || {
        let stats: Option<Bm25Stats> = stats.map(|s| parse(s, "stats")).transpose()?;
        json(&index.shard_candidates(request(request_json)?, stats.as_ref(), matched)?)
    })
}

pub(crate) fn maxsim(
    py: Python<'_>,
    index: &Index,
    request_json: &str,
    docs: Vec<u32>,
    describe: Option<bool>,
) -> PyResult<String> {
    without_gil(py, || json(&index.shard_maxsim(request(request_json)?, &docs, describe)?))
}

pub(crate) fn hits(py: Python<'_>, index: &Index, hits_json: &str, include_text: bool) -> PyResult<String> {
    without_gil(py, || {
        let hits: Vec<ShardHit> = parse(hits_json, "hits")?;
        json(&index.shard_hits(&hits, include_text)?)
    })
}

/// The sum of shards' BM25 statistics for one query (each a JSON object from
/// `Index._shard_prepare`'s ``stats``).
#[pyfunction]
pub(crate) fn merge_stats(py: Python<'_>, stats: Vec<String>) -> PyResult<String> {
    let merged = (|| {
        let mut total = Bm25Stats::default();
        for s in &stats {
            total.merge(&parse(s, "stats")?);
        }
        json(&total)
    })();
    merged.map_err(|e| to_py(py, e))
}

/// The router's merge of one sharded search: built from the resolved parameters and every
/// shard's first-stage lists (JSON, in shard order) and, under a filter, its matches summed
/// over the shards, it says which documents each shard
/// re-scores (`rerank`), fuses their MaxSim scores over the global candidate list (`fuse`) and
/// answers in the shape of one index's search (`respond`).
#[pyclass(frozen, module = "cellar", name = "Gather")]
pub struct PyGather {
    gather: Gather,
    shards: usize,
}

#[pymethods]
impl PyGather {
    #[new]
    #[pyo3(signature = (params, candidates, matched=None, filter_ms=0.0))]
    fn new(
        py: Python<'_>,
        params: &str,
        candidates: Vec<String>,
        matched: Option<usize>,
        filter_ms: f64,
    ) -> PyResult<PyGather> {
        let built = (|| {
            let params: SearchParams = parse(params, "params")?;
            let lists = candidates
                .iter()
                .map(|c| parse::<ShardCandidates>(c, "candidates"))
                .collect::<Result<Vec<_>>>()?;
            Ok(PyGather { gather: Gather::new(params, &lists, matched, filter_ms), shards: lists.len() })
        })();
        built.map_err(|e| to_py(py, e))
    }

    /// Each shard's documents to re-score with MaxSim, in global candidate order.
    fn rerank(&self) -> Vec<Vec<u32>> {
        self.gather.rerank(self.shards)
    }

    /// First-stage candidates considered over all shards.
    #[getter]
    fn candidates(&self) -> usize {
        self.gather.candidates()
    }

    /// The best `k` of the fused ranking (JSON list of hits with their shard), given each
    /// shard's MaxSim scores of the documents `rerank` gave it.
    fn fuse(&self, py: Python<'_>, maxsim: Vec<Vec<f32>>) -> PyResult<String> {
        self.gather.fuse(&maxsim).and_then(|hits| json(&hits)).map_err(|e| to_py(py, e))
    }

    /// The response (JSON) of one index's search made of `hits` (JSON list of hits, ranked),
    /// `timings` and `io` (JSON objects) and how the query was encoded (JSON or ``None``).
    #[pyo3(signature = (hits, timings, io, query=None))]
    fn respond(
        &self,
        py: Python<'_>,
        hits: &str,
        timings: &str,
        io: &str,
        query: Option<&str>,
    ) -> PyResult<String> {
        let answered = (|| {
            let hits: Vec<Hit> = parse(hits, "hits")?;
            let timings: Timings = parse(timings, "timings")?;
            let io: IoReport = parse(io, "io")?;
            let query = query.map(|q| parse(q, "query")).transpose()?;
            json(&self.gather.respond(hits, timings, io, query))
        })();
        answered.map_err(|e| to_py(py, e))
    }
}
