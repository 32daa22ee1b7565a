"""A living index from Python: add, update and delete are searchable when they return, durable
across reopening, all or nothing, and refused with typed errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import cellar

HARP = "The harp is plucked: its strings are played by the fingers, not a bow."
MODES = ["bm25", "rerank", "hybrid", "dense-exact"]


@pytest.fixture()
def written(index_dir: Path, tmp_path: Path) -> Path:
    """A copy of the shared index, to write to."""
    copy = tmp_path / "written.cellar"
    shutil.copytree(index_dir, copy)
    return copy


def top(index: cellar.Index, query: str, mode: str) -> list[str]:
    return list(index.search(query, mode=mode, k=5).ids)


def test_add_update_delete_are_searchable_at_once_and_survive_reopening(written: Path) -> None:
    index = cellar.Index.open(written)
    before = len(index)
    report = index.add([{"id": "harp", "title": "Harp", "text": HARP}])
    assert (report["seq"], report["added"], report["docs"]) == (1, 1, before + 1)
    assert len(index) == before + 1
    for mode in MODES:
        assert top(index, "harp strings plucked by the fingers", mode)[0] == "harp", mode
    victim = top(index, "black hole event horizon", "bm25")[0]
    index.delete(victim)
    index.update({"id": "harp", "text": "A harp has strings plucked with the fingers; it sounds like rain."})
    assert len(index) == before
    del index
    index = cellar.Index.open(written)
    assert len(index) == before
    for mode in MODES:
        assert victim not in top(index, "black hole event horizon", mode), mode
        hits = index.search("harp strings plucked by the fingers", mode=mode, k=36)
        assert list(hits.ids).count("harp") == 1, mode
    index.flush()
    assert index.search("harp sounds like rain", mode="bm25", k=1).ids[0] == "harp"
    index.add({"id": "flute", "text": "A flute is a woodwind instrument played by blowing across a hole."})
    index.flush()
    report = index.merge(mib_per_sec=0)
    assert report is not None and (report["segments"], report["dropped"]) == (2, 1), report
    assert index.merge() is None
    assert index.get("harp")["text"].endswith("it sounds like rain.")
    assert index.get(victim) is None and index.get("no-such-id") is None
    stats = index.live_stats()
    assert (stats["segments"], stats["records"], stats["deleted"]) == (1, 2, 2), stats
    for mode in MODES:
        assert top(index, "harp sounds like rain", mode)[0] == "harp", mode


def test_documents_with_their_own_vectors(written: Path) -> None:
    index = cellar.Index.open(written)
    rng = np.random.default_rng(3)
    tokens = rng.standard_normal((5, 384)).astype(np.float32)
    tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
    index.add([{"id": "vec-doc", "text": "", "vectors": {"tokens": tokens}}])
    query = {"tokens": tokens[:2], "pooled": tokens.mean(axis=0) / np.linalg.norm(tokens.mean(axis=0))}
    hit = index.search("", mode="dense-exact", k=1, query_vectors=query)
    assert hit.ids[0] == "vec-doc"


def test_bad_writes_raise_typed_errors_and_change_nothing(written: Path) -> None:
    index = cellar.Index.open(written)
    before = len(index)
    existing = top(index, "volcano lava", "bm25")[0]
    with pytest.raises(cellar.InvalidInputError, match="exists"):
        index.add([{"id": "new-one", "text": HARP}, {"id": existing, "text": HARP}])
    with pytest.raises(cellar.NotFoundError):
        index.delete(["new-one"])
    with pytest.raises(cellar.NotFoundError):
        index.update([{"id": "missing", "text": HARP}])
    with pytest.raises(cellar.InvalidInputError, match="colour"):
        index.add({"id": "x", "text": "y", "colour": "red"})
    with pytest.raises(cellar.InvalidInputError, match="dimension"):
        index.add({"id": "x", "vectors": {"tokens": np.ones((2, 3), dtype=np.float32)}})
    with pytest.raises(cellar.InvalidInputError, match="ops must hold"):
        index.delete([])
    assert len(index) == before
    with pytest.raises(cellar.LockedError):
        cellar.Index.open(written).delete(existing)


def test_metadata_filters_search_and_delete(written: Path) -> None:
    index = cellar.Index.open(written)
    before = len(index)
    index.add(
        [
            {"id": f"m{i}", "text": f"{HARP} number {i}", "metadata": {"lang": "en" if i % 2 else "fr", "year": 2000 + i}}
            for i in range(6)
        ]
    )
    only_en = {"and": [{"eq": {"field": "lang", "value": "en"}}, {"range": {"field": "year", "lt": 2005}}]}
    for mode in MODES + ["dense"]:
        hits = index.search("harp strings plucked", mode=mode, k=10, filter=only_en)
        assert sorted(hits.ids) == ["m1", "m3"], mode
    assert index.get("m3")["metadata"] == {"lang": "en", "year": 2003}
    with pytest.raises(cellar.InvalidInputError, match="filter: range needs a bound"):
        index.search("harp", filter={"range": {"field": "year"}})
    with pytest.raises(cellar.InvalidInputError, match="metadata"):
        index.add({"id": "bad", "text": HARP, "metadata": {"nested": {"a": 1}}})
    with pytest.raises(TypeError, match="filter"):
        index.evaluate({"q": "harp"}, {"q": {"m1": 1}}, filter=only_en)
    report = index.delete(filter={"eq": {"field": "lang", "value": "fr"}})
    assert report["deleted"] == 3
    assert len(index) == before + 3
    assert index.get("m0") is None


def test_a_reader_sees_what_another_handle_wrote_at_its_next_read(written: Path) -> None:
    """Issue 43.1: an `Index` that does not write follows another writer's commits (another
    handle here; `cellar add` or a server alike) at its next search, batch or get."""
    reader = cellar.Index.open(written)
    assert reader.get("harp") is None
    writer = cellar.Index.open(written)
    writer.add([{"id": "harp", "title": "Harp", "text": HARP}])
    assert reader.get("harp")["text"] == HARP
    assert top(reader, "harp strings plucked by the fingers", "bm25")[0] == "harp"
    writer.delete("harp")
    found = reader.search_batch(["harp strings plucked by the fingers"], mode="bm25", k=5)[0]
    assert "harp" not in list(found.ids)
    assert reader.get("harp") is None
    assert len(reader) == len(writer)
