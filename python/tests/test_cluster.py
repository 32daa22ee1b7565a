"""`cellar.cluster`: a collection split over shards answers as one index of all its documents
(issue 19): the same corpus built as one index and as 3 shards ranks identically, ties aside,
in every mode, before and after writes routed to the owning shards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import cellar
from cellar import cluster

DIM = 16
WORDS = [f"w{i}" for i in range(120)]
SHARDS = 3
#: Scores closer than this are ties (the router's z-normalisation sums in another order).
TIE = 1e-4


def metadata(n: int, seed: int = 2) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"lang": str(rng.choice(["en", "de", "fr"])), "year": int(rng.integers(1990, 2025))} for _ in range(n)]


def corpus(n: int, seed: int = 0) -> tuple[list[str], list[np.ndarray], list[str], np.ndarray]:
    """`n` documents: 2 to 8 random unit token vectors, a text of 5 to 60 words drawn with a
    skew (so word counts, and BM25's statistics, differ from shard to shard)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    weights /= weights.sum()
    ids, vectors, texts, pooled = [], [], [], []
    for i in range(n):
        tokens = rng.normal(size=(int(rng.integers(2, 9)), DIM)).astype(np.float32)
        tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
        mean = tokens.mean(axis=0)
        ids.append(f"doc-{i}")
        vectors.append(tokens)
        pooled.append(mean / np.linalg.norm(mean))
        texts.append(" ".join(rng.choice(WORDS, size=int(rng.integers(5, 61)), p=weights)))
    return ids, vectors, texts, np.stack(pooled).astype(np.float32)


def queries(n: int, seed: int = 1) -> list[tuple[str, dict]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        tokens = rng.normal(size=(3, DIM)).astype(np.float32)
        tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
        mean = tokens.mean(axis=0)
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 4)), replace=False))
        out.append((text, {"tokens": tokens.tolist(), "pooled": (mean / np.linalg.norm(mean)).tolist()}))
    return out


def assert_same_ranking(one: list[tuple[str, float]], sharded: list[tuple[str, float]], what: str) -> None:
    """Same scores position by position, and each document where the other ranking has it, up
    to the order of ties (and which tied documents the cut at k kept)."""
    assert len(one) == len(sharded), what
    for (_, a), (_, b) in zip(one, sharded):
        assert abs(a - b) <= TIE * max(1.0, abs(a)), (what, one, sharded)
    cut = one[-1][1] if one else 0.0
    where = {doc: score for doc, score in sharded}
    for doc, score in one:
        if abs(score - cut) <= TIE * max(1.0, abs(cut)):
            continue
        assert doc in where and abs(where[doc] - score) <= TIE * max(1.0, abs(score)), (what, doc, one, sharded)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    ids, vectors, texts, pooled = corpus(300)
    root = tmp_path_factory.mktemp("cluster")
    options = {"codec": "f16", "ivf_cluster_size": 16}
    meta = metadata(300)
    cellar.Index.from_embeddings(root / "one", ids, vectors, texts=texts, pooled=pooled, metadata=meta, **options)
    manifest = cluster.from_embeddings(
        root / "sharded", ids, vectors, texts=texts, pooled=pooled, metadata=meta, shards=SHARDS, **options
    )
    assert manifest.count == SHARDS and sum(s.docs for s in manifest.shards) == 300
    assert all(s.docs > 0 for s in manifest.shards)
    return root / "one", root / "sharded"


def ties_at_a_cut(one: cellar.Index, text: str, params: dict) -> bool:
    """Whether one index's first-stage list has a tie straddling a cut the search makes (at
    `rerank_k` or at `candidates`; for rrf, anywhere among the re-ranked): which of the tied
    documents is kept there is an order of ties, and it moves every fused score (the
    z-normalisation is over the kept ones, reciprocal ranks follow the order)."""
    if params["mode"] in ("bm25", "dense-exact", "ivf") or params.pop("_exact", False):
        return False
    first = "dense" if params["mode"] == "dense" else "bm25"
    listed = {k: v for k, v in params.items() if k in ("query_vectors", "nprobe", "oversample", "rescore", "filter", "filter_exact_max")}
    if first == "dense":
        listed.update(rerank_k=0, candidates=400)
    hits = one.search(text, mode=first, k=400, **listed).to_dict()["hits"]
    scores = [h["first_stage_score"] for h in hits]
    cuts = [params.get("rerank_k", 40), params.get("candidates", 200)]
    if params.get("fusion") == "rrf":
        # Reciprocal ranks: a tie anywhere among the re-ranked is an order of ties.
        cuts = range(1, params.get("rerank_k", 40) + 1)
    return any(0 < c < len(scores) and abs(scores[c - 1] - scores[c]) <= 1e-6 for c in cuts)


