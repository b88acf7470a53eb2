"""The replay run by the compiled controller (hpccoll/sim/controller.cpp, the module
``hpccoll_sim_controller`` that scripts/install-sim.sh builds): the rules of
:class:`hpccoll.sim.replay.Ranks` with nothing in Python per transfer.

:func:`flatten` turns every rank's program into flat arrays (each step's flags and local work,
its messages to / from one peer summed into one flow, each send with the two hosts its transfer
runs between); :func:`run` replays them in the current SimGrid engine.  The Python controller
(:class:`~hpccoll.sim.replay.Ranks` with :class:`~hpccoll.sim.drive.Actor`) stays for
``--pause``, and tests/unit/test_sim.py checks both give the same times.
"""

from __future__ import annotations

from array import array
from typing import Any

from ..schedule import Copy, Program, Reduce
from . import engine
from .parts import Platform

SYNC, EMPTY, POSTS = 1, 2, 4            # step flags, as controller.cpp reads them


def local_seconds(ops: Any, itemsize: int, platform: Platform) -> float:
    """Seconds of local copies and reductions (the cost model's rates)."""
    seconds = 0.0
    for op in ops:
        if isinstance(op, Reduce):
            seconds += op.dst.count * itemsize * len(op.srcs) / platform.machine.reduce_bandwidth
        elif isinstance(op, Copy):
            seconds += op.dst.count * itemsize / platform.machine.copy_bandwidth
    return seconds


def flatten(progs: list[Program], platform: Platform, itemsize: int,
            host_of: Any) -> dict[str, array]:
    """The job's arrays (see the module doc); ``host_of(src, dst)``: the indices of the two
    hosts a transfer from ``src`` to ``dst`` runs between."""
    a = {name: array(code) for name, code in (
        ("rank_steps", "q"), ("flags", "b"), ("local", "d"), ("send_at", "q"),
        ("send_peer", "i"), ("send_count", "q"), ("send_from", "i"), ("send_to", "i"),
        ("recv_at", "q"), ("recv_peer", "i"), ("recv_count", "q"), ("recv_work", "d"))}
    rank_steps, flags, local = a["rank_steps"], a["flags"], a["local"]
    send_at, send_peer, send_count = a["send_at"], a["send_peer"], a["send_count"]
    send_from, send_to = a["send_from"], a["send_to"]
    recv_at, recv_peer, recv_count, recv_work = (a["recv_at"], a["recv_peer"], a["recv_count"],
                                                 a["recv_work"])
    rank_steps.append(0)
    send_at.append(0)
    recv_at.append(0)
    for rank, prog in enumerate(progs):
        for step in prog.steps:
            flags.append((SYNC if step.sync else 0) | (EMPTY if step.empty else 0)
                         | (POSTS if step.sends or step.recvs else 0))
            local.append(local_seconds(step.local, itemsize, platform) if step.local else 0.0)
            sends: dict[int, int] = {}
            for send in step.sends:
                sends[send.peer] = sends.get(send.peer, 0) + send.count
            for peer, count in sends.items():
                source, destination = host_of(rank, peer)
                send_peer.append(peer)
                send_count.append(count)
                send_from.append(source)
                send_to.append(destination)
            recvs: dict[int, list] = {}
            for recv in step.recvs:
                entry = recvs.setdefault(recv.peer, [0, 0.0])
                entry[0] += recv.count
                if recv.on_arrival:
                    entry[1] += local_seconds(recv.on_arrival, itemsize, platform)
            for peer, (count, work) in recvs.items():
                recv_peer.append(peer)
                recv_count.append(count)
                recv_work.append(work)
            send_at.append(len(send_peer))
            recv_at.append(len(recv_peer))
        rank_steps.append(len(flags))
    return a


def barriers(platform: Platform) -> dict[str, array]:
    """Each rank's node, each node's ranks and the seconds of a barrier of them."""
    node = platform.topology.regions[0]
    machine = platform.machine
    members = [0] * (max(node) + 1)
    for n in node:
        members[n] += 1
    seconds = [machine.step_overhead + machine.intra.alpha * max(1, (m - 1).bit_length())
               for m in members]
    return {"node": array("i", node), "members": array("i", members),
            "barrier_seconds": array("d", seconds)}


class Hosts:
    """The hosts of a platform built in SimGrid, by index: each rank's own first, then any
    other host a transfer runs between (``ends``: :func:`hpccoll.sim.network.build`)."""

    def __init__(self, hosts: list, ends: Any) -> None:
        self.names = [h.name for h in hosts]
        self.rank_names = list(self.names)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.ends = ends

    def of(self, src: int, dst: int) -> tuple[int, int]:
        if self.ends is None:
            return src, dst
        return tuple(self._index(h.name) for h in self.ends(src, dst))  # type: ignore[return-value]

    def _index(self, name: str) -> int:
        found = self.index.get(name)
        if found is None:
            found = self.index[name] = len(self.names)
            self.names.append(name)
        return found


def run(platform: Platform, progs: list[Program], itemsize: int, hosts: Hosts,
        speed: float) -> tuple[float, int]:
    """Replay one planned job in the current engine: (its simulated seconds, transfers)."""
    job = flatten(progs, platform, itemsize, hosts.of)
    job.update(barriers(platform))
    seconds, transfers, steps = engine.controller().replay(
        job, hosts.names, hosts.rank_names, platform.machine.step_overhead, float(speed),
        itemsize)
    if seconds < 0:
        raise RuntimeError(f"replay deadlock: ranks wait for messages never sent (steps {steps})")
    return seconds, transfers
