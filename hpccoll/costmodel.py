"""An alpha-beta cost model of schedules, per link class.

A :class:`Machine` gives each link class (``intra``: ranks on one node, ``inter``: ranks on
different nodes) a start-up time alpha, a bandwidth, and whether a rank's concurrent messages
of that class each get a link of their own (a full mesh such as NVSwitch or Infinity Fabric:
the step costs the peer with the most bytes, its messages one stream on its link) or share
one port (a NIC, or a memory bus: the step costs the sum).  A step of a rank costs the larger of its send and receive sides, plus its local
reduction and copy work, plus a fixed software overhead per step; a program costs the sum over
steps of the slowest rank's step.  Steps do not really run in lockstep, so this is an
estimate of the critical path, good for ranking algorithms, not a simulator of contention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable

from . import registry, settings
from .collectives import spec
from .schedule import Call, Copy, Program, Reduce, Step


@dataclass(frozen=True)
class Link:
    alpha: float          # seconds per message
    bandwidth: float      # bytes per second per link
    parallel: bool        # concurrent messages of one rank use separate links


@dataclass(frozen=True)
class Machine:
    name: str
    intra: Link
    inter: Link
    step_overhead: float = 0.0        # software cost of a step with transfers (s)
    reduce_bandwidth: float = 4e9     # bytes/s of a local reduction (per input byte)
    copy_bandwidth: float = 8e9       # bytes/s of a local copy


_SHARED = Link(alpha=1.5e-6, bandwidth=5e9, parallel=False)
MACHINES = {
    # one host, MPI over shared memory, Python driving each step (what CI measures)
    "shared-memory": Machine("shared-memory", _SHARED, _SHARED, step_overhead=3e-6),
    # CPU nodes on a 100 Gb/s fabric
    "cluster": Machine("cluster", _SHARED, Link(3e-6, 12.5e9, False), step_overhead=3e-6),
    # 8 H100 per node, NVLink full mesh (the TASP paper's 64 GB/s per directed link), one
    # 400 Gb/s NIC per GPU between nodes; GPU reductions at HBM speed
    "h100": Machine("h100", Link(2e-6, 64e9, True), Link(5e-6, 50e9, False),
                    step_overhead=5e-6, reduce_bandwidth=1e12, copy_bandwidth=1e12),
    # the same with the TASP paper's slow 6.25 GB/s inter-node links
    "h100-slow-ib": Machine("h100-slow-ib", Link(2e-6, 64e9, True), Link(5e-6, 6.25e9, False),
                            step_overhead=5e-6, reduce_bandwidth=1e12, copy_bandwidth=1e12),
}


def machine_for(call: Call) -> Machine:
    """``HPCCOLL_MACHINE`` (a preset name) if set, else shared memory for one node and a
    cluster otherwise."""
    name = settings.read("HPCCOLL_MACHINE")
    if name:
        if name not in MACHINES:
            raise ValueError(f"HPCCOLL_MACHINE={name!r}: unknown preset; presets: "
                             f"{', '.join(sorted(MACHINES))}")
        return MACHINES[name]
    one_node = call.topology is None or call.topology.count(0) == 1
    return MACHINES["shared-memory" if one_node else "cluster"]


def _side(machine: Machine, node: tuple[int, ...] | None, rank: int,
          messages: Iterable[tuple[int, int]]) -> float:
    """Time of one side (sends or receives) of a step: (peer, bytes) messages.  On a shared
    port the messages follow each other; on a full mesh the peers' links work at once, each
    carrying that peer's messages (a large block's segments) one after the other, as one
    stream."""
    by_class: dict[str, dict[int, int]] = {}
    count: dict[str, int] = {}
    for peer, size in messages:
        cls = "inter" if node is not None and node[peer] != node[rank] else "intra"
        peers = by_class.setdefault(cls, {})
        peers[peer] = peers.get(peer, 0) + size
        count[cls] = count.get(cls, 0) + 1
    total = 0.0
    for cls, peers in by_class.items():
        link = machine.inter if cls == "inter" else machine.intra
        if link.parallel:
            time = link.alpha + max(peers.values()) / link.bandwidth
        else:
            time = count[cls] * link.alpha + sum(peers.values()) / link.bandwidth
        total = max(total, time)
    return total


def step_time(machine: Machine, step: Step, rank: int, itemsize: int,
              node: tuple[int, ...] | None) -> float:
    """Predicted time of one rank's step."""
    send = _side(machine, node, rank, ((s.peer, s.count * itemsize) for s in step.sends))
    recv = _side(machine, node, rank, ((r.peer, r.count * itemsize) for r in step.recvs))
    work = 0.0
    for op in (*step.local, *(op for r in step.recvs for op in r.on_arrival)):
        if isinstance(op, Reduce):
            work += op.dst.count * itemsize * len(op.srcs) / machine.reduce_bandwidth
        elif isinstance(op, Copy):
            work += op.dst.count * itemsize / machine.copy_bandwidth
    if step.sync:       # a node barrier: a dissemination of log2(ranks per node) rounds
        ranks = node.count(node[rank]) if node is not None else 2
        return machine.step_overhead + machine.intra.alpha * max(1, math.ceil(math.log2(ranks)))
    overhead = machine.step_overhead if step.sends or step.recvs else 0.0
    return max(send, recv) + work + overhead


