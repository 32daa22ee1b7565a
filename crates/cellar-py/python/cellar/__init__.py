"""Cellar: SSD-resident ColBERT-style retrieval.

BM25 finds candidates, their token vectors are read from disk and re-scored with MaxSim, and
the two scores are fused::

    import cellar

    index = cellar.Index.build("data/scifact", "scifact.cellar")   # or cellar.Index.open(path)
    result = index.search("does vitamin D prevent fractures?", k=10, mode="hybrid")
    for doc_id, score, text in zip(result.ids, result.scores, result.texts):
        print(doc_id, round(score, 3), text[:80])

    metrics = index.evaluate({"q1": "..."}, {"q1": {"doc7": 2}})   # {"nDCG@10": ..., ...}

Streaming collections keep each user's (group's) documents together and search one group
exactly, with no index::

    stream = cellar.Stream.open("notes.stream")          # created with the model's dimension
    stream.put("alice", "n1", "buy sourdough flour", metadata={"kind": "todo"})
    stream.search("alice", "bread", k=5)                   # [{"id", "score", "text", "metadata"}]

A running ``cellar serve`` is reached with :class:`Client` (standard library only), which has
the same methods: ``cellar.Client("http://127.0.0.1:7700", api_key=...)``.

Searches and evaluations release the GIL: one :class:`Index` can serve many Python threads.
Errors derive from :class:`CellarError`; bad input raises :class:`InvalidInputError`, which is
also a :class:`ValueError`.
"""

from __future__ import annotations

from ._cellar import CODECS, MAX_K, MAX_QUERY_BYTES, SEARCH_REQUEST_SCHEMA, Index, SearchResult, Stream, __version__
from . import _errors
from ._client import Client, RemoteIndex, RemoteStream
from ._errors import (
    CellarError,
    CellarIOError,
    CorruptedError,
    IncompatibleError,
    InternalError,
    InvalidInputError,
    LockedError,
    ModelError,
    NotFoundError,
    OverloadedError,
    UnauthorizedError,
    UnreachableError,
    UnsupportedError,
)

#: Search modes accepted by :meth:`Index.search` and :meth:`Index.evaluate`.
MODES = ("hybrid", "rerank", "bm25", "dense", "ivf", "dense-exact")
#: Keyword arguments of :meth:`Index.search`: the fields of a search request, as in the JSON body
#: of ``POST /v1/search`` (declared once, in Rust's ``SearchRequest``).
SEARCH_PARAMETERS = tuple(p for p in SEARCH_REQUEST_SCHEMA["properties"] if p != "query")
#: Readers accepted by :meth:`Index.open`.
READERS = ("mmap", "direct", "ram")
#: Vector codecs accepted by :meth:`Index.build` (``CODECS``, declared once, in Rust's ``CodecKind``).

__all__ = [
    "Index",
    "Client",
    "RemoteIndex",
    "RemoteStream",
    "SearchResult",
    "Stream",
    "MODES",
    "READERS",
    "CODECS",
    "MAX_K",
    "MAX_QUERY_BYTES",
    "SEARCH_REQUEST_SCHEMA",
    "SEARCH_PARAMETERS",
    "__version__",
    # The exceptions (`_errors.__all__`; a test holds the two lists equal).
    "CellarError",
    "CellarIOError",
    "CorruptedError",
    "IncompatibleError",
    "InternalError",
    "InvalidInputError",
    "LockedError",
    "ModelError",
    "NotFoundError",
    "OverloadedError",
    "UnauthorizedError",
    "UnreachableError",
    "UnsupportedError",
]
