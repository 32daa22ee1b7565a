"""`cellar.cluster` on Ray (issue 19): shards built as Ray tasks, served on Ray Serve behind a
router with `cellar serve`'s HTTP API, and a replica killed under load. A local Ray of several
processes on loopback; every wait is bounded."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_cluster import corpus, queries

import cellar
from cellar import cluster

ray = pytest.importorskip("ray", reason="the ray extra (pip install 'ray[serve]') is part of `make setup`")
from ray import serve  # noqa: E402

from cellar.cluster.serve import app  # noqa: E402

#: Ray Serve's own pydantic models warn about their use of pydantic; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: Longest wait for Ray Serve to replace a killed replica.
RESTART_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_serve():
    # Nothing leaves the machine: Ray's usage report is off.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ids, vectors, texts, pooled = corpus(300)
    out = tmp_path_factory.mktemp("ray") / "sharded"
    cluster.from_embeddings(out, ids, vectors, texts=texts, pooled=pooled, shards=3, codec="f16", ivf_cluster_size=16)
    return out


def call(base: str, verb: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=verb, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def call_text(base: str, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return r.status, r.read().decode()


def deploy(collection: Path, **options) -> None:
    options = {"shard_cpus": 0.5, "router_cpus": 0.25, "reader": "mmap", "shard_timeout_s": 3.0, **options}
    serve.run(app(collection, **options), name="cellar", route_prefix="/")


def replicas_of(shard: str) -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if f"#{shard}#" in a["name"]]


def test_the_router_answers_as_the_in_process_shards_do(ray_serve: str, sharded: Path) -> None:
    deploy(sharded)
    status, health = call(ray_serve, "GET", "/healthz")
    assert status == 200 and health["shards"] == 3
    with cluster.LocalCluster(sharded) as local:
        for mode in ("bm25", "rerank", "hybrid", "dense", "dense-exact"):
            for text, vectors in queries(4):
                body = {"query": text, "mode": mode, "k": 8, "query_vectors": vectors}
                if mode == "bm25":
                    body.pop("query_vectors")
                status, served = call(ray_serve, "POST", "/v1/search", body)
                assert status == 200, served
                expected = local.search(**body)
                assert [(h["id"], h["score"], h["shard"]) for h in served["hits"]] == [
                    (h["id"], h["score"], h["shard"]) for h in expected["hits"]
                ]
                assert served["partial"] is False and served["shards"]["answered"] == [0, 1, 2]
                parsed = cellar.SearchResult._from_json(json.dumps(served))
                assert parsed.ids == [h["id"] for h in served["hits"]]
    status, error = call(ray_serve, "POST", "/v1/search", {"query": "w1", "k": 0})
    assert status == 400 and error["code"] == "invalid_input" and "k must be" in error["message"]
    status, error = call(ray_serve, "POST", "/v1/search", {"query": "w1", "mode": "sideways"})
    assert status == 400 and "mode" in error["message"]
    status, error = call(ray_serve, "GET", "/v1/nowhere")
    assert status == 404 and error["code"] == "not_found"
    text, vectors = queries(1)[0]
    status, batch = call(ray_serve, "POST", "/v1/search/batch", {"queries": [
        {"query": text, "mode": "rerank", "k": 4, "query_vectors": vectors}, {"query": "w1", "k": 0}]})
    assert status == 200 and len(batch["results"]) == 2
    with cluster.LocalCluster(sharded) as local:
        expected = local.search(text, mode="rerank", k=4, query_vectors=vectors)
    assert [h["id"] for h in batch["results"][0]["hits"]] == [h["id"] for h in expected["hits"]]
    assert batch["results"][1]["error"]["code"] == "invalid_input"
    status, error = call(ray_serve, "POST", "/v1/search/batch", {"queries": []})
    assert status == 400 and "1 to 64" in error["message"]


def test_a_killed_replica_is_restarted_answers_name_the_missing_shard_and_acknowledged_writes_survive(
    ray_serve: str, sharded: Path, tmp_path: Path
) -> None:
    import shutil

    collection = tmp_path / "writable"
    shutil.copytree(sharded, collection)
    deploy(collection)
    doc = {"id": "written-1", "text": "w5 w6 acknowledged", "vectors": {"tokens": queries(1)[0][1]["tokens"]}}
    status, report = call(ray_serve, "POST", "/v1/docs", {"ops": [{"add": doc}]})
    assert status == 200 and report["added"] == 1 and report["partial"] is False, report
    owner = cluster.Manifest.load(collection).shard_of("written-1")
    name = cluster.shard_name(owner)
    (killed,) = replicas_of(name)
    ray.kill(ray.get_actor(killed, namespace="serve"), no_restart=True)

    text, vectors = queries(1)[0]
    partial = complete_after = 0
    deadline = time.monotonic() + RESTART_S
    for _ in range(500):
        status, served = call(ray_serve, "POST", "/v1/search", {"query": text, "mode": "rerank", "k": 5, "query_vectors": vectors})
        assert status == 200, served
        if served["partial"]:
            # Never a silently smaller answer: the missing shard is the killed one, named.
            assert [m["shard"] for m in served["shards"]["missing"]] == [owner], served["shards"]
            assert {h["shard"] for h in served["hits"]} <= {0, 1, 2} - {owner}
            partial += 1
        else:
            assert served["shards"]["answered"] == [0, 1, 2]
            if replicas_of(name) and replicas_of(name) != [killed]:
                complete_after += 1
                if complete_after >= 3:
                    break
        assert time.monotonic() < deadline, f"no replica of {name} within {RESTART_S} s"
        time.sleep(0.2)
    assert complete_after >= 3
    # The acknowledged write is in the restarted replica's index (read back from its log).
    status, found = call(ray_serve, "GET", "/v1/docs/written-1")
    assert status == 200 and found["id"] == "written-1" and "acknowledged" in found["text"], found
    status, served = call(ray_serve, "POST", "/v1/search", {"query": "acknowledged", "mode": "bm25", "k": 3})
    assert served["hits"][0]["id"] == "written-1"
    status, report = call(ray_serve, "DELETE", "/v1/docs/written-1")
    assert status == 200 and report["deleted"] == 1
    status, gone = call(ray_serve, "GET", "/v1/docs/written-1")
    assert status == 404 and gone["code"] == "not_found"
    status, gone = call(ray_serve, "DELETE", "/v1/docs/written-1")
    assert status == 404, gone
    print(f"answers while {name} was down: {partial} partial")
    status, metrics = call_text(ray_serve, "/metrics")
    assert status == 200
    counts = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line and not line.startswith("#")}
    assert counts["cellar_cluster_partial_total"] == partial
    assert counts.get(f'cellar_cluster_shard_missing_total{{shard="{owner}"}}', 0) == partial
    assert counts['cellar_cluster_requests_total{endpoint="/v1/search",status="200"}'] >= 4
    assert counts['cellar_cluster_phase_seconds_count{phase="candidates"}'] >= 4


def test_with_two_replicas_a_killed_one_costs_no_answer(ray_serve: str, sharded: Path) -> None:
    deploy(sharded, replicas=2, shard_cpus=0.25)
    status, refused = call(ray_serve, "POST", "/v1/docs", {"ops": [{"delete": "doc-1"}]})
    assert status == 501 and "one replica per shard" in refused["message"]
    victims = replicas_of("shard-001")
    assert len(victims) == 2
    ray.kill(ray.get_actor(victims[0], namespace="serve"), no_restart=True)
    text, vectors = queries(1)[0]
    for _ in range(20):
        status, served = call(ray_serve, "POST", "/v1/search", {"query": text, "mode": "rerank", "k": 5, "query_vectors": vectors})
        assert status == 200 and served["partial"] is False, served["shards"]


def test_shards_from_embeddings_build_as_ray_tasks_as_they_do_here(ray_serve: str, sharded: Path, tmp_path: Path) -> None:
    ids, vectors, texts, pooled = corpus(300)
    cluster.from_embeddings(tmp_path / "on-ray", ids, vectors, texts=texts, pooled=pooled, shards=3, ray=True,
                            task_cpus=0.5, codec="f16", ivf_cluster_size=16)
    text, q = queries(1)[0]
    with cluster.LocalCluster(tmp_path / "on-ray") as on_ray, cluster.LocalCluster(sharded) as here:
        assert [len(s) for s in on_ray.shards] == [len(s) for s in here.shards]
        a = on_ray.search(text, mode="hybrid", k=10, query_vectors=q, hybrid_candidates=0)
        b = here.search(text, mode="hybrid", k=10, query_vectors=q, hybrid_candidates=0)
        assert [(h["id"], h["score"]) for h in a["hits"]] == [(h["id"], h["score"]) for h in b["hits"]]


def test_shards_build_as_ray_tasks(ray_serve: str, collection: Path, tmp_path: Path) -> None:
    from conftest import require_model

    require_model()
    manifest = cluster.build(collection, tmp_path / "built", shards=2, ray=True, task_cpus=0.5, codec="f16")
    assert manifest.count == 2 and all(s.docs > 0 for s in manifest.shards)
    with cluster.LocalCluster(tmp_path / "built") as local:
        answer = local.search("harp strings", mode="hybrid", k=3)
        assert answer["hits"] and answer["partial"] is False
        assert len(local.shards[0]) + len(local.shards[1]) == sum(s.docs for s in manifest.shards)
    with pytest.raises(cellar.InvalidInputError, match="already holds"):
        cluster.build(collection, tmp_path / "built", shards=2)
