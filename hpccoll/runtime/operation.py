"""Run a binding: an :class:`Operation` runs one execution of a
:class:`~.executor.Binding` step by step without blocking (``test``) or to the end
(``wait``); blocking calls, non-blocking calls and persistent requests all use it, and the
compiled executor (:mod:`.scheduled`) runs its steps where it can, handing back to it
anything but a clean completion.

A step that makes no progress for ``HPCCOLL_TIMEOUT`` seconds raises
:class:`~hpccoll.runtime.progress.CollectiveTimeout` naming the step and the peers not heard
from.  Any failure after the first post (that, an MPI error, another rank's revocation, an
interrupt) abandons the operation: its open receives are cancelled, everything its requests
may still touch goes to :mod:`.abandoned`, and the guard (the communicator's context) is
revoked.  Fault injection (``settings.stall``, for resilience benchmarks) pauses before
posts; while it is configured, the compiled executor is not used.
"""

from __future__ import annotations

import os
import random
import time
from typing import Callable, Iterator

from mpi4py import MPI

from .. import settings
from . import abandoned, kernels, scheduled
from .libmpi import FAILED, NOTICE, PENDING
from .executor import Binding, CompiledStep, step_tag
from .ops import run_ops
from .progress import Guard, idle_polls, past, poll, timeout

_test_some = MPI.Request.Testsome


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
            runner = binding.compiled(self.reduce, self.guard) if settings.fast else None
            if runner is None:
                self._post()
            else:
                self.runner = runner
                self._ran(runner.bound.resume(0, self.tag))
        except BaseException as error:
            raise self._fail(error) from None
        return self

    @classmethod
    def resume(cls, runner: scheduled.Runner, code: int, memory: tuple, tag: int
               ) -> "Operation":
        """The operation of a run that ``runner`` began outside one (tagged from ``tag``, on
        the arrays of ``memory``) and left with ``code`` (not :data:`~.libmpi.DONE`): it
        takes over the binding."""
        operation = cls(runner.binding, runner.reduce, _nothing, memory, runner.guard, tag)
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
        if code == PENDING:
            self.position = self.runner.step()
            return
        if code == FAILED:
            self.position = self.runner.step()
            raise self.runner.error()
        self._finish(notices=False)
        if code == NOTICE:
            raise self.guard.notice()

    def _run_compiled(self, polls: int) -> None:
        """Run with the compiled function until done, yielding the core between its calls
        once it has polled ``polls`` times, with the deadline and notices checked here."""
        resume, tag = self.runner.bound.resume, self.tag
        code = resume(polls, tag)
        spins = 0
        while code == PENDING:
            spins += 1
            # the deadline at every poll (a yield on a crowded host can take milliseconds,
            # as progress.poll says), notices every 64
            self._check_compiled(notices=spins % 64 == 0)
            os.sched_yield()
            code = resume(1, tag)
        self._ran(code)

    def _check_compiled(self, notices: bool = True) -> None:
        """CollectiveTimeout past the current step's deadline, or (``notices``) another
        rank's notice."""
        runner = self.runner
        self.position = runner.step()
        if self.limit is not None and MPI.Wtime() - runner.started() > self.limit:
            plan = self.binding.plan
            raise _timeout(plan.label, self.steps[self.position], len(plan.program.steps),
                           runner.in_flight())
        if notices and self.guard.interrupted():
            raise self.guard.notice()

    def _post(self) -> None:
        """Post the current step (and run through steps that only compute), after the
        pauses of fault injection where ``settings.stall`` asks for them."""
        steps = self.steps
        stall = settings.current.stall
        if stall is not None:
            _stall(steps[self.position:], stall)
        while self.position < len(steps):
            step = steps[self.position]
            # the deadline counts from before the posts: a peer's next step, which needs them,
            # starts later, so its deadline never passes before this one's
            posted = time.monotonic()
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
                    self.deadline = posted + self.limit
                self.tested = None
                return
            self.position += 1
        self._finish()

    def _complete(self, step: CompiledStep) -> None:
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
            code = runner.bound.resume(1, self.tag)
            if code == PENDING:
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

    def _arrived(self, step: CompiledStep, done: list[int]) -> None:
        for i in done:
            ops = step.arrivals.get(i)
            if ops:
                run_ops(ops, self.reduce)

    def _wait_step(self, step: CompiledStep) -> None:
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
        function just polled the notice receive) CommunicatorRevoked if another rank's notice
        came meanwhile."""
        self.done = True
        binding = self.binding
        binding.busy = False
        if self.runner is not None and notices:
            self.runner.rewind()            # finished here, not by the compiled function
        self.on_done()
        if notices:
            self.guard.check_notices()


def _timeout(label: str, step: CompiledStep, steps: int, requests: list[MPI.Request]
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


def _stall(steps: list[CompiledStep], stall: tuple[float, float]) -> None:
    """``settings.stall``'s random pauses before a post: one throw of the dice per step
    that the post runs (the steps that only compute on the way, and the one it posts)."""
    probability, seconds = stall
    for step in steps:
        if _STALLS.random() < probability:
            time.sleep(seconds)
        if step.posts or step.sync:
            break
