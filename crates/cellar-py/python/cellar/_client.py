"""`cellar.Client`: the whole HTTP API of a `cellar serve` server, with :class:`Index`'s and
:class:`Stream`'s method names, argument shapes, result types and exceptions.

Standard library only (``urllib``). Vectors of searches and index writes travel in the compact
base64 form (``tokens_b64``, ``pooled_b64``: little-endian f32), not as JSON numbers; streams
take JSON numbers (their API has no compact form).

- :class:`Client` (the server's ``--index`` under ``/v1/...``): search, search_batch, add,
  update, delete, write, get, live_stats; health, metrics, openapi; the ``--data-dir`` indexes:
  indexes, create_index, index, drop_index; the ``--streams``: stream.
- :class:`RemoteIndex` (``client.index(name)``): the same index methods on a named index of the
  data directory (``/v1/indexes/{name}/...``), plus info and drop.
- :class:`RemoteStream` (``client.stream(name)``): put, put_batch, get, delete, search, stats,
  drop of one streaming collection (``/v1/streams/{name}/...``).

Every error answer raises the exception :class:`Index` would (by the answer's ``code``), with
``code``, ``details`` and the HTTP ``status`` as attributes; a 401 raises
:class:`UnauthorizedError`, a 429 or 504 :class:`OverloadedError`, and a server that does not
answer :class:`UnreachableError`.
"""

from __future__ import annotations

import base64
import errno
import http.client
import json
import os
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from . import _errors, _json
from ._cellar import SEARCH_REQUEST_SCHEMA, SearchResult, __version__
from ._docs import documents, vectors

__all__ = ["Client", "RemoteIndex", "RemoteStream", "API_KEY_ENV"]

#: The environment variable a :class:`Client` takes its API key from when given none (the same
#: variable ``cellar serve`` reads its key from).
API_KEY_ENV = "CELLAR_API_KEY"

#: Exception class by the server's error code (`{code, message, details}`): each class's own
#: code, and the codes that share a class. Every code of docs/server.md's error table is here.
_BY_CODE: dict[str, type[_errors.CellarError]] = {
    cls.code: cls for cls in (getattr(_errors, name) for name in _errors.__all__)
}
_BY_CODE.update(
    # The request, as sent, cannot be served: fix it.
    wrong_dimension=_errors.InvalidInputError,
    doc_out_of_range=_errors.InvalidInputError,
    invalid_request=_errors.InvalidInputError,
    malformed_json=_errors.InvalidInputError,
    body_too_large=_errors.InvalidInputError,
    write_too_large=_errors.InvalidInputError,
    too_many_indexes=_errors.InvalidInputError,
    # Retry later (after a 504 a write may still have completed).
    deadline_exceeded=_errors.OverloadedError,
    # The body did not arrive whole (a broken or too slow connection).
    bad_body=_errors.UnreachableError,
    body_timeout=_errors.UnreachableError,
    # A route or media type this server does not have (an older server).
    method_not_allowed=_errors.UnsupportedError,
    unsupported_media_type=_errors.UnsupportedError,
    disk_full=_errors.CellarIOError,
)

#: The class of an answer whose code this client does not know (a newer server), by status.
_BY_STATUS: dict[int, type[_errors.CellarError]] = {
    401: _errors.UnauthorizedError,
    404: _errors.NotFoundError,
    409: _errors.LockedError,
    429: _errors.OverloadedError,
    502: _errors.UnreachableError,
    503: _errors.OverloadedError,
    504: _errors.OverloadedError,
}

#: The keyword arguments of `search`: the fields of a search request but its text.
_SEARCH_FIELDS = frozenset(SEARCH_REQUEST_SCHEMA["properties"]) - {"query"}


def error_from_answer(raw: bytes | str | Mapping[str, Any], status: int | None) -> _errors.CellarError:
    """The exception of an error answer ``{code, message, details}`` (``raw``) of HTTP
    ``status`` (``None`` inside a batch): the class of its code, else of its status, with
    ``code``, ``details`` and ``status`` set."""
    try:
        body = raw if isinstance(raw, Mapping) else json.loads(raw)
        code, message, details = str(body["code"]), str(body["message"]), body.get("details") or {}
    except (ValueError, KeyError, TypeError):
        code, message, details = "http", f"HTTP {status}: {raw!r:.200}", {}
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = _BY_STATUS.get(status or 0)
    if cls is None:
        cls = _errors.InvalidInputError if status and 400 <= status < 500 else _errors.InternalError
    error = cls(errno.ENOSPC, message) if code == "disk_full" else cls(message)
    error.code = code
    error.details = details
    error.status = status
    return error


