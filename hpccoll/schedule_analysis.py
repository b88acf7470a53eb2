"""Analysis of all ranks' programs of a call: bytes across region boundaries, dependency chains.

Pure (no MPI, no data, no network): it reads only the messages of the programs (the RAT
paper's Table 1 measures, for any registered algorithm), the regions being the topology's
(node, rack, pod).  What the messages do to a simulated machine's links -- bytes by the route
each takes -- is :mod:`hpccoll.sim.traffic`'s.

* **Cross-region bytes.**  A message from rank a to rank b crosses the boundary of level l
  (node, rack, pod) when a and b lie in different regions of that level; it counts, in
  bytes (elements x itemsize), as *out* of a's region and *in* to b's.  Per level:
  the total (sum over regions of out = of in) and the largest out and in of any region.
* **Dependency chain.**  Message m2 (sent by rank x in step s2) depends on message m1 when
  x received m1 in a step s1 < s2: the executor starts step s2 only once step s1's receives
  have landed, so a late m1 delays m2.  The chain of a message is 1 + the longest chain
  among the messages it depends on (1 when none); the *dependency chain* of the programs is
  the longest chain of any message: the number of message hops on the critical path
  through the step structure, so the number of hops a stalled link or paused rank can
  hold up in sequence (the RAT paper's "chain blocking").  Ring allreduce: 2(p-1); PS: 2;
  RAT: 2(l+1); recursive doubling: log2 p.
* **Stalled share.**  With one rank paused from the start (the RAT paper's straggler), the share
  of all bytes whose sending must wait for it: its own messages and, transitively, those
  of every rank that receives, in an earlier step, from a rank that must wait.  The rest can
  flow meanwhile.  A ring holds up about 3/4 of its bytes (the stall travels one hop a
  step); PS and RAT about 1/2 (the broadcast half, which needs everyone's data anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from . import registry
from .schedule import Call, Program


@dataclass(frozen=True)
class LevelCrossings:
    """Bytes crossing the boundaries of the regions of one topology level."""

    level: str
    out: tuple[int, ...]        # per region: bytes its ranks send to ranks outside it
    into: tuple[int, ...]       # per region: bytes its ranks receive from outside

    @property
    def total(self) -> int:
        """Bytes crossing any boundary of this level (each message counted once)."""
        return sum(self.out)

    @property
    def max_out(self) -> int:
        return max(self.out, default=0)

    @property
    def max_in(self) -> int:
        return max(self.into, default=0)


@dataclass(frozen=True)
class Analysis:
    """What the programs of all ranks send: totals, per-level crossings, dependency chain."""

    messages: int
    bytes: int                  # all bytes sent
    max_rank_bytes: int         # the most bytes any one rank sends
    rounds: int                 # steps in which some rank sends
    chain: int                  # longest dependency chain (message hops)
    levels: tuple[LevelCrossings, ...] = ()

    def level(self, name: str) -> LevelCrossings:
        for level in self.levels:
            if level.level == name:
                return level
        raise ValueError(f"no level {name!r} (levels: {[l.level for l in self.levels]})")


def dependency_chain(programs: Sequence[Program]) -> int:
    """The longest dependency chain of ``programs`` (see the module docstring); O(messages)."""
    p = len(programs)
    landed = [0] * p                 # longest chain among messages a rank received so far
    depth = 0
    for s in range(max((len(prog.steps) for prog in programs), default=0)):
        arriving = [0] * p
        for rank, prog in enumerate(programs):
            if s >= len(prog.steps):
                continue
            for send in prog.steps[s].sends:
                chain = landed[rank] + 1
                arriving[send.peer] = max(arriving[send.peer], chain)
                depth = max(depth, chain)
        landed = [max(a, b) for a, b in zip(landed, arriving)]
    return depth


def stalled_share(programs: Sequence[Program], paused: int) -> float:
    """The share of all bytes (elements) whose sending waits for rank ``paused`` (see the
    module docstring); 0 when nothing is sent."""
    waits = [False] * len(programs)
    waits[paused] = True
    total = stalled = 0
    for s in range(max((len(prog.steps) for prog in programs), default=0)):
        reached = []
        for rank, prog in enumerate(programs):
            for send in prog.steps[s].sends if s < len(prog.steps) else ():
                total += send.count
                if waits[rank]:
                    stalled += send.count
                    reached.append(send.peer)
        for rank in reached:
            waits[rank] = True
    return stalled / total if total else 0.0


def analyze(programs: Sequence[Program], topology=None, itemsize: int = 8) -> Analysis:
    """The analysis of one rank's program per rank (``programs[r]`` is rank r's), with the
    region crossings of every level of ``topology`` (none when it is None)."""
    p = len(programs)
    levels = [] if topology is None else list(zip(topology.levels, topology.regions))
    if topology is not None and topology.size != p:
        raise ValueError(f"topology describes {topology.size} ranks, there are {p} programs")
    out = [[0] * (max(regions) + 1) for _, regions in levels]
    into = [[0] * (max(regions) + 1) for _, regions in levels]
    sent = [0] * p
    messages, active = 0, set()
    for rank, prog in enumerate(programs):
        for s, send in prog.messages():
            size = send.count * itemsize
            messages += 1
            sent[rank] += size
            active.add(s)
            for l, (_, regions) in enumerate(levels):
                a, b = regions[rank], regions[send.peer]
                if a != b:
                    out[l][a] += size
                    into[l][b] += size
    return Analysis(messages, sum(sent), max(sent, default=0), len(active),
                    dependency_chain(programs),
                    tuple(LevelCrossings(name, tuple(o), tuple(i))
                          for (name, _), o, i in zip(levels, out, into)))


def analyze_algorithm(collective: str, name: str, calls: Sequence[Call],
                      topology=None) -> Analysis:
    """:func:`analyze` of registered algorithm ``name`` planned for ``calls`` (one per rank);
    the topology defaults to the calls' own."""
    algorithm = registry.get(collective, name)
    why = algorithm.violated(calls[0])
    if why is not None:
        raise ValueError(f"{collective}/{name} cannot serve this call: {why}")
    programs = [algorithm.planner(call) for call in calls]
    return analyze(programs, topology if topology is not None else calls[0].topology,
                   calls[0].itemsize)
