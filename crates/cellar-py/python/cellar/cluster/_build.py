"""Building a sharded collection: documents split by the partitioning rule, each shard an
ordinary Cellar index folder, built in parallel as Ray tasks (or one after the other here)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import _cellar
from .._errors import InvalidInputError
from ._manifest import MANIFEST_FILE, Manifest, ShardEntry, shard_name, shard_of

#: The folder a build splits the corpus into before building each shard (removed after).
SPLIT_DIR = "_split"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _check_out(out: Path, shards: int) -> None:
    if shards < 1:
        raise InvalidInputError(f"shards must be at least 1, got {shards}")
    if (out / MANIFEST_FILE).exists():
        raise InvalidInputError(f"{out} already holds a sharded collection; choose an empty folder")


def _corpus_file(source: Path) -> Path:
    corpus = source / "corpus.jsonl" if source.is_dir() else source
    if not corpus.is_file():
        raise InvalidInputError(f"{source}: expected a BEIR folder with corpus.jsonl, or a corpus.jsonl")
    return corpus


def _split(corpus: Path, split: Path, shards: int) -> list[int]:
    """Writes each document's line to its shard's ``corpus.jsonl``; returns the counts."""
    counts = [0] * shards
    files = []
    for i in range(shards):
        (split / shard_name(i)).mkdir(parents=True, exist_ok=True)
        files.append(open(split / shard_name(i) / "corpus.jsonl", "w", encoding="utf-8"))
    try:
        with open(corpus, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    doc_id = json.loads(line)["_id"]
                except (ValueError, KeyError, TypeError):
                    raise InvalidInputError(f"{corpus}:{n}: not a JSON object with an \"_id\"") from None
                s = shard_of(str(doc_id), shards)
                files[s].write(line if line.endswith("\n") else line + "\n")
                counts[s] += 1
    finally:
        for f in files:
            f.close()
    if not any(counts):
        raise InvalidInputError(f"{corpus}: no documents")
    return counts


def _build_shard(source: str, out: str, kwargs: dict[str, Any]) -> int:
    return len(_cellar.Index.build(source, out, **kwargs))


def _embed_shard(out: str, columns: dict[str, Any], kwargs: dict[str, Any]) -> int:
    return len(_cellar.Index.from_embeddings(out, **columns, **kwargs))


def _run(tasks: list[tuple[Any, tuple]], use_ray: bool, cpus: float) -> list[Any]:
    """Runs each ``(function, args)``: as Ray tasks of ``cpus`` CPUs each, or here in order."""
    if not use_ray:
        return [fn(*args) for fn, args in tasks]
    import ray

    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init()
    refs = [ray.remote(num_cpus=cpus)(fn).remote(*args) for fn, args in tasks]
    return ray.get(refs)


def _run_sharing_codec(
    tasks: list[tuple[Any, tuple]], out: Path, options: dict[str, Any], use_ray: bool, cpus: float
) -> list[Any]:
    """Runs the shard builds so that they share one codec (and PCA): the caller's
    ``codec_from`` when given; else shard 0 fits one and the others, in parallel, take it."""
    if options.get("codec_from") is not None:
        return _run(tasks, use_ray, cpus)
    first = _run(tasks[:1], use_ray, cpus)
    shared = {**options, "codec_from": str(out / shard_name(0))}
    rest = [(fn, (*args[:-1], shared)) for fn, args in tasks[1:]]
    return first + _run(rest, use_ray, cpus)


def build(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    shards: int,
    ray: bool = False,
    task_cpus: float = 1,
    **index_options: Any,
) -> Manifest:
    """Builds a sharded collection in ``out`` from a BEIR folder (or a ``corpus.jsonl``):
    each document goes to the shard its id hashes to (:func:`shard_of`), each shard is built by
    :meth:`cellar.Index.build` with ``index_options`` (as Ray tasks of ``task_cpus`` CPUs when
    ``ray``, else one after the other), and ``cluster.json`` is written last, so a folder with
    a manifest is complete. Returns the manifest.

    The shards share one codec (and PCA): shard 0 fits it and the others take it
    (``codec_from``), or all take an existing index's when ``codec_from`` names one, so a
    document's MaxSim is the same on any shard; each shard has its own IVF.
    """
    out = Path(out)
    _check_out(out, shards)
    split = out / SPLIT_DIR
    shutil.rmtree(split, ignore_errors=True)
    counts = _split(_corpus_file(Path(source)), split, shards)
    if 0 in counts:
        raise InvalidInputError(
            f"shard {counts.index(0)} of {shards} would be empty: {sum(counts)} documents are too few for {shards} shards"
        )
    tasks = [(_build_shard, (str(split / shard_name(i)), str(out / shard_name(i)), index_options)) for i in range(shards)]
    docs = _run_sharing_codec(tasks, out, index_options, ray, task_cpus)
    shutil.rmtree(split, ignore_errors=True)
    manifest = Manifest(shards=[ShardEntry(shard_name(i), int(d), _now()) for i, d in enumerate(docs)])
    manifest.save(out)
    return manifest


def from_embeddings(
    out: str | os.PathLike[str],
    ids: Iterable[str],
    doc_vectors: Iterable[Any],
    texts: Iterable[str] | None = None,
    pooled: Iterable[Any] | None = None,
    metadata: Iterable[Mapping[str, Any] | None] | None = None,
    *,
    shards: int,
    ray: bool = False,
    task_cpus: float = 1,
    **index_options: Any,
) -> Manifest:
    """:func:`build` from the caller's vectors: the columns of :meth:`cellar.Index.from_embeddings`
    split by id over ``shards`` shards, each built by it, sharing one codec as :func:`build`'s."""
    out = Path(out)
    _check_out(out, shards)
    ids = [str(i) for i in ids]
    columns: dict[str, list[Any] | None] = {
        "doc_vectors": list(doc_vectors),
        "texts": None if texts is None else list(texts),
        "pooled": None if pooled is None else list(pooled),
        "metadata": None if metadata is None else list(metadata),
    }
    for name, column in columns.items():
        if column is not None and len(column) != len(ids):
            raise InvalidInputError(f"{name} has {len(column)} items for {len(ids)} ids")
    owner = [shard_of(i, shards) for i in ids]
    tasks = []
    for s in range(shards):
        rows = [r for r, o in enumerate(owner) if o == s]
        if not rows:
            raise InvalidInputError(f"shard {s} of {shards} would be empty: {len(ids)} documents are too few")
        part: dict[str, Any] = {"ids": [ids[r] for r in rows]}
        for name, column in columns.items():
            if column is not None:
                part[name] = [column[r] for r in rows]
        tasks.append((_embed_shard, (str(out / shard_name(s)), part, index_options)))
    docs = _run_sharing_codec(tasks, out, index_options, ray, task_cpus)
    manifest = Manifest(shards=[ShardEntry(shard_name(i), int(d), _now()) for i, d in enumerate(docs)])
    out.mkdir(parents=True, exist_ok=True)
    manifest.save(out)
    return manifest
