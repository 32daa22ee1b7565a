"""A sharded collection served on Ray Serve: one deployment per shard (each replica opens its
shard, by default with the direct reader, so the page cache holds no vectors and a replica's
memory is its index's small structures) behind a router deployment that answers ``cellar
serve``'s HTTP API — ``POST /v1/search``, ``POST /v1/docs``, ``GET /v1/docs/{id}``,
``GET /healthz`` — with the same JSON shapes, plus ``partial`` and ``shards`` on a search.

Replicas per shard set the query capacity; Ray restarts a replica that dies. A shard call that
fails is retried (Ray sends it to another replica when there is one) and, past
``shard_timeout_s`` or its retries, the shard is named missing and the answer says
``partial: true``. Writes go to the owning shard's replica and are durable once acknowledged
(the index's write-ahead log); they need one replica per shard, since each replica holds its
own view of the index.

Start a local demo (one machine, Ray started in-process)::

    python -m cellar.cluster.serve --collection /data/scifact.sharded --port 8000

On a cluster, ``ray start --head`` on one machine, ``ray start --address=HEAD:6379`` on the
others, then ``serve run`` a config naming :func:`app_builder` (see the README).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse

from .. import _cellar, _errors
from ._manifest import Manifest
from ._search import USER_ERRORS, ShardsUnavailable, search, write

if TYPE_CHECKING:
    from .._cellar import _Reader

#: HTTP status of each error class, as ``cellar serve`` answers them.
STATUS = {
    "InvalidInputError": 400,
    "NotFoundError": 404,
    "LockedError": 409,
    "IncompatibleError": 409,
    "UnsupportedError": 501,
    "ModelError": 503,
    "ShardsUnavailable": 503,
}


def _error(e: BaseException) -> JSONResponse:
    name = type(e).__name__
    code = getattr(e, "code", "internal")
    return JSONResponse({"code": code, "message": str(e), "details": {}}, status_code=STATUS.get(name, 500))


@serve.deployment(ray_actor_options={"num_cpus": 1})
class Shard:
    """One shard of a sharded collection; each replica opens the shard's folder."""

    def __init__(self, path: str, reader: str = "direct", model: str | None = None):
        self.path = path
        self.index = _cellar.Index.open(path, reader=cast("_Reader", reader), model=model)

    def call(self, method: str, *args: Any) -> dict[str, Any]:
        """Runs ``Index._shard_<method>`` (``write``: ``_write_ops``; ``get``: ``get``). A
        Cellar error comes back as data (class, code, message), not as a failure of the
        replica."""
        out: Any
        try:
            if method == "write":
                out = self.index._write_ops(*args)
            elif method == "get":
                out = self.index.get(*args)
            else:
                out = getattr(self.index, f"_shard_{method}")(*args)
        except _errors.CellarError as e:
            return {"error": {"class": type(e).__name__, "code": e.code, "message": str(e)}}
        return {"ok": out if isinstance(out, str) else json.dumps(out)}

    def check_health(self) -> None:
        """Ray Serve's health check: the index answers (a replica that cannot is restarted)."""
        self.index.live_stats()


