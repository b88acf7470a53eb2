"""The replay run by the compiled controller (hpccoll/sim/controller.cpp, the module
``hpccoll_sim_controller`` that scripts/install-sim.sh builds): the rules of
:class:`hpccoll.sim.replay.Ranks` with nothing in Python per transfer.

:func:`flatten` turns every rank's program into flat arrays (each step's flags and local work,
its messages to / from one peer summed into one flow, each send with the two hosts its transfer
runs between) as the ranks are planned, so that a job's programs need not be held at once;
:func:`run` replays them in the current SimGrid engine.  The Python controller
(:class:`~hpccoll.sim.replay.Ranks` with :class:`~hpccoll.sim.drive.Actor`) stays for
``--pause``, and tests/unit/test_sim.py checks both give the same times.
"""

from __future__ import annotations

from array import array
from typing import Any, Iterable

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


def flatten(progs: Iterable[Program], platform: Platform, itemsize: int,
            host_of: Any) -> dict[str, array]:
    """The job's arrays (see the module doc) from every rank's program in rank order;
    ``host_of(src, dst)``: the indices of the two hosts a transfer from ``src`` to ``dst`` runs
    between (:func:`hpccoll.sim.network.transfer_ends`; None: the ranks' own).  A step of one
    send and one receive, most steps of most schedules, takes the short way."""
    a = {name: array(code) for name, code in (
        ("rank_steps", "q"), ("flags", "b"), ("local", "d"), ("send_at", "q"),
        ("send_peer", "i"), ("send_count", "q"), ("send_from", "i"), ("send_to", "i"),
        ("recv_at", "q"), ("recv_peer", "i"), ("recv_count", "q"), ("recv_work", "d"))}
    rank_steps, flag, local = a["rank_steps"].append, a["flags"].append, a["local"].append
    send_at, recv_at = a["send_at"].append, a["recv_at"].append
    send_peer, send_count = a["send_peer"].append, a["send_count"].append
    send_from, send_to = a["send_from"].append, a["send_to"].append
    recv_peer, recv_count, recv_work = (a["recv_peer"].append, a["recv_count"].append,
                                        a["recv_work"].append)
    sends_made, recvs_made = a["send_peer"], a["recv_peer"]

    def add_send(rank: int, peer: int, count: int) -> None:
        send_peer(peer)
        send_count(count)
        source, destination = (rank, peer) if host_of is None else host_of(rank, peer)
        send_from(source)
        send_to(destination)

    def arrival(recv: Any) -> float:
        return local_seconds(recv.on_arrival, itemsize, platform) if recv.on_arrival else 0.0

    rank_steps(0)
    send_at(0)
    recv_at(0)
    for rank, prog in enumerate(progs):
        for step in prog.steps:
            sends, recvs = step.sends, step.recvs
            flag((SYNC if step.sync else 0) | (POSTS if sends or recvs else 0)
                 | (EMPTY if step.empty else 0))
            local(local_seconds(step.local, itemsize, platform) if step.local else 0.0)
            if len(sends) == 1:
                send = sends[0]
                add_send(rank, send.peer, send.count)
            elif sends:
                summed: dict[int, int] = {}
                for send in sends:
                    summed[send.peer] = summed.get(send.peer, 0) + send.count
                for peer, count in summed.items():
                    add_send(rank, peer, count)
            if len(recvs) == 1:
                recv = recvs[0]
                recv_peer(recv.peer)
                recv_count(recv.count)
                recv_work(arrival(recv))
            elif recvs:
                entries: dict[int, list] = {}
                for recv in recvs:
                    entry = entries.setdefault(recv.peer, [0, 0.0])
                    entry[0] += recv.count
                    entry[1] += arrival(recv)
                for peer, (count, work) in entries.items():
                    recv_peer(peer)
                    recv_count(count)
                    recv_work(work)
            send_at(len(sends_made))
            recv_at(len(recvs_made))
        rank_steps(len(a["flags"]))
    return a


def pair_bytes(job: dict[str, array], ranks: int, itemsize: int) -> dict[tuple[int, int], int]:
    """Bytes each ordered pair of ranks sends in a flattened job, summed over every step (what
    :func:`hpccoll.sim.traffic.pair_bytes` counts from the programs), counted in NumPy."""
    import numpy as np
    step_rank = np.repeat(np.arange(ranks, dtype=np.int64),
                          np.diff(np.frombuffer(job["rank_steps"], np.int64)))
    src = np.repeat(step_rank, np.diff(np.frombuffer(job["send_at"], np.int64)))
    pair = src * ranks + np.frombuffer(job["send_peer"], np.int32)
    order = np.argsort(pair, kind="stable")
    pair = pair[order]
    if pair.size == 0:
        return {}
    first = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
    total = np.add.reduceat(np.frombuffer(job["send_count"], np.int64)[order], first) * itemsize
    return {(int(k) // ranks, int(k) % ranks): int(n) for k, n in zip(pair[first], total)}


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


def run(platform: Platform, job: dict[str, array], hosts: list, itemsize: int,
        speed: float) -> tuple[float, int]:
    """Replay one flattened job in the current engine on ``hosts`` (those
    :func:`hpccoll.sim.network.build` made): (its simulated seconds, transfers)."""
    names = [h.name for h in hosts]
    seconds, transfers, steps = engine.controller().replay(
        {**job, **barriers(platform)}, names, names[:platform.ranks],
        platform.machine.step_overhead, float(speed), itemsize)
    if seconds < 0:
        raise RuntimeError(f"replay deadlock: ranks wait for messages never sent (steps {steps})")
    return seconds, transfers
