"""Sharded collections: one collection split over several Cellar indexes, searched so that the
merged answer ranks as one index of all their documents would.

- :func:`build`, :func:`from_embeddings`: documents placed on ``shards`` shards by a stable
  hash of their id (:func:`shard_of`), each shard an ordinary index folder, built in parallel
  as Ray tasks; ``cluster.json`` (:class:`Manifest`) lists the shards and the rule.
- :class:`StreamCluster`: a streaming collection over several streams, each group on its
  home shard until it outgrows ``split_docs`` writes, then spread over the next shards.
- :class:`LocalCluster`: every shard opened in this process, searched in parallel threads.
- ``cellar.cluster.serve``: the same search on Ray Serve, a deployment per shard (replicas set
  the query capacity) behind a router with ``cellar serve``'s HTTP API.

Ray is optional: only ``ray=True`` builds and ``cellar.cluster.serve`` import it.
"""

from ._build import build, from_embeddings
from ._manifest import MANIFEST_FILE, PARTITION_RULE, Manifest, ShardEntry, shard_name, shard_of
from ._search import LocalCluster, ShardsUnavailable, search, split_write, write
from ._stream import STREAMS_FILE, StreamCluster

__all__ = [
    "build",
    "from_embeddings",
    "LocalCluster",
    "Manifest",
    "ShardEntry",
    "ShardsUnavailable",
    "StreamCluster",
    "STREAMS_FILE",
    "MANIFEST_FILE",
    "PARTITION_RULE",
    "search",
    "shard_name",
    "shard_of",
    "split_write",
    "write",
]