class RouterMetrics:
    """The router's counters, rendered in Prometheus' text format (each router replica its own;
    the shards' work is in the phase times)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = {}
        self.partial = 0
        self.missing: dict[int, int] = {}
        self.phase_sum: dict[str, float] = {}
        self.phase_count: dict[str, int] = {}
        self.search_sum = 0.0
        self.search_count = 0

    def request(self, endpoint: str, status: int) -> None:
        self.requests[(endpoint, status)] = self.requests.get((endpoint, status), 0) + 1

    def search(self, answer: dict[str, Any]) -> None:
        self.search_count += 1
        self.search_sum += answer["timings"]["total_ms"] / 1e3
        self.partial += bool(answer.get("partial"))
        for m in answer["shards"]["missing"]:
            self.missing[m["shard"]] = self.missing.get(m["shard"], 0) + 1
        for phase, ms in answer["shards"]["phases_ms"].items():
            name = phase.removesuffix("_ms")
            self.phase_sum[name] = self.phase_sum.get(name, 0.0) + ms / 1e3
            self.phase_count[name] = self.phase_count.get(name, 0) + 1

    def render(self) -> str:
        lines = ["# HELP cellar_cluster_requests_total HTTP requests by endpoint and status",
                 "# TYPE cellar_cluster_requests_total counter"]
        lines += [f'cellar_cluster_requests_total{{endpoint="{e}",status="{s}"}} {n}' for (e, s), n in sorted(self.requests.items())]
        lines += ["# HELP cellar_cluster_searches_total Searches answered", "# TYPE cellar_cluster_searches_total counter",
                  f"cellar_cluster_searches_total {self.search_count}",
                  "# HELP cellar_cluster_search_seconds_sum Router time of the searches answered",
                  "# TYPE cellar_cluster_search_seconds_sum counter", f"cellar_cluster_search_seconds_sum {self.search_sum:.6f}",
                  "# HELP cellar_cluster_partial_total Searches answered without every shard",
                  "# TYPE cellar_cluster_partial_total counter", f"cellar_cluster_partial_total {self.partial}",
                  "# HELP cellar_cluster_shard_missing_total Searches a shard was left out of",
                  "# TYPE cellar_cluster_shard_missing_total counter"]
        lines += [f'cellar_cluster_shard_missing_total{{shard="{s}"}} {n}' for s, n in sorted(self.missing.items())]
        lines += ["# HELP cellar_cluster_phase_seconds Time in each phase of a sharded search (sum and count)",
                  "# TYPE cellar_cluster_phase_seconds summary"]
        for phase in sorted(self.phase_sum):
            lines.append(f'cellar_cluster_phase_seconds_sum{{phase="{phase}"}} {self.phase_sum[phase]:.6f}')
            lines.append(f'cellar_cluster_phase_seconds_count{{phase="{phase}"}} {self.phase_count[phase]}')
        return "\n".join(lines) + "\n"


def _raise(error: dict[str, str]) -> None:
    cls = getattr(_errors, error["class"], _errors.CellarError)
    raise cls(error["message"])


#: The router's endpoints (others count as "other" in its metrics).
ENDPOINTS = ("/healthz", "/metrics", "/v1/search", "/v1/search/batch", "/v1/docs")


@serve.deployment(ray_actor_options={"num_cpus": 0.5})
class Router:
    """The collection's HTTP front: scatters each search over the shards and gathers the
    answer one index would give; routes each write to the shard that owns its ids."""

    def __init__(self, collection: str, *shards: DeploymentHandle, shard_timeout_s: float = 10.0, writable: bool = True):
        self.manifest = Manifest.load(collection)
        if len(shards) != self.manifest.count:
            raise ValueError(f"{collection}: {self.manifest.count} shards in cluster.json, {len(shards)} deployments")
        self.shards = list(shards)
        self.timeout = shard_timeout_s
        self.writable = writable
        self.metrics = RouterMetrics()

    async def _call(self, shard: int, method: str, *args: Any) -> str:
        answer = await asyncio.wait_for(self.shards[shard].call.remote(method, *args), self.timeout)
        if "error" in answer:
            _raise(answer["error"])
        return answer["ok"]

    async def __call__(self, request: Request) -> JSONResponse | PlainTextResponse:
        path, verb = request.url.path.rstrip("/"), request.method
        response = await self._answer(path, verb, request)
        if path.startswith("/v1/docs/"):
            endpoint = "/v1/docs/{id}"
        else:
            endpoint = path if path in ENDPOINTS else "other"
        self.metrics.request(endpoint, response.status_code)
        return response

    async def _answer(self, path: str, verb: str, request: Request) -> JSONResponse | PlainTextResponse:
        try:
            if path == "/healthz" and verb == "GET":
                return JSONResponse({"status": "ok", "shards": self.manifest.count, "partition": self.manifest.partition})
            if path == "/metrics" and verb == "GET":
                return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")
            if path == "/v1/search" and verb == "POST":
                answer = await search(self._call, self.manifest.count, await self._body(request))
                self.metrics.search(answer)
                return JSONResponse(answer)
            if path == "/v1/search/batch" and verb == "POST":
                return JSONResponse(await self._batch(await self._body(request)))
            if path == "/v1/docs" and verb == "POST":
                return await self._write(await self._body(request))
            if path.startswith("/v1/docs/") and verb == "DELETE":
                return await self._write({"ops": [{"delete": path[len("/v1/docs/"):]}]})
            if path.startswith("/v1/docs/") and verb == "GET":
                doc_id = path[len("/v1/docs/"):]
                found = json.loads(await self._call(self.manifest.shard_of(doc_id), "get", doc_id))
                if found is None:
                    raise _errors.NotFoundError(f"no document {doc_id!r}")
                return JSONResponse(found)
            return JSONResponse(
                {"code": "not_found", "message": f"no endpoint {verb} {path}", "details": {}}, status_code=404
            )
        except (*USER_ERRORS, _errors.CellarError, ShardsUnavailable) as e:
            return _error(e)
        except asyncio.TimeoutError:
            return _error(ShardsUnavailable(f"a shard did not answer within {self.timeout} s"))

    async def _batch(self, body: dict[str, Any]) -> dict[str, Any]:
        """Each query of a batch searched at once, each answering or failing on its own (an
        error is ``{"error": {code, message, details}}`` in its place), as ``cellar serve``."""
        queries = body.get("queries")
        if set(body) != {"queries"} or not isinstance(queries, list):
            raise _errors.InvalidInputError('a batch is {"queries": [...]}')
        if not 1 <= len(queries) <= _cellar.MAX_BATCH:
            raise _errors.InvalidInputError(f"a batch holds 1 to {_cellar.MAX_BATCH} queries, got {len(queries)}")

        async def one(query: Any) -> dict[str, Any]:
            try:
                if not isinstance(query, dict):
                    raise _errors.InvalidInputError("each query of a batch is a search request object")
                return await search(self._call, self.manifest.count, query)
            except (_errors.CellarError, asyncio.TimeoutError) as e:
                if isinstance(e, asyncio.TimeoutError):
                    e = ShardsUnavailable(f"a shard did not answer within {self.timeout} s")
                return {"error": {"code": getattr(e, "code", "internal"), "message": str(e), "details": {}}}

        return {"results": list(await asyncio.gather(*(one(q) for q in queries)))}

    async def _write(self, body: dict[str, Any]) -> JSONResponse:
        if not self.writable:
            raise _errors.UnsupportedError(
                "writes need one replica per shard (each replica holds its own view of its index); "
                "this collection is served with more"
            )
        report = await write(self._call, self.manifest, body)
        return JSONResponse(report, status_code=503 if report["partial"] else 200)

    async def _body(self, request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            raise _errors.InvalidInputError(f"request body: not JSON: {e}") from None
        if not isinstance(body, dict):
            raise _errors.InvalidInputError("request body: a JSON object")
        return body


def app(
    collection: str | Path,
    *,
    replicas: int = 1,
    reader: str = "direct",
    model: str | None = None,
    shard_cpus: float = 1.0,
    router_cpus: float = 0.5,
    shard_memory: int | None = None,
    shard_timeout_s: float = 10.0,
) -> serve.Application:
    """The Serve application of the sharded collection in ``collection``: ``replicas``
    replicas of each shard (``shard_cpus`` CPUs and, when given, ``shard_memory`` bytes
    reserved for each) behind one router."""
    collection = Path(collection).resolve()
    manifest = Manifest.load(collection)
    actor: dict[str, Any] = {"num_cpus": shard_cpus}
    if shard_memory:
        actor["memory"] = shard_memory
    shards = [
        Shard.options(  # type: ignore[attr-defined]  # added by @serve.deployment
            name=entry.name, num_replicas=replicas, ray_actor_options=actor).bind(str(path), reader, model)
        for entry, path in zip(manifest.shards, manifest.paths(collection))
    ]
    return Router.options(  # type: ignore[attr-defined]  # added by @serve.deployment
        ray_actor_options={"num_cpus": router_cpus}).bind(
        str(collection), *shards, shard_timeout_s=shard_timeout_s, writable=replicas == 1
    )


def app_builder(args: dict[str, Any]) -> serve.Application:
    """``serve run``'s entry point: ``args`` are :func:`app`'s keyword arguments, with
    ``collection``."""
    args = dict(args)
    return app(args.pop("collection"), **args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cellar.cluster.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--collection", required=True, help="a sharded collection's folder (cluster.json)")
    parser.add_argument("--replicas", type=int, default=1, help="replicas per shard (default 1)")
    parser.add_argument("--reader", default="direct", choices=["direct", "mmap", "ram"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--shard-cpus", type=float, default=None,
        help="CPUs reserved per shard replica (default: this machine's cores shared by all replicas)",
    )
    args = parser.parse_args(argv)
    try:
        manifest = Manifest.load(args.collection)
    except _errors.CellarError as e:
        print(f"cellar: error: {e}", file=sys.stderr)
        return 2
    if args.replicas < 1:
        print("cellar: error: --replicas must be at least 1", file=sys.stderr)
        return 2
    import os

    import ray

    # Nothing leaves the machine unless the user asks: Ray's usage report is off by default.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init()
    cores = float(os.cpu_count() or 1)
    if args.shard_cpus is None:
        args.shard_cpus = max(0.05, (cores - 0.5) / (manifest.count * args.replicas))
    serve.start(http_options={"host": args.host, "port": args.port})
    serve.run(
        app(args.collection, replicas=args.replicas, reader=args.reader, shard_cpus=args.shard_cpus),
        name="cellar",
        route_prefix="/",
        blocking=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
