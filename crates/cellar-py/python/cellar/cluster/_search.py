"""A sharded search and a sharded write, over any transport to the shards (in-process
indexes: :class:`LocalCluster`; Ray Serve replicas: ``cellar.cluster.serve``).

A search runs four phases, each on every living shard at once (``cellar_search::shard`` says
what each does): ``prepare`` (parameters, BM25 statistics, the query encoded once),
``candidates`` (first-stage lists scored with the summed statistics), ``maxsim`` (the global
best ``rerank_k``, each scored by its shard) and ``hits`` (ids and text). A shard that fails a
phase is asked again (``retries``; Ray sends the retry to another replica when there is one);
one that still fails is left out and named, and the answer says ``partial: true`` — never a
silently smaller answer. A user error (bad request) is raised as itself.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .. import _cellar, _errors
from ._manifest import Manifest

if TYPE_CHECKING:
    from .._cellar import _Reader

#: Errors that are the caller's, not a shard's: raised, never turned into a missing shard.
USER_ERRORS = (_errors.InvalidInputError, _errors.UnsupportedError, _errors.NotFoundError)

#: A transport: ``call(shard, method, *args)`` runs ``Index._shard_<method>`` (``write``:
#: ``Index._write_ops``) on a replica of the shard and returns its JSON text.
Call = Callable[..., Awaitable[str]]


class ShardsUnavailable(_errors.CellarError):
    """No shard of the collection answered."""

    code = "unavailable"


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


async def _phase(call: Call, method: str, args: dict[int, tuple], retries: int, missing: dict[int, str]) -> dict[int, Any]:
    """Runs ``method`` on each shard of ``args`` at once; returns the parsed answers of those
    that answered, recording the others in ``missing`` (shard → why)."""

    async def one(shard: int, a: tuple) -> Any:
        for attempt in range(retries + 1):
            try:
                return json.loads(await call(shard, method, *a))
            except USER_ERRORS:
                raise
            except Exception as e:  # noqa: BLE001 - a shard's failure, whatever its kind
                if attempt == retries:
                    return e
        raise AssertionError("unreachable")

    shards = list(args)
    answers = await asyncio.gather(*(one(s, args[s]) for s in shards))
    out = {}
    for s, a in zip(shards, answers):
        if isinstance(a, Exception):
            missing[s] = f"{type(a).__name__}: {a}"
        else:
            out[s] = a
    return out


async def search(call: Call, shards: int, request: dict[str, Any], *, retries: int = 1) -> dict[str, Any]:
    """One search over ``shards`` shards; the answer has the shape of ``POST /v1/search``'s,
    each hit with its ``shard``, plus ``partial`` and ``shards`` (answered, missing)."""
    start = time.perf_counter()
    missing: dict[int, str] = {}
    phases: dict[str, float] = {}
    include_text = request.get("include_text", True) is not False
    body = json.dumps(request)

    t = time.perf_counter()
    living = list(range(shards))
    prepared = await _phase(call, "prepare", {s: (body, s == living[0]) for s in living}, retries, missing)
    encoder = next(iter(prepared), None)
    if encoder is None:
        raise ShardsUnavailable(f"no shard of {shards} answered: {missing}")
    if encoder != living[0] and "query_vectors" not in request:
        # The shard asked to encode the query failed: another one does.
        again = await _phase(call, "prepare", {encoder: (body, True)}, retries, missing)
        prepared.update(again)
    living = [s for s in range(shards) if s in prepared]
    phases["prepare_ms"] = _ms(t)
    first = prepared[encoder]
    params = first["params"]
    vectors = next((p["query_vectors"] for p in prepared.values() if p.get("query_vectors")), None)
    encoding = next((p["query"] for p in prepared.values() if p.get("query")), None)
    stats_parts = [json.dumps(p["stats"]) for p in prepared.values() if p.get("stats") is not None]
    stats = _cellar.merge_stats(stats_parts) if stats_parts else None
    filtered = request.get("filter") is not None
    matched = sum(prepared[s]["matched"] or 0 for s in living) if filtered else None
    filter_ms = max((p.get("filter_ms", 0.0) for p in prepared.values()), default=0.0)
    if vectors is not None:
        request = {**request, "query_vectors": vectors}
    body = json.dumps(request)

    t = time.perf_counter()
    lists = await _phase(call, "candidates", {s: (body, stats, matched) for s in living}, retries, missing)
    phases["candidates_ms"] = _ms(t)

    # A shard failing MaxSim or its hits is left out and the merge made again without it.
    for _round in range(shards + 1):
        living = [s for s in living if s in lists and s not in missing]
        if not living:
            raise ShardsUnavailable(f"no shard of {shards} answered: {missing}")
        gather = _cellar.Gather(json.dumps(params), [json.dumps(lists[s]) for s in living], matched, filter_ms)
        rerank = gather.rerank()
        t = time.perf_counter()
        # The re-ranked hold the best k whenever k is at most their number: their shards name
        # them (with their text) along with their scores, and the fourth round trip is skipped.
        describe = include_text if sum(len(d) for d in rerank) >= params["k"] else None
        asked = {living[i]: (body, docs, describe) for i, docs in enumerate(rerank) if docs}
        scored = await _phase(call, "maxsim", asked, retries, missing)
        phases["maxsim_ms"] = _ms(t)
        if any(s not in scored for s in asked):
            continue
        maxsim = [scored[s]["scores"] if s in scored else [] for s in living]
        fused = json.loads(gather.fuse(maxsim))
        named: dict[tuple[int, int], dict[str, Any]] = {
            (s, doc): hit for s, answer in scored.items() for doc, hit in answer.get("hits") or []
        }
        by_shard: dict[int, list[dict[str, Any]]] = {}
        if describe is None:
            for h in fused:
                by_shard.setdefault(living[h["shard"]], []).append(h)
        if by_shard:
            t = time.perf_counter()
            more = await _phase(
                call, "hits", {s: (json.dumps(hs), include_text) for s, hs in by_shard.items()}, retries, missing
            )
            phases["hits_ms"] = _ms(t)
            if any(s not in more for s in by_shard):
                continue
            named.update({(s, doc): hit for s, pairs in more.items() for doc, hit in pairs})
        break
    else:
        raise ShardsUnavailable(f"no shard of {shards} answered: {missing}")

    hits = []
    for h in fused:
        s = living[h["shard"]]
        hit = named.get((s, h["doc"]))
        if hit is not None:  # None: deleted since its first stage
            fields = {"score": h["score"], "stage": h["stage"], "first_stage_score": h["first_stage"], "maxsim": h["maxsim"]}
            hits.append({**hit, **fields, "shard": s})
    parts = list(lists[s] for s in living)
    ms = list(scored.values())
    # The stages the shards measured (the slowest shard's); the others are 0.
    timings = {
        "encode_ms": float(first.get("encode_ms", 0.0)) if encoding else 0.0,
        "first_stage_ms": max((p["first_stage_ms"] for p in parts), default=0.0),
        "read_ms": max((m["read_ms"] for m in ms), default=0.0),
        "maxsim_ms": max((m["maxsim_ms"] for m in ms), default=0.0),
        "text_ms": phases.get("hits_ms", 0.0),  # 0 when the MaxSim phase named the hits
    }
    io = {k: sum(p["io"][k] for p in parts) + sum(m["io"][k] for m in ms) for k in ("read_calls", "pages", "bytes_read")}
    answer = json.loads(
        gather.respond(
            json.dumps(hits),  # a hit's "shard" is not a field of one index's hit: read past, added back below
            json.dumps(timings),
            json.dumps(io),
            None if encoding is None else json.dumps(encoding),
        )
    )
    for h, out in zip(hits, answer["hits"]):
        out["shard"] = h["shard"]
    answer["timings"]["total_ms"] = _ms(start)
    answer["partial"] = bool(missing)
    answer["shards"] = {
        "total": shards,
        "answered": [s for s in range(shards) if s not in missing],
        "missing": [{"shard": s, "error": why} for s, why in sorted(missing.items())],
        "phases_ms": phases,
    }
    return answer


def split_write(manifest: Manifest, request: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The operations of a write request (``{"ops": [...]}``) by owning shard, in order; a
    ``delete_where`` goes to every shard."""
    ops = request.get("ops") if isinstance(request, dict) else None
    if not isinstance(ops, list) or not ops:
        raise _errors.InvalidInputError('a write is {"ops": [...]} with at least one operation')
    parts: dict[int, list[Any]] = {}
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or len(op) != 1:
            raise _errors.InvalidInputError(f"ops[{i}]: one of add, update, delete, delete_where")
        (kind, value), = op.items()
        if kind in ("add", "update"):
            if not isinstance(value, dict) or not isinstance(value.get("id"), (str, int)):
                raise _errors.InvalidInputError(f"ops[{i}].{kind}: a document with an id")
            owners = [manifest.shard_of(str(value["id"]))]
        elif kind == "delete":
            if not isinstance(value, (str, int)):
                raise _errors.InvalidInputError(f"ops[{i}].delete: a document id")
            owners = [manifest.shard_of(str(value))]
        elif kind == "delete_where":
            owners = list(range(manifest.count))
        else:
            raise _errors.InvalidInputError(f"ops[{i}]: unknown operation {kind!r}: one of add, update, delete, delete_where")
        for s in owners:
            parts.setdefault(s, []).append(op)
    return {s: {"ops": o} for s, o in sorted(parts.items())}


