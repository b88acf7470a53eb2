"""Run one rank's program on mpi4py.

A :class:`Plan` is a program compiled for one dtype.  Bound to concrete buffers it becomes a
:class:`Binding`: views of the user's arrays (no copies for contiguous regions), scratch and
packing space of its own, and one persistent request (``Send_init``/``Recv_init``) per
transfer, so a repeated call costs a ``Startall`` per step.  Bindings are cached per plan by
buffer address and dropped as soon as the memory's owner is gone (weak references; MPI gets
raw addresses, so the cache never keeps user arrays alive).

An :class:`Operation` runs a binding step by step without blocking (``test``) or to the end
(``wait``); blocking calls, non-blocking calls and persistent requests all use it.  A step
that makes no progress for ``HPCCOLL_TIMEOUT`` seconds raises :class:`CollectiveTimeout`
naming the step and the peers not heard from.
"""

from __future__ import annotations

import os
import random
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
from mpi4py import MPI

from . import buffers, kernels, settings
from .schedule import RECV, SCRATCH, SEND, WINDOW, Copy, LocalOp, Program, Region, Step

BINDINGS_PER_PLAN = 4
POLLS_BEFORE_YIELD = {False: 256, True: 16}   # idle polls before yielding: cores to spare, or not
_idle_polls = POLLS_BEFORE_YIELD[False]


def idle_polls() -> int:
    """Idle polls of a wait before each further poll yields the core."""
    return _idle_polls


def note_ranks_per_host(ranks: int) -> None:
    """Poll longer before yielding when this host has a core per rank, yield early when ranks
    outnumber cores (a spinning rank then holds the core its peer needs: measured at 4 ranks
    on 2 cores, yielding after 16 polls instead of 256 makes small collectives 3x faster)."""
    global _idle_polls
    _idle_polls = POLLS_BEFORE_YIELD[ranks > (os.cpu_count() or 1)]


class CollectiveTimeout(RuntimeError):
    """A collective step did not complete before the deadline."""


def deadline_from(start: float) -> float | None:
    """The monotonic time at which work begun at ``start`` times out (None: never)."""
    limit = settings.current.timeout
    return None if limit is None else start + limit


def wait_requests(requests: list[MPI.Request], what: str | Callable[[], str],
                  on_complete: Callable[[int], None] | None = None,
                  pending: Callable[[list[int]], str] | None = None,
                  deadline: float | None = None) -> None:
    """Complete ``requests``, calling ``on_complete(i)`` as each finishes, polling until
    ``deadline`` (default: ``HPCCOLL_TIMEOUT`` from now); past it, cancel what is left and
    raise :class:`CollectiveTimeout` saying ``what`` timed out (a string, or a function
    making it, so the hot path formats nothing) and ``pending(open request indices)``."""
    if on_complete is None and MPI.Request.Testall(requests):
        return
    if deadline is None:
        deadline = deadline_from(time.monotonic())
    test = MPI.Request.Testsome
    spins, left = 0, len(requests)
    while left:
        done = test(requests)
        if done:
            left -= len(done)
            if on_complete is not None:
                for i in done:
                    on_complete(i)
            continue
        if done is None:
            break
        spins += 1
        if spins > _idle_polls:
            os.sched_yield()
        if deadline is not None and spins % 64 == 0 and time.monotonic() > deadline:
            open_ = [i for i, r in enumerate(requests) if not r.Test()]
            for i in open_:
                _cancel(requests[i])
            detail = pending(open_) if pending else f"{len(open_)} request(s) open"
            what = what() if callable(what) else what
            limit = settings.current.timeout
            raise CollectiveTimeout(f"{what} did not complete within {limit:g} s "
                                    f"(HPCCOLL_TIMEOUT): {detail}")


def _cancel(request: MPI.Request) -> None:
    try:
        request.Cancel()
    except MPI.Exception:
        pass


def shares_memory(comm: MPI.Comm) -> bool:
    """Whether all ranks of ``comm`` are in one shared-memory group (collective)."""
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    together = shared.Get_size() == comm.Get_size()
    shared.Free()
    return together


