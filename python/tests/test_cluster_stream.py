"""`cellar.cluster.StreamCluster` (issue 19.1): groups on their home shard, a group past
`split_docs` writes spread over the next shards, each group searched exactly over its shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cellar
from cellar import cluster

DIM = 8


def vec(rng: np.random.Generator, n: int) -> list[list[float]]:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).tolist()


def test_a_large_group_spreads_and_searches_as_one_stream(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    docs = [("big", f"b{i}", vec(rng, 3)) for i in range(40)] + [("small", f"s{i}", vec(rng, 2)) for i in range(4)]
    one = cellar.Stream.open(tmp_path / "one", dim=DIM)
    with cluster.StreamCluster(tmp_path / "sharded", shards=3, dim=DIM, split_docs=10) as sharded:
        for group, doc_id, tokens in docs:
            one.put(group, doc_id, f"text of {doc_id}", tokens=tokens)
            sharded.put(group, doc_id, f"text of {doc_id}", tokens=tokens)
        assert sharded.group_shards("small") == [cluster.shard_of("small", 3)]
        assert len(sharded.group_shards("big")) == 3
        holding = [s for s, stream in enumerate(sharded.shards) if any(_holds(stream, "big", f"b{i}") for i in range(40))]
        assert holding == [0, 1, 2], "the large group's later documents spread over every shard"
        assert sum(_holds(s, "big", f"b{i}") for s in sharded.shards for i in range(40)) == 40, "each document once"
        for _ in range(5):
            q = vec(rng, 2)
            for group in ("big", "small"):
                expected = [(h["id"], round(h["score"], 5)) for h in one.search(group, query_tokens=q, k=7)]
                got = [(h["id"], round(h["score"], 5)) for h in sharded.search(group, query_tokens=q, k=7)]
                assert got == expected
        # b0 was written before the group widened: its update may land on another shard; the old
        # version goes, one copy stays.
        for i in range(10):
            sharded.put("big", f"b{i}", "rewritten", tokens=vec(rng, 3))
        assert sum(_holds(s, "big", f"b{i}") for s in sharded.shards for i in range(40)) == 40
        assert sharded.get("big", "b3")["text"] == "rewritten"
        sharded.delete("big", "b3")
        with pytest.raises(cellar.NotFoundError):
            sharded.get("big", "b3")
        with pytest.raises(cellar.NotFoundError):
            sharded.delete("big", "b3")
        with pytest.raises(cellar.NotFoundError):
            sharded.search("nobody", query_tokens=vec(rng, 1))
    with cluster.StreamCluster(tmp_path / "sharded") as reopened:
        assert len(reopened.group_shards("big")) == 3, "the widened group is in streams.json"
        assert reopened.get("big", "b5")["text"] == "rewritten"
    with pytest.raises(cellar.InvalidInputError, match="holds 3 shards"):
        cluster.StreamCluster(tmp_path / "sharded", shards=4)
    with pytest.raises(cellar.InvalidInputError, match="shards"):
        cluster.StreamCluster(tmp_path / "new")


def _holds(stream: cellar.Stream, group: str, doc_id: str) -> bool:
    try:
        return stream.get(group, doc_id) is not None
    except cellar.NotFoundError:
        return False
