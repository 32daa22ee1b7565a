"""Tests of the `cellar` Python package: build, open, search, evaluate, errors and the GIL."""

from __future__ import annotations

import errno
import json
import math
import shutil
import sys
import threading
from pathlib import Path

import pytest
from topics import QUERIES, TOPICS, UNJUDGED, topic_of

import cellar

MODES = ("hybrid", "rerank", "bm25", "dense", "ivf", "dense-exact")
N_DOCS = sum(len(docs) for docs in TOPICS.values())


# --- build, open, metadata ------------------------------------------------------------------


def test_build_returns_an_open_index(collection: Path, tmp_path: Path) -> None:
    idx = cellar.Index.build(collection, tmp_path / "idx", codec="int8", max_docs=8)
    assert isinstance(idx, cellar.Index)
    assert len(idx) == 8
    assert idx.reader == "mmap"
    assert idx.config["codec"] == "int8"
    assert idx.config["build"]["docs"] == 8
    assert idx.search("volcano lava", k=3, mode="bm25").ids[0].startswith("volcano-")


def test_open_reports_size_config_and_repr(index: cellar.Index, index_dir: Path) -> None:
    assert len(index) == N_DOCS
    config = index.config
    assert config["build"]["docs"] == N_DOCS
    assert config["codec"] == "residual2", "the default codec"
    assert config["search"]["mode"] == "hybrid"
    assert config["search"]["alpha"] == 0.4, "f32 values reach Python in their shortest form"
    assert config["encoder"]["skip_special"] is True
    assert Path(index.path) == index_dir
    assert "docs=36" in repr(index) and "mmap" in repr(index)


@pytest.mark.parametrize("reader", ["ram", "mmap", "direct"])
def test_every_reader_gives_the_same_ranking(index_dir: Path, index: cellar.Index, reader: str) -> None:
    try:
        idx = cellar.Index.open(index_dir, reader=reader)
    except cellar.UnsupportedError:
        assert reader == "direct", "only O_DIRECT may be refused by the file system"
        return
    assert idx.reader == reader
    query = "black hole event horizon"
    assert idx.search(query, k=10).ids == index.search(query, k=10).ids


def test_a_hot_record_cache_answers_a_repeated_query_alike_without_reading(index_dir: Path, index: cellar.Index) -> None:
    try:
        idx = cellar.Index.open(index_dir, reader="direct", cache_mib=2)
    except cellar.UnsupportedError:
        idx = cellar.Index.open(index_dir, reader="mmap", cache_mib=2)
    query = "black hole event horizon"
    first, again = idx.search(query, k=5, mode="rerank"), idx.search(query, k=5, mode="rerank")
    want = index.search(query, k=5, mode="rerank")
    assert first.ids == want.ids and again.ids == want.ids
    assert first.io["records_cached"] == 0 and first.bytes_read > 0
    assert again.io["records_cached"] > 0 and again.bytes_read == 0
    with pytest.raises(cellar.InvalidInputError, match="ram reader"):
        cellar.Index.open(index_dir, reader="ram", cache_mib=2)
    with pytest.raises(ValueError, match="cache_mib"):
        cellar.Index.open(index_dir, reader="mmap", cache_mib=0)


def test_f16_model_weights_answer_a_text_query_as_f32_weights_do(index_dir: Path, index: cellar.Index) -> None:
    idx = cellar.Index.open(index_dir, model_weights="f16")
    query = "black hole event horizon"
    half, full = idx.search(query, k=5, mode="rerank").ids, index.search(query, k=5, mode="rerank").ids
    # The weights' rounding moves scores by about 1e-3: the top hit stays, near ties below may swap.
    assert half[0] == full[0] and len(set(half) & set(full)) >= 4
    with pytest.raises(cellar.InvalidInputError, match="f32 or f16"):
        cellar.Index.open(index_dir, model_weights="bf16")


# --- search -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_search_every_mode_ranks_the_topic_first(index: cellar.Index, mode: str) -> None:
    # Every query shares words with at least 3 documents of its topic, so BM25-based modes (which
    # rank BM25 candidates only) also fill k=3.
    for qid, (text, topic) in QUERIES.items():
        res = index.search(text, k=3, mode=mode)
        assert len(res) == 3, (qid, mode)
        assert len(res.ids) == len(res.scores) == len(res.texts) == len(res.titles) == len(res.hits) == 3
        assert [topic_of(d) for d in res.ids] == [topic] * 3, f"{mode}: {text!r} ranked {res.ids}"
        assert res.scores == sorted(res.scores, reverse=True)
        assert res.params["mode"] == mode and res.params["k"] == 3


