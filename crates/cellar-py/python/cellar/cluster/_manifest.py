"""The partitioning rule and the cluster manifest (``cluster.json``) of a sharded collection."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._errors import CorruptedError, InvalidInputError, NotFoundError

#: The manifest's file name in a sharded collection's folder.
MANIFEST_FILE = "cluster.json"
#: The manifest's format version.
MANIFEST_VERSION = 1
#: How ids map to shards: the first 8 bytes of BLAKE2b of the id's UTF-8, big-endian, modulo the
#: shard count. Stable across processes, machines and Python versions (unlike ``hash``).
PARTITION_RULE = "blake2b64-mod"


def shard_of(doc_id: str, shards: int) -> int:
    """The shard that owns ``doc_id`` in a collection of ``shards`` shards."""
    if shards < 1:
        raise InvalidInputError(f"a sharded collection has at least 1 shard, got {shards}")
    digest = hashlib.blake2b(str(doc_id).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def shard_name(i: int) -> str:
    """The folder name of shard ``i`` (``shard-007``)."""
    return f"shard-{i:03d}"


@dataclass
class ShardEntry:
    """One shard: its folder (relative to the manifest) and what it held when built."""

    name: str
    docs: int
    built: str


@dataclass
class Manifest:
    """A sharded collection: its shards in order and the rule that places ids on them."""

    shards: list[ShardEntry]
    partition: str = PARTITION_RULE
    version: int = MANIFEST_VERSION
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    @property
    def count(self) -> int:
        """How many shards the collection has."""
        return len(self.shards)

    def shard_of(self, doc_id: str) -> int:
        """The shard that owns ``doc_id`` (:func:`shard_of` with this collection's count)."""
        return shard_of(doc_id, self.count)

    def paths(self, root: str | os.PathLike[str]) -> list[Path]:
        """Each shard's folder under the collection's folder ``root``, in shard order."""
        return [Path(root) / s.name for s in self.shards]

    def save(self, root: str | os.PathLike[str]) -> None:
        """Writes ``root/cluster.json`` atomically (a temp file renamed over it)."""
        path = Path(root) / MANIFEST_FILE
        tmp = path.with_suffix(".json.tmp")
        body = {"version": self.version, "partition": self.partition, "created": self.created,
                "shards": [asdict(s) for s in self.shards]}
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @staticmethod
    def load(root: str | os.PathLike[str]) -> "Manifest":
        """Reads ``root/cluster.json``: ``NotFoundError`` when there is none, ``CorruptedError``
        when it is not one this version reads."""
        path = Path(root) / MANIFEST_FILE
        if not path.is_file():
            raise NotFoundError(f"{path}: no sharded collection here (build one with cellar.cluster.build)")
        try:
            body: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            if body.get("version") != MANIFEST_VERSION:
                raise CorruptedError(f"{path}: manifest version {body.get('version')!r}, this cellar reads {MANIFEST_VERSION}")
            if body.get("partition") != PARTITION_RULE:
                raise CorruptedError(f"{path}: partitioning rule {body.get('partition')!r} is unknown (expected {PARTITION_RULE})")
            shards = [ShardEntry(name=str(s["name"]), docs=int(s["docs"]), built=str(s["built"])) for s in body["shards"]]
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptedError(f"{path}: not a cluster manifest: {e}") from None
        if not shards:
            raise CorruptedError(f"{path}: a cluster manifest names at least one shard")
        return Manifest(shards=shards, partition=body["partition"], version=body["version"], created=str(body.get("created", "")))
