"""Type hints of the native module (see the docstrings on the objects themselves)."""

from collections.abc import Iterable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any, Literal, final

_Path = str | PathLike[str]
_Mode = Literal["hybrid", "rerank", "bm25", "dense", "ivf", "dense-exact"]
_Reader = Literal["mmap", "direct", "ram"]
_Codec = Literal["f16", "int8", "residual1", "residual2", "residual4"]
_Id = str | int
#: A ``(n, dim)`` array (or nested lists) of token vectors, or ``{"tokens": ..., "pooled": ...}``.
_QueryVectors = Any
#: A filter: ``{"field": value, ...}`` (equality; a list value means any of) or the long form
#: (``{"eq": {"field": ..., "value": ...}}``, ``in``, ``range``, ``and``, ``or``, ``not``).
_Filter = Mapping[str, Any]

__all__ = [
    "_panic_for_tests",
    "Index",
    "SearchResult",
    "Stream",
    "Gather",
    "merge_stats",
    "_documents_from_columns",
    "__version__",
    "MAX_K",
    "MAX_BATCH",
    "CODECS",
    "MAX_QUERY_BYTES",
    "SEARCH_REQUEST_SCHEMA",
]

__version__: str
CODECS: tuple[str, ...]
MAX_K: int
MAX_BATCH: int
MAX_QUERY_BYTES: int
#: The JSON schema of a search request: the fields `Index.search` takes as keyword arguments.
SEARCH_REQUEST_SCHEMA: dict[str, Any]

@final
class SearchResult:
    @property
    def ids(self) -> list[str]: ...
    @property
    def scores(self) -> list[float]: ...
    @property
    def texts(self) -> list[str]: ...
    @property
    def titles(self) -> list[str]: ...
    @property
    def hits(self) -> list[dict[str, Any]]: ...
    @property
    def timings(self) -> dict[str, float]: ...
    @property
    def params(self) -> dict[str, Any]: ...
    @property
    def io(self) -> dict[str, int]: ...
    @property
    def bytes_read(self) -> int: ...
    @property
    def candidates(self) -> int: ...
    @property
    def reranked(self) -> int: ...
    def to_dict(self) -> dict[str, Any]: ...
    def __len__(self) -> int: ...
    @staticmethod
    def _from_json(body: str) -> SearchResult: ...

@final
class Index:
    @staticmethod
    def build(
        source: _Path,
        out: _Path,
        *,
        model: _Path | None = None,
        codec: _Codec | None = None,
        pca_dim: int | None = None,
        doc_max_tokens: int = 256,
        doc_overflow: Literal["truncate", "windows", "passages"] = "truncate",
        query_max_tokens: int = 64,
        keep_special: bool = False,
        keep_punctuation: bool = False,
        max_docs: int | None = None,
        threads: int | None = None,
        reader: _Reader = "mmap",
        progress: bool = False,
        ivf: bool = True,
        ivf_cluster_size: int = 256,
        splade: bool = False,
        splade_model: str | PathLike[str] | None = None,
        codec_from: _Path | None = None,
        tokens: bool = False,
    ) -> Index: ...
    @staticmethod
    def from_embeddings(
        out: _Path,
        ids: Iterable[str],
        doc_vectors: Iterable[Any],
        texts: Iterable[str | None] | None = None,
        pooled: Iterable[Any] | None = None,
        metadata: Iterable[Mapping[str, Any] | None] | None = None,
        *,
        model: _Path | None = None,
        codec: _Codec | None = None,
        pca_dim: int | None = None,
        reader: _Reader = "mmap",
        progress: bool = False,
        ivf: bool = True,
        ivf_cluster_size: int = 256,
        codec_from: _Path | None = None,
        tokens: bool = False,
    ) -> Index: ...
    @staticmethod
    def create_empty(
        out: _Path,
        *,
        dim: int | None = None,
        model: _Path | None = None,
        codec: _Codec | None = None,
        reader: _Reader = "mmap",
    ) -> Index: ...
    @staticmethod
    def open(
        path: _Path,
        reader: _Reader = "mmap",
        model: _Path | None = None,
        encoder_threads: int = 1,
        cache_mib: int | None = None,
        model_weights: Literal["f32", "f16"] = "f32",
    ) -> Index: ...
    def search(
        self,
        query: str | None = None,
        *,
        k: int = 10,
        mode: _Mode | None = "hybrid",
        alpha: float | None = None,
        fusion: Literal["z", "rrf", "z_peak"] | None = None,
        lexical: Literal["bm25", "splade", "both"] | None = None,
        rerank_k: int | None = None,
        candidates: int | None = None,
        include_text: bool | None = None,
        query_vectors: _QueryVectors | None = None,
        dense_stage: Literal["tokens", "pooled"] | None = None,
        nprobe: int | None = None,
        oversample: float | None = None,
        rescore: bool | None = None,
        prefetch: bool | None = None,
        prefetch_step: float | None = None,
        hybrid_candidates: int | None = None,
        early_read: bool | None = None,
        filter: _Filter | None = None,
        filter_exact_max: int | None = None,
        require_terms: str | None = None,
    ) -> SearchResult: ...
    def search_batch(
        self,
        queries: Iterable[str | Mapping[str, Any]],
        *,
        k: int = 10,
        mode: _Mode | None = "hybrid",
        alpha: float | None = None,
        fusion: Literal["z", "rrf", "z_peak"] | None = None,
        lexical: Literal["bm25", "splade", "both"] | None = None,
        rerank_k: int | None = None,
        candidates: int | None = None,
        include_text: bool | None = None,
        query_vectors: _QueryVectors | None = None,
        dense_stage: Literal["tokens", "pooled"] | None = None,
        nprobe: int | None = None,
        oversample: float | None = None,
        rescore: bool | None = None,
        prefetch: bool | None = None,
        prefetch_step: float | None = None,
        hybrid_candidates: int | None = None,
        early_read: bool | None = None,
        filter: _Filter | None = None,
        filter_exact_max: int | None = None,
        require_terms: str | None = None,
    ) -> list[SearchResult]: ...
    def evaluate(
        self,
        queries: Mapping[_Id, str] | Iterable[tuple[_Id, str]],
        qrels: Mapping[_Id, Mapping[_Id, int]],
        *,
        k: int = 100,
        mode: _Mode | None = "hybrid",
        alpha: float | None = None,
        fusion: Literal["z", "rrf", "z_peak"] | None = None,
        lexical: Literal["bm25", "splade", "both"] | None = None,
        rerank_k: int | None = None,
        candidates: int | None = None,
        dense_stage: Literal["tokens", "pooled"] | None = None,
        nprobe: int | None = None,
        oversample: float | None = None,
        rescore: bool | None = None,
        prefetch: bool | None = None,
        prefetch_step: float | None = None,
        hybrid_candidates: int | None = None,
        early_read: bool | None = None,
        require_terms: str | None = None,
    ) -> dict[str, Any]: ...
    def add(
        self,
        docs: Mapping[str, Any] | Iterable[Mapping[str, Any]] | Iterable[str],
        doc_vectors: Iterable[Any] | None = None,
        texts: Iterable[str | None] | None = None,
        pooled: Iterable[Any] | None = None,
        metadata: Iterable[Mapping[str, Any] | None] | None = None,
    ) -> dict[str, Any]: ...
    def update(
        self,
        docs: Mapping[str, Any] | Iterable[Mapping[str, Any]] | Iterable[str],
        doc_vectors: Iterable[Any] | None = None,
        texts: Iterable[str | None] | None = None,
        pooled: Iterable[Any] | None = None,
        metadata: Iterable[Mapping[str, Any] | None] | None = None,
    ) -> dict[str, Any]: ...
    def delete(self, ids: _Id | Iterable[_Id] | None = None, *, filter: _Filter | None = None) -> dict[str, Any]: ...
    def flush(self) -> None: ...
    def merge(self, mib_per_sec: int = 32) -> dict[str, Any] | None: ...
    def retrain_ivf(self) -> dict[str, Any]: ...
    def retrain_tokens(self) -> dict[str, Any]: ...
    def get(self, id: _Id) -> dict[str, Any] | None: ...
    def live_stats(self) -> dict[str, Any]: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def path(self) -> Path: ...
    @property
    def reader(self) -> _Reader: ...
    def __len__(self) -> int: ...
    # The shards' calls of `cellar.cluster` (JSON in, JSON out).
    def _write_ops(self, request: str) -> dict[str, Any]: ...
    def _shard_prepare(self, request: str, encode: bool) -> str: ...
    def _shard_candidates(self, request: str, stats: str | None = None, matched: int | None = None) -> str: ...
    def _shard_maxsim(self, request: str, docs: list[int], describe: bool | None = None) -> str: ...
    def _shard_hits(self, hits: str, include_text: bool) -> str: ...