def test_search_result_fields_are_aligned(index: cellar.Index) -> None:
    res = index.search("honeybee hive honey", k=4, mode="hybrid")
    for i, hit in enumerate(res.hits):
        assert hit["id"] == res.ids[i]
        assert hit["title"] == res.titles[i]
        assert hit["text"] == res.texts[i]
        assert hit["score"] == res.scores[i]
        assert set(hit) == {"id", "internal_id", "score", "stage", "first_stage_score", "maxsim", "title", "text"}
    by_id = {doc: (title, text) for doc, title, text in zip(res.ids, res.titles, res.texts)}
    assert by_id["bees-3"] == TOPICS["bees"][3]
    assert set(res.timings) == {"queue", "encode", "first_stage", "read", "read_hidden", "maxsim", "fuse", "text", "total"}
    assert all(v >= 0 for v in res.timings.values())
    assert res.bytes_read > 0 and res.bytes_read == res.io["bytes_read"]
    assert res.reranked > 0 and res.candidates >= res.reranked
    assert json.loads(json.dumps(res.to_dict()))["hits"][0]["id"] == res.ids[0]
    assert "SearchResult(mode=hybrid" in repr(res)


def test_search_defaults_and_parameters(index: cellar.Index) -> None:
    res = index.search("sourdough yeast")
    assert res.params["k"] == 10 and res.params["mode"] == "hybrid"
    assert len(res) == 10, "the default hybrid joins the IVF's candidates to BM25's"
    bm25_only = index.search("sourdough yeast", hybrid_candidates=0)
    assert 2 <= len(bm25_only) <= 10, "BM25 candidates alone: only documents sharing a word"
    assert index.search("sourdough yeast", mode=None).params["mode"] == index.config["search"]["mode"]
    res = index.search("sourdough yeast", k=3, candidates=20, rerank_k=5, alpha=0.5)
    params = dict(res.params)
    ivf = params.pop("ivf")
    assert params == {
        "mode": "hybrid",
        "k": 3,
        "candidates": 20,
        "rerank_k": 5,
        "alpha": 0.5,
        "fusion": "z",
        "lexical": "bm25",
        "early_read": True,
        "filter_exact_max": 1024,
    }
    assert ivf["hybrid_candidates"] == 100 and ivf["prefetch"] is False
    assert res.reranked <= 5
    assert index.search("sourdough yeast", mode="rerank").params["alpha"] == 0.0
    assert index.search("sourdough yeast", mode="bm25").bytes_read == 0
    assert len(index.search("sourdough yeast", k=1000, mode="dense-exact")) == N_DOCS
    assert len(index.search("sourdough yeast", k=1000, mode="ivf")) == N_DOCS


# --- the IVF first stage ----------------------------------------------------------------------


def test_build_adds_an_ivf_and_its_modes_take_their_parameters(index: cellar.Index) -> None:
    exact = index.search("sourdough yeast", k=5, mode="dense-exact")
    ivf = index.search("sourdough yeast", k=5, mode="ivf", nprobe=1, oversample=100.0, rescore=True)
    assert ivf.ids == exact.ids, "one cluster fully probed and rescored is the exact scan"
    res = index.search("sourdough yeast", k=5, mode="dense", rerank_k=8, prefetch=True, prefetch_step=0.5)
    assert res.params["ivf"]["nprobe"] == 1 and res.params["ivf"]["prefetch_step"] == 0.5
    assert res.params["alpha"] == 0.0, "dense ranks by MaxSim alone"
    assert res.reranked == 8
    joined = index.search("sourdough yeast", k=5, mode="hybrid", hybrid_candidates=10)
    assert joined.params["ivf"]["hybrid_candidates"] == 10
    assert joined.candidates >= 10


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"nprobe": 0}, "nprobe"),
        ({"nprobe": 2}, "1 clusters"),
        ({"prefetch_step": 0.0}, "prefetch_step"),
        ({"prefetch_step": 1.5}, "prefetch_step"),
        ({"oversample": 0.5}, "oversample"),
        ({"hybrid_candidates": -1}, "hybrid_candidates"),
    ],
)
def test_bad_ivf_parameters_raise_invalid_input(index: cellar.Index, kwargs: dict, needle: str) -> None:
    with pytest.raises(cellar.InvalidInputError, match=needle):
        index.search("sourdough yeast", k=5, mode="dense", **kwargs)
    assert len(index.search("sourdough yeast", k=2, mode="dense")) == 2


