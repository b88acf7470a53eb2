"""Run one rank's program on mpi4py.

A :class:`Plan` is a program compiled for one dtype.  Bound to concrete buffers it becomes a
:class:`Binding`: views of the user's arrays (no copies for contiguous regions), scratch and
packing space of its own, and per step the messages to post (buffer, peer, direction);
a step's local work is compiled into records over those views (:mod:`.ops`).  A binding holds
no MPI request and no tag: each operation posts a step's messages (``Isend``/``Irecv``) with
the tags it was given (step ``i`` of an operation whose first tag is ``t`` is tagged
:func:`step_tag`), so one binding serves blocking calls, non-blocking ones and persistent
requests alike.  Bindings are cached per plan by buffer address and dropped as soon as the
memory's owner is gone: their views borrow the user's memory (:func:`.buffers.borrowed`) and
MPI gets raw addresses, so the cache never keeps user arrays alive; the operation running a
binding holds the arrays meanwhile (and its binding, if the cache drops it); a second
operation on the same buffers meanwhile gets a binding of its own.

An :class:`~.operation.Operation` runs a binding (:mod:`.operation`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from ..schedule import (RECV, SCRATCH, SEND, WINDOW, LocalOp, Program, Recv, Region, Send,
                        Step)
from . import buffers, device, kernels, scheduled
from .ops import CopyOp, DeviceCopyOp, MoveOp, Op, ReduceOp, RowsOp, terms
from .progress import Guard
from .window import NodeWindow

BINDINGS_PER_PLAN = 4
Transfer = Send | Recv


def step_tag(first: int, span: int, index: int) -> int:
    """The tag of step ``index`` of an operation whose first tag is ``first``: the steps'
    tags rotate within the slot of ``span`` tags that holds ``first``."""
    return first - first % span + (first + index) % span


@dataclass
class CompiledStep:
    index: int
    posts: list[tuple[Callable, Any, int]]  # per request: Irecv or Isend, buffer spec, peer
    peers: list[tuple[str, int]]          # ('from'|'to', rank) per request
    packs: list[MoveOp]                   # packing before the sends start
    local: list[Op]
    arrivals: dict[int, list[Op]]         # request index -> ops on arrival
    messages: list[tuple[tuple[str, Transfer], int | None]]   # per request: ('from'|'to',
    #                                       the transfer), where packed in staging (or None)
    posted: list[tuple[int, int]]         # receive-buffer regions its local work writes
    arrived: list[tuple[int, int]]        # ... and those its receives and arrivals write
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

    def binding(self, comm: MPI.Comm, send: Any, recv: Any, key: tuple[int, int, str | None],
                window: NodeWindow | None = None) -> "Binding":
        """A binding of this plan to ``send``/``recv`` for ``key`` (their addresses and the
        op, which its compiled runner reduces with), and to the node ``window`` if the program
        uses one; cached ones are reused while their buffers' memory
        (and the window) is alive and no other operation uses them, the least recently used
        beyond :data:`BINDINGS_PER_PLAN` dropped; one made while the cached one is in use is
        not kept."""
        found = self.bindings.get(key)
        if found is not None:
            if found.alive():
                if not found.busy:
                    self.bindings.move_to_end(key)
                    return found
                return Binding(self, comm, send, recv, window)
            self.bindings.pop(key, None)
        fresh = self.bindings[key] = Binding(self, comm, send, recv, window,
                                             lambda ref: self._released(key, ref))
        while len(self.bindings) > BINDINGS_PER_PLAN:
            self.bindings.popitem(last=False)
        return fresh

    def _released(self, key: tuple, ref: Any) -> None:
        """The owner of the host memory behind reference ``ref`` died: drop the binding of
        ``key`` if it is the one that held ``ref``, and with it its scratch (a program that
        runs once on each of many arrays would otherwise keep a scratch per dead array)."""
        found = self.bindings.get(key)
        if found is not None and (ref is found.send_owner or ref is found.recv_owner):
            self.bindings.pop(key, None)

    def free(self) -> None:
        self.bindings.clear()


def _staging_count(step: Step) -> int:
    packed = [t for t in (*step.sends, *step.recvs) if len(t.regions) > 1]
    return sum(t.count for t in packed)


class Binding:
    """A plan bound to buffers: views, scratch, staging and each step's messages."""

    def __init__(self, plan: Plan, comm: MPI.Comm, send: Any, recv: Any,
                 window: NodeWindow | None, released: Callable[[Any], None] | None = None):
        self.plan = plan
        self.comm = comm
        self.busy = False
        self.uses = 0
        self.runner: scheduled.Runner | None = None     # the compiled executor's, once made
        self.memory_kind = memory = buffers.kind(recv)
        dtype = plan.dtype
        self.views = {SEND: buffers.empty(memory, 0, dtype) if send is None else
                      buffers.borrowed(send),
                      RECV: buffers.borrowed(recv),
                      SCRATCH: buffers.empty(memory, plan.program.scratch, dtype)}
        self.staging = buffers.empty(memory, plan.staging, dtype)
        self.send_owner = buffers.owner_ref(send, released) if send is not None else _alive
        self.recv_owner = buffers.owner_ref(recv, released)
        self.mpi_type = buffers.mpi_datatype(dtype)
        self.window = window if plan.program.window else None
        if self.window is None:
            self.steps_by_parity = [[self._compile(comm, i, step) for i, step in plan.steps]]
            return
        if memory != buffers.HOST:
            raise NotImplementedError("shared-window algorithms work on host memory: pass "
                                      "host arrays, or stage device ones (HPCCOLL_GPU_AWARE=0)")
        self.generation = self.window.generation
        self.steps_by_parity = []
        for parity in (0, 1):
            self.views[WINDOW] = self.window.view(parity, dtype, plan.program.window)
            self.steps_by_parity.append([self._compile(comm, i, step)
                                         for i, step in plan.steps])

    def compiled(self, reduction: kernels.Reduction | None, guard: Guard
                 ) -> scheduled.Runner | None:
        """The runner of this binding on the compiled executor, made at its second use where
        one can run it (:func:`.scheduled.runs`); None: the Python executor runs it."""
        self.uses += 1
        if self.uses == 2 and scheduled.runs(self, reduction):
            self.runner = scheduled.Runner(self, reduction, self.comm, guard)
        return self.runner

    def alive(self) -> bool:
        return self.send_owner() is not None and self.recv_owner() is not None and \
            (self.window is None or self.window.generation == self.generation)

    def view(self, region: Region) -> Any:
        return self.views[region.buffer][region.offset:region.stop]

    def _compile(self, comm: MPI.Comm, index: int, step: Step) -> CompiledStep:
        if step.sync:
            return CompiledStep(index, [], [], [], [], {}, [], [], [], sync=True)
        messages = _messages(step)
        posts, peers, packs, arrivals = [], [], [], {}
        for i, ((way, transfer), packed_at) in enumerate(messages):
            if packed_at is None:
                buffer, ops = self.view(transfer.regions[0]), []
            else:
                buffer = self.staging[packed_at:packed_at + transfer.count]
                ops = [self._pack_op(buffer, transfer.regions, gather=way == "to")]
            if way == "from":
                ops += [self._op(op) for op in transfer.on_arrival]
                if ops:
                    arrivals[i] = ops
                posts.append((comm.Irecv, buffers.mpi_buffer(buffer, self.mpi_type),
                              transfer.peer))
            else:
                packs += ops
                posts.append((comm.Isend, buffers.mpi_buffer(buffer, self.mpi_type),
                              transfer.peer))
            peers.append((way, transfer.peer))
        return CompiledStep(index, posts, peers, packs, [self._op(op) for op in step.local],
                             arrivals, messages, *_results(step))

    def _op(self, op: LocalOp) -> Op:
        copy = CopyOp if self.memory_kind == buffers.HOST else DeviceCopyOp
        srcs, stride = terms(op)
        if len(srcs) == 1:
            return copy(self.view(op.dst), self.view(srcs[0]))
        views = tuple(self.view(r) for r in srcs)
        if stride is not None and self.memory_kind == buffers.HOST:
            flat = self.views[srcs[0].buffer][srcs[0].offset:srcs[-1].stop]
            return RowsOp(self.view(op.dst), views, flat, stride)
        return ReduceOp(self.view(op.dst), views)

    def _pack_op(self, packed: Any, regions: tuple[Region, ...], gather: bool) -> MoveOp:
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
        mover = kernels.block_mover if self.memory_kind == buffers.HOST else device.block_mover
        for name, start, blocks in runs:
            count = sum(r.count for r in blocks)
            movers.append(mover(
                packed[start:start + count], self.views[name],
                np.array([r.offset for r in blocks], np.int64),
                np.array([r.count for r in blocks], np.int64), gather))
        return MoveOp(tuple(movers))

def _messages(step: Step) -> list[tuple[tuple[str, Transfer], int | None]]:
    """A step's transfers in the order of its requests (receives first), each with where it
    is packed in the staging buffer: None for a message of one region (sent from, or received
    into, its place)."""
    messages, at = [], 0
    for way, transfers in (("from", step.recvs), ("to", step.sends)):
        for transfer in transfers:
            messages.append(((way, transfer), None if len(transfer.regions) == 1 else at))
            if len(transfer.regions) > 1:
                at += transfer.count
    return messages


def _results(step: Step) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The receive-buffer regions a step writes, as (offset, count): those of its local work
    (written when the step is posted), and its receives' and arrival operations'."""
    def in_recv(regions):
        return [(r.offset, r.count) for r in regions if r.buffer == RECV and r.count]
    return (in_recv(op.dst for op in step.local),
            in_recv([r for recv in step.recvs for r in recv.regions] +
                    [op.dst for recv in step.recvs for op in recv.on_arrival]))


def _alive() -> bool:
    return True