def merge_stats(stats: list[str]) -> str: ...
def _panic_for_tests(message: str) -> None: ...
def _documents_from_columns(
    ids: Iterable[_Id],
    doc_vectors: Iterable[Any],
    texts: Iterable[str | None] | None = None,
    pooled: Iterable[Any] | None = None,
    metadata: Iterable[Mapping[str, Any] | None] | None = None,
    *,
    compact: bool = True,
) -> list[dict[str, Any]]: ...

@final
class Gather:
    """The router's merge of one sharded search (``cellar.cluster``)."""

    def __new__(cls, params: str, candidates: list[str], matched: int | None = None, filter_ms: float = 0.0) -> Gather: ...
    def rerank(self) -> list[list[int]]: ...
    @property
    def candidates(self) -> int: ...
    def fuse(self, maxsim: list[list[float]]) -> str: ...
    def respond(self, hits: str, timings: str, io: str, query: str | None = None) -> str: ...

@final
class Stream:
    """A streaming collection: documents keyed by (group, id), exact search inside one group."""

    @staticmethod
    def open(
        path: _Path,
        *,
        dim: int | None = None,
        model: _Path | None = None,
        fsync: bool = True,
        memtable_bytes: int | None = None,
        background_compaction: bool = True,
        background_flush: bool = False,
        codec_from: _Path | None = None,
    ) -> Stream: ...
    def put(
        self,
        group: str,
        id: str,
        text: str = "",
        *,
        metadata: dict[str, str | int | float | bool] | None = None,
        tokens: Any | None = None,
        pooled: Any | None = None,
    ) -> int: ...
    def put_batch(self, docs: list[dict[str, Any]]) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Stream: ...
    def __exit__(self, *exc: object) -> bool: ...
    def get(self, group: str, id: str) -> dict[str, Any]: ...
    def delete(self, group: str, id: str) -> int: ...
    def search(
        self,
        group: str,
        query: str | None = None,
        *,
        k: int = 10,
        mode: str = "maxsim",
        query_tokens: Any | None = None,
        query_pooled: Any | None = None,
        require_terms: str | None = None,
        filter: _Filter | None = None,
        include_text: bool = True,
    ) -> list[dict[str, Any]]: ...
    def flush(self) -> None: ...
    def compact(self) -> bool: ...
    def stats(self) -> dict[str, Any]: ...
    @property
    def dim(self) -> int: ...
    @property
    def path(self) -> Path: ...