def test_ivf_modes_without_an_ivf_say_how_to_build_one(collection: Path, tmp_path: Path) -> None:
    idx = cellar.Index.build(collection, tmp_path / "plain", max_docs=8, ivf=False)
    with pytest.raises(cellar.InvalidInputError, match="cellar ivf build"):
        idx.search("volcano lava", k=3, mode="dense")
    assert len(idx.search("volcano lava", k=3, mode="hybrid")) >= 1


def test_a_splade_stage_ranks_alone_and_feeds_the_modes(collection: Path, tmp_path: Path) -> None:
    idx = cellar.Index.build(collection, tmp_path / "sparse", max_docs=12, ivf=False, splade=True)
    assert idx.config["search"]["lexical"] == "bm25"
    for lexical in ("splade", "both"):
        for mode in ("bm25", "rerank", "hybrid"):
            result = idx.search("volcano lava", k=3, mode=mode, lexical=lexical)
            assert len(result) >= 1
    with pytest.raises(cellar.InvalidInputError, match="unknown variant"):
        idx.search("volcano lava", lexical="colbert")
    plain = cellar.Index.build(collection, tmp_path / "plain", max_docs=8, ivf=False)
    with pytest.raises(cellar.InvalidInputError, match="cellar splade build"):
        plain.search("volcano lava", k=3, lexical="splade")


def test_long_documents_are_cut_and_counted_or_windowed(collection: Path, tmp_path: Path) -> None:
    cut = cellar.Index.build(collection, tmp_path / "cut", max_docs=4, ivf=False, doc_max_tokens=8)
    whole = cellar.Index.build(collection, tmp_path / "whole", max_docs=4, ivf=False, doc_max_tokens=8,
                               doc_overflow="windows")
    assert cut.config["build"]["long_docs"]["cut"] == 4
    assert whole.config["build"]["long_docs"]["windowed"] == 4
    assert whole.config["build"]["tokens"] > cut.config["build"]["tokens"]
    with pytest.raises(cellar.InvalidInputError, match="truncate or windows"):
        cellar.Index.build(collection, tmp_path / "bad", max_docs=4, doc_overflow="split")


