"""The workloads the collectives exist for, built on them (any algorithm, ``auto`` by default).

- :mod:`.sharding`: a sequence axis sharded over the ranks (``contiguous``, ``zigzag``,
  ``tasp`` layouts): :func:`shard`, :func:`unshard`.
"""

from .sharding import LAYOUTS, positions, shard, split_counts, unshard

__all__ = ["LAYOUTS", "positions", "shard", "split_counts", "unshard"]
