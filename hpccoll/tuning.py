"""What ``algorithm="auto"`` resolves to.

The built-in rule per collective comes from the measurements recorded in ``perf/`` (MPICH
wheel, shared memory, 2-4 ranks): the direct algorithms win where the endpoint can keep all
transfers in flight at once; the ring ones when the per-rank data is large and p grows.
Only algorithms whose constraints hold for the call are candidates.
"""

from __future__ import annotations

from . import registry
from .schedule import Call

# (collective) -> list of (largest message in bytes, algorithm); the last entry is open-ended
RULES: dict[str, list[tuple[float, str]]] = {
    "allgather": [(float("inf"), "direct")],
    "alltoall": [(float("inf"), "direct")],
    "alltoallv": [(float("inf"), "direct")],
    "reduce_scatter": [(float("inf"), "direct")],
    "allreduce": [(float("inf"), "ring")],
}


def choose(call: Call, nbytes: int) -> str:
    """The algorithm ``auto`` picks for ``call`` moving ``nbytes`` (the collective's size
    in the benchmark's convention)."""
    for limit, name in RULES[call.collective]:
        if nbytes <= limit and registry.get(call.collective, name).violated(call) is None:
            return name
    return registry.NATIVE
