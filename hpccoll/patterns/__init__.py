"""The workloads the collectives exist for, built on them (any algorithm, ``auto`` by default).

- :mod:`.sharding`: a sequence axis sharded over the ranks (``contiguous``, ``zigzag``,
  ``tasp`` layouts): :func:`shard`, :func:`unshard`.
- :mod:`.resharding`: tensor-parallel (hidden-sharded) <-> sequence-parallel activations by
  one all-to-all: :func:`tp_to_sp`, :func:`sp_to_tp`.
"""

from .resharding import sp_to_tp, tp_to_sp
from .sharding import LAYOUTS, positions, shard, split_counts, unshard

__all__ = ["LAYOUTS", "positions", "shard", "sp_to_tp", "split_counts", "tp_to_sp",
           "unshard"]
