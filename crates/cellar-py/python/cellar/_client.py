"""`cellar.Client`: a `cellar serve` server's search API, with :class:`Index`'s method names,
result type and exceptions. Standard library only (``urllib``); query vectors travel in the
compact base64 form (``tokens_b64``), not as JSON numbers."""

from __future__ import annotations

import base64
import json
import struct
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from . import _errors
from ._cellar import SearchResult

__all__ = ["Client"]

#: Exception class by the server's error code (`{code, message, details}`); codes without a class
#: of their own (``"overloaded"``, ``"timeout"``, ...) raise :class:`CellarError` with that code.
_BY_CODE: dict[str, type[_errors.CellarError]] = {
    cls.code: cls for cls in (getattr(_errors, name) for name in _errors.__all__)
}
_BY_CODE.update(wrong_dimension=_errors.InvalidInputError, doc_out_of_range=_errors.InvalidInputError)


def _rows(value: Any) -> list[float]:
    """The values of a vector or a matrix (NumPy array or nested lists), row after row."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if value and isinstance(value[0], (list, tuple)):
        return [float(x) for row in value for x in row]
    return [float(x) for x in value]


def _b64(values: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def _compact(vectors: Mapping[str, Any]) -> dict[str, Any]:
    """`query_vectors` with `tokens` and `pooled` as little-endian f32 base64."""
    out = {k: v for k, v in vectors.items() if k not in ("tokens", "pooled")}
    if vectors.get("tokens") is not None:
        out["tokens_b64"] = _b64(_rows(vectors["tokens"]))
    if vectors.get("pooled") is not None:
        out["pooled_b64"] = _b64(_rows(vectors["pooled"]))
    if "tokens_b64" in out or "pooled_b64" in out:
        out.setdefault("dtype", "f32")
    return out


def _request(query: str, params: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"query": query}
    body.update({k: v for k, v in params.items() if v is not None})
    if isinstance(body.get("query_vectors"), Mapping):
        body["query_vectors"] = _compact(body["query_vectors"])
    return body


class Client:
    """Searches a running ``cellar serve`` at ``url`` (e.g. ``"http://127.0.0.1:8080"``).

    ``search`` and ``search_batch`` take the arguments of :meth:`Index.search` and
    :meth:`Index.search_batch` and return :class:`SearchResult` objects; an error answer raises
    the exception :class:`Index` would (``InvalidInputError`` for a bad request, ...), with the
    server's ``code`` and ``details`` attributes. ``timeout`` is in seconds.
    """

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise _errors.InvalidInputError(f"url {url!r}: an http:// or https:// address is needed")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def _post(self, path: str, body: Any) -> bytes:
        data = json.dumps(body).encode("utf-8")
        request = urllib.request.Request(
            self.url + path, data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            raise self._error(error.read(), f"HTTP {error.code}") from None

    @staticmethod
    def _error(raw: bytes | str | Mapping[str, Any], status: str) -> _errors.CellarError:
        try:
            body = raw if isinstance(raw, Mapping) else json.loads(raw)
            code, message, details = body["code"], body["message"], body.get("details", {})
        except (ValueError, KeyError, TypeError):
            code, message, details = "http", f"{status}: {raw!r:.200}", {}
        error = _BY_CODE.get(code, _errors.CellarError)(message)
        error.code = code
        error.details = details
        return error

    def search(self, query: str = "", **params: Any) -> SearchResult:
        """One search; the arguments of :meth:`Index.search`."""
        return SearchResult._from_json(self._post("/v1/search", _request(query, params)).decode("utf-8"))

    def search_batch(self, queries: Iterable[str | Mapping[str, Any]], **params: Any) -> list[SearchResult]:
        """Many searches in one request; the arguments of :meth:`Index.search_batch`. The first
        query the server refused raises its error (the others' answers are dropped)."""
        batch = []
        for item in queries:
            if isinstance(item, str):
                batch.append(_request(item, params))
            else:
                fields = dict(item)
                batch.append(_request(fields.pop("query", ""), {**params, **fields}))
        answer = json.loads(self._post("/v1/search/batch", {"queries": batch}))
        results = []
        for i, one in enumerate(answer["results"]):
            if "error" in one:
                error = self._error(one["error"], "batch")
                error.args = (f"queries[{i}]: {error}",)
                raise error
            results.append(SearchResult._from_json(json.dumps(one)))
        return results
