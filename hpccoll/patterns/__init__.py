"""The workloads the collectives exist for, built on them (any algorithm, ``auto`` by default).

- :mod:`.sharding`: a sequence axis sharded over the ranks (``contiguous``, ``zigzag``,
  ``tasp`` layouts): :func:`shard`, :func:`unshard`.
- :mod:`.attention`: sequence-parallel attention (``ring``, ``zigzag``, ``tasp`` layouts,
  causal or not; the TASP paper): :func:`attention`, :func:`attention_backward`.
"""

from .attention import ATTENTION_LAYOUTS, attention, attention_backward
from .sharding import LAYOUTS, positions, shard, split_counts, unshard

__all__ = ["ATTENTION_LAYOUTS", "LAYOUTS", "attention", "attention_backward", "positions", "shard",
           "split_counts", "unshard"]
