"""The one shape of each thing across the Python API: a search needs no text when it has vectors,
query vectors may be a bare array whose pooled vector defaults to their normalised mean, writes
take the columns of `from_embeddings`, and one filter grammar (with its equality shorthand)
serves searches, deletes and streams."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_embeddings import DIM, axis, documents

import cellar


@pytest.fixture()
def index(tmp_path: Path) -> cellar.Index:
    ids, vectors, texts = documents(40, seed=3)
    colors = [{"color": "red" if i % 2 else "blue", "n": i} for i in range(40)]
    return cellar.Index.from_embeddings(tmp_path / "idx", ids, vectors, texts=texts, metadata=colors, codec="f16")


def test_a_vector_only_search_takes_no_text_and_a_bare_array(index: cellar.Index) -> None:
    tokens = np.array([axis(5)], dtype=np.float32)
    explicit = index.search("", mode="dense", k=5, query_vectors={"tokens": tokens, "pooled": axis(5)})
    bare = index.search(query_vectors=tokens, k=5)
    assert bare.params["mode"] == "dense", "no text: dense, not hybrid"
    assert bare.ids == explicit.ids and bare.ids[0] in {"d5", "d21", "d37"}
    # The pooled vector defaults to the normalised mean of the tokens: two tokens, one search.
    two = np.array([axis(1), axis(2)], dtype=np.float32)
    mean = (two.mean(axis=0) / np.linalg.norm(two.mean(axis=0))).tolist()
    for mode in ["ivf", "dense-exact"]:
        assert index.search(query_vectors=two, mode=mode, k=5).ids == index.search(
            query_vectors={"tokens": two, "pooled": mean}, mode=mode, k=5
        ).ids, mode
    batch = index.search_batch([{"query_vectors": tokens}, {"query_vectors": two}], k=5)
    assert batch[0].ids == bare.ids and batch[0].params["mode"] == "dense"
    with pytest.raises(cellar.InvalidInputError, match="query text, query_vectors, or both"):
        index.search()
    with pytest.raises(cellar.InvalidInputError, match="pooled vector"):
        index.search(mode="ivf", query_vectors={})


def test_add_and_update_take_the_columns_of_from_embeddings(index: cellar.Index) -> None:
    rng = np.random.default_rng(9)
    new = [rng.normal(size=(3, DIM)).astype(np.float32) for _ in range(2)]
    for v in new:
        v[0] = axis(7)
    report = index.add(["n1", "n2"], new, texts=["first new", "second new"], metadata=[{"color": "green"}, None])
    assert report["added"] == 2 and len(index) == 42
    assert index.get("n1") == {"id": "n1", "title": "", "text": "first new", "metadata": {"color": "green"}}
    hits = index.search(query_vectors=np.array([axis(7)], dtype=np.float32), k=42, mode="dense-exact")
    assert {"n1", "n2"} <= set(hits.ids)
    index.update(["n2"], [np.array([axis(11)], dtype=np.float32)], texts=["moved"])
    assert index.get("n2")["text"] == "moved"
    # The dict form takes a bare array as the document's token vectors.
    index.add({"id": "n3", "text": "third", "vectors": np.array([axis(12)], dtype=np.float32)})
    top = index.search(query_vectors=np.array([axis(12)], dtype=np.float32), k=1, mode="dense-exact")
    assert top.ids == ["n3"]
    # The columns are checked by the reader of from_embeddings, and nothing is written.
    with pytest.raises(cellar.InvalidInputError, match="texts has more items than doc_vectors"):
        index.add(["n4"], [new[0]], texts=["a", "b"])
    with pytest.raises(cellar.InvalidInputError, match="dimension"):
        index.add(["n4", "n5"], [new[0], np.ones((2, DIM + 1), dtype=np.float32)])
    with pytest.raises(cellar.InvalidInputError, match="goes with doc_vectors"):
        index.add([{"id": "n4", "text": "x"}], texts=["x"])
    assert index.get("n4") is None and len(index) == 43


def test_one_filter_grammar_with_the_equality_shorthand(index: cellar.Index) -> None:
    query = np.array([axis(3)], dtype=np.float32)
    short = index.search(query_vectors=query, k=40, mode="dense-exact", filter={"color": "red"})
    long = index.search(
        query_vectors=query, k=40, mode="dense-exact", filter={"eq": {"field": "color", "value": "red"}}
    )
    assert short.ids == long.ids and len(short.ids) == 20
    assert all(int(i[1:]) % 2 == 1 for i in short.ids)
    both = index.search(query_vectors=query, k=40, mode="dense-exact", filter={"color": "red", "n": [1, 3, 4]})
    assert sorted(both.ids) == ["d1", "d3"]
    nested = {"or": [{"color": "blue"}, {"range": {"field": "n", "lt": 2}}]}
    assert len(index.search(query_vectors=query, k=40, mode="dense-exact", filter=nested).ids) == 21
    index.delete(filter={"color": "blue"})
    assert len(index) == 20
    with pytest.raises(cellar.InvalidInputError, match="one operator, or only fields"):
        index.search(query_vectors=query, filter={"color": "red", "not": {"n": 1}})


def test_a_stream_takes_the_same_filter_grammar(tmp_path: Path) -> None:
    with cellar.Stream.open(tmp_path / "s.stream", dim=DIM) as stream:
        for i, color in enumerate(["red", "blue", "red"]):
            meta = {"color": color, "n": i}
            stream.put("g", f"x{i}", metadata=meta, tokens=np.array([axis(i)], dtype=np.float32))
        q = np.array([axis(0)], dtype=np.float32)
        short = stream.search("g", query_tokens=q, filter={"color": "red"})
        long = stream.search("g", query_tokens=q, filter={"and": [{"eq": {"field": "color", "value": "red"}}]})
        assert [h["id"] for h in short] == [h["id"] for h in long] == ["x0", "x2"]
        # Issue 46: the whole grammar, as an index runs it (streams ran equality only before).
        ranged = stream.search("g", query_tokens=q, filter={"range": {"field": "n", "gt": 0}})
        assert sorted(h["id"] for h in ranged) == ["x1", "x2"]
        either = stream.search("g", query_tokens=q, filter={"or": [{"color": "blue"}, {"not": {"n": 2}}]})
        assert sorted(h["id"] for h in either) == ["x0", "x1"]
