"""The workloads the collectives exist for, built on them (any algorithm, ``auto`` by default).

- :mod:`.sharding`: a sequence axis sharded over the ranks (``contiguous``, ``zigzag``,
  ``tasp`` layouts): :func:`shard`, :func:`unshard`.
- :mod:`.moe`: mixture-of-experts over expert parallelism: :func:`dispatch` sends each token's
  top-k slots to their experts' ranks, :func:`combine` brings the outputs back weighted.
"""

from .moe import MoEHandle, combine, default_owner, dispatch
from .sharding import LAYOUTS, positions, shard, split_counts, unshard

__all__ = ["LAYOUTS", "positions", "shard", "split_counts", "unshard"]
__all__ += ["MoEHandle", "combine", "default_owner", "dispatch"]