async def write(call: Call, manifest: Manifest, request: dict[str, Any]) -> dict[str, Any]:
    """Sends each shard the operations on its ids; a shard's part is all or nothing and durable
    once acknowledged. Returns the summed report and each shard's, or raises the first user
    error; a shard that fails is named in ``failed`` (its part not applied)."""
    parts = split_write(manifest, request)
    failed: dict[int, str] = {}
    reports = await _phase(call, "write", {s: (json.dumps(p),) for s, p in parts.items()}, 0, failed)
    total = {k: sum(r[k] for r in reports.values()) for k in ("added", "updated", "deleted")}
    return {
        **total,
        "shards": {str(s): r for s, r in reports.items()},
        "failed": [{"shard": s, "error": why} for s, why in sorted(failed.items())],
        "partial": bool(failed),
    }


class LocalCluster:
    """A sharded collection's shards opened in this process, searched in parallel threads: the
    router's logic without Ray (tests, one machine, and the baseline the Ray deployment is
    measured against)."""

    def __init__(self, path: str | Path, *, reader: str = "mmap", model: str | Path | None = None):
        self.path = Path(path)
        self.manifest = Manifest.load(self.path)
        self.shards = [_cellar.Index.open(p, reader=cast("_Reader", reader), model=model) for p in self.manifest.paths(self.path)]
        self._pool = ThreadPoolExecutor(max_workers=max(4, 2 * len(self.shards)))

    async def _call(self, shard: int, method: str, *args: Any) -> str:
        index = self.shards[shard]
        fn = index._write_ops if method == "write" else getattr(index, f"_shard_{method}")
        result = await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        return result if isinstance(result, str) else json.dumps(result)

    def search(self, query: str, **params: Any) -> dict[str, Any]:
        """Searches every shard as :meth:`cellar.Index.search` searches one index (the same
        keyword arguments); returns the response dict."""
        request = {"query": query, **{k: v for k, v in params.items() if v is not None}}
        return asyncio.run(search(self._call, len(self.shards), request))

    def write(self, request: dict[str, Any]) -> dict[str, Any]:
        """Applies a write (``{"ops": [...]}``, as ``POST /v1/docs`` takes it), each operation
        on the shard that owns its id; returns the merged report."""
        return asyncio.run(write(self._call, self.manifest, request))

    def close(self) -> None:
        """Closes every shard and the thread pool; the cluster cannot be used after."""
        self._pool.shutdown(wait=True)
        self.shards = []

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