def _segment(value: Any, what: str) -> str:
    """One path segment of a URL: a name, group or id, percent-encoded (``/`` included)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise _errors.InvalidInputError(f"{what} must be a non-empty str, got {value!r:.80}")
    return urllib.parse.quote(value, safe="")


def _f32_b64(value: Any, what: str) -> str:
    """A vector or matrix (NumPy array or nested lists) as base64 of its values, row after row,
    little-endian f32."""
    try:
        if hasattr(value, "astype") and hasattr(value, "tobytes"):
            raw = value.astype("<f4").tobytes()
        else:
            values: list[float] = []
            for item in value:
                if hasattr(item, "tolist"):
                    item = item.tolist()
                if isinstance(item, (list, tuple)):
                    values.extend(float(x) for x in item)
                else:
                    values.append(float(item))
            raw = struct.pack(f"<{len(values)}f", *values)
    except (TypeError, ValueError, struct.error) as e:
        raise _errors.InvalidInputError(f"{what}: numbers are needed ({e})") from None
    return base64.b64encode(raw).decode("ascii")


def _compact(value: Any, what: str) -> dict[str, Any]:
    """Vectors (``{"tokens", "pooled"}``, or a bare token array) with ``tokens`` and ``pooled``
    as little-endian f32 base64 (``tokens_b64``, ``pooled_b64``)."""
    given = vectors(value, what)
    out = {k: v for k, v in given.items() if k not in ("tokens", "pooled")}
    if given.get("tokens") is not None:
        out["tokens_b64"] = _f32_b64(given["tokens"], f"{what}['tokens']")
    if given.get("pooled") is not None:
        out["pooled_b64"] = _f32_b64(given["pooled"], f"{what}['pooled']")
    if "tokens_b64" in out or "pooled_b64" in out:
        out.setdefault("dtype", "f32")
    return out


def _json_rows(value: Mapping[str, Any]) -> dict[str, Any]:
    """Vectors with ``tokens`` and ``pooled`` as JSON numbers (lists of rows)."""
    return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in value.items()}


def _search_request(query: str | None, params: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """The JSON body of one search, as :meth:`Index.search` builds it: ``k`` 10, ``mode``
    ``"hybrid"`` with a text and ``"dense"`` without (``None``: the index's default)."""
    unknown = sorted(set(params) - _SEARCH_FIELDS)
    if unknown:
        raise TypeError(f"{where}search() got an unexpected keyword argument {unknown[0]!r}")
    if query is not None and not isinstance(query, str):
        raise TypeError(f"{where}query: a str is needed, got {type(query).__name__}")
    if query is None and params.get("query_vectors") is None:
        raise _errors.InvalidInputError(f"{where}give a query text, query_vectors, or both")
    body: dict[str, Any] = {"k": 10, "mode": "hybrid" if query is not None else "dense"}
    body.update(params)
    body = {k: v for k, v in body.items() if v is not None}
    if query is not None:
        body["query"] = query
    if "query_vectors" in body:
        body["query_vectors"] = _compact(body["query_vectors"], f"{where}query_vectors")
    return body


def _write_doc(doc: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A document of a write with its vectors in the compact form."""
    out = dict(doc)
    if out.get("vectors") is not None:
        out["vectors"] = _compact(out["vectors"], f"{what}['vectors']")
    return out


def _ids(ids: Any) -> list[str]:
    if isinstance(ids, (str, int)) and not isinstance(ids, bool):
        return [str(ids)]
    if not isinstance(ids, Iterable) or isinstance(ids, (bytes, Mapping)):
        raise _errors.InvalidInputError(f"ids: an id (str or int) or a list of them, got {type(ids).__name__}")
    out = []
    for i, one in enumerate(ids):
        if isinstance(one, bool) or not isinstance(one, (str, int)):
            raise _errors.InvalidInputError(f"ids[{i}]: an id is a str or an int, not {type(one).__name__}")
        out.append(str(one))
    return out


class _Http:
    """Requests to one server, with its API key, and the errors of their answers."""

    def __init__(self, url: str, api_key: str | None, timeout: float) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise _errors.InvalidInputError(f"url {url!r}: an http:// or https:// address is needed")
        if not timeout or timeout <= 0:
            raise _errors.InvalidInputError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = {"User-Agent": f"cellar-python/{__version__}"}
        if api_key is not None:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def request(self, method: str, path: str, body: Any = None) -> bytes:
        """The body of the answer to ``method path`` (with ``body`` as JSON); an error answer
        raises its exception, no answer :class:`UnreachableError`."""
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = _json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer: bytes = response.read()
                return answer
        except urllib.error.HTTPError as error:
            raw = error.read()
            error.close()
            raise error_from_answer(raw, error.code) from None
        except (OSError, http.client.HTTPException) as error:
            reason = getattr(error, "reason", error)
            timed_out = isinstance(reason, TimeoutError) or isinstance(error, TimeoutError)
            what = f"no answer within {self.timeout} s" if timed_out else f"no answer ({reason})"
            raised = _errors.UnreachableError(f"{method} {self.url}{path}: {what}")
            raised.code = "timeout" if timed_out else "unreachable"
            raise raised from None

    def json(self, method: str, path: str, body: Any = None) -> Any:
        raw = self.request(method, path, body)
        try:
            return json.loads(raw)
        except ValueError:
            raise _errors.InvalidInputError(
                f"{method} {self.url}{path} answered {raw[:80]!r}, not JSON: is this a cellar serve?"
            ) from None


class _IndexMethods:
    """The methods of one served index, at ``base`` (``/v1`` or ``/v1/indexes/{name}``)."""

    _http: _Http
    _base: str

    def search(self, query: str | None = None, **params: Any) -> SearchResult:
        """Searches ``query`` (a text, or ``None`` with ``query_vectors``), with the keyword
        arguments of :meth:`Index.search` (``k`` 10, ``mode`` ``"hybrid"`` with a text and
        ``"dense"`` without, ``filter``, ``query_vectors`` as a bare ``(n, dim)`` token array or
        ``{"tokens", "pooled"}``, ...).

        Sends ``POST .../search`` with the vectors in base64; returns a :class:`SearchResult`.
        Raises ``TypeError`` for a misspelt argument, :class:`InvalidInputError` for a request
        the server refuses (and the other typed errors of an error answer)."""
        body = _search_request(query, params)
        return SearchResult._from_json(self._http.request("POST", f"{self._base}/search", body).decode("utf-8"))

    def search_batch(self, queries: Iterable[str | Mapping[str, Any]], **params: Any) -> list[SearchResult]:
        """Many searches in one request (at most 64): each item a query text or a dict of
        request fields (``query``, ``query_vectors``, ``k``, ...), the keyword arguments shared
        by all (an item's own fields win), as :meth:`Index.search_batch` takes them.

        Sends ``POST .../search/batch``; returns one :class:`SearchResult` per query, in order.
        The first query the server refused raises its error, named ``queries[i]`` (the others'
        answers are dropped)."""
        if isinstance(queries, (str, Mapping)):
            raise TypeError("search_batch() takes a list of queries (texts or dicts of request fields)")
        batch = []
        for i, item in enumerate(queries):
            if isinstance(item, str):
                batch.append(_search_request(item, params, f"queries[{i}]: "))
            elif isinstance(item, Mapping):
                fields = {**params, **item}
                batch.append(_search_request(fields.pop("query", None), fields, f"queries[{i}]: "))
            else:
                raise TypeError(
                    f"queries[{i}]: a query text (str) or a dict of request fields is needed, got {type(item).__name__}"
                )
        if not batch:
            return []
        answer = self._http.json("POST", f"{self._base}/search/batch", {"queries": batch})
        results = []
        for i, one in enumerate(answer["results"]):
            if "error" in one:
                error = error_from_answer(one["error"], None)
                error.args = (f"queries[{i}]: {error}",)
                raise error
            results.append(SearchResult._from_json(json.dumps(one)))
        return results

    def write(self, ops: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """Applies one batch of operations, all or nothing, in order: ``{"add": doc}``,
        ``{"update": doc}``, ``{"delete": id}`` or ``{"delete_where": filter}`` (1 to 4096; a
        doc as :meth:`add` takes a dict).

        Sends ``POST .../docs``; returns the write's report (``seq``, ``added``, ``updated``,
        ``deleted``, ``docs``, timings) once the batch is durable and searchable. An add of an
        existing id raises :class:`InvalidInputError`, an update or delete of a missing one
        :class:`NotFoundError`; nothing is written then."""
        body = []
        for i, op in enumerate(ops):
            if not isinstance(op, Mapping) or len(op) != 1:
                raise _errors.InvalidInputError(
                    f"ops[{i}]: one of {{'add': doc}}, {{'update': doc}}, {{'delete': id}}, {{'delete_where': filter}}"
                )
            ((kind, value),) = op.items()
            if kind in ("add", "update"):
                (doc,) = documents(value)
                value = _write_doc(doc, f"ops[{i}]['{kind}']")
            body.append({kind: value})
        if not body:
            raise _errors.InvalidInputError("write() needs at least one operation")
        return self._http.json("POST", f"{self._base}/docs", {"ops": body})  # type: ignore[no-any-return]

    def _write_docs(self, kind: str, docs: Any, columns: tuple[Any, Any, Any, Any]) -> dict[str, Any]:
        ops = [{kind: _write_doc(doc, f"docs[{i}]")} for i, doc in enumerate(documents(docs, *columns))]
        if not ops:
            raise _errors.InvalidInputError(f"{kind}() needs at least one document")
        return self._http.json("POST", f"{self._base}/docs", {"ops": ops})  # type: ignore[no-any-return]

    def add(
        self,
        docs: Any,
        doc_vectors: Iterable[Any] | None = None,
        texts: Iterable[str | None] | None = None,
        pooled: Iterable[Any] | None = None,
        metadata: Iterable[Mapping[str, Any] | None] | None = None,
    ) -> dict[str, Any]:
        """Adds documents, in the shapes :meth:`Index.add` takes: dicts (``{"id", "title",
        "text", "metadata", "vectors"}``, one or a list; without ``vectors`` the server's model
        encodes the text) or the columns of :meth:`Index.from_embeddings` (``ids, doc_vectors,
        texts=None, pooled=None, metadata=None``).

        Sends one ``POST .../docs`` of ``add`` operations (vectors in base64); returns the
        write's report once the documents are durable and searchable. All or nothing: an
        existing id or a bad document raises :class:`InvalidInputError` (a wrong dimension too)
        and nothing is written."""
        return self._write_docs("add", docs, (doc_vectors, texts, pooled, metadata))

    def update(
        self,
        docs: Any,
        doc_vectors: Iterable[Any] | None = None,
        texts: Iterable[str | None] | None = None,
        pooled: Iterable[Any] | None = None,
        metadata: Iterable[Mapping[str, Any] | None] | None = None,
    ) -> dict[str, Any]:
        """Replaces documents by id (each must exist: :class:`NotFoundError` otherwise), in the
        shapes :meth:`add` takes. Sends one ``POST .../docs`` of ``update`` operations; returns
        the write's report. All or nothing."""
        return self._write_docs("update", docs, (doc_vectors, texts, pooled, metadata))

    def delete(self, ids: Any = None, *, filter: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Deletes documents by id (a str or int, or a list of them; each must exist:
        :class:`NotFoundError` otherwise, and nothing is deleted), and with ``filter=`` (as
        :meth:`search` takes it, ``{"color": "red"}`` included) every document it matches.

        Sends ``DELETE .../docs/{id}`` for one id alone, else one ``POST .../docs`` of
        ``delete`` and ``delete_where`` operations; returns the write's report."""
        if ids is None and filter is None:
            raise _errors.InvalidInputError("delete() needs ids, filter= or both")
        listed = [] if ids is None else _ids(ids)
        if len(listed) == 1 and filter is None:
            path = f"{self._base}/docs/{_segment(listed[0], 'id')}"
            return self._http.json("DELETE", path)  # type: ignore[no-any-return]
        ops: list[dict[str, Any]] = [{"delete": one} for one in listed]
        if filter is not None:
            ops.append({"delete_where": filter})
        return self.write(ops)

    def get(self, id: str | int) -> dict[str, Any] | None:
        """The document stored under ``id`` (``id``, ``internal_id``, ``title``, ``text``,
        ``metadata``), or ``None`` when there is none. Sends ``GET .../docs/{id}``; a missing
        index (or none served) raises :class:`NotFoundError`."""
        try:
            doc = self._http.json("GET", f"{self._base}/docs/{_segment(id, 'id')}")
        except _errors.NotFoundError as error:
            if "id" in error.details:
                return None
            raise
        doc.setdefault("metadata", {})
        return doc  # type: ignore[no-any-return]


class RemoteIndex(_IndexMethods):
    """A named index of a server's data directory (``cellar serve --data-dir``), at
    ``/v1/indexes/{name}``: :class:`Client`'s index methods (search, search_batch, add, update,
    delete, write, get) on it, and :meth:`info`, :meth:`live_stats`, :meth:`drop`. Made by
    :meth:`Client.index` or :meth:`Client.create_index`; making one sends nothing."""

    def __init__(self, http: _Http, name: str) -> None:
        self._http = http
        self.name = name
        self._base = f"/v1/indexes/{_segment(name, 'index name')}"

    def __repr__(self) -> str:
        return f"RemoteIndex({self._http.url!r}, {self.name!r})"

    def info(self) -> dict[str, Any]:
        """The index's facts, ``{name, docs, codec, live}`` (``GET /v1/indexes/{name}``);
        :class:`NotFoundError` when the data directory has no such index."""
        return self._http.json("GET", self._base)  # type: ignore[no-any-return]

    def live_stats(self) -> dict[str, Any]:
        """What was written since the build (as :meth:`Index.live_stats`): ``info()["live"]``."""
        return self.info()["live"]  # type: ignore[no-any-return]

    def drop(self) -> dict[str, Any]:
        """Drops the index and every file of it (``DELETE /v1/indexes/{name}``); returns
        ``{dropped, index}``. :class:`LockedError` while another process holds it,
        :class:`NotFoundError` when there is no such index."""
        return self._http.json("DELETE", self._base)  # type: ignore[no-any-return]


class RemoteStream:
    """A streaming collection of a server (``cellar serve --streams``), at
    ``/v1/streams/{name}``, with :class:`Stream`'s methods: put, put_batch, get, delete,
    search, stats; and :meth:`drop`. A stream is created by its first write. Made by
    :meth:`Client.stream`; making one sends nothing. Vectors travel as JSON numbers."""

    def __init__(self, http: _Http, name: str) -> None:
        self._http = http
        self.name = name
        self._base = f"/v1/streams/{_segment(name, 'stream name')}"

    def __repr__(self) -> str:
        return f"RemoteStream({self._http.url!r}, {self.name!r})"

    def _doc(self, group: str, id: str) -> str:
        return f"{self._base}/groups/{_segment(group, 'group')}/docs/{_segment(id, 'id')}"

    def put(
        self,
        group: str,
        id: str,
        text: str = "",
        *,
        metadata: Mapping[str, str | int | float | bool] | None = None,
        tokens: Any | None = None,
        pooled: Any | None = None,
    ) -> int:
        """Writes (or replaces) one document, as :meth:`Stream.put`: without ``tokens`` (an
        ``(n, dim)`` array or list of rows) the server's model encodes ``text``.

        Sends ``PUT .../groups/{group}/docs/{id}``; returns the write's sequence number once it
        is durable. Bad input raises :class:`InvalidInputError`, a wrong dimension too."""
        body: dict[str, Any] = {"text": text}
        for key, value in (("metadata", metadata), ("tokens", tokens), ("pooled", pooled)):
            if value is not None:
                body[key] = value
        return int(self._http.json("PUT", self._doc(group, id), body)["seq"])

    def put_batch(self, docs: Iterable[Mapping[str, Any]]) -> int:
        """Writes up to 1000 documents (dicts with ``group``, ``id``, ``text``, and optionally
        ``metadata``, ``tokens``, ``pooled``) as one batch, as :meth:`Stream.put_batch`: one log
        record, all or nothing. Sends ``POST .../feed``; returns the last sequence number."""
        listed = list(docs)
        return int(self._http.json("POST", f"{self._base}/feed", {"docs": listed})["last_seq"])

    def get(self, group: str, id: str) -> dict[str, Any]:
        """The document (group, id): ``{group, id, seq, text, n_tokens, metadata}`` (no vectors,
        unlike :meth:`Stream.get`). Sends ``GET .../groups/{group}/docs/{id}``;
        :class:`NotFoundError` when absent."""
        return self._http.json("GET", self._doc(group, id))  # type: ignore[no-any-return]

    def delete(self, group: str, id: str) -> int:
        """Deletes (group, id) (``DELETE .../groups/{group}/docs/{id}``); returns the delete's
        sequence number. :class:`NotFoundError` when it holds no document."""
        return int(self._http.json("DELETE", self._doc(group, id))["seq"])

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
        filter: Mapping[str, Any] | None = None,
        include_text: bool = True,
    ) -> list[dict[str, Any]]:
        """The exact top-``k`` of ``group``, as :meth:`Stream.search`: ``query`` text (encoded by
        the server) or ``query_tokens``; ``mode`` ``"maxsim"`` or ``"pooled"``;
        ``require_terms``; ``filter`` in the whole grammar of :meth:`search`
        (``{"kind": "todo"}``, ``eq``, ``in``, ``range``, ``and``, ``or``, ``not``).

        Sends ``POST .../groups/{group}/search``; returns ``[{id, score, text, metadata}]``,
        best first (``text`` ``None`` with ``include_text=False``). :class:`NotFoundError` for a
        group with no documents."""
        body: dict[str, Any] = {"k": k, "mode": mode, "include_text": include_text}
        fields = {
            "query": query,
            "query_tokens": query_tokens,
            "query_pooled": query_pooled,
            "require_terms": require_terms,
            "filter": filter,
        }
        body.update({key: value for key, value in fields.items() if value is not None})
        answer = self._http.json("POST", f"{self._base}/groups/{_segment(group, 'group')}/search", body)
        hits = answer["hits"]
        for hit in hits:
            hit.setdefault("text", None)
        return hits  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        """The stream's figures (segments, memtable, RAM, disk, sequence numbers), as
        :meth:`Stream.stats` (``GET /v1/streams/{name}``); :class:`NotFoundError` when absent."""
        return self._http.json("GET", self._base)  # type: ignore[no-any-return]

    def drop(self) -> dict[str, Any]:
        """Deletes the stream and every document in it (``DELETE /v1/streams/{name}``); returns
        ``{deleted, stream}``. :class:`NotFoundError` when absent, :class:`LockedError` while
        another process has it open."""
        return self._http.json("DELETE", self._base)  # type: ignore[no-any-return]


class Client(_IndexMethods):
    """A running ``cellar serve`` at ``url`` (e.g. ``"http://127.0.0.1:7700"``).

    The index methods (search, search_batch, add, update, delete, write, get, live_stats) take
    :class:`Index`'s arguments and act on the server's ``--index``; :meth:`index` gives the same
    methods on a named index of its ``--data-dir``, :meth:`stream` :class:`Stream`'s methods on
    a streaming collection of its ``--streams``.

    ``api_key`` is sent as ``Authorization: Bearer KEY`` to a server started with an API key;
    without one the ``CELLAR_API_KEY`` environment variable's is (read here, once). ``timeout``
    is in seconds, per request. Creating a client sends nothing.

    Errors: an error answer raises the exception :class:`Index` would (:class:`InvalidInputError`
    for a bad request, :class:`NotFoundError`, ...) with the server's ``code``, ``details`` and
    HTTP ``status``; a missing or wrong key :class:`UnauthorizedError`; a full server or a passed
    deadline :class:`OverloadedError`; no answer (refused, broken, ``timeout``)
    :class:`UnreachableError`.
    """

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        if api_key is None:
            api_key = os.environ.get(API_KEY_ENV, "").strip() or None
        elif not isinstance(api_key, str) or not api_key.strip():
            raise _errors.InvalidInputError("api_key must be a non-empty str (or None: $CELLAR_API_KEY)")
        if api_key is not None and any(c in api_key for c in "\r\n"):
            raise _errors.InvalidInputError("api_key must be one line")
        self._http = _Http(url, api_key, timeout)
        self._base = "/v1"

    def __repr__(self) -> str:
        return f"Client({self._http.url!r})"

    @property
    def url(self) -> str:
        """The server's address."""
        return self._http.url

    @property
    def timeout(self) -> float:
        """Seconds each request may take before :class:`UnreachableError` (code ``"timeout"``)."""
        return self._http.timeout

    def health(self) -> dict[str, Any]:
        """The server's liveness and facts (``GET /healthz``, which needs no key): ``status``,
        ``docs``, ``live``, ``model``, ``streams``, ``workers``, queue depth, ``version``, ..."""
        return self._http.json("GET", "/healthz")  # type: ignore[no-any-return]

    def metrics(self) -> str:
        """The Prometheus text of ``GET /metrics`` (request counts, stage timings, queue, ...)."""
        return self._http.request("GET", "/metrics").decode("utf-8")

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI 3.1 document of the server's API (``GET /openapi.json``)."""
        return self._http.json("GET", "/openapi.json")  # type: ignore[no-any-return]

    def live_stats(self) -> dict[str, Any]:
        """What was written to the ``--index`` since its build (as :meth:`Index.live_stats`):
        ``health()["live"]``; :class:`NotFoundError` when the server serves no ``--index``."""
        live = self.health().get("live")
        if live is None:
            raise _errors.NotFoundError("this server serves no index (started without --index)")
        return live  # type: ignore[no-any-return]

    def indexes(self) -> list[str]:
        """The names of the data directory's indexes (``GET /v1/indexes``);
        :class:`NotFoundError` when the server has no ``--data-dir``."""
        return self._http.json("GET", "/v1/indexes")["indexes"]  # type: ignore[no-any-return]

    def index(self, name: str) -> RemoteIndex:
        """The named index ``name`` of the data directory, as a :class:`RemoteIndex` (sends
        nothing: a missing index raises :class:`NotFoundError` at its first call)."""
        return RemoteIndex(self._http, name)

    def create_index(
        self,
        name: str,
        docs: Any = None,
        doc_vectors: Iterable[Any] | None = None,
        texts: Iterable[str | None] | None = None,
        pooled: Iterable[Any] | None = None,
        metadata: Iterable[Mapping[str, Any] | None] | None = None,
        *,
        dim: int | None = None,
        codec: str | None = None,
        ivf: bool = False,
    ) -> RemoteIndex:
        """Creates the index ``name`` (1 to 64 ASCII letters, digits, ``-``, ``_``) in the data
        directory from its first 1 to 4096 documents, in the shapes :meth:`add` takes: all with
        vectors (an index of your embeddings, like :meth:`Index.from_embeddings`) or none (their
        text encoded by the server's model). ``codec`` as :meth:`Index.build`'s; ``ivf`` also
        builds the IVF (the ``ivf`` mode and ``dense`` over it).

        Without ``docs`` the index starts empty and every document arrives through :meth:`add`:
        of your embeddings when ``dim`` gives their dimension, else of the server's model. An
        empty index stores f16 vectors (a codec fitted on vectors, PCA and the IVF need
        documents, and are refused).

        Sends ``PUT /v1/indexes/{name}``; returns the new index's :class:`RemoteIndex`. A taken
        or bad name raises :class:`InvalidInputError`, as does a data directory past
        ``--max-indexes`` (code ``too_many_indexes``)."""
        handle = RemoteIndex(self._http, name)
        body: dict[str, Any] = {"ivf": ivf}
        if codec is not None:
            body["codec"] = codec
        if docs is None:
            if dim is not None:
                body["dim"] = dim
            self._http.json("PUT", handle._base, body)
            return handle
        given = documents(docs, doc_vectors, texts, pooled, metadata, compact=False)
        docs_in = [_write_doc(doc, f"docs[{i}]") for i, doc in enumerate(given)]
        if docs_in and given[0].get("vectors") is not None:
            # The first document's vectors go as rows: they set the new index's dimension
            # (base64 values have none); the others stay compact.
            docs_in[0]["vectors"] = _json_rows(given[0]["vectors"])
        body["docs"] = docs_in
        if dim is not None:
            body["dim"] = dim
        self._http.json("PUT", handle._base, body)
        return handle

    def drop_index(self, name: str) -> dict[str, Any]:
        """Drops the data directory's index ``name``: :meth:`RemoteIndex.drop`."""
        return RemoteIndex(self._http, name).drop()

    def stream(self, name: str) -> RemoteStream:
        """The streaming collection ``name`` as a :class:`RemoteStream` (sends nothing; a stream
        is created by its first write)."""
        return RemoteStream(self._http, name)