def ranking(result: dict) -> list[tuple[str, float]]:
    return [(h["id"], h["score"]) for h in result["hits"]]


MODES = [
    ("bm25", {}),
    ("rerank", {"rerank_k": 40}),
    ("hybrid", {"rerank_k": 40, "hybrid_candidates": 0}),
    ("hybrid", {"rerank_k": 12, "fusion": "rrf", "hybrid_candidates": 0}),
    ("hybrid", {"rerank_k": 25, "alpha": 0.7}),
    ("dense", {"rerank_k": 30}),
    ("dense-exact", {}),
    ("ivf", {}),
]


@pytest.mark.parametrize("mode,extra", MODES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(MODES)])
def test_three_shards_rank_as_one_index(built: tuple[Path, Path], mode: str, extra: dict) -> None:
    one_dir, sharded_dir = built
    one = cellar.Index.open(one_dir)
    clusters = json.loads((one_dir / "ivf" / "ivf.json").read_text())["clusters"]
    # An exhaustive probe with every shortlisted candidate rescored: the IVF, approximate per
    # shard, is then exact, as the other first stages are.
    ivf = {"nprobe": clusters, "oversample": 100.0, "rescore": True}
    checked = 0
    with cluster.LocalCluster(sharded_dir) as shards:
        for q, (text, vectors) in enumerate(queries(16)):
            params = {"k": 10, "mode": mode, "query_vectors": vectors, **ivf, **extra}
            if mode == "bm25":
                params.pop("query_vectors")
            if ties_at_a_cut(one, text, params):
                continue
            checked += 1
            single = json.loads(json.dumps(one.search(text, **params).to_dict()))
            merged = shards.search(text, **params)
            assert merged["partial"] is False and merged["shards"]["missing"] == []
            # nprobe is per shard, at most each shard's clusters: every cluster here.
            unprobed = [{**p, "ivf": p["ivf"] and {**p["ivf"], "nprobe": None}} for p in (merged["params"], single["params"])]
            assert unprobed[0] == unprobed[1], (merged["params"], single["params"])
            assert_same_ranking(ranking(single), ranking(merged), f"{mode} {extra} query {q} {text!r}")
            assert {h["stage"] for h in merged["hits"]} == {h["stage"] for h in single["hits"]}
            texts = {h["id"]: (h["text"], h.get("metadata")) for h in single["hits"]}
            assert all(texts.get(h["id"], (h["text"], h.get("metadata"))) == (h["text"], h.get("metadata")) for h in merged["hits"])
            assert all(h["text"] for h in merged["hits"]), "each hit carries its text"
            # The re-ranked named the hits with their scores: no fourth round trip.
            assert ("hits_ms" in merged["shards"]["phases_ms"]) == (merged["reranked"] < 10)
    assert checked >= 8, f"only {checked} of 16 queries had no tie at a cut"


def test_bm25_with_each_shards_own_statistics_would_rank_differently(built: tuple[Path, Path]) -> None:
    """The test above can fail: a shard scoring BM25 alone (its own document frequencies) gives
    other scores than the collection-wide statistics the router sums."""
    one_dir, sharded_dir = built
    one = cellar.Index.open(one_dir)
    shard = cellar.Index.open(cluster.Manifest.load(sharded_dir).paths(sharded_dir)[0])
    differ = 0
    for text, _ in queries(12):
        global_scores = {h["id"]: h["score"] for h in one.search(text, mode="bm25", k=300).to_dict()["hits"]}
        for hit in shard.search(text, mode="bm25", k=5).to_dict()["hits"]:
            differ += abs(global_scores[hit["id"]] - hit["score"]) > 1e-3
    assert differ > 0