def program_time(programs: dict[int, Program], itemsize: int, machine: Machine,
                 node: tuple[int, ...] | None = None) -> float:
    """Sum over steps of the slowest rank's step, for the given ranks' programs."""
    steps = max((len(p.steps) for p in programs.values()), default=0)
    total = 0.0
    for s in range(steps):
        total += max((step_time(machine, prog.steps[s], rank, itemsize, node)
                      for rank, prog in programs.items() if s < len(prog.steps)), default=0.0)
    return total


def sample_ranks(p: int, limit: int = 64) -> list[int]:
    """All ranks up to ``limit``, else ``limit`` ranks spread evenly (first and last kept)."""
    if p <= limit:
        return list(range(p))
    return sorted({round(i * (p - 1) / (limit - 1)) for i in range(limit)})


def predict(call: Call, name: str, machine: Machine | None = None) -> float:
    """Predicted time of algorithm ``name`` for ``call`` (the call's rank is replaced by each
    sampled rank)."""
    machine = machine or machine_for(call)
    planner = registry.get(call.collective, name).planner
    programs = {r: planner(replace(call, rank=r)) for r in sample_ranks(call.p)}
    node = call.topology.regions[0] if call.topology is not None else (0,) * call.p
    return program_time(programs, call.itemsize, machine, node)


TIE = 1e-9      # predicted times this close (relative) are a tie: float noise, not a win


def best(call: Call, machine: Machine | None = None) -> tuple[str, float]:
    """The applicable registered algorithm with the lowest predicted time for ``call``
    (among those registered for ``auto``); on a tie (within :data:`TIE`) the one registered
    first, so that the newer families (registered last) win only where they are faster."""
    candidates = [a.name for a in registry.algorithms(call.collective)
                  if a.auto and a.violated(call) is None]
    if not candidates:
        raise ValueError(f"no algorithm auto may pick serves {call.collective} on {call.p} ranks"
                         + (f" with options {dict(call.options)} (each algorithm refuses the "
                            f"options it does not declare)" if call.options else ""))
    timed = [(predict(call, name, machine), name) for name in candidates]
    fastest = min(time for time, _ in timed)
    return next((name, time) for time, name in timed if time <= fastest * (1 + TIE))


def stand_in(collective: str, p: int, nbytes: int, itemsize: int = 4, topology=None) -> Call:
    """A uniform call of ``nbytes`` in the benchmark convention (for ``hpccoll explain``)."""
    return spec(collective).bench_call(p, 0, max(nbytes // itemsize, 0), itemsize=itemsize,
                                       topology=topology)
