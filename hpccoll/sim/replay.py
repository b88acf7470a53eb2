"""Every rank's program of a collective, replayed as simulated transfers on a modelled machine.

The programs are the planners' own (:mod:`hpccoll.schedule`), the ones the executor runs on
MPI, planned for the platform's topology.  One controller actor plays every rank as the
executor does: a rank enters step s when its step s-1 is over, posts the step's sends and
receives, and a message of step s starts when its sender and its receiver have both entered
step s (a rendezvous: the data flow of the schedule; a step's messages between two ranks,
segments of a large block, are one flow, as on one connection); the step's local operations run
meanwhile, each receive's ``on_arrival`` operations after it lands, and the step ends when
all of them are done.  Local work is computation on the rank's host at the platform's copy
and reduction speeds, plus its software overhead per step with transfers (as the cost model
counts them); a ``sync`` step is a barrier of the node's ranks.  Transfers are SimGrid
flows on the platform's links: alone on a path a message takes latency + bytes / bandwidth
(the alpha-beta model); flows that share a link share its bandwidth max-min fairly.

Perturbations: :class:`Pause` stops ``k`` nodes drawn at random from sending (their outgoing
transfers, in flight or new, are held back), re-drawn every ``period`` seconds: the failure
experiment of "RAT - Resilient Allreduce Tree for Distributed Machine Learning"; a slow rank
(``Platform.slowed``) has slower links of its own.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from .. import registry
from ..collectives import spec
from ..costmodel import sample_ranks
from ..schedule import Call, Program, Step
from . import compiled, drive, engine, native, network
from .compiled import local_seconds
from .platform import Platform

# the classic algorithms MPICH and Open MPI choose among for each collective, as registered
CLASSIC = {"allreduce": ("recursive_doubling", "rabenseifner", "ring"),
           "allgather": ("recursive_doubling", "ring"),
           "alltoall": ("bruck", "pairwise", "direct"),
           "alltoallv": ("pairwise", "direct"),
           "reduce_scatter": ("recursive_halving", "ring", "direct"),
           "bcast": ("binomial", "scatter_allgather", "chain"),
           "reduce": ("binomial", "reduce_scatter_gather", "chain")}
SPEED = 1e12            # flops per second of a host: local work of t seconds is t * SPEED flops


@dataclass(frozen=True)
class Pause:
    """``k`` nodes paused (their outgoing transfers held back), re-drawn every ``period``
    seconds of simulated time, from the random generator seeded by ``seed``."""

    k: int
    period: float
    seed: int = 0

    @classmethod
    def parse(cls, text: str) -> "Pause":
        """'k=K,period=SECONDS[,seed=S]' (period with units: 10ms, 500us, ...)."""
        from .platform import latency
        fields: dict[str, str] = {}
        for item in filter(None, text.split(",")):
            name, sep, value = item.partition("=")
            if not sep or name not in ("k", "period", "seed") or name in fields:
                raise ValueError(f"bad --pause item {item!r}: k=K,period=SECONDS[,seed=S]")
            fields[name] = value
        if "k" not in fields or "period" not in fields:
            raise ValueError("--pause needs k=K and period=SECONDS")
        if not fields["k"].isdigit() or not fields.get("seed", "0").isdigit():
            raise ValueError("--pause: k and seed are whole numbers")
        period = latency(fields["period"])
        if period <= 0:
            raise ValueError("--pause: period must be > 0")
        return cls(int(fields["k"]), period, int(fields.get("seed", "0")))

    def check(self, platform: Platform) -> None:
        """ValueError unless a node is left sending: with every node paused no transfer
        would ever move (a one-node machine, fullmesh or switch, has none to pause)."""
        nodes = platform.topology.count(0)
        if self.k >= nodes and self.k > 0:
            raise ValueError(f"--pause k={self.k}: {platform.spec} has {nodes} node(s) and at "
                             f"least one must keep sending: k must be below {nodes}"
                             + (" (a one-node machine has no node to pause)" if nodes == 1
                                else ""))


def programs(collective: str, algorithm: str, platform: Platform, nbytes: int,
             itemsize: int, flat: bool = False, options: tuple = ()) -> list[Program]:
    """Every rank's program of ``algorithm`` for a ``nbytes`` message (OSU convention) on
    ``platform``'s ranks, planned for its topology (``flat``: as if every rank were on one
    node, the topology-blind schedule) with the planner ``options`` ((name, value) pairs);
    ValueError if the algorithm cannot serve it.  ``native:mpich`` and ``native:openmpi``:
    the algorithm that library selects (:mod:`hpccoll.sim.native`)."""
    return list(each_program(collective, algorithm, platform, nbytes, itemsize, flat, options))


def each_program(collective: str, algorithm: str, platform: Platform, nbytes: int,
                 itemsize: int, flat: bool = False, options: tuple = ()) -> Iterator[Program]:
    """:func:`programs`, one rank at a time (the check made before the first)."""
    if algorithm == registry.NATIVE:
        raise ValueError("native is the MPI library's own collective and has no schedule to "
                         "replay: name native:mpich or native:openmpi (their default "
                         "selections replayed) or the classic algorithm it runs ("
                         f"{', '.join(CLASSIC.get(collective, ())) or 'see hpccoll list'})")
    if native.is_native(algorithm):
        algorithm = native.select(algorithm, collective, platform.ranks, nbytes,
                                  itemsize).algorithm
    count = max(nbytes // itemsize, 0)
    topology = None if flat else platform.topology

    def call(rank: int) -> Call:
        """Rank ``rank``'s call, made when it is planned: an allgather's or all-to-all's
        call holds p counts, so all p calls at once would hold p^2."""
        return spec(collective).bench_call(platform.ranks, rank, count, itemsize=itemsize,
                                           topology=topology, options=tuple(sorted(options)))
    reason = registry.get(collective, algorithm).violated(call(0))
    if reason is not None:
        raise ValueError(f"algorithm {algorithm!r} cannot serve {collective} on "
                         f"{platform.ranks} ranks of {platform.spec}: it requires {reason}")
    chosen = registry.get(collective, algorithm)
    planner = chosen.sizes or chosen.planner     # (only sizes matter here: exact, and tested)
    return (planner(call(rank)) for rank in range(platform.ranks))


@dataclass(frozen=True)
class Planned:
    """One job planned: its flattened arrays (the compiled controller's input), the bytes each
    ordered pair of ranks sends (:func:`hpccoll.sim.traffic.traffic`), the programs of the cost
    model's sampled ranks, and every rank's program only where kept (the Python controller's
    input, for ``--pause``): a job of millions of steps is never held as programs."""

    itemsize: int
    arrays: dict
    sent: dict
    sample: dict
    programs: Optional[list]


def planned(platform: Platform, job: tuple[str, str, int, int], flat: bool = False,
            options: tuple = (), keep: bool = False) -> Planned:
    """``job`` (collective, algorithm, nbytes, itemsize) planned rank by rank
    (:func:`each_program`), every rank's program flattened as it is made."""
    collective, algorithm, nbytes, itemsize = job
    sampled = set(sample_ranks(platform.ranks))
    sample: dict = {}
    kept: Optional[list] = [] if keep else None

    def noted() -> Iterator[Program]:
        for rank, program in enumerate(each_program(collective, algorithm, platform, nbytes,
                                                    itemsize, flat, options)):
            if rank in sampled:
                sample[rank] = program
            if kept is not None:
                kept.append(program)
            yield program
    arrays = compiled.flatten(noted(), platform, itemsize, network.transfer_ends(platform))
    sent = compiled.pair_bytes(arrays, platform.ranks, itemsize)
    return Planned(itemsize, arrays, sent, sample, kept)


class Ranks:
    """The controller of one replay (see the module doc): every rank's progress through its
    program; it starts activities through a driver (:mod:`hpccoll.sim.drive`) and is told of
    their end by :meth:`done`."""

    def __init__(self, driver: Any, simulation: Any, platform: Platform,
                 progs: list[Program], itemsize: int):
        self.driver, self.simulation = driver, simulation
        self.platform, self.progs, self.itemsize = platform, progs, itemsize
        p = platform.ranks
        self.node = platform.topology.regions[0]
        self.step = [-1] * p
        self.pending = [0] * p
        self.done_at = [0.0] * p
        # (src, dst, step) of a flow one side posted -> (1 send / 2 receive, the receive's
        # on_arrival work)
        self.posted: dict[tuple, tuple[int, float]] = {}
        self.barriers: dict[tuple[int, int], list[int]] = {}
        self.unfinished = p
        self.transfers = 0
        self.begun = simulation.clock

    def start(self) -> None:
        for rank in range(len(self.progs)):
            self.enter(rank)

    def compute(self, rank: int, seconds: float, kind: str = "work") -> None:
        if seconds > 0:
            self.driver.compute(rank, seconds * SPEED, (kind, rank))
            self.pending[rank] += 1

    # ---------------------------------------------------------------- ranks
    def enter(self, rank: int) -> None:
        """Start ``rank``'s next step (or finish it)."""
        while True:
            self.step[rank] += 1
            s = self.step[rank]
            steps = self.progs[rank].steps
            if s >= len(steps):
                self.done_at[rank] = self.simulation.clock
                self.unfinished -= 1
                return
            step: Step = steps[s]
            if step.sync:
                self.barrier(rank, s)
                return
            if not step.empty:
                break
        overhead = self.platform.machine.step_overhead
        if (step.sends or step.recvs) and overhead > 0:
            self.compute(rank, overhead, "posting")      # then begin()
        else:
            self.begin(rank)

    def begin(self, rank: int) -> None:
        """Post the transfers of ``rank``'s current step and start its local operations."""
        s = self.step[rank]
        step = self.progs[rank].steps[s]
        self.post(rank, s, step)
        self.compute(rank, local_seconds(step.local, self.itemsize, self.platform))
        if self.pending[rank] == 0:
            self.enter(rank)

    def post(self, rank: int, s: int, step: Step) -> None:
        """Post the step's messages, those to (from) one peer as one flow: a step's segments
        between two ranks travel back to back on one connection, and their on-arrival work
        follows the last of them."""
        sends: dict[int, int] = {}
        for send in step.sends:
            sends[send.peer] = sends.get(send.peer, 0) + send.count
        recvs: dict[int, tuple[int, float]] = {}
        for recv in step.recvs:
            count, work = recvs.get(recv.peer, (0, 0.0))
            recvs[recv.peer] = (count + recv.count,
                                work + local_seconds(recv.on_arrival, self.itemsize, self.platform))
        for peer, count in sends.items():
            self._meet((rank, peer, s), 1, count, 0.0)
        for peer, (count, work) in recvs.items():
            self._meet((peer, rank, s), 2, count, work)
        self.pending[rank] += len(sends) + len(recvs)

    def _meet(self, key: tuple, side: int, count: int, arrival_work: float) -> None:
        other = self.posted.pop(key, None)
        if other is None:
            self.posted[key] = (side, arrival_work)
            return
        work = arrival_work if side == 2 else other[1]
        self.transfers += 1
        self.driver.transfer(key[0], key[1], count * self.itemsize,
                             ("message", key[0], key[1], work))

    def barrier(self, rank: int, s: int) -> None:
        node = self.node[rank]
        waiting = self.barriers.setdefault((node, s), [])
        waiting.append(rank)
        members = self.platform.topology.regions[0].count(node)
        if len(waiting) == members:
            del self.barriers[node, s]
            machine = self.platform.machine
            rounds = max(1, (members - 1).bit_length())
            for member in waiting:
                self.compute(member, machine.step_overhead + machine.intra.alpha * rounds)
                if self.pending[member] == 0:
                    self.enter(member)

    def finished(self, rank: int) -> None:
        self.pending[rank] -= 1
        if self.pending[rank] == 0:
            self.enter(rank)

    def done(self, token: tuple) -> None:
        """The activity ``token`` names has ended."""
        if token[0] == "posting":
            self.pending[token[1]] -= 1
            self.begin(token[1])
            return
        if token[0] == "work":
            self.finished(token[1])
            return
        _, src, dst, arrival_work = token
        self.finished(src)
        self.compute(dst, arrival_work)     # the step goes on while there is arrival work
        self.finished(dst)

    def seconds(self) -> float:
        """The simulated time from the start to the last rank's end."""
        if self.unfinished:
            raise RuntimeError("replay deadlock: ranks wait for messages never sent "
                               f"(steps {self.step})")
        return max(self.done_at) - self.begun


@dataclass(frozen=True)
class Replayed:
    """Simulated seconds of each job, the transfers simulated in all, and the wall seconds the
    simulation took (building the platform in SimGrid and running every job)."""

    times: list[float]
    transfers: int
    wall: float

    @property
    def rate(self) -> float:
        """Simulated transfers per wall second."""
        return self.transfers / self.wall if self.wall > 0 else 0.0


def simulate(platform: Platform, jobs: list[tuple[str, str, int, int]],
             pause: Pause | None = None, flat: bool = False, options: tuple = ()
             ) -> Replayed:
    """Simulated seconds of each job (collective, algorithm, nbytes, itemsize) on
    ``platform`` (schedules planned ``flat`` or not, with the planner ``options``:
    :func:`programs`), one after the other in one engine, in a child process."""
    return replay(platform, plan(platform, jobs, flat, options, pause is not None), pause)


def plan(platform: Platform, jobs: list[tuple[str, str, int, int]], flat: bool = False,
         options: tuple = (), keep: bool = False) -> list[Planned]:
    """Each job (collective, algorithm, nbytes, itemsize) :func:`planned` (``keep``: with
    every rank's program, as a replay with a :class:`Pause` needs), with Python's cyclic
    garbage collector paused: planning makes millions of objects and no cycles, and the
    collector's passes over them were most of the planning time at 1,024 ranks (30 of 41 s
    for a ring allgather)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return [planned(platform, job, flat, options, keep) for job in jobs]
    finally:
        if enabled:
            gc.enable()


def replay(platform: Platform, plans: list[Planned], pause: Pause | None = None) -> Replayed:
    """Simulated seconds of each planned job, one after the other in one engine, in a child
    process (with a ``pause``, the jobs must have been planned with ``keep``)."""
    if pause is not None:
        pause.check(platform)
        if any(job.programs is None for job in plans):
            raise ValueError("a replay with a pause needs every rank's program: plan(keep=True)")
    return engine.in_child(_simulate, platform, plans, pause)


def _simulate(platform: Platform, plans: list[Planned], pause: Pause | None) -> Replayed:
    began = time.perf_counter()
    sg = engine.load()
    simulation = engine.engine()
    hosts = network.build(sg, simulation, platform, SPEED)
    times: list[float] = []
    transfers = 0
    if pause is None:             # the compiled controller
        for job in plans:
            seconds, moved = compiled.run(platform, job.arrays, hosts, job.itemsize, SPEED)
            times.append(seconds)
            transfers += moved
        return Replayed(times, transfers, time.perf_counter() - began)
    driver = drive.Actor(sg, simulation, hosts, pause, network.transfer_ends(platform))
    for job in plans:
        ranks = Ranks(driver, simulation, platform, job.programs, job.itemsize)
        driver.run(ranks)
        times.append(ranks.seconds())
        transfers += ranks.transfers
    return Replayed(times, transfers, time.perf_counter() - began)
