"""Run all p ranks' programs in one process, on real data, without MPI.

:func:`run_in_one_process` executes the programs step by step: it matches every send with a
receive of the same step (in posting order per pair of ranks, as MPI's non-overtaking rule
does), checks sizes, bounds, reads of unwritten data and the hazards the schedule rules forbid
(see :mod:`hpccoll.schedule`), and processes arrivals in reverse posting order to expose order
dependence.  :func:`check_algorithm` builds random calls (uneven counts and zeros included),
runs them so and compares every rank's output with the collective's definition.  Every
problem raises :class:`VerificationError` naming the rank, the step and the region.  (This is
no network simulation: that is :mod:`hpccoll.sim`'s SimGrid replay, ``hpccoll simulate``.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from . import registry
from .collectives import spec
from .schedule import RECV, SCRATCH, SEND, WINDOW, Call, Copy, Program, Reduce, Region, Step


class VerificationError(AssertionError):
    """A program breaks a schedule rule or computes a wrong result."""


@dataclass
class Report:
    """What a run counted: rounds (steps with transfers), messages, elements sent."""

    rounds: int = 0
    messages: int = 0
    max_sent: int = 0
    sent: list[int] = field(default_factory=list)


_Outbox = dict[tuple[int, int], list[list[int]]]   # (sender, receiver) -> payloads in order


class _Window:
    """A node's shared segment during a run: its data, what is written, and which rank last
    wrote and read each element in which epoch (epochs are counted by the node's syncs)."""

    def __init__(self, size: int):
        self.data = [0] * size
        self.written = bytearray(size)
        self.writer, self.write_epoch = [-1] * size, [-1] * size
        self.reader, self.read_epoch = [-1] * size, [-1] * size     # reader -2: several
        self.epoch = 0

    def read(self, rank: int, region: Region, where: str) -> None:
        now = self.epoch
        for e in range(region.offset, region.stop):
            writer = self.writer[e]
            if writer not in (-1, rank) and self.write_epoch[e] >= now:
                raise VerificationError(f"{where} reads window element {e}, which rank {writer} "
                                        "wrote without a sync in between")
            seen = self.read_epoch[e] >= now and self.reader[e] not in (-1, rank)
            self.reader[e], self.read_epoch[e] = (-2 if seen else rank), now

    def write(self, rank: int, region: Region, where: str) -> None:
        now = self.epoch
        for e in range(region.offset, region.stop):
            if self.writer[e] not in (-1, rank) and self.write_epoch[e] >= now:
                raise VerificationError(f"{where} writes window element {e}, which rank "
                                        f"{self.writer[e]} wrote without a sync in between")
            if self.read_epoch[e] >= now and self.reader[e] not in (-1, rank):
                raise VerificationError(f"{where} writes window element {e}, which another "
                                        "rank read without a sync in between")
            self.writer[e], self.write_epoch[e] = rank, now


class _Rank:
    """One rank in a run: its buffers, what of them is written, the per-step hazard
    marks, and the three parts of running a step (:meth:`post`, :meth:`run_local`,
    :meth:`receive`).

    Buffers are Python lists (the verifier moves a few elements per message, where lists are
    several times faster than NumPy slices).  Marks are stamps (``step * _SPAN + index``), so
    they need no clearing: a mark belongs to the current step when it is >= ``step * _SPAN``.
    """

    def __init__(self, rank: int, call: Call, program: Program, data: list[int],
                 window: _Window):
        self.rank, self.p = rank, call.p
        self.window = window
        send_n, recv_n = spec(call.collective).sizes(call)
        sizes = {SEND: send_n, RECV: recv_n, SCRATCH: program.scratch,
                 WINDOW: len(window.data)}
        self.data = {name: [0] * n for name, n in sizes.items()}
        self.written = {name: bytearray(n) for name, n in sizes.items()}
        self.data[WINDOW], self.written[WINDOW] = window.data, window.written
        source = spec(call.collective).input(call)
        self.data[source.buffer][source.offset:source.stop] = data
        self.written[source.buffer][source.offset:source.stop] = b"\x01" * len(data)

        def stamps() -> dict[str, list[int]]:
            return {name: [-1] * n for name, n in sizes.items()}
        self.receiving, self.sending = stamps(), stamps()
        self.arrival_writer, self.arrival_reader, self.shared_read = stamps(), stamps(), stamps()
        self.accumulating = {name: [False] * n for name, n in sizes.items()}
        self._check_bounds(program)

    def _check_bounds(self, program: Program) -> None:
        for s, step in enumerate(program.steps):
            if step.sync and (step.sends or step.recvs or step.local):
                raise VerificationError(f"{self.where(s)}: a sync step must do nothing else")
            ops = [(op, "local op") for op in step.local]
            for i, recv in enumerate(step.recvs):
                for region in recv.regions:
                    self._inside(region, s, f"receive {i} from {recv.peer}")
                ops += [(op, f"arrival op of receive {i}") for op in recv.on_arrival]
            for send in step.sends:
                for region in send.regions:
                    self._inside(region, s, f"send to {send.peer}")
            for op, what in ops:
                reads, dst = _op_regions(op)
                for region in (*reads, dst):
                    self._inside(region, s, what)
                if any(r.count != dst.count for r in reads):
                    raise VerificationError(f"{self.where(s)}: {what} {op} has regions of "
                                            "unequal sizes")
                if dst.buffer == SEND:
                    raise VerificationError(f"{self.where(s)}: {what} writes the send buffer "
                                            f"{dst}")
            for i, recv in enumerate(step.recvs):
                if any(r.buffer == SEND for r in recv.regions):
                    raise VerificationError(f"{self.where(s)}: receive {i} from {recv.peer} "
                                            "writes the send buffer")

    def _inside(self, region: Region, step: int, what: str) -> None:
        if region.buffer not in self.data:
            raise VerificationError(f"{self.where(step)}: {what} names unknown buffer {region}")
        size = len(self.data[region.buffer])
        if region.offset < 0 or region.count < 0 or region.stop > size:
            raise VerificationError(f"{self.where(step)}: {what} {region} is outside the "
                                    f"{region.buffer} buffer of {size} elements")

    def where(self, step: int) -> str:
        return f"rank {self.rank}, step {step}"

    def read(self, region: Region, step: int, what: str) -> list[int]:
        if self.written[region.buffer].find(0, region.offset, region.stop) != -1:
            raise VerificationError(f"{self.where(step)}: {what} reads unwritten data in {region}")
        if region.buffer == WINDOW:
            self.window.read(self.rank, region, f"{self.where(step)}: {what}")
        return self.data[region.buffer][region.offset:region.stop]

    def write(self, region: Region, values: list[int], step: int, what: str) -> None:
        if region.buffer == WINDOW:
            self.window.write(self.rank, region, f"{self.where(step)}: {what}")
        self.data[region.buffer][region.offset:region.stop] = values
        self.written[region.buffer][region.offset:region.stop] = b"\x01" * region.count

    def mark(self, marks: dict[str, list[int]], region: Region, stamp: int) -> None:
        marks[region.buffer][region.offset:region.stop] = [stamp] * region.count

    def not_sending(self, region: Region, step: int, what: str) -> None:
        seen = self.sending[region.buffer][region.offset:region.stop]
        if seen and max(seen) >= step * _SPAN:
            raise VerificationError(f"{self.where(step)}: {what} writes {region} while it is "
                                    "being sent")

    def not_receiving(self, region: Region, step: int, what: str, allowed: int = -1) -> None:
        now, mine = step * _SPAN, step * _SPAN + allowed
        seen = self.receiving[region.buffer][region.offset:region.stop]
        if seen and max(seen) >= now and any(x >= now and x != mine for x in seen):
            raise VerificationError(f"{self.where(step)}: {what} touches {region} while a "
                                    "receive into it is in flight")

    def post(self, step: Step, s: int, outbox: _Outbox, report: Report) -> None:
        """Mark what the step's receives will write and queue its sends' payloads."""
        for i, recv in enumerate(step.recvs):
            for region in recv.regions:
                self.not_receiving(region, s, f"receive {i} from {recv.peer}")
                self.mark(self.receiving, region, s * _SPAN + i)
        for send in step.sends:
            what = f"send to {send.peer}"
            if not 0 <= send.peer < self.p or send.peer == self.rank:
                raise VerificationError(f"{self.where(s)}: {what}: invalid peer")
            for region in send.regions:
                self.not_receiving(region, s, what)
                self.mark(self.sending, region, s * _SPAN)
            payload = [x for r in send.regions for x in self.read(r, s, what)] \
                if len(send.regions) > 1 else self.read(send.regions[0], s, what)
            outbox.setdefault((self.rank, send.peer), []).append(payload)
            report.messages += 1
            report.sent[self.rank] += len(payload)

    def run_local(self, step: Step, s: int) -> None:
        """The step's local operations, while its transfers are in flight."""
        for op in step.local:
            reads, dst = _op_regions(op)
            if step.recvs:
                for r in (*reads, dst):
                    self.not_receiving(r, s, "local op")
            if step.sends:
                self.not_sending(dst, s, "local op")
            self.apply(op, s, "local op")

    def receive(self, step: Step, s: int, outbox: _Outbox) -> None:
        """Match the step's receives with the queued sends, then land them in reverse posting
        order (to expose order dependence), each followed by its arrival operations."""
        matched = []
        for i, recv in enumerate(step.recvs):
            queue = outbox.get((recv.peer, self.rank))
            if not 0 <= recv.peer < self.p or not queue:
                raise VerificationError(f"{self.where(s)}: receive {i} from {recv.peer} has "
                                        "no matching send in this step")
            payload = queue.pop(0)
            if len(payload) != recv.count:
                raise VerificationError(f"{self.where(s)}: receive {i} from {recv.peer} "
                                        f"expects {recv.count} elements, the send has "
                                        f"{len(payload)}")
            matched.append((i, recv, payload))
        concurrent = sum(bool(recv.on_arrival) for recv in step.recvs) > 1
        for i, recv, payload in reversed(matched):
            at = 0
            for region in recv.regions:
                self.write(region, payload[at:at + region.count], s, f"receive {i}")
                at += region.count
            for op in recv.on_arrival:
                self.arrive(op, step, s, i, f"arrival op of receive {i} from {recv.peer}",
                            concurrent)

    def arrive(self, op: Copy | Reduce, step: Step, s: int, index: int, what: str,
               concurrent: bool) -> None:
        """An arrival operation of receive ``index``, checked against the step's other
        transfers (and, with ``concurrent`` ones, against the other arrivals)."""
        reads, dst = _op_regions(op)
        if len(step.recvs) > 1:
            for r in (*reads, dst):
                self.not_receiving(r, s, what, allowed=index)
        if step.sends:
            self.not_sending(dst, s, what)
        if concurrent:
            self.check_arrival_op(op, index, s, what)
        self.apply(op, s, what)

    def apply(self, op: Copy | Reduce, step: int, what: str) -> None:
        if isinstance(op, Copy):
            self.write(op.dst, self.read(op.src, step, what), step, what)
            return
        values = [self.read(src, step, what) for src in op.srcs]
        self.write(op.dst, [sum(t) for t in zip(*values)], step, what)

    def check_arrival_op(self, op: Copy | Reduce, index: int, step: int, what: str) -> None:
        """Arrival ops of different receives must commute: no one reads what another writes,
        and two write the same element only when both accumulate into it."""
        reads, dst = _op_regions(op)
        accumulate = isinstance(op, Reduce) and op.accumulates
        now, mine = step * _SPAN, step * _SPAN + index
        for r in reads:
            if accumulate and r == dst:
                continue
            writer = self.arrival_writer[r.buffer]
            readers, shared = self.arrival_reader[r.buffer], self.shared_read[r.buffer]
            for e in range(r.offset, r.stop):
                if writer[e] >= now and writer[e] != mine:
                    raise VerificationError(f"{self.where(step)}: {what} reads {r}, which "
                                            "another receive's arrival writes (result depends "
                                            "on arrival order)")
                if readers[e] >= now and readers[e] != mine:
                    shared[e] = now
                readers[e] = mine
        writer, acc = self.arrival_writer[dst.buffer], self.accumulating[dst.buffer]
        readers, shared = self.arrival_reader[dst.buffer], self.shared_read[dst.buffer]
        for e in range(dst.offset, dst.stop):
            other_writer = writer[e] >= now and writer[e] != mine
            if (other_writer and not (acc[e] and accumulate)) or shared[e] >= now or \
                    (readers[e] >= now and readers[e] != mine):
                raise VerificationError(f"{self.where(step)}: {what} writes {dst}, which "
                                        "another receive's arrival also uses (result depends "
                                        "on arrival order)")
            acc[e] = (acc[e] and accumulate) if writer[e] >= now else accumulate
            writer[e] = mine


_SPAN = 1 << 32


def _synchronize(windows: dict[int, _Window], node: tuple[int, ...], steps: list,
                 s: int) -> None:
    """Step ``s``'s syncs: all ranks of a node or none; each opens a new epoch."""
    syncing: dict[int, set[bool]] = {}
    for r, step in enumerate(steps):
        syncing.setdefault(node[r], set()).add(bool(step is not None and step.sync))
    for n, flags in syncing.items():
        if len(flags) > 1:
            late = [r for r, step in enumerate(steps)
                    if node[r] == n and not (step is not None and step.sync)]
            raise VerificationError(f"step {s}: node {n} syncs, but ranks {late} do not")
        if True in flags:
            windows[n].epoch += 1


def _op_regions(op: Copy | Reduce) -> tuple[tuple[Region, ...], Region]:
    return ((op.src,), op.dst) if isinstance(op, Copy) else (op.srcs, op.dst)


def _node_windows(node: tuple[int, ...], programs: list[Program]) -> dict[int, _Window]:
    """Every node's shared window, of the size all its ranks' programs ask for."""
    sizes: dict[int, int] = {}
    for r, program in enumerate(programs):
        size = sizes.setdefault(node[r], program.window)
        if size != program.window:
            raise VerificationError(f"rank {r}: window of {program.window} elements, "
                                    f"another rank of its node has {size}")
    return {n: _Window(size) for n, size in sizes.items()}


def _check_delivered(outbox: _Outbox, s: int) -> None:
    for (src, dst), left in outbox.items():
        if left:
            raise VerificationError(f"rank {src}, step {s}: {len(left)} send(s) to {dst} "
                                    "are never received in this step")


def run_in_one_process(calls: list[Call], programs: list[Program], inputs: list[np.ndarray]
                       ) -> tuple[list[np.ndarray], list[np.ndarray], Report]:
    """Run every rank's program; return (recv buffers, their written masks, report).

    Each step: the node syncs, every rank posts its receives and sends, runs its local
    operations, then lands its receives; every send must have been received by then."""
    p = len(programs)
    node = calls[0].topology.regions[0] if p and calls[0].topology is not None else (0,) * p
    windows = _node_windows(node, programs)
    ranks = [_Rank(r, calls[r], programs[r], inputs[r].tolist(), windows[node[r]])
             for r in range(p)]
    report = Report(sent=[0] * p)
    for s in range(max((len(prog.steps) for prog in programs), default=0)):
        steps = [prog.steps[s] if s < len(prog.steps) else None for prog in programs]
        _synchronize(windows, node, steps, s)
        busy = [(rank, step) for rank, step in zip(ranks, steps) if step is not None]
        outbox: _Outbox = {}
        for rank, step in busy:
            rank.post(step, s, outbox, report)
        for rank, step in busy:
            rank.run_local(step, s)
        for rank, step in busy:
            rank.receive(step, s, outbox)
        _check_delivered(outbox, s)
        report.rounds += any(step.sends for _, step in busy)
    report.max_sent = max(report.sent, default=0)
    return ([np.array(st.data[RECV], np.int64) for st in ranks],
            [np.frombuffer(bytes(st.written[RECV]), bool) for st in ranks], report)


# ---------------------------------------------------------------- the collectives' definitions

def random_calls(collective: str, p: int, rng: random.Random, *, counts: tuple[int, int] = (0, 4),
                 uniform: bool = False, **fields) -> list[Call]:
    """One :class:`Call` per rank for a random instance, block counts drawn from the range
    ``counts`` (zeros included by default); ``fields`` (in_place, topology, options) as in
    :class:`Call`."""
    return spec(collective).random_calls(p, rng, counts, uniform, **fields)


def random_inputs(calls: list[Call], rng: np.random.Generator) -> list[np.ndarray]:
    """Each rank's input: what its collective's input region holds."""
    return [rng.integers(-1000, 1000, spec(c.collective).input(c).count) for c in calls]


def expected_outputs(calls: list[Call], inputs: list[np.ndarray]
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per rank: (expected receive buffer, mask of the elements the collective defines)."""
    return spec(calls[0].collective).expected(calls, inputs) if calls else []


def check_calls(algorithm: registry.Algorithm, calls: list[Call],
                rng: np.random.Generator) -> Report:
    """Plan, run (:func:`run_in_one_process`) and compare one instance; raise
    VerificationError on any problem."""
    programs = [algorithm.planner(c) for c in calls]
    inputs = random_inputs(calls, rng)
    results, written, report = run_in_one_process(calls, programs, inputs)
    for call, got, wrote, (want, defined) in zip(calls, results, written,
                                                 expected_outputs(calls, inputs)):
        where = f"{algorithm.collective}/{algorithm.name}, p={call.p}, rank {call.rank}"
        bad = np.flatnonzero(defined & ((got != want) | ~wrote))
        if len(bad):
            raise VerificationError(f"{where}: wrong result at recv elements {bad[:8].tolist()}"
                                    f" (got {got[bad[:4]].tolist()}, want {want[bad[:4]].tolist()})"
                                    f"; counts {call.counts}")
        stray = np.flatnonzero(~defined & wrote)
        if len(stray):
            raise VerificationError(f"{where}: writes recv elements {stray[:8].tolist()} "
                                    "outside the collective's output")
    return report


def check_algorithm(collective: str, name: str, p: int, *, seed: int = 0, cases: int = 1,
                    counts: tuple[int, int] = (0, 4), uneven: bool = True,
                    topology=None, options: tuple = ()) -> list[Report]:
    """Verify ``name`` for ``collective`` at ``p`` ranks on ``cases`` random instances per
    variant: uniform counts, uneven counts with zeros (``uneven``), and IN_PLACE where the
    collective has it.  Instances the algorithm's constraints exclude are skipped."""
    algorithm = registry.get(collective, name)
    rng = random.Random(f"{seed}/{collective}/{name}/{p}")
    data_rng = np.random.default_rng(rng.getrandbits(32))
    variants = [dict(uniform=True)] + ([dict()] if uneven else [])
    if spec(collective).in_place:
        variants += [dict(v, in_place=True) for v in variants]
    reports = []
    for variant in variants:
        for _ in range(cases):
            calls = random_calls(collective, p, rng, counts=counts, topology=topology,
                                 options=options, **variant)
            if algorithm.violated(calls[0]) is None:
                reports.append(check_calls(algorithm, calls, data_rng))
    return reports


def sweep_sizes(max_ranks: int = 33, max_power_of_two: int = 256) -> list[int]:
    """Rank counts of the standard sweep: 1..max_ranks, then powers of two up to the limit."""
    powers = [1 << e for e in range(max_ranks.bit_length(), max_power_of_two.bit_length())]
    return list(range(1, max_ranks + 1)) + [q for q in powers if q > max_ranks]


def check_sweep(collective: str, name: str, max_ranks: int = 33,
                max_power_of_two: int = 256, seed: int = 0, topology=None,
                options: tuple = ()) -> int:
    """The standard verification of one algorithm: every p up to ``max_ranks`` with uneven
    counts and zeros, then powers of two up to ``max_power_of_two`` with one element per
    block (the data moved grows like p^3 there).  Returns the number of instances checked."""
    checked = 0
    for p in sweep_sizes(max_ranks, max_power_of_two):
        small = p <= max_ranks
        checked += len(check_algorithm(collective, name, p, seed=seed,
                                       counts=(0, 4) if small else (1, 1), uneven=small,
                                       topology=topology, options=options))
    return checked
