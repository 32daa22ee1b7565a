"""The token-level first stage from Python: built with the index (`tokens=True`), the dense
mode's candidates without text; written documents are found through it at once, deleted ones
never come back, filters apply to it; sharded builds give every shard one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_embeddings import DIM, axis, documents

import cellar
from cellar import cluster


def query(i: int) -> np.ndarray:
    return np.array([axis(i)], dtype=np.float32)


@pytest.fixture()
def index(tmp_path: Path) -> cellar.Index:
    ids, vectors, texts = documents(48, seed=7)
    meta = [{"n": i} for i in range(48)]
    return cellar.Index.from_embeddings(tmp_path / "idx", ids, vectors, texts=texts, metadata=meta, tokens=True)


def test_the_dense_mode_takes_its_candidates_from_the_token_stage(index: cellar.Index) -> None:
    assert (index.path / "tokens" / "tokens.json").is_file()
    result = index.search(query_vectors=query(5), k=3)
    answer = result.to_dict()
    assert answer["tokens"]["postings"] > 0 and result.params["tokens"] is not None, answer
    assert result.ids[0] in {"d5", "d21", "d37"}
    pooled = index.search(query_vectors=query(5), k=3, dense_stage="pooled")
    assert pooled.params.get("tokens") is None and pooled.to_dict().get("tokens") is None


def test_written_deleted_and_filtered_documents_through_the_stage(index: cellar.Index) -> None:
    new = np.array([axis(9), axis(9)], dtype=np.float32)
    index.add(["w1"], [new], texts=["written after the build"], metadata=[{"n": 100}])
    found = index.search(query_vectors=query(9), k=5)
    assert found.to_dict()["tokens"]["postings"] > 0
    assert "w1" in found.ids, "a written document is searchable through the stage at once"
    index.delete(["w1", "d9"])
    gone = index.search(query_vectors=query(9), k=48)
    assert not {"w1", "d9"} & set(gone.ids), "deleted documents never come back"
    # filter_exact_max 0: the filter runs inside the stage instead of ranking its matches exactly.
    only = index.search(query_vectors=query(9), k=10, filter={"n": [25, 41, 100]}, filter_exact_max=0)
    assert only.to_dict()["tokens"]["postings"] > 0
    assert set(only.ids) <= {"d25", "d41"} and only.ids, only.ids


def test_every_shard_of_a_sharded_build_has_a_token_stage(tmp_path: Path) -> None:
    ids, vectors, texts = documents(40, seed=8)
    one = cellar.Index.from_embeddings(tmp_path / "one", ids, vectors, texts=texts, tokens=True)
    manifest = cluster.from_embeddings(tmp_path / "sharded", ids, vectors, texts=texts, shards=2, tokens=True)
    for path in manifest.paths(tmp_path / "sharded"):
        assert (path / "tokens" / "tokens.json").is_file(), path
    q = {"tokens": query(3).tolist()}
    with cluster.LocalCluster(tmp_path / "sharded") as shards:
        answer = shards.search("", mode="dense", k=3, query_vectors=q)
    assert [h["id"] for h in answer["hits"]][0] == one.search(query_vectors=query(3), k=3).ids[0]


def test_a_retrain_takes_the_written_documents_into_the_stage(index: cellar.Index) -> None:
    new = np.array([axis(11), axis(11)], dtype=np.float32)
    index.add(["w2"], [new], texts=["written before the retrain"])
    index.delete(["d11"])
    config = index.retrain_tokens()
    assert config["docs"] == 49, "it covers every id written"
    found = index.search(query_vectors=query(11), k=5)
    assert "w2" in found.ids and "d11" not in found.ids
    reopened = cellar.Index.open(index.path)
    assert "w2" in reopened.search(query_vectors=query(11), k=5).ids
    empty = cellar.Index.create_empty(index.path.parent / "empty", dim=DIM)
    with pytest.raises(cellar.InvalidInputError, match="no documents"):
        empty.retrain_tokens()
    empty.add(["e1", "e2"], [new, np.array([axis(3)], dtype=np.float32)])
    assert empty.retrain_tokens()["docs"] == 2, "its first token stage, over the written documents"
    assert empty.search(query_vectors=query(11), k=1).ids == ["e1"]
