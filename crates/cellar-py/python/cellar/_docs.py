"""The documents a write takes, in either of its two forms, as one list of document dicts.

:meth:`Index.add`, :meth:`Index.update` and :class:`Client`'s writes take documents as dicts
(``{"id", "title", "text", "metadata", "vectors": {"tokens": (n, dim), "pooled": (dim,)}}``) or
as columns, the arguments of :meth:`Index.from_embeddings`: ``add(ids, doc_vectors, texts=None,
pooled=None, metadata=None)``. :func:`documents` turns both into the first, for the client; the
columns are read by the native reader of ``from_embeddings`` (``_cellar._documents_from_columns``),
the one ``Index.add`` uses. A dict's vectors are left as given (NumPy arrays or lists), for the
caller to convert.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import _cellar
from ._errors import InvalidInputError

__all__ = ["documents", "vectors"]


def vectors(value: Any, what: str) -> dict[str, Any]:
    """Vectors as ``{"tokens": ..., "pooled": ...}``: a mapping as given (copied), anything else
    (a bare ``(n, dim)`` array or list of rows) as the token vectors alone."""
    if isinstance(value, Mapping):
        return dict(value)
    if value is None or isinstance(value, (str, bytes)):
        raise InvalidInputError(
            f"{what}: token vectors (an (n, dim) array or list of rows) or a dict with "
            f"'tokens' and/or 'pooled' are needed, got {type(value).__name__}"
        )
    return {"tokens": value}


def _id(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise InvalidInputError(f"{where}: an id is a str or an int, not {type(value).__name__}")


def documents(
    docs_or_ids: Any,
    doc_vectors: Iterable[Any] | None = None,
    texts: Iterable[str | None] | None = None,
    pooled: Iterable[Any] | None = None,
    metadata: Iterable[Mapping[str, Any] | None] | None = None,
    *,
    compact: bool = True,
) -> list[dict[str, Any]]:
    """The documents of a write as a list of dicts.

    ``docs_or_ids`` is one document dict, an iterable of them, or an iterable of ids (str or
    int) whose documents the other arguments give, one item per id: ``doc_vectors`` (each an
    ``(n_tokens, dim)`` float32 or float16 array; required with ids), ``texts`` (str; what BM25
    indexes and a search's answer shows), ``pooled`` (each a ``(dim,)`` vector, or ``None``:
    the normalised mean of the tokens) and ``metadata`` (each a dict, or ``None``). A document
    dict's ``vectors`` may be a bare token array, read as ``{"tokens": array}``; a dict without
    ``vectors`` has its text encoded by the index's model.

    The columns' vectors come back in the compact base64 form (``compact``) or as rows.
    Raises :class:`InvalidInputError` naming the argument when a column's length differs from the
    ids', when columns come with document dicts, or when an item is malformed, and ``TypeError``
    for a vector that is not a float32 or float16 array, as :meth:`Index.from_embeddings` does.
    """
    columns = {"doc_vectors": doc_vectors, "texts": texts, "pooled": pooled, "metadata": metadata}
    named = [name for name, value in columns.items() if value is not None]
    if isinstance(docs_or_ids, Mapping):
        docs_or_ids = [docs_or_ids]
    elif isinstance(docs_or_ids, (str, bytes)) or not isinstance(docs_or_ids, Iterable):
        raise InvalidInputError(
            "documents: a list of document dicts, or a list of ids with doc_vectors and/or texts, is "
            f"needed, got {type(docs_or_ids).__name__}"
        )
    items = list(docs_or_ids)
    if all(isinstance(item, Mapping) for item in items):
        if named and items:
            raise InvalidInputError(
                f"documents given as dicts take no {', '.join(named)}: put each document's fields in "
                "its dict, or pass ids with doc_vectors"
            )
        out: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            doc: dict[str, Any] = dict(item)
            if "id" not in doc:
                raise InvalidInputError(f"documents[{i}] has no 'id'")
            doc["id"] = _id(doc["id"], f"documents[{i}]['id']")
            if doc.get("vectors") is not None:
                doc["vectors"] = vectors(doc["vectors"], f"documents[{i}]['vectors']")
            out.append(doc)
        return out
    if any(isinstance(item, Mapping) for item in items):
        raise InvalidInputError("documents: either every item is a document dict or every item is an id")
    ids = [_id(item, f"ids[{i}]") for i, item in enumerate(items)]
    if doc_vectors is None:
        raise InvalidInputError(
            "ids need doc_vectors (one (n_tokens, dim) array per id); documents whose text the "
            "index's model encodes are dicts: {'id': ..., 'text': ...}"
        )
    # The columns are read by `Index.from_embeddings`' own reader (native), as `Index.add` reads them.
    return _cellar._documents_from_columns(ids, doc_vectors, texts, pooled, metadata, compact=compact)
