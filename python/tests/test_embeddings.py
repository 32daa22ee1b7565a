"""`cellar.Index.from_embeddings`: indexes of the caller's token vectors, with no model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import cellar

DIM = 16


def documents(n: int, seed: int = 0) -> tuple[list[str], list[np.ndarray], list[str]]:
    """`n` documents of 1 to 5 unit token vectors; document i holds axis i % DIM as a token."""
    rng = np.random.default_rng(seed)
    ids, vectors, texts = [], [], []
    for i in range(n):
        tokens = rng.uniform(-0.1, 0.1, size=(int(rng.integers(1, 6)), DIM)).astype(np.float32)
        tokens[0, i % DIM] = 1.0
        tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
        ids.append(f"d{i}")
        vectors.append(tokens)
        texts.append(f"document {i} about topic{i % DIM}")
    return ids, vectors, texts


def axis(i: int) -> list[float]:
    v = [0.0] * DIM
    v[i] = 1.0
    return v


def by_vector(i: int) -> dict:
    return {"tokens": [axis(i)], "pooled": axis(i)}


def test_arrays_of_both_dtypes_build_an_index_searched_by_vectors_and_bm25(tmp_path: Path) -> None:
    ids, vectors, texts = documents(40)
    vectors[3] = vectors[3].astype(np.float16)
    index = cellar.Index.from_embeddings(tmp_path / "idx", ids, vectors, texts=texts, codec="f16")
    assert len(index) == 40
    assert index.config["encoder"]["external"] is True
    for mode in ["dense-exact", "dense", "ivf"]:
        hits = index.search("", mode=mode, k=3, query_vectors=by_vector(5))
        assert hits.ids[0] in {"d5", "d21", "d37"}, (mode, hits.ids)
    hits = index.search("topic7", mode="bm25", k=3)
    assert all("topic7" in t for t in hits.texts)
    with pytest.raises(cellar.InvalidInputError, match="no model"):
        index.search("topic7", mode="dense")
    reopened = cellar.Index.open(tmp_path / "idx", reader="direct")
    assert reopened.search("", mode="dense", k=1, query_vectors=by_vector(9)).ids[0] in {"d9", "d25"}


def test_an_index_created_empty_is_filled_by_add_and_given_an_ivf(tmp_path: Path) -> None:
    index = cellar.Index.create_empty(tmp_path / "idx", dim=DIM)
    assert len(index) == 0 and index.config["codec"] == "f16"
    assert index.search("", mode="dense-exact", k=3, query_vectors=by_vector(5)).ids == []
    ids, vectors, texts = documents(40)
    index.add([{"id": i, "text": t, "vectors": v} for i, t, v in zip(ids, texts, vectors)])
    assert len(index) == 40
    assert index.search("", mode="dense-exact", k=1, query_vectors=by_vector(5)).ids[0] in {"d5", "d21", "d37"}
    assert index.retrain_ivf()["docs"] == 40
    assert index.search("", mode="dense", k=1, query_vectors=by_vector(9)).ids[0] in {"d9", "d25"}
    for bad, says in [({"codec": "residual2"}, "codec residual2"), ({"dim": 0}, "dim must be")]:
        with pytest.raises(cellar.InvalidInputError, match=says):
            cellar.Index.create_empty(tmp_path / "other", **({"dim": DIM} | bad))
    assert not (tmp_path / "other").exists()


def test_generators_and_a_pooled_matrix_are_read_one_document_at_a_time(tmp_path: Path) -> None:
    ids, vectors, _ = documents(30, seed=1)
    pulled: list[int] = []

    def stream() -> Iterator[np.ndarray]:
        for i, v in enumerate(vectors):
            pulled.append(i)
            yield v

    pooled = np.stack([v.mean(axis=0) / np.linalg.norm(v.mean(axis=0)) for v in vectors])
    index = cellar.Index.from_embeddings(tmp_path / "gen", iter(ids), stream(), pooled=pooled)
    assert pulled == list(range(30)) and len(index) == 30
    assert index.config["codec"] == "residual2"
    assert index.search("", mode="dense-exact", k=1, query_vectors={"pooled": pooled[4].tolist()}).ids == ["d4"]


def test_bad_embeddings_raise_typed_errors_and_leave_nothing(tmp_path: Path) -> None:
    ids, vectors, _ = documents(5, seed=2)
    nan = [v.copy() for v in vectors]
    nan[3][0, 2] = np.nan

    def failing() -> Iterator[np.ndarray]:
        yield vectors[0]
        raise RuntimeError("the GPU job died")

    cases = [
        (lambda: (ids, [v.astype(np.float64) for v in vectors]), TypeError, "dtype float64"),
        (lambda: (ids, [v.tolist() for v in vectors]), TypeError, "NumPy array"),
        (lambda: (ids, [vectors[0], vectors[1][0]]), cellar.InvalidInputError, r"doc_vectors\[1\]: shape"),
        (lambda: (ids, nan), cellar.InvalidInputError, r"document 3 \(\"d3\"\) token 0"),
        (lambda: (ids, [vectors[0], np.zeros((2, DIM + 1), np.float32)]), cellar.InvalidInputError, "dimension 17"),
        (lambda: (["a", "b", "a", "c", "d"], vectors), cellar.InvalidInputError, 'duplicate id "a"'),
        (lambda: (ids[:3], vectors), cellar.InvalidInputError, "ids has 3 items, fewer"),
        (lambda: (ids + ["extra"], vectors), cellar.InvalidInputError, "ids has more items"),
        (lambda: (ids, []), cellar.InvalidInputError, "doc_vectors is empty"),
        (lambda: (ids, failing()), RuntimeError, "the GPU job died"),
    ]
    for n, (make, error, match) in enumerate(cases):
        out = tmp_path / f"bad{n}"
        given_ids, given_vectors = make()
        with pytest.raises(error, match=match):
            cellar.Index.from_embeddings(out, given_ids, given_vectors)
        assert not out.exists(), f"case {n} left {out}"
    with pytest.raises(cellar.InvalidInputError, match="pooled has"):
        cellar.Index.from_embeddings(tmp_path / "p", ids, vectors, pooled=np.ones((4, DIM), np.float32))


def test_pylate_vectors_index_and_rank_as_pylate_ranks_them(tmp_path: Path) -> None:
    """The recipe of docs/embeddings.md, run by PyLate into testdata/colbert-v1/bert-corpus
    (`make_fixtures.py`): its folder built into an index, its queries' PyLate vectors searched
    with exact MaxSim over every document (dense mode, the IVF's one cluster, every candidate
    re-scored), against PyLate's own `rank.rerank` of the same vectors."""
    import json

    folder = Path(__file__).resolve().parents[2] / "testdata/colbert-v1/bert-corpus"
    tokens = np.load(folder / "embeddings.0.npy")
    lens = json.loads((folder / "doclens.0.json").read_text())
    lines = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    ids = [d["_id"] for d in lines]
    vectors = np.split(tokens, np.cumsum(lens)[:-1])
    index = cellar.Index.from_embeddings(tmp_path / "pylate", ids, vectors, texts=[d["text"] for d in lines], codec="f16")
    n = len(ids)
    for case in json.loads((folder / "queries.json").read_text()):
        q = np.asarray(case["vectors"], dtype=np.float32)
        pooled = q.mean(axis=0) / np.linalg.norm(q.mean(axis=0))
        got = index.search(
            "", mode="dense", k=n, rerank_k=n, candidates=n, query_vectors={"tokens": q, "pooled": pooled}
        )
        ours = {h["id"]: h["maxsim"] for h in got.hits}
        theirs = {r["id"]: r["score"] for r in case["ranking"]}
        assert set(ours) == set(theirs) == set(ids), case["text"]
        # f16 storage: each of the 12 query tokens' best dot product moves by ~1e-3 at most.
        worst = max(abs(ours[i] - theirs[i]) for i in ids)
        assert worst <= 0.01, f"{case['text']!r}: MaxSim differs from PyLate's by {worst}"
        ranking = [r["id"] for r in case["ranking"]]
        for above, below in zip(ranking, ranking[1:]):
            if theirs[above] - theirs[below] > 0.02:
                assert got.ids.index(above) < got.ids.index(below), (case["text"], above, below)


def test_metadata_comes_with_the_embeddings_and_filters_every_mode(tmp_path: Path) -> None:
    ids, vectors, texts = documents(40)
    metadata = [{"topic": i % DIM, "even": i % 2 == 0} if i != 7 else None for i in range(40)]
    index = cellar.Index.from_embeddings(tmp_path / "m", ids, vectors, texts=texts, metadata=metadata, codec="f16")
    for mode in ["dense-exact", "dense", "ivf"]:
        hits = index.search("", mode=mode, k=5, query_vectors=by_vector(5), filter={"eq": {"field": "even", "value": True}})
        assert hits.ids and all(int(i[1:]) % 2 == 0 for i in hits.ids), (mode, hits.ids)
    assert index.get("d7")["metadata"] == {}
    with pytest.raises(cellar.InvalidInputError, match=r"metadata\[2\]"):
        cellar.Index.from_embeddings(tmp_path / "bad", ids[:3], vectors[:3], metadata=[{}, {}, {"x": [1]}])
    assert not (tmp_path / "bad").exists()
    with pytest.raises(cellar.InvalidInputError, match="metadata has 2 items"):
        cellar.Index.from_embeddings(tmp_path / "short", ids[:3], vectors[:3], metadata=[{}, {}])
