"""Tests of `cellar.Stream`: streaming collections from Python (writes, reads, deletes, exact
per-group search with the model or caller vectors, filters, persistence, errors, threads)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import cellar

NOTES = {
    "ana": {
        "n1": "Sourdough bread needs a starter, flour, water and salt",
        "n2": "Book the dentist appointment for next Tuesday",
        "n3": "The volcano erupted and lava reached the sea",
    },
    "ben": {"m1": "Recipe: rye bread with caraway seeds", "m2": "Quarterly tax return due in April"},
}


def axis(i: int, dim: int = 4) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(dim)]


@pytest.fixture()
def notes(tmp_path: Path) -> cellar.Stream:
    stream = cellar.Stream.open(tmp_path / "notes")
    docs = [
        {"group": g, "id": i, "text": t, "metadata": {"len": len(t), "first": i == "n1"}}
        for g, texts in NOTES.items()
        for i, t in texts.items()
    ]
    stream.put_batch(docs)
    return stream


def test_text_is_encoded_and_search_stays_in_its_group(notes: cellar.Stream) -> None:
    assert notes.dim == 384
    hits = notes.search("ana", "baking bread", k=10)
    assert [h["id"] for h in hits][0] == "n1"
    assert {h["id"] for h in hits} == set(NOTES["ana"]), "only ana's notes"
    assert hits[0]["text"] == NOTES["ana"]["n1"]
    assert hits == sorted(hits, key=lambda h: -h["score"])
    assert [h["id"] for h in notes.search("ben", "bread", k=1, mode="pooled")] == ["m1"]
    assert [h["id"] for h in notes.search("ana", "bread", filter={"first": True})] == ["n1"]
    assert [h["id"] for h in notes.search("ana", "anything", require_terms="LAVA sea")] == ["n3"]
    assert notes.search("ana", "bread", include_text=False)[0]["text"] is None


def test_get_update_delete_and_reopen(notes: cellar.Stream, tmp_path: Path) -> None:
    doc = notes.get("ana", "n2")
    assert doc["text"] == NOTES["ana"]["n2"] and len(doc["tokens"][0]) == 384
    assert doc["metadata"] == {"len": len(NOTES["ana"]["n2"]), "first": False}
    notes.put("ana", "n2", "Dentist moved to Wednesday")
    assert notes.get("ana", "n2")["text"] == "Dentist moved to Wednesday"
    notes.delete("ana", "n3")
    with pytest.raises(cellar.NotFoundError) as e:
        notes.get("ana", "n3")
    assert e.value.code == "not_found" and isinstance(e.value, KeyError)
    with pytest.raises(cellar.NotFoundError):
        notes.delete("ana", "n3")
    notes.flush()
    assert notes.stats()["segments"] == 1
    notes.put("ana", "n4", "Buy more flour")
    # One opener at a time (issue 21.2): a second handle would append to the same log.
    with pytest.raises(cellar.LockedError, match="open elsewhere") as e:
        cellar.Stream.open(tmp_path / "notes")
    assert e.value.code == "locked"
    notes.close()
    assert "closed" in repr(notes)
    with pytest.raises(cellar.InvalidInputError, match="closed"):
        notes.get("ana", "n1")
    reopened = cellar.Stream.open(tmp_path / "notes")
    assert {h["id"] for h in reopened.search("ana", "flour")} == {"n1", "n2", "n4"}
    assert reopened.compact() is False, "one segment: nothing to merge"
    assert "segments=1" in repr(reopened)
    with reopened:
        assert reopened.get("ana", "n4")["text"] == "Buy more flour"
    with cellar.Stream.open(tmp_path / "notes") as again:
        assert again.stats()["segments"] == 1


def test_caller_vectors_and_numpy_like_arrays(tmp_path: Path) -> None:
    stream = cellar.Stream.open(tmp_path / "vec", dim=4)
    stream.put("g", "x", "x", tokens=[axis(0), axis(1)])
    stream.put("g", "y", "y", tokens=[axis(2)], pooled=axis(2))

    class Array:  # anything with tolist() is accepted, as NumPy arrays are
        def __init__(self, rows: list[list[float]]) -> None:
            self.rows = rows

        def tolist(self) -> list[list[float]]:
            return self.rows

    stream.put("g", "z", "z", tokens=Array([axis(3)]))
    assert [h["id"] for h in stream.search("g", query_tokens=[axis(2)], k=1)] == ["y"]
    assert [h["id"] for h in stream.search("g", query_tokens=Array([axis(3)]), k=1)] == ["z"]
    assert [h["id"] for h in stream.search("g", mode="pooled", query_pooled=axis(2), k=1)] == ["y"]
    assert stream.get("g", "x")["tokens"] == [axis(0), axis(1)]


def test_a_stream_takes_its_codec_from_an_index(tmp_path: Path) -> None:
    import json
    import random

    rng = random.Random(5)
    dim = 16

    def vectors(n: int) -> list[list[float]]:
        return [[rng.uniform(-1, 1) for _ in range(dim)] for _ in range(n)]

    source = tmp_path / "source"
    arrays = [np.array(vectors(4), dtype=np.float32) for _ in range(150)]
    cellar.Index.from_embeddings(str(source), [f"s{i}" for i in range(150)], arrays, codec="residual2", ivf=False)
    stream = cellar.Stream.open(tmp_path / "small", dim=dim, codec_from=str(source))
    assert json.loads((tmp_path / "small" / "index.json").read_text())["codec"] == "residual2"
    docs = {f"d{i}": vectors(3) for i in range(20)}
    for doc_id, tokens in docs.items():
        stream.put("g", doc_id, doc_id, tokens=tokens)
    hits = stream.search("g", query_tokens=docs["d7"], k=1)
    assert [h["id"] for h in hits] == ["d7"]
    stored = stream.get("g", "d7")["tokens"]
    assert len(stored) == 3 and stored != docs["d7"], "stored as residual2 codes, decoded"
    with pytest.raises(cellar.InvalidInputError, match="codec_from"):
        cellar.Stream.open(tmp_path / "wide", dim=2 * dim, codec_from=str(source))


def test_bad_input_raises_typed_errors(tmp_path: Path) -> None:
    stream = cellar.Stream.open(tmp_path / "bad", dim=4)
    stream.put("g", "d", "t", tokens=[axis(0)])
    cases = [
        (lambda: stream.put("g", "d", "t", tokens=[[1.0, 2.0]]), cellar.InvalidInputError, "dimension"),
        (lambda: stream.put("", "d", "t", tokens=[axis(0)]), cellar.InvalidInputError, "group"),
        (lambda: stream.put("g", "d", ""), cellar.InvalidInputError, "neither text nor tokens"),
        (lambda: stream.put("g", "d", "t", tokens=[[float("nan")] * 4]), cellar.InvalidInputError, "finite"),
        (lambda: stream.put("g", "d", "t", tokens=[axis(0)], metadata={"a": [1]}), cellar.InvalidInputError, "metadata"),
        (lambda: stream.put("g", "d", "x" * (2 << 20), tokens=[axis(0)]), cellar.InvalidInputError, "over the limit"),
        (lambda: stream.put_batch([{"id": "x", "text": "t"}]), cellar.InvalidInputError, "no group"),
        (lambda: stream.put_batch([{"group": "g", "id": "x", "txt": "t"}]), cellar.InvalidInputError, "unknown field"),
        (lambda: stream.search("nobody", query_tokens=[axis(0)]), cellar.NotFoundError, "nobody"),
        (lambda: stream.search("g", query_tokens=[axis(0)], k=0), cellar.InvalidInputError, "k must be"),
        (lambda: stream.search("g", query_tokens=[axis(0)], mode="fuzzy"), cellar.InvalidInputError, "mode"),
        (lambda: stream.search("g", query_tokens=[[1.0]]), cellar.InvalidInputError, "dimension"),
        (lambda: stream.get("g", "zzz"), cellar.NotFoundError, "zzz"),
        (lambda: cellar.Stream.open(tmp_path / "bad", dim=8), cellar.InvalidInputError, "dimension"),
    ]
    for call, error, needle in cases:
        with pytest.raises(error) as info:
            call()
        assert needle in str(info.value), str(info.value)
    assert stream.get("g", "d")["tokens"] == [axis(0)], "failed writes changed nothing"


def test_a_background_flush_is_committed_by_flush_and_loses_nothing(tmp_path: Path) -> None:
    stream = cellar.Stream.open(tmp_path / "bg", dim=4, fsync=False, memtable_bytes=512, background_flush=True)
    for i in range(80):
        stream.put("g", f"d{i}", "t", tokens=[axis(i % 4)])
    stream.flush()
    stats = stream.stats()
    assert stats["flushes"] > 0 and stats["memtable_entries"] == 0, stats
    assert len(stream.search("g", query_tokens=[axis(1)], k=100)) == 80
    stream.close()
    again = cellar.Stream.open(tmp_path / "bg", background_flush=True)
    assert len(again.search("g", query_tokens=[axis(1)], k=100)) == 80


def write_and_search(stream: "cellar.Stream", g: int, errors: list[BaseException]) -> None:
    """Sixty puts into group `g`, each followed by a search of it; failures go to `errors`."""
    try:
        for i in range(60):
            stream.put(f"g{g}", f"g{g}-{i}", "t", tokens=[axis(i % 4)])
            for hit in stream.search(f"g{g}", query_tokens=[axis(0)], k=5):
                assert hit["id"].startswith(f"g{g}-")
    except BaseException as e:  # noqa: BLE001 - reported by the caller
        errors.append(e)


def test_threads_write_and_search_one_stream(tmp_path: Path) -> None:
    stream = cellar.Stream.open(tmp_path / "threads", dim=4, fsync=False, memtable_bytes=4096)
    errors: list[BaseException] = []
    threads = [threading.Thread(target=write_and_search, args=(stream, g, errors)) for g in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert stream.stats()["flushes"] > 0
    assert len(stream.search("g2", query_tokens=[axis(1)], k=100)) == 60


def test_threads_writing_with_background_flushes_all_finish(tmp_path: Path) -> None:
    """Four threads writing and searching one stream whose flushes run in the background (the
    compaction thread waiting for each segment beside the writers): every thread ends, which
    the test above cannot see (it joins with a timeout and goes on), and nothing is lost."""
    stream = cellar.Stream.open(
        tmp_path / "threads", dim=4, fsync=False, memtable_bytes=4096, background_flush=True
    )
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=write_and_search, args=(stream, g, errors), daemon=True) for g in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not [t.name for t in threads if t.is_alive()], "a writer thread hung"
    assert not errors, errors
    stream.flush()
    assert stream.stats()["flushes"] > 0
    for g in range(4):
        assert len(stream.search(f"g{g}", query_tokens=[axis(1)], k=100)) == 60