def test_concurrent_searches_agree_with_serial_ones(index: cellar.Index) -> None:
    texts = [text for text, _ in QUERIES.values()] * 3
    expected = [index.search(t, k=5).ids for t in texts]
    results: list[list[str] | None] = [None] * len(texts)

    def work(offset: int) -> None:
        for i in range(offset, len(texts), 4):
            results[i] = index.search(texts[i], k=5).ids

    threads = [threading.Thread(target=work, args=(o,)) for o in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == expected


# --- evaluate ---------------------------------------------------------------------------------


def test_evaluate_returns_sane_metrics(index: cellar.Index, queries, qrels) -> None:
    for mode in MODES:
        m = index.evaluate(queries, qrels, mode=mode)
        assert m["queries"] == len(QUERIES)
        for key in ("nDCG@10", "MRR@10", "R@100", "S@5"):
            assert 0.0 <= m[key] <= 1.0, (mode, key, m[key])
        # Every query ranks its topic first, but the top document may be the unjudged fourth.
        assert m["S@5"] == 1.0 and m["MRR@10"] >= 0.5, (mode, m)
        assert m["nDCG@10"] > 0.5
        assert m["params"]["mode"] == mode and m["params"]["k"] == 100


def test_evaluate_scores_only_judged_queries_and_accepts_pairs(index: cellar.Index, queries, qrels) -> None:
    as_dict = index.evaluate(queries, qrels)
    pairs = [*queries.items(), UNJUDGED]
    as_pairs = index.evaluate(pairs, qrels)
    assert as_pairs["queries"] == len(QUERIES)
    for key in ("nDCG@10", "MRR@10", "R@100", "S@5"):
        assert as_dict[key] == as_pairs[key]


def test_evaluate_matches_a_hand_computed_case(index: cellar.Index) -> None:
    text = "honeybee pollen nectar flowers"
    ranking = index.search(text, k=100, mode="bm25").ids
    assert len(ranking) >= 3
    missing = next(d for d in (f"{t}-{i}" for t in TOPICS for i in range(4)) if d not in ranking)
    # Rank 1 judged irrelevant, rank 3 relevant (grade 2), one relevant document not retrieved.
    qrels = {"q": {ranking[0]: 0, ranking[2]: 2, missing: 1}}
    m = index.evaluate({"q": text}, qrels, mode="bm25", k=100)
    dcg = 2 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert m["queries"] == 1
    assert m["nDCG@10"] == pytest.approx(dcg / idcg, abs=1e-12)
    assert m["MRR@10"] == pytest.approx(1 / 3, abs=1e-12)
    assert m["R@100"] == 0.5
    assert m["S@5"] == 1.0


def test_evaluate_accepts_int_ids(index: cellar.Index) -> None:
    m = index.evaluate([(7, "black hole event horizon")], {7: {"blackhole-1": 1}}, mode="bm25")
    assert m["queries"] == 1 and m["S@5"] == 1.0


# --- errors -----------------------------------------------------------------------------------


def test_exception_hierarchy() -> None:
    assert issubclass(cellar.InvalidInputError, cellar.CellarError)
    assert issubclass(cellar.InvalidInputError, ValueError)
    assert issubclass(cellar.CellarIOError, OSError)
    for cls in (
        cellar.CorruptedError,
        cellar.IncompatibleError,
        cellar.ModelError,
        cellar.UnsupportedError,
        cellar.InternalError,
    ):
        assert issubclass(cls, cellar.CellarError) and not issubclass(cls, ValueError)


@pytest.mark.parametrize("query", ["", "   \n"])
def test_empty_query_is_invalid_input(index: cellar.Index, query: str) -> None:
    with pytest.raises(cellar.InvalidInputError, match="empty") as info:
        index.search(query)
    assert isinstance(info.value, ValueError) and isinstance(info.value, cellar.CellarError)
    assert info.value.code == "invalid_input"


def test_overlong_query_is_invalid_input(index: cellar.Index) -> None:
    with pytest.raises(ValueError, match="limit"):
        index.search("word " * cellar.MAX_QUERY_BYTES)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"mode": "fancy"}, "unknown mode"),
        ({"k": 0}, "k must be between 1"),
        ({"k": -3}, "k: invalid value: integer `-3`"),
        ({"k": cellar.MAX_K + 1}, "k must be between"),
        ({"candidates": 0}, "candidates"),
        ({"rerank_k": -1}, "rerank_k"),
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
    ],
)
def test_bad_search_arguments_are_invalid_input(index: cellar.Index, kwargs, pattern: str) -> None:
    with pytest.raises(cellar.InvalidInputError, match=pattern):
        index.search("volcano", **kwargs)


@pytest.mark.parametrize(
    "kwargs", [{"k": "10"}, {"k": 2.5}, {"mode": 3}, {"alpha": "high"}, {"nprobes": 4}, {"rerank": 5}]
)
def test_wrong_argument_types_are_type_errors(index: cellar.Index, kwargs) -> None:
    with pytest.raises(TypeError):
        index.search("volcano", **kwargs)
    with pytest.raises(TypeError):
        index.search(42)  # type: ignore[arg-type]


def test_bad_evaluate_arguments(index: cellar.Index, queries, qrels) -> None:
    with pytest.raises(cellar.InvalidInputError, match="no.*judgments|none of"):
        index.evaluate({"x": "volcano"}, qrels)
    with pytest.raises(cellar.InvalidInputError, match="more than once"):
        index.evaluate([("q-bees", "bees"), ("q-bees", "honey")], qrels)
    with pytest.raises(cellar.InvalidInputError, match="q-bees.*empty"):
        index.evaluate({"q-bees": " "}, qrels)
    with pytest.raises(cellar.InvalidInputError, match="k must"):
        index.evaluate(queries, qrels, k=0)
    with pytest.raises(cellar.InvalidInputError, match="unknown mode"):
        index.evaluate(queries, qrels, mode="best")
    with pytest.raises(TypeError, match="qrels"):
        index.evaluate(queries, [("q-bees", "bees-0", 1)])
    with pytest.raises(TypeError, match="grade"):
        index.evaluate(queries, {"q-bees": {"bees-0": "relevant"}})
    with pytest.raises(TypeError, match="queries"):
        index.evaluate("q-bees", qrels)
    with pytest.raises(TypeError, match="pair"):
        index.evaluate([("q-bees", "bees", "extra")], qrels)


