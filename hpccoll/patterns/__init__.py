"""The workloads the collectives exist for, built on them (any algorithm, ``auto`` by default).

- :mod:`.sharding`: a sequence axis sharded over the ranks (``contiguous``, ``zigzag``,
  ``tasp`` layouts): :func:`shard`, :func:`unshard`.
- :mod:`.resharding`: tensor-parallel (hidden-sharded) <-> sequence-parallel activations by
  one all-to-all: :func:`tp_to_sp`, :func:`sp_to_tp`.
- :mod:`.moe`: mixture-of-experts over expert parallelism: :func:`dispatch` sends each token's
  top-k slots to their experts' ranks, :func:`combine` brings the outputs back weighted.
- :mod:`.sequence_attention`: sequence-parallel attention (``ring``, ``zigzag``, ``tasp``
  layouts, causal or not; the TASP paper): :func:`attention`, :func:`attention_backward`.
"""

from .moe import MoEHandle, combine, default_owner, dispatch
from .resharding import sp_to_tp, tp_to_sp
from .sequence_attention import ATTENTION_LAYOUTS, attention, attention_backward
from .sharding import LAYOUTS, positions, shard, split_counts, unshard

__all__ = ["ATTENTION_LAYOUTS", "LAYOUTS", "MoEHandle", "attention", "attention_backward",
           "combine", "default_owner", "dispatch", "positions", "shard", "sp_to_tp",
           "split_counts", "tp_to_sp", "unshard"]
