"""Where a collective's bytes go on a platform: the traffic of its planned programs by level.

Every link of a platform names its level (node, nic, host, spine, pod, core, dimN, local,
global; :class:`~hpccoll.sim.parts.NetLink`), the levels ordered as the platform first lists
them (low to high).  For each message of the programs (a step's messages between two ranks
as the replay sends them: one flow) this counts

- ``reach``: its bytes under the highest level its route climbs (a message within a leaf
  stays at ``host``; one across the spine reaches ``spine``): these add up to the bytes sent;
- ``link_bytes``: its bytes on every link it crosses, summed per level (a fat-tree message
  between pods puts its bytes on two host, two pod and two core links);
- the busiest link: the most bytes any one link carries, and its name.

It needs no simulation: the routes are the platform's (:attr:`Platform.route`), the same
SimGrid's zones compute (tested).  Message sizes are the programs' own, so what an
algorithm's schedule sends is what is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedule import Program
from .parts import Platform


@dataclass(frozen=True)
class Traffic:
    total: int                      # bytes sent between ranks (every message once)
    reach: dict[str, int]           # bytes by the highest level their route climbs
    link_bytes: dict[str, int]      # bytes times links crossed, by level
    busiest: int                    # bytes on the busiest link
    busiest_link: str

    def as_dict(self) -> dict:
        return {"bytes": self.total, "reach": self.reach, "link_bytes": self.link_bytes,
                "busiest_link_bytes": self.busiest, "busiest_link": self.busiest_link}


def levels(platform: Platform) -> list[str]:
    """The platform's levels, low to high (the order its links first name them)."""
    return list(dict.fromkeys(link.level for link in platform.links))


def pair_bytes(programs: list[Program], itemsize: int) -> dict[tuple[int, int], int]:
    """Bytes each ordered pair of ranks sends, summed over every step (a replay counts them
    from its flattened job: :func:`hpccoll.sim.compiled.pair_bytes`)."""
    sent: dict[tuple[int, int], int] = {}
    for rank, program in enumerate(programs):
        for step in program.steps:
            for send in step.sends:
                key = (rank, send.peer)
                sent[key] = sent.get(key, 0) + send.count * itemsize
    return sent


def traffic(platform: Platform, sent: dict[tuple[int, int], int]) -> Traffic:
    """The :class:`Traffic` on ``platform`` of the bytes ``sent`` between ordered pairs of
    ranks (:func:`pair_bytes`)."""
    order = levels(platform)
    rank_of = {name: i for i, name in enumerate(order)}
    level = [rank_of[link.level] for link in platform.links]
    load = [0] * len(platform.links)
    reach = [0] * len(order)
    total = 0
    route = platform.route
    for (src, dst), nbytes in sent.items():
        if src == dst:
            continue
        total += nbytes
        top = 0
        for i in route(src, dst):
            load[i] += nbytes
            if level[i] > top:
                top = level[i]
        reach[top] += nbytes
    per_level = [0] * len(order)
    for i, nbytes in enumerate(load):
        per_level[level[i]] += nbytes
    busiest = max(range(len(load)), key=load.__getitem__) if load else 0
    return Traffic(total, dict(zip(order, reach)), dict(zip(order, per_level)),
                   load[busiest] if load else 0,
                   platform.links[busiest].name if load else "")