def test_bad_open_and_build_choices_are_invalid_input(index_dir: Path, collection: Path, tmp_path: Path) -> None:
    with pytest.raises(cellar.InvalidInputError, match="unknown reader"):
        cellar.Index.open(index_dir, reader="tape")
    with pytest.raises(cellar.InvalidInputError, match="unknown codec"):
        cellar.Index.build(collection, tmp_path / "x", codec="f8")
    with pytest.raises(cellar.InvalidInputError, match="doc_max_tokens"):
        cellar.Index.build(collection, tmp_path / "x", doc_max_tokens=0)
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("not an index")
    with pytest.raises(cellar.InvalidInputError, match="not empty"):
        cellar.Index.build(collection, full)
    # An index open here (the session's) is locked against a build into its directory.
    with pytest.raises(cellar.LockedError, match="open for reading elsewhere"):
        cellar.Index.build(collection, index_dir)
    with pytest.raises(cellar.InvalidInputError, match="no such collection"):
        cellar.Index.build(tmp_path / "nowhere", tmp_path / "x")


def test_missing_index_dir(tmp_path: Path) -> None:
    with pytest.raises(cellar.CellarError, match="no such index directory") as info:
        cellar.Index.open(tmp_path / "absent")
    assert isinstance(info.value, ValueError)
    (tmp_path / "empty").mkdir()
    with pytest.raises(cellar.InvalidInputError, match="no index.json"):
        cellar.Index.open(tmp_path / "empty")


