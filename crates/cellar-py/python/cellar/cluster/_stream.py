"""Sharded streaming collections: per-user (group) documents spread over several
:class:`cellar.Stream` shards. A group lives on its home shard (:func:`shard_of` of the group);
once it has had more than ``split_docs`` documents written it widens over the next shards (up to
all of them, one more per ``split_docs``: Vespa's rule for groups that outgrow a node), its new
documents placed by a hash of (group, id) over its shards. A search of a group scans every
shard of its set in parallel, exactly, and merges the hits by score (exact MaxSim scores need
no collection statistics, so the merge is what one stream would answer).

The set of widened groups, with each group's count of writes, is ``streams.json``; it only
grows wider, so a document is always on one shard of its group's set (an update that lands on
another shard than the old version removes the old one)."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .. import _cellar, _errors
from ._manifest import shard_name, shard_of

#: The sharded stream's registry in its folder.
STREAMS_FILE = "streams.json"
STREAMS_VERSION = 1


def _placement(group: str, doc_id: str, width: int) -> int:
    """Which of a widened group's ``width`` shards holds (group, id): the partitioning rule
    applied to the pair."""
    return shard_of(f"{group}\0{doc_id}", width)


class StreamCluster:
    """A streaming collection over ``shards`` :class:`cellar.Stream` shards in ``path``
    (created on first open with ``shards``, ``dim`` and ``split_docs``; reopened as saved)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        shards: int | None = None,
        dim: int | None = None,
        split_docs: int = 100_000,
        model: str | os.PathLike[str] | None = None,
        fsync: bool = True,
    ):
        self.path = Path(path)
        registry = self.path / STREAMS_FILE
        if registry.is_file():
            saved = json.loads(registry.read_text(encoding="utf-8"))
            if saved.get("version") != STREAMS_VERSION:
                raise _errors.CorruptedError(f"{registry}: version {saved.get('version')!r}, this cellar reads {STREAMS_VERSION}")
            if shards is not None and shards != saved["shards"]:
                raise _errors.InvalidInputError(f"{self.path} holds {saved['shards']} shards, not {shards}")
            self.shards_count, self.split_docs = int(saved["shards"]), int(saved["split_docs"])
            self.groups: dict[str, dict[str, int]] = {g: dict(v) for g, v in saved["groups"].items()}
        else:
            if shards is None or shards < 1:
                raise _errors.InvalidInputError("a new sharded stream needs shards >= 1")
            if split_docs < 1:
                raise _errors.InvalidInputError(f"split_docs must be at least 1, got {split_docs}")
            self.shards_count, self.split_docs, self.groups = shards, split_docs, {}
            self.path.mkdir(parents=True, exist_ok=True)
            self._save()
        self.shards = [
            _cellar.Stream.open(self.path / shard_name(i), dim=dim, model=model, fsync=fsync)
            for i in range(self.shards_count)
        ]
        self._small: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(2, self.shards_count))

    def _save(self) -> None:
        body = {"version": STREAMS_VERSION, "shards": self.shards_count, "split_docs": self.split_docs, "groups": self.groups}
        tmp = self.path / (STREAMS_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path / STREAMS_FILE)

    def group_shards(self, group: str) -> list[int]:
        """The shards holding ``group``: its home shard and, once widened, the next ones."""
        home = shard_of(group, self.shards_count)
        width = self.groups.get(group, {}).get("width", 1)
        return [(home + j) % self.shards_count for j in range(width)]

    def _place(self, group: str, doc_id: str) -> tuple[int, list[int]]:
        members = self.group_shards(group)
        return members[_placement(group, doc_id, len(members))], members

    def put(self, group: str, id: str, text: str = "", **fields: Any) -> int:
        """Stores (group, id) on its shard, as :meth:`cellar.Stream.put` takes it; an older
        version on another shard of the group is removed. Durable once it returns."""
        with self._lock:
            target, members = self._place(group, id)
            seq = self.shards[target].put(group, id, text, **fields)
            for s in members:
                if s != target and self._holds(s, group, id):
                    self.shards[s].delete(group, id)
            self._count(group, 1)
            return seq

    def _holds(self, shard: int, group: str, doc_id: str) -> bool:
        try:
            return self.shards[shard].get(group, doc_id) is not None
        except _errors.NotFoundError:
            return False

    def _count(self, group: str, writes: int) -> None:
        """Counts writes to ``group`` and widens it by one shard per ``split_docs`` of them.
        Only widened groups are saved (the registry holds the large ones, not every user); a
        smaller group's count restarts with the process, so it may widen later, never wrongly."""
        entry = self.groups.get(group) or self._small.setdefault(group, {"writes": 0, "width": 1})
        entry["writes"] += writes
        width = min(self.shards_count, 1 + entry["writes"] // self.split_docs)
        if width > entry["width"]:
            entry["width"] = width
            self.groups[group] = entry
            self._small.pop(group, None)
            self._save()

    def delete(self, group: str, id: str) -> int:
        """Deletes (group, id) from whichever shard of its group holds it (``NotFoundError``
        when none does)."""
        with self._lock:
            for s in self.group_shards(group):
                if self._holds(s, group, id):
                    return self.shards[s].delete(group, id)
        raise _errors.NotFoundError(f"no document {id!r} in group {group!r}")

    def get(self, group: str, id: str) -> dict[str, Any]:
        """The document ``id`` of ``group`` from whichever shard holds it, as
        :meth:`cellar.Stream.get` answers (``NotFoundError`` when none does)."""
        for s in self.group_shards(group):
            try:
                found = self.shards[s].get(group, id)
            except _errors.NotFoundError:
                continue
            if found is not None:
                return found
        raise _errors.NotFoundError(f"no document {id!r} in group {group!r}")

    def search(self, group: str, query: str | None = None, *, k: int = 10, **params: Any) -> list[dict[str, Any]]:
        """The exact top-``k`` of ``group`` over its shards, scanned in parallel, as
        :meth:`cellar.Stream.search` answers one stream (``NotFoundError`` when no shard holds
        the group)."""
        members = self.group_shards(group)

        def one(s: int) -> list[dict[str, Any]] | None:
            try:
                return self.shards[s].search(group, query, k=k, **params)
            except _errors.NotFoundError:
                return None

        parts = list(self._pool.map(one, members))
        if all(p is None for p in parts):
            raise _errors.NotFoundError(f"no group {group!r} in this collection")
        hits = [h for p in parts if p for h in p]
        hits.sort(key=lambda h: (-h["score"], h["id"]))
        return hits[:k]

    def flush(self) -> None:
        """Writes every shard's buffered documents to a segment."""
        for s in self.shards:
            s.flush()

    def close(self) -> None:
        """Closes every shard's stream and the thread pool."""
        self._pool.shutdown(wait=True)
        for s in self.shards:
            s.close()

    def __enter__(self) -> "StreamCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
