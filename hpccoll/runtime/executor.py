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

An :class:`Operation` runs a binding step by step without blocking (``test``) or to the end
(``wait``); blocking calls, non-blocking calls and persistent requests all use it.  A step
that makes no progress for ``HPCCOLL_TIMEOUT`` seconds raises
:class:`~hpccoll.runtime.progress.CollectiveTimeout` naming the step and the peers not heard
from.  Any failure after the first post (that, an MPI error, another rank's revocation, an
interrupt) abandons the operation: its open receives are cancelled, everything its requests
may still touch goes to :mod:`.abandoned`, and the guard (the communicator's context) is
revoked.  Fault injection (``settings.stall``, for resilience benchmarks) wraps the step loop
only while it is configured: the plain loop has none of it.
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

from .. import settings
from ..schedule import (RECV, SCRATCH, SEND, WINDOW, LocalOp, Program, Recv, Region, Send,
                        Step)
from . import abandoned, buffers, device, kernels, scheduled
from .ops import CopyOp, DeviceCopyOp, MoveOp, Op, ReduceOp, RowsOp, run_ops, terms
from .progress import Guard, idle_polls, past, poll, timeout
from .window import NodeWindow

BINDINGS_PER_PLAN = 4
Transfer = Send | Recv
_test_some = MPI.Request.Testsome


def step_tag(first: int, span: int, index: int) -> int:
    """The tag of step ``index`` of an operation whose first tag is ``first``: the steps'
    tags rotate within the slot of ``span`` tags that holds ``first``."""
    return first - first % span + (first + index) % span


@dataclass
class _CompiledStep:
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
            del self.bindings[key]
        fresh = self.bindings[key] = Binding(self, comm, send, recv, window)
        while len(self.bindings) > BINDINGS_PER_PLAN:
            self.bindings.popitem(last=False)
        return fresh

    def free(self) -> None:
        self.bindings.clear()


def _staging_count(step: Step) -> int:
    packed = [t for t in (*step.sends, *step.recvs) if len(t.regions) > 1]
    return sum(t.count for t in packed)


class Binding:
    """A plan bound to buffers: views, scratch, staging and each step's messages."""

    def __init__(self, plan: Plan, comm: MPI.Comm, send: Any, recv: Any,
                 window: NodeWindow | None):
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
        self.send_owner = buffers.owner_ref(send) if send is not None else _alive
        self.recv_owner = buffers.owner_ref(recv)
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
            self.runner = scheduled.Runner(self, reduction and reduction.op, self.comm, guard)
        return self.runner

    def alive(self) -> bool:
        return self.send_owner() is not None and self.recv_owner() is not None and \
            (self.window is None or self.window.generation == self.generation)

    def view(self, region: Region) -> Any:
        return self.views[region.buffer][region.offset:region.stop]

    def _compile(self, comm: MPI.Comm, index: int, step: Step) -> _CompiledStep:
        if step.sync:
            return _CompiledStep(index, [], [], [], [], {}, [], [], [], sync=True)
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
        return _CompiledStep(index, posts, peers, packs, [self._op(op) for op in step.local],
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


def _nothing() -> None:
    pass


class Operation:
    """One execution of a binding, its messages tagged from ``tag`` (:func:`step_tag`):
    ``start`` posts the first step; ``wait`` runs to the end, ``test`` advances as far as it
    can without blocking.  ``memory``: the user's arrays, held while it runs (the binding
    only borrows them); ``guard``: the communicator's context, which is revoked if the
    operation fails (see the module doc)."""

    __slots__ = ("binding", "reduce", "on_done", "memory", "guard", "tag", "position",
                 "deadline", "limit", "done", "steps", "requests", "pending", "tested",
                 "runner")

    def __init__(self, binding: Binding, reduce: kernels.Reduction | None,
                 on_done: Callable[[], None], memory: tuple, guard: Guard, tag: int):
        self.binding = binding
        self.reduce = reduce
        self.on_done = on_done
        self.memory = memory
        self.guard = guard
        self.tag = tag
        self.requests: list[MPI.Request] = []   # the posted step's, as its peers list them
        self.position = 0
        self.limit = settings.current.timeout
        self.deadline: float | None = None
        self.done = False
        self.tested: set[int] | None = None     # the current step's receives test() handled
        self.runner: scheduled.Runner | None = None     # where the compiled executor runs it

    def start(self) -> "Operation":
        binding = self.binding
        binding.busy = True
        window = binding.window
        self.steps = binding.steps_by_parity[window.flip() if window is not None else 0]
        try:
            runner = binding.compiled(self.reduce, self.guard) \
                if settings.current.stall is None else None
            if runner is None:
                self._post()
            else:
                self.runner = runner
                self._ran(runner.function(runner.send, runner.recv, runner.state,
                                          runner.handles, 0, self.tag))
        except BaseException as error:
            raise self._fail(error) from None
        return self

    @classmethod
    def resume(cls, runner: scheduled.Runner, code: int, reduce: kernels.Reduction | None,
               memory: tuple, guard: Guard, tag: int) -> "Operation":
        """The operation of a run that ``runner``'s function began outside one (tagged from
        ``tag``) and left with ``code`` (not :data:`~.scheduled.DONE`): it takes over the
        binding."""
        operation = cls(runner.binding, reduce, _nothing, memory, guard, tag)
        runner.binding.busy = True
        operation.steps = runner.binding.steps_by_parity[0]
        operation.runner = runner
        try:
            operation._ran(code)
        except BaseException as error:
            raise operation._fail(error) from None
        return operation

    def _ran(self, code: int) -> None:
        """Where the compiled function left the run: pending at a step, done, failed."""
        if code == scheduled.PENDING:
            self.position = self.runner.step()
            return
        if code == scheduled.FAILED:
            self.position = self.runner.step()
            raise self.runner.error()
        self._finish(notices=False)
        if code == scheduled.NOTICE:
            raise self.guard.notice()

    def _run_compiled(self, polls: int) -> None:
        """Run with the compiled function until done, yielding the core between its calls
        once it has polled ``polls`` times, with the deadline and notices checked here."""
        runner = self.runner
        function, send, recv, state, handles, tag = \
            runner.function, runner.send, runner.recv, runner.state, runner.handles, self.tag
        code = function(send, recv, state, handles, polls, tag)
        spins = 0
        while code == scheduled.PENDING:
            spins += 1
            if spins % 64 == 0:
                self._check_compiled()
            os.sched_yield()
            code = function(send, recv, state, handles, 1, tag)
        self._ran(code)

    def _check_compiled(self) -> None:
        """CollectiveTimeout past the current step's deadline, or another rank's notice."""
        runner = self.runner
        self.position = runner.step()
        if self.limit is not None and MPI.Wtime() - runner.started() > self.limit:
            plan = self.binding.plan
            raise _timeout(plan.label, self.steps[self.position], len(plan.program.steps),
                           runner.in_flight())
        if self.guard.interrupted():
            raise self.guard.notice()

    def _post(self) -> None:
        """Post the current step (and run through steps that only compute)."""
        steps = self.steps
        while self.position < len(steps):
            step = steps[self.position]
            if step.sync:
                window = self.binding.window
                window.segment.win.Sync()
                self.requests = [window.node_comm.Ibarrier()]
            else:
                if step.packs:
                    run_ops(step.packs, self.reduce)
                tag = step_tag(self.tag, self.guard.tag_span, step.index)
                self.requests = [post(buffer, peer, tag) for post, buffer, peer in step.posts]
            if step.local:
                run_ops(step.local, self.reduce)
            if self.requests:
                if self.limit is not None:
                    self.deadline = time.monotonic() + self.limit
                self.tested = None
                return
            self.position += 1
        self._finish()

    def _complete(self, step: _CompiledStep) -> None:
        """Wait for the current step, then post the next."""
        if MPI.Request.Testall(self.requests):
            if step.arrivals:
                tested = self.tested
                self._arrived(step, step.arrivals if tested is None else
                              [i for i in step.arrivals if i not in tested])
        else:
            self._wait_step(step)
        if step.sync:
            self.binding.window.segment.win.Sync()
        self.position += 1
        self._post()

    def wait(self) -> None:
        steps = self.steps
        try:
            if self.runner is not None and not self.done:
                self._run_compiled(idle_polls())
            while not self.done:
                self._complete(steps[self.position])
        except BaseException as error:
            raise self._fail(error) from None

    def stream(self) -> Iterator[list[tuple[int, int]]]:
        """Run to the end, yielding the (offset, count) regions of the receive buffer as they
        are written, while the transfers that follow are in flight: first what the local work
        of the posted step wrote (an allgather's own block), then after each step what its
        receives brought and what the next step's local work wrote."""
        steps = self.steps
        posted = self.position + 1              # steps[:posted] ran their local work
        ready = [r for step in steps[:posted] for r in step.posted]
        if ready:
            yield ready
        while not self.done:
            step = steps[self.position]
            try:
                self._complete(step)
            except BaseException as error:
                raise self._fail(error) from None
            upto = min(self.position + 1, len(steps))
            yield step.arrived + [r for later in steps[posted:upto] for r in later.posted]
            posted = upto

    def test(self) -> bool:
        try:
            return self._test()
        except BaseException as error:
            raise self._fail(error) from None

    def _test(self) -> bool:
        runner = self.runner
        if runner is not None and not self.done:
            code = runner.function(runner.send, runner.recv, runner.state, runner.handles, 1,
                                   self.tag)
            if code == scheduled.PENDING:
                self._check_compiled()
                return False
            self._ran(code)
            return True
        steps = self.steps
        while not self.done:
            step = steps[self.position]
            done = MPI.Request.Testsome(self.requests)
            while done:
                self._arrived(step, done)
                if self.tested is None:
                    self.tested = set()
                self.tested.update(done)
                done = MPI.Request.Testsome(self.requests)
            if done is not None:
                if self.deadline is not None and time.monotonic() > self.deadline:
                    self._wait_step(step)   # past the deadline: raises with the details
                return False
            if step.sync:
                self.binding.window.segment.win.Sync()
            self.position += 1
            self._post()
        return True

    def _arrived(self, step: _CompiledStep, done: list[int]) -> None:
        for i in done:
            ops = step.arrivals.get(i)
            if ops:
                run_ops(ops, self.reduce)

    def _wait_step(self, step: _CompiledStep) -> None:
        """Complete the current step's transfers, running arrival operations as they land;
        CollectiveTimeout past the deadline (or the guard's error if another rank revoked
        the communicator meanwhile)."""
        self.pending = len(self.requests)
        if poll(self._step_done, self.deadline, self.guard.interrupted):
            return
        if not past(self.deadline):
            raise self.guard.notice()
        plan = self.binding.plan
        raise _timeout(plan.label, step, len(plan.program.steps), self.requests)

    def _step_done(self) -> bool:
        """Whether the current step's transfers are all complete (arrival operations run for
        those that just completed)."""
        step = self.steps[self.position]
        done = _test_some(self.requests)
        if done is None:                    # no active request left
            return True
        if done:
            self._arrived(step, done)
            self.pending -= len(done)
        return self.pending <= 0

    def _fail(self, error: BaseException) -> BaseException:
        """Abandon after ``error``: cancel the open receives, leave the requests and all the
        memory they may touch to :mod:`.abandoned`, revoke the guard; the error to raise."""
        if self.done:                       # completed, and then told of a revocation
            return error
        self.done = True
        binding = self.binding
        binding.busy = False
        if self.runner is not None:
            self.position = self.runner.step()
        plan = binding.plan
        for key, cached in list(plan.bindings.items()):
            if cached is binding:
                del plan.bindings[key]
        step = self.steps[self.position] if self.position < len(self.steps) else None
        requests = self.runner.in_flight() if self.runner is not None else self.requests
        if step is not None and not step.sync:
            abandoned.cancel_receives(requests, [i for i, (way, _) in enumerate(step.peers)
                                                 if way == "from"])
        binding.steps_by_parity = [[]]     # never started again
        binding.runner = None
        abandoned.hold(plan.label, requests, binding, self.memory)
        return self.guard.fail(error)

    def _finish(self, notices: bool = True) -> None:
        """Done: the binding free again, ``on_done``; then (``notices``: unless the compiled
        function just probed) CommunicatorRevoked if another rank's notice came meanwhile."""
        self.done = True
        binding = self.binding
        binding.busy = False
        if self.runner is not None and notices:
            self.runner.rewind()            # finished here, not by the compiled function
        self.on_done()
        if notices:
            self.guard.check_notices()


def _timeout(label: str, step: _CompiledStep, steps: int, requests: list[MPI.Request]
             ) -> BaseException:
    """CollectiveTimeout for ``step``, saying which of its transfers (``requests``, as its
    peers list them) are still open."""
    what = f"{label} step {step.index} (of {steps})"
    if step.sync:
        return timeout(what, "not every rank of the node reached the window synchronisation")
    open_ = [i for i, r in enumerate(requests) if not r.Test()]
    waiting = sorted({peer for i in open_ for d, peer in [step.peers[i]] if d == "from"})
    sending = sorted({peer for i in open_ for d, peer in [step.peers[i]] if d == "to"})
    parts = []
    if waiting:
        parts.append(f"no message from rank(s) {waiting}")
    if sending:
        parts.append(f"sends to rank(s) {sending} not completed")
    return timeout(what, "; ".join(parts) or "requests open", tuple(waiting))


_STALLS = random.Random(12345)      # the stall injector's dice (settings.stall)
_post_steps = Operation._post


def _post_with_stalls(operation: Operation) -> None:
    """``Operation._post`` after ``settings.stall``'s random pauses: one throw of the dice per
    step that the post runs (the steps that only compute on the way, and the one it posts)."""
    probability, seconds = settings.current.stall
    for step in operation.steps[operation.position:]:
        if _STALLS.random() < probability:
            time.sleep(seconds)
        if step.posts or step.sync:
            break
    _post_steps(operation)


def _install_stalls(current: settings.Settings) -> None:
    """The step loop with fault injection while ``stall`` is set, the plain one otherwise."""
    Operation._post = _post_steps if current.stall is None else _post_with_stalls


settings.on_change(_install_stalls)
