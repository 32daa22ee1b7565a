"""`Index.search_batch` and `cellar.Client` against a real `cellar serve` on loopback."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_embeddings import DIM, by_vector, documents

import cellar

ROOT = Path(__file__).resolve().parents[2]


def cellar_binary() -> Path:
    """The `cellar` binary: $CELLAR_BIN, else the newest of target/{debug,release}/cellar."""
    if os.environ.get("CELLAR_BIN"):
        return Path(os.environ["CELLAR_BIN"])
    built = [p for p in (ROOT / "target/debug/cellar", ROOT / "target/release/cellar") if p.is_file()]
    if not built:
        pytest.fail("no cellar binary: run `cargo build -p cellar-cli` (or set CELLAR_BIN)", pytrace=False)
    return max(built, key=lambda p: p.stat().st_mtime)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[cellar.Index, cellar.Client]]:
    ids, vectors, texts = documents(60, seed=5)
    out = tmp_path_factory.mktemp("served") / "idx"
    index = cellar.Index.from_embeddings(out, ids, vectors, texts=texts)
    server = subprocess.Popen(
        [str(cellar_binary()), "serve", "--index", str(out), "--bind", "127.0.0.1:0", "--workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = None
        deadline = time.monotonic() + 60
        assert server.stdout is not None
        while url is None and time.monotonic() < deadline:
            line = server.stdout.readline()
            if not line:
                break
            found = re.search(r"listening on (http://\S+)", line)
            url = found.group(1) if found else None
        assert url, f"cellar serve did not start (exit {server.poll()})"
        yield index, cellar.Client(url)
    finally:
        server.terminate()
        server.wait(timeout=30)


def query(i: int) -> dict:
    rng = np.random.default_rng(i)
    tokens = rng.uniform(-1, 1, size=(3, DIM)).astype(np.float32)
    tokens[0, i % DIM] = 4.0
    return {"tokens": tokens, "pooled": tokens.mean(axis=0)}


def same(a: cellar.SearchResult, b: cellar.SearchResult) -> None:
    assert a.ids == b.ids
    assert a.scores == pytest.approx(b.scores, abs=1e-6)
    assert a.texts == b.texts


def test_the_client_answers_as_the_index_does(served: tuple[cellar.Index, cellar.Client]) -> None:
    index, client = served
    for mode in ["dense", "dense-exact", "ivf"]:
        same(client.search(mode=mode, k=5, query_vectors=query(3)), index.search("", mode=mode, k=5, query_vectors=query(3)))
    lists = {"tokens": query(4)["tokens"].tolist(), "pooled": query(4)["pooled"].tolist()}
    same(client.search(mode="dense", k=5, query_vectors=lists), index.search("", mode="dense", k=5, query_vectors=lists))
    same(client.search("topic7", mode="bm25", k=3), index.search("topic7", mode="bm25", k=3))
    hits = client.search(mode="dense", k=2, query_vectors=by_vector(5))
    assert isinstance(hits, cellar.SearchResult) and hits.params["mode"] == "dense" and len(hits) == 2


def test_batches_match_single_searches_locally_and_over_http(served: tuple[cellar.Index, cellar.Client]) -> None:
    index, client = served
    batch = [{"query_vectors": query(i)} for i in range(7)] + [{"query": "topic3", "mode": "bm25"}]
    local = index.search_batch(batch, mode="dense", k=4)
    remote = client.search_batch(batch, mode="dense", k=4)
    assert len(local) == len(remote) == 8
    for i in range(7):
        single = index.search("", mode="dense", k=4, query_vectors=query(i))
        same(local[i], single)
        same(remote[i], single)
    same(local[7], index.search("topic3", mode="bm25", k=4))
    same(remote[7], local[7])
    bm25 = index.search_batch(["topic3", {"query": "topic5", "k": 2}], mode="bm25", k=3)
    assert [len(r) for r in bm25] == [3, 2]
    assert all("topic5" in t for t in bm25[1].texts)
    assert index.search_batch([]) == []


def test_errors_keep_their_type_and_code_over_http(served: tuple[cellar.Index, cellar.Client]) -> None:
    index, client = served
    with pytest.raises(cellar.InvalidInputError, match="no model") as remote:
        client.search("needs encoding", mode="dense")
    assert remote.value.code == "invalid_input"
    with pytest.raises(cellar.InvalidInputError) as wrong:
        client.search(mode="dense", query_vectors={"tokens": [[1.0, 2.0]], "pooled": [1.0, 2.0]})
    assert wrong.value.code in {"wrong_dimension", "invalid_input"}
    with pytest.raises(cellar.InvalidInputError, match="k"):
        client.search(mode="dense", k=0, query_vectors=query(1))
    with pytest.raises(cellar.InvalidInputError, match=r"queries\[1\]"):
        client.search_batch([{"query_vectors": query(1)}, "needs encoding"], mode="dense")
    with pytest.raises(cellar.InvalidInputError, match=r"queries\[1\]"):
        index.search_batch([{"query_vectors": query(1)}, "needs encoding"], mode="dense")
    with pytest.raises(TypeError, match=r"queries\[0\]"):
        index.search_batch([3])
    with pytest.raises(cellar.InvalidInputError, match="http"):
        cellar.Client("127.0.0.1:1")