class NodeWindow:
    """The segment shared by the ranks of each node (``MPI.Win.Allocate_shared`` on the node's
    communicator), for programs that use the ``window`` buffer.

    It is grown on demand (collectively over the node, which happens at the same call on every
    rank of it because the size is a function of the call) and split in two halves that
    successive calls use alternately, so one call's reads never race the next call's writes:
    a rank writes a half again only after the following call's first sync, which every rank
    of the node reaches after its reads of that half.  Memory model: a passive-target epoch
    (``Lock_all``) for the window's life, and each sync is ``Win.Sync`` + node barrier +
    ``Win.Sync``, as MPI's unified model requires for load/store access.
    """

    ALIGN = 64

    def __init__(self, comm: MPI.Comm, node_of_rank: tuple[int, ...]):
        self.node_comm = comm.Split(node_of_rank[comm.Get_rank()], comm.Get_rank())
        together = shares_memory(self.node_comm)
        flags = np.zeros(comm.Get_size(), np.int8)
        wait_requests([comm.Iallgather(np.array([together], np.int8), flags)],
                      "checking that each node's ranks share memory")
        if not flags.all():
            self.node_comm.Free()
            apart = np.flatnonzero(flags == 0).tolist()
            raise ValueError(f"shared-window algorithms need the ranks of each node to share "
                             f"memory, and ranks {apart} do not share memory with the rest of "
                             f"their node (is the topology right?)")
        self.win: MPI.Win | None = None
        self.half = 0              # bytes per half
        self.memory = np.empty(0, np.uint8)
        self.generation = 0
        self.parity = 0

    def ensure(self, nbytes: int) -> None:
        """Make each half at least ``nbytes`` (collective over the node when it grows)."""
        if nbytes <= self.half:
            return
        half = -(-nbytes // self.ALIGN) * self.ALIGN
        if 2 * half > buffers.physical_memory():    # every rank of the node sees the same
            raise MemoryError(f"a shared window of {2 * half} bytes is more than this node's "
                              f"memory ({buffers.physical_memory()} bytes)")
        self._release()
        size = 2 * half if self.node_comm.Get_rank() == 0 else 0
        try:
            self.win = MPI.Win.Allocate_shared(size, 1, comm=self.node_comm)
        except MPI.Exception as error:
            raise MemoryError(f"could not allocate a {2 * half}-byte shared window on the "
                              f"node: {error}") from None
        buffer, _ = self.win.Shared_query(0)
        self.memory = np.frombuffer(buffer, np.uint8)
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.half = half
        self.generation += 1

    def view(self, parity: int, dtype: np.dtype, count: int) -> np.ndarray:
        """Half ``parity`` as ``count`` elements of ``dtype``."""
        start = parity * self.half
        return self.memory[start:start + count * dtype.itemsize].view(dtype)

    def flip(self) -> int:
        """The half the next call uses."""
        self.parity ^= 1
        return self.parity

    def _release(self) -> None:
        if self.win is not None:
            self.memory = np.empty(0, np.uint8)
            self.win.Unlock_all()
            self.win.Free()
            self.win = None

    def free(self) -> None:
        self._release()
        self.node_comm.Free()


@dataclass
class _CompiledStep:
    index: int
    requests: list[MPI.Prequest]
    peers: list[tuple[str, int]]          # ('from'|'to', rank) per request
    packs: list[tuple[Callable, tuple]]
    local: list[tuple]
    arrivals: dict[int, list[tuple]]      # request index -> ops on arrival
    results: list[tuple[int, int]]        # (offset, count) of the receive buffer it writes
    sync: bool = False                    # a node barrier over the shared window


class Plan:
    """A program compiled for a dtype: what every binding of it shares."""

    def __init__(self, program: Program, dtype: np.dtype, label: str):
        self.program = program
        self.dtype = np.dtype(dtype)
        self.label = label
        self.steps = [(i, s) for i, s in enumerate(program.steps) if not s.empty]
        self.staging = max((_staging_count(s) for _, s in self.steps), default=0)
        self.bindings: OrderedDict[tuple, Binding] = OrderedDict()

    def binding(self, comm: MPI.Comm, send: Any, recv: Any, addresses: tuple[int, int],
                tags: tuple[int, int], cache: bool,
                window: NodeWindow | None = None) -> "Binding":
        """A binding of this plan to ``send``/``recv`` (at ``addresses``), step s tagged
        ``base + s % span`` for ``tags = (base, span)``, and to the node ``window`` if the
        program uses one; cached ones are reused while their buffers' memory (and the
        window) is alive and no other operation uses them."""
        key = (addresses, tags)
        found = self.bindings.get(key)
        if found is not None:
            if found.alive():
                if not found.busy:
                    self.bindings.move_to_end(key)
                    return found
            else:
                del self.bindings[key]
                found.free()
                found = None
        fresh = Binding(self, comm, send, recv, tags, window)
        if cache and found is None:
            self.bindings[key] = fresh
            while len(self.bindings) > BINDINGS_PER_PLAN:
                self.bindings.popitem(last=False)[1].free()
        else:
            fresh.transient = True
        return fresh

    def release(self, tags: tuple[int, int]) -> None:
        """Free the cached bindings made for tag range ``tags`` (a persistent request's)."""
        for key, binding in list(self.bindings.items()):
            if key[1] == tags:
                del self.bindings[key]
                binding.free()

    def free(self) -> None:
        for binding in self.bindings.values():
            binding.free()
        self.bindings.clear()


def _staging_count(step: Step) -> int:
    packed = [t for t in (*step.sends, *step.recvs) if len(t.regions) > 1]
    return sum(t.count for t in packed)


class Binding:
    """A plan bound to buffers: views, scratch, staging and persistent requests."""

    def __init__(self, plan: Plan, comm: MPI.Comm, send: Any, recv: Any, tags: tuple[int, int],
                 window: NodeWindow | None):
        self.plan = plan
        self.busy = False
        self.transient = False
        self.array_kind = buffers.kind(recv)
        xp = np if self.array_kind == "numpy" else __import__("cupy")
        dtype = plan.dtype
        self.views = {SEND: xp.empty(0, dtype) if send is None else buffers.flat(send),
                      RECV: buffers.flat(recv), SCRATCH: xp.empty(plan.program.scratch, dtype)}
        self.staging = xp.empty(plan.staging, dtype)
        self.send_owner = buffers.owner_ref(send) if send is not None else _alive
        self.recv_owner = buffers.owner_ref(recv)
        self.mpi_type = buffers.mpi_datatype(dtype)
        self.window = window if plan.program.window else None
        if self.window is None:
            self.steps_by_parity = [[self._compile(comm, i, step, tags) for i, step in plan.steps]]
            return
        if self.array_kind != "numpy":
            raise NotImplementedError("shared-window algorithms work on host (NumPy) buffers")
        self.window.ensure(plan.program.window * dtype.itemsize)
        self.generation = self.window.generation
        self.steps_by_parity = []
        for parity in (0, 1):
            self.views[WINDOW] = self.window.view(parity, dtype, plan.program.window)
            self.steps_by_parity.append([self._compile(comm, i, step, tags)
                                         for i, step in plan.steps])

    @property
    def steps(self) -> list[_CompiledStep]:
        return self.steps_by_parity[0]

    def alive(self) -> bool:
        return self.send_owner() is not None and self.recv_owner() is not None and \
            (self.window is None or self.window.generation == self.generation)

    def view(self, region: Region) -> Any:
        return self.views[region.buffer][region.offset:region.stop]

    def _compile(self, comm: MPI.Comm, index: int, step: Step,
                 tags: tuple[int, int]) -> _CompiledStep:
        if step.sync:
            return _CompiledStep(index, [], [], [], [], {}, [], sync=True)
        tag = tags[0] + index % tags[1]
        at = 0
        requests, peers, packs, arrivals = [], [], [], {}
        for recv in step.recvs:
            if len(recv.regions) == 1:
                into, unpack = self.view(recv.regions[0]), []
            else:
                into = self.staging[at:at + recv.count]
                unpack = [self._pack_op(into, recv.regions, gather=False)]
                at += recv.count
            ops = unpack + [self._op(op) for op in recv.on_arrival]
            if ops:
                arrivals[len(requests)] = ops
            requests.append(comm.Recv_init(buffers.mpi_buffer(into, self.mpi_type), recv.peer, tag))
            peers.append(("from", recv.peer))
        for send in step.sends:
            if len(send.regions) == 1:
                out = self.view(send.regions[0])
            else:
                out = self.staging[at:at + send.count]
                packs.append(self._pack_op(out, send.regions, gather=True))
                at += send.count
            requests.append(comm.Send_init(buffers.mpi_buffer(out, self.mpi_type), send.peer, tag))
            peers.append(("to", send.peer))
        return _CompiledStep(index, requests, peers, packs, [self._op(op) for op in step.local],
                             arrivals, _results(step))

    def _op(self, op: LocalOp) -> tuple:
        if isinstance(op, Copy):
            return (_COPY, self.view(op.dst), self.view(op.src))
        if len(op.srcs) == 1:                                # a reduction of one term
            return (_COPY, self.view(op.dst), self.view(op.srcs[0]))
        srcs = sorted(op.srcs, key=lambda r: r != op.dst)   # the accumulator first
        views = tuple(self.view(r) for r in srcs)
        stride = _stride(op.srcs)
        if stride is not None and op.dst not in op.srcs and self.array_kind == "numpy":
            first = op.srcs[0]
            flat = self.views[first.buffer][first.offset:op.srcs[-1].stop]
            return (_ROWS, self.view(op.dst), views, flat, stride)
        return (_REDUCE, self.view(op.dst), views)

    def _pack_op(self, packed: Any, regions: tuple[Region, ...], gather: bool) -> tuple:
        """Gather ``regions`` into ``packed`` (or scatter back): one mover per run of regions
        in the same buffer (:func:`kernels.block_mover`)."""
        runs, at = [], 0
        for region in regions:
            if runs and runs[-1][0] == region.buffer:
                runs[-1][2].append(region)
            else:
                runs.append((region.buffer, at, [region]))
            at += region.count
        movers = []
        for name, start, blocks in runs:
            count = sum(r.count for r in blocks)
            movers.append(kernels.block_mover(
                packed[start:start + count], self.views[name],
                np.array([r.offset for r in blocks], np.int64),
                np.array([r.count for r in blocks], np.int64), gather))
        return (_MOVE, movers)

    def free(self) -> None:
        for steps in self.steps_by_parity:
            for step in steps:
                for request in step.requests:
                    if request != MPI.REQUEST_NULL:
                        request.Free()
        self.steps_by_parity = [[]]


_COPY, _REDUCE, _MOVE, _ROWS = range(4)


def _stride(regions: tuple[Region, ...]) -> int | None:
    """The common distance between equally sized regions of one buffer laid out at a fixed
    stride (a one-pass row reduction applies), or None."""
    first = regions[0]
    if len(regions) < 3 or any(r.buffer != first.buffer or r.count != first.count
                               for r in regions):
        return None
    stride = regions[1].offset - first.offset
    if stride < first.count or any(b.offset - a.offset != stride
                                   for a, b in zip(regions, regions[1:])):
        return None
    return stride
_STALLS = random.Random(12345)      # the stall injector's dice (settings.stall)


def _results(step: Step) -> list[tuple[int, int]]:
    """The receive-buffer regions a step writes: its receives and the targets of its local and
    arrival operations, as (offset, count)."""
    written = [r for recv in step.recvs for r in recv.regions]
    written += [op.dst for op in step.local]
    written += [op.dst for recv in step.recvs for op in recv.on_arrival]
    return [(r.offset, r.count) for r in written if r.buffer == RECV and r.count]


def _alive() -> bool:
    return True


def _run_ops(ops: list[tuple], reduce: kernels.Reduction) -> None:
    for op in ops:
        code = op[0]
        if code == _COPY:
            op[1][...] = op[2]
        elif code == _ROWS and reduce.rows is not None:
            reduce.rows(op[1], op[3], op[4], len(op[2]))
        elif code in (_REDUCE, _ROWS):
            dst, srcs = op[1], op[2]
            reduce.pair(dst, srcs[0], srcs[1])
            for src in srcs[2:]:
                reduce.pair(dst, dst, src)
        else:
            for move, arguments in op[1]:
                move(*arguments)


class Operation:
    """One execution of a binding: ``start`` posts the first step; ``wait`` runs to the end,
    ``test`` advances as far as it can without blocking."""

    __slots__ = ("binding", "reduce", "on_done", "position", "deadline", "limit", "done",
                 "computed", "steps")

    def __init__(self, binding: Binding, reduce: kernels.Reduction | None,
                 on_done: Callable[[], None]):
        self.binding = binding
        self.reduce = reduce
        self.on_done = on_done
        self.position = 0
        self.limit = settings.current.timeout
        self.deadline: float | None = None
        self.done = False
        self.computed: list[tuple[int, int]] = []     # results of steps without transfers

    def start(self) -> "Operation":
        binding = self.binding
        binding.busy = True
        if binding.array_kind == "cupy":
            buffers.synchronize(binding.views[RECV])
        window = binding.window
        self.steps = binding.steps_by_parity[window.flip() if window is not None else 0]
        self._post()
        return self

    def _post(self) -> None:
        """Post the current step (and run through steps that only compute)."""
        steps = self.steps
        stall = settings.current.stall
        while self.position < len(steps):
            step = steps[self.position]
            if stall is not None and _STALLS.random() < stall[0]:
                time.sleep(stall[1])
            if step.sync:
                window = self.binding.window
                window.win.Sync()
                step.requests = [window.node_comm.Ibarrier()]
            elif step.packs:
                _run_ops(step.packs, self.reduce)
            if step.requests and not step.sync:
                MPI.Prequest.Startall(step.requests)
            if step.local:
                _run_ops(step.local, self.reduce)
            if step.requests:
                if self.limit is not None:
                    self.deadline = time.monotonic() + self.limit
                return
            self.computed += step.results
            self.position += 1
        self._finish()

    def _complete(self, step: _CompiledStep) -> None:
        """Wait for the current step, then post the next."""
        if MPI.Request.Testall(step.requests):
            if step.arrivals:
                self._arrived(step, step.arrivals)
        else:
            self._wait_step(step)
        if step.sync:
            self.binding.window.win.Sync()
        self.position += 1
        self._post()

    def wait(self) -> None:
        steps = self.steps
        while not self.done:
            self._complete(steps[self.position])

    def stream(self) -> Iterator[list[tuple[int, int]]]:
        """Run to the end, yielding after each step the (offset, count) regions of the receive
        buffer it wrote, with the next step's transfers already posted, so the caller
        computes on what arrived while the rest is in flight."""
        steps = self.steps
        while not self.done:
            step = steps[self.position]
            self._complete(step)
            yield step.results + self._take_computed()
        computed = self._take_computed()
        if computed:
            yield computed

    def _take_computed(self) -> list[tuple[int, int]]:
        done, self.computed = self.computed, []
        return done

    def test(self) -> bool:
        steps = self.steps
        while not self.done:
            step = steps[self.position]
            done = MPI.Request.Testsome(step.requests)
            while done:
                self._arrived(step, done)
                done = MPI.Request.Testsome(step.requests)
            if done is not None:
                if self.deadline is not None and time.monotonic() > self.deadline:
                    self._wait_step(step)   # past the deadline: raises with the details
                return False
            if step.sync:
                self.binding.window.win.Sync()
            self.position += 1
            self._post()
        return True

    def _arrived(self, step: _CompiledStep, done: list[int]) -> None:
        for i in done:
            ops = step.arrivals.get(i)
            if ops:
                _run_ops(ops, self.reduce)

    def _wait_step(self, step: _CompiledStep) -> None:
        plan = self.binding.plan
        try:
            wait_requests(step.requests,
                          lambda: f"{plan.label} step {step.index} (of {len(plan.program.steps)})",
                          (lambda i: self._arrived(step, (i,))) if step.arrivals else None,
                          lambda open_: _describe_open(step, open_), self.deadline)
        except CollectiveTimeout:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """After a timeout the binding's requests are in an unknown state: drop it."""
        binding = self.binding
        binding.busy = False
        for key, cached in list(binding.plan.bindings.items()):
            if cached is binding:
                del binding.plan.bindings[key]
        self.done = True

    def _finish(self) -> None:
        self.done = True
        self.binding.busy = False
        if self.binding.transient:
            self.binding.free()
        self.on_done()


def _describe_open(step: _CompiledStep, open_: list[int]) -> str:
    if step.sync:
        return "not every rank of the node reached the window synchronisation"
    waiting = sorted({peer for i in open_ for d, peer in [step.peers[i]] if d == "from"})
    sending = sorted({peer for i in open_ for d, peer in [step.peers[i]] if d == "to"})
    parts = []
    if waiting:
        parts.append(f"no message from rank(s) {waiting}")
    if sending:
        parts.append(f"sends to rank(s) {sending} not completed")
    return "; ".join(parts) or "requests open"