def copy_index(index_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy.cellar"
    shutil.copytree(index_dir, copy)
    return copy


def test_corrupted_index_json(index_dir: Path, tmp_path: Path) -> None:
    copy = copy_index(index_dir, tmp_path)
    (copy / "index.json").write_text("{ this is not json")
    with pytest.raises(cellar.CorruptedError, match="index.json") as info:
        cellar.Index.open(copy)
    assert info.value.code == "corrupted" and not isinstance(info.value, ValueError)


def test_incompatible_format_version(index_dir: Path, tmp_path: Path) -> None:
    copy = copy_index(index_dir, tmp_path)
    config = json.loads((copy / "index.json").read_text())
    config["format_version"] = 99
    (copy / "index.json").write_text(json.dumps(config))
    with pytest.raises(cellar.IncompatibleError, match="99"):
        cellar.Index.open(copy)


def test_index_parts_that_disagree_are_corrupted(index_dir: Path, tmp_path: Path) -> None:
    copy = copy_index(index_dir, tmp_path)
    config = json.loads((copy / "index.json").read_text())
    config["build"]["docs"] += 1
    (copy / "index.json").write_text(json.dumps(config))
    # pooled.bin, checked at open, holds a row per document: one fewer than index.json says.
    with pytest.raises(cellar.CorruptedError, match=r"expected \d+ rows"):
        cellar.Index.open(copy)


def test_missing_model(collection: Path, index_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(cellar.ModelError, match="not found") as info:
        cellar.Index.build(collection, tmp_path / "idx", model=tmp_path / "no-model")
    assert info.value.code == "model"
    idx = cellar.Index.open(index_dir, model=tmp_path / "no-model")
    assert idx.search("volcano lava", mode="bm25").ids, "BM25 needs no model"
    with pytest.raises(cellar.ModelError):
        idx.search("volcano lava", mode="hybrid")


def test_io_error_is_an_oserror(collection: Path, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(cellar.CellarIOError) as info:
        cellar.Index.build(collection, tmp_path / "a-file" / "idx")
    assert isinstance(info.value, OSError) and isinstance(info.value, cellar.CellarError)
    assert info.value.errno == errno.ENOTDIR
    assert info.value.code == "io"


# --- the GIL ----------------------------------------------------------------------------------


def ticks_during(call) -> int:
    """Runs `call` in a worker thread while a pure-Python thread counts its own ticks made while
    the worker is inside `call`; returns that count.

    The switch interval is made huge, so the interpreter never takes the GIL from the worker on
    its own: the ticker can tick inside `call` only if `call` releases the GIL. The ticker sleeps
    between ticks (sleeping releases the GIL), so the worker always gets it back.
    """
    inside = threading.Event()
    done = threading.Event()
    ticks = [0]

    def ticker() -> None:
        while not done.is_set():
            if inside.is_set():
                ticks[0] += 1
            threading.Event().wait(0.0005)

    failure: list[BaseException] = []

    def worker() -> None:
        try:
            inside.set()
            call()
        except BaseException as e:  # re-raised below, in the test's thread
            failure.append(e)
        finally:
            inside.clear()
            done.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        threads = [threading.Thread(target=ticker), threading.Thread(target=worker)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
    finally:
        sys.setswitchinterval(old)
    if failure:
        raise failure[0]
    return ticks[0]


def test_evaluate_releases_the_gil(index: cellar.Index, queries, qrels) -> None:
    assert ticks_during(lambda: [index.evaluate(queries, qrels, mode="hybrid") for _ in range(5)]) > 0


def test_search_releases_the_gil(index: cellar.Index) -> None:
    texts = [text for text, _ in QUERIES.values()]
    assert ticks_during(lambda: [index.search(t, k=10, mode="hybrid") for t in texts * 5]) > 0


def test_the_tick_counter_sees_a_gil_holding_call() -> None:
    """Control: a call that holds the GIL throughout (a pure-Python busy loop) gets no ticks."""

    def busy() -> None:
        total = 0
        for i in range(3_000_000):
            total += i

    assert ticks_during(busy) == 0


def test_a_rust_panic_is_a_cellar_error() -> None:
    from cellar import _cellar

    with pytest.raises(cellar.CellarError, match="internal error.*boom") as info:
        _cellar._panic_for_tests("boom")
    assert info.value.code == "panic"
    assert type(info.value) is cellar.CellarError


def _stub_keywords(method: str) -> set[str]:
    import ast
    import pathlib

    stub = pathlib.Path(cellar.__file__).with_name("_cellar.pyi")
    tree = ast.parse(stub.read_text())
    index = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Index")
    fn = next(n for n in index.body if isinstance(n, ast.FunctionDef) and n.name == method)
    return {a.arg for a in fn.args.kwonlyargs}


def test_search_keywords_are_the_request_fields_and_the_stubs_list_them() -> None:
    fields = set(cellar.SEARCH_REQUEST_SCHEMA["properties"])
    assert {"k", "mode", "alpha", "nprobe", "query_vectors"} <= fields
    assert set(cellar.SEARCH_PARAMETERS) == fields - {"query"}
    assert _stub_keywords("search") == fields - {"query"}
    assert _stub_keywords("search_batch") == fields - {"query"}
    assert _stub_keywords("evaluate") == fields - {
        "query",
        "query_vectors",
        "include_text",
        "filter",
        "filter_exact_max",
    }


def test_search_takes_query_vectors_and_every_request_field(index: cellar.Index) -> None:
    import numpy as np

    text = "sourdough yeast"
    by_text = index.search(text, k=5, mode="rerank")
    from_server = index.search(text, k=5, mode="rerank", include_text=False)
    assert from_server.ids == by_text.ids and all(t == "" for t in from_server.texts)
    with pytest.raises(cellar.InvalidInputError, match="query_vectors.tokens"):
        index.search(text, mode="rerank", query_vectors={"tokens": []})
    dim = index.config["encoder"]["model_dim"]
    with pytest.raises(cellar.InvalidInputError, match=f"expected {dim}"):
        index.search(text, mode="rerank", query_vectors={"tokens": np.ones((2, dim + 1))})
    with pytest.raises(cellar.InvalidInputError, match="pooled"):
        index.search("", mode="ivf", query_vectors={"tokens": []})
    with pytest.raises(TypeError, match="evaluate.*query_vectors"):
        index.evaluate({"q": text}, {"q": {"x": 1}}, query_vectors={"tokens": []})