def test_writes_go_to_the_owning_shard_and_rankings_stay_equal(built: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    one_dir, sharded_dir = built
    shutil.copytree(one_dir, tmp_path / "one")
    shutil.copytree(sharded_dir, tmp_path / "sharded")
    one = cellar.Index.open(tmp_path / "one")
    rng = np.random.default_rng(7)
    new = []
    for i in range(12):
        tokens = rng.normal(size=(3, DIM)).astype(np.float32)
        tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
        new.append({"id": f"new-{i}", "text": f"w1 w2 w{i} fresh", "vectors": {"tokens": tokens.tolist()}})
    ops = [{"add": d} for d in new] + [{"delete": "doc-3"}, {"delete": "doc-150"}, {"update": {**new[0], "id": "doc-7"}}]
    one._write_ops(json.dumps({"ops": ops}))
    with cluster.LocalCluster(tmp_path / "sharded") as shards:
        report = shards.write({"ops": ops})
        assert (report["added"], report["deleted"], report["updated"]) == (12, 2, 1)
        assert report["partial"] is False
        manifest = shards.manifest
        for d in new:
            owner = manifest.shard_of(d["id"])
            holders = [s for s, index in enumerate(shards.shards) if index.get(d["id"]) is not None]
            assert holders == [owner]
        checked = 0
        for mode in ("bm25", "rerank", "hybrid"):
            for text, vectors in queries(8, seed=3) + [("w1 fresh", queries(1)[0][1])]:
                params = {"k": 10, "mode": mode, "hybrid_candidates": 0, "rerank_k": 40}
                if mode != "bm25":
                    params["query_vectors"] = vectors
                if ties_at_a_cut(one, text, params):
                    continue
                checked += 1
                single = one.search(text, **params).to_dict()
                merged = shards.search(text, **params)
                assert_same_ranking(ranking(single), ranking(merged), f"after writes {mode} {text!r}")
                assert "doc-3" not in {h["id"] for h in merged["hits"]}
        assert checked >= 15, f"only {checked} of 27 searches had no tie at a cut"


def test_bad_requests_raise_as_one_index_would(built: tuple[Path, Path]) -> None:
    _, sharded_dir = built
    with cluster.LocalCluster(sharded_dir) as shards:
        with pytest.raises(cellar.InvalidInputError, match="k must be"):
            shards.search("w1", mode="bm25", k=0)
        with pytest.raises(cellar.InvalidInputError, match="filter"):
            shards.search("w1", mode="bm25", filter={"eq": {"field": "lang"}})
        with pytest.raises(cellar.InvalidInputError, match="ops"):
            shards.write({"ops": []})
        with pytest.raises(cellar.InvalidInputError, match="unknown operation"):
            shards.write({"ops": [{"replace": {"id": "x"}}]})
    with pytest.raises(cellar.NotFoundError, match="no sharded collection"):
        cluster.LocalCluster(sharded_dir / "nowhere")


def test_a_shard_that_fails_is_named_and_the_answer_says_partial(built: tuple[Path, Path]) -> None:
    _, sharded_dir = built
    with cluster.LocalCluster(sharded_dir) as shards:
        real = shards._call

        async def flaky(shard: int, method: str, *args):
            if shard == 1:
                raise ConnectionError("replica gone")
            return await real(shard, method, *args)

        shards._call = flaky
        text, vectors = queries(1)[0]
        merged = shards.search(text, mode="rerank", k=10, query_vectors=vectors)
        assert merged["partial"] is True
        assert [m["shard"] for m in merged["shards"]["missing"]] == [1]
        assert "replica gone" in merged["shards"]["missing"][0]["error"]
        assert merged["hits"] and {h["shard"] for h in merged["hits"]} <= {0, 2}


def test_partitioning_is_stable_and_spread() -> None:
    assert cluster.shard_of("doc-1", 3) == cluster.shard_of("doc-1", 3)
    counts = np.bincount([cluster.shard_of(f"id{i}", 4) for i in range(4000)], minlength=4)
    assert counts.min() > 900
    # Pinned: the rule is part of the on-disk format (cluster.json names it).
    assert [cluster.shard_of(x, 7) for x in ("a", "doc-42", "é")] == [2, 5, 2]
    assert [cluster.shard_of(x, 1000) for x in ("a", "doc-42", "é")] == [343, 295, 743]
    with pytest.raises(cellar.InvalidInputError):
        cluster.shard_of("a", 0)


FILTERS = [
    # Broad: the first stages take only the matches: 97 matched, more than filter_exact_max,
    # though each shard's own count (28, 37, 32) is below it — the choice is the collection's.
    ({"eq": {"field": "lang", "value": "en"}}, 40),
    # Selective: every match ranked exactly (no more than filter_exact_max over the collection,
    # though no single shard would know it from its own count).
    ({"and": [{"eq": {"field": "lang", "value": "de"}}, {"range": {"field": "year", "gte": 2010}}]}, 60),
]


@pytest.mark.parametrize("mode", ["bm25", "rerank", "hybrid", "dense", "dense-exact", "ivf"])
@pytest.mark.parametrize("which", [0, 1], ids=["broad", "selective"])
def test_filtered_searches_rank_as_one_index(built: tuple[Path, Path], mode: str, which: int) -> None:
    one_dir, sharded_dir = built
    one = cellar.Index.open(one_dir)
    clusters = json.loads((one_dir / "ivf" / "ivf.json").read_text())["clusters"]
    flt, exact_max = FILTERS[which]
    checked = 0
    with cluster.LocalCluster(sharded_dir) as shards:
        for q, (text, vectors) in enumerate(queries(10)):
            params = {"k": 10, "mode": mode, "query_vectors": vectors, "nprobe": clusters, "oversample": 100.0,
                      "rescore": True, "filter": flt, "filter_exact_max": exact_max, "rerank_k": 40}
            if mode == "bm25":
                params.pop("query_vectors")
            single = one.search(text, **params).to_dict()
            if ties_at_a_cut(one, text, {**params, "_exact": single["filter"]["exact"]}):
                continue
            checked += 1
            merged = shards.search(text, **params)
            assert merged["filter"]["matched"] == single["filter"]["matched"]
            assert merged["filter"]["exact"] == single["filter"]["exact"]
            assert merged["filter"]["exact"] == (which == 1 and mode not in ("bm25", "dense-exact"))
            assert_same_ranking(ranking(single), ranking(merged), f"{mode} {flt} query {q} {text!r}")
            meta = {h["id"]: h.get("metadata", {}) for h in merged["hits"]}
            assert all(m.get("lang") == ("en" if which == 0 else "de") for m in meta.values()), meta
    assert checked >= 5, f"only {checked} of 10 queries had no tie at a cut"


def test_shards_share_one_codec_and_score_maxsim_as_one_index(tmp_path: Path) -> None:
    """With a trained codec (residual2, the default) the shards take one codec — shard 0's, or
    an existing index's — so MaxSim is the same wherever a document lives."""
    ids, vectors, texts, pooled = corpus(300)
    one = cellar.Index.from_embeddings(tmp_path / "one", ids, vectors, texts=texts, pooled=pooled, ivf=False)
    cluster.from_embeddings(tmp_path / "own", ids, vectors, texts=texts, pooled=pooled, shards=SHARDS, ivf=False)
    codecs = {(p / "vectors" / "codec.bin").read_bytes() for p in cluster.Manifest.load(tmp_path / "own").paths(tmp_path / "own")}
    assert len(codecs) == 1, "one codec for every shard"
    cluster.from_embeddings(tmp_path / "shared", ids, vectors, texts=texts, pooled=pooled, shards=SHARDS, ivf=False,
                            codec_from=tmp_path / "one")
    checked = 0
    with cluster.LocalCluster(tmp_path / "shared") as shards:
        for text, q in queries(16):
            params = {"k": 10, "mode": "rerank", "query_vectors": q, "rerank_k": 40}
            if ties_at_a_cut(one, text, params):
                continue
            checked += 1
            single = one.search(text, **params).to_dict()
            merged = shards.search(text, **params)
            assert_same_ranking(ranking(single), ranking(merged), f"residual2 rerank {text!r}")
            assert [h["maxsim"] for h in single["hits"]] == pytest.approx([h["maxsim"] for h in merged["hits"]], abs=1e-5)
    assert checked >= 8
    with pytest.raises(cellar.InvalidInputError, match="codec"):
        cellar.Index.from_embeddings(tmp_path / "bad", ids, vectors, codec="f16", codec_from=tmp_path / "one")
