"""A call validated, its algorithm chosen and planned: :func:`prepare` and :class:`Prepared`,
what every form of every collective (:mod:`hpccoll.api`, :mod:`hpccoll.comm`) starts from.
Arguments are checked on every rank before the first message (:mod:`hpccoll.arguments`);
an identical call on the same communicator is served from its context's cache after a cheap
signature check."""

from __future__ import annotations

import bisect
import operator
from dataclasses import replace
from typing import Any, Callable, Mapping

import numpy as np
from mpi4py import MPI

from . import registry, settings
from .arguments import (CallArgs, agree, check_apart, identity, ignores_recvbuf, resolve,
                        signature, validate)
from .collectives import Collective, nonblocking
from .context import Context, context, existing_context
from .requests import NativeOperation
from .runtime import buffers, device, kernels, native
from .runtime.executor import Plan
from .runtime.operation import Operation
from .runtime.progress import COMPLETED
from .runtime.native import NativeCall
from .schedule import RECV, Call


class Prepared:
    """A validated call with its algorithm chosen and planned; ``start`` runs it on buffers
    of the validated kind, dtype and sizes (cached and reused by later identical calls).

    Device buffers go to MPI as they are when it is GPU-aware (:func:`buffers.gpu_aware`,
    decided here, once), the local work running as device kernels; otherwise each call copies
    them into pinned host buffers taken once for this call signature (from the pinned pool),
    runs on those, and copies the result back (a second call running meanwhile gets buffers
    of its own).  Of the receive buffer, staging copies only what the call reads and writes
    (:func:`staged_regions`).  A call on device buffers starts after the work queued on their
    producers' streams, not after the whole device (:func:`device.wait_for_producers`)."""

    def __init__(self, ctx: Context, args: CallArgs, algorithm: str, memory_kind: str):
        self.ctx = ctx
        self.args = args
        self.algorithm = algorithm
        self.ignores_recv = ignores_recvbuf(args.spec, args.call.rank, args.call.root)
        self.host: tuple[Any, Any] | None = None        # the staging buffers, once made
        self.host_busy = False
        self.plan: Plan | None = None
        self.reduce = None
        self.label = f"{args.collective}/{algorithm}"
        self.shift = identity(args, algorithm) % ctx.tag_span    # where in a slot its tags start
        self.compiled: NativeCall | None = None      # the compiled executor, where it runs
        # no rank sends or receives anything (sizes every rank passes alike, all zero): a
        # blocking call has nothing to do, as MPI libraries return from such calls at once
        self.moves_nothing = args.nbytes == 0 and not args.spec.vector
        # one rank, host arrays of one size (or in place): a scheduled algorithm's result is
        # the send buffer, so a non-blocking or persistent start copies it and is done
        send_n, recv_n = args.spec.sizes(args.call)
        self.local_copy = args.call.p == 1 and algorithm != registry.NATIVE and \
            memory_kind == buffers.HOST and not args.spec.vector and send_n in (0, recv_n)
        if algorithm == registry.NATIVE:
            self.start_native = _native_starter(args, ctx.comm, nonblocking)
            if memory_kind == buffers.HOST:
                self.compiled = _native_call(args, ctx, self.label)
        else:
            key = (args.collective, algorithm, args.call, args.dtype)
            planner = registry.get(args.collective, algorithm).planner
            self.plan = ctx.plan(key, lambda: Plan(planner(args.call), args.dtype, self.label))
        # a shared window is host memory: its algorithms stage device buffers
        self.on_device = memory_kind == buffers.DEVICE
        self.staged = self.on_device and \
            (not buffers.gpu_aware() or self.plan is not None and self.plan.program.window > 0)
        self.recv_regions = staged_regions(args.spec, args.call) if self.staged else ((), ())
        on_host = not self.on_device or self.staged
        if args.op and not on_host and not device.reduces(args.op, args.dtype):
            raise TypeError(f"{args.op} on {args.dtype} device arrays: the device kernels do "
                            f"not reduce {args.dtype} (stage through host memory with "
                            "HPCCOLL_GPU_AWARE=0, or reduce another dtype)")
        if self.plan is not None:
            if args.op:
                self.reduce = kernels.reduction(args.op, args.dtype) if on_host \
                    else device.reduction(args.op)

    def start(self, send: Any, recv: Any, slot: int | None = None) -> Any:
        """Start on ``send``/``recv`` (send None when there is none) with the blocking calls'
        tags, or those of tag ``slot`` (:meth:`~hpccoll.context.Context.next_slot`) for a
        non-blocking or persistent operation; returns the operation.  Before any message:
        CommunicatorRevoked if the communicator is, ValueError if the two buffers overlap."""
        ctx = self.ctx
        ctx.check()
        addresses = check_apart(send, recv)
        if settings.current.check:
            agree(ctx.comm, self.args, self.algorithm, ctx)
        if self.moves_nothing:          # (every rank's call is empty: nothing to send)
            return COMPLETED
        if self.local_copy and slot is not None:
            if send is not None:        # (C-contiguous, of one size: flat views, no copy)
                recv.reshape(-1)[...] = send.reshape(-1)
            return COMPLETED
        on_done = nothing
        memory = (send, recv)
        if self.on_device:      # after the producers' work on them (MPI reads them: the host)
            device.wait_for_producers(memory, host=not self.staged)
            if self.staged:
                send, recv, on_done = self._stage(send, recv)
                addresses = check_apart(send, recv)
        if self.plan is None:
            if self.on_device and not self.staged:
                send, recv = None if send is None else buffers.message(send), \
                    buffers.message(recv)
            return NativeOperation(self.label, self.start_native(send, recv), on_done,
                                   memory + (send, recv), ctx)
        window = None
        if self.plan.program.window:
            window = ctx.node_window(self.plan.program.window * self.args.dtype.itemsize,
                                     self.shift)
        binding = self.plan.binding(ctx.comm, send, recv, (*addresses, self.args.op), window)
        return Operation(binding, self.reduce, on_done, memory + (send, recv), ctx,
                         self.tag(slot)).start()

    def init_native(self, send: Any, recv: Any) -> MPI.Prequest:
        """The MPI library's own persistent collective (MPI-4's ``MPI_<Collective>_init``,
        collective like the call itself) on host ``send`` (None when there is none) and
        ``recv``; NotImplementedError where the library (or mpi4py) has none."""
        try:
            start = _native_starter(self.args, self.ctx.comm, lambda name: name + "_init")
        except AttributeError:      # (an mpi4py without MPI-4's persistent collectives)
            raise NotImplementedError("no persistent collective in this mpi4py") from None
        return start(send, recv)

    def tag(self, slot: int | None = None) -> int:
        """The first tag of a run in tag ``slot`` (None: the blocking calls')."""
        return (slot or 0) + self.shift

    def _stage(self, send: Any, recv: Any) -> tuple[Any, Any, Callable[[], None]]:
        """The pinned host buffers for device ``send``/``recv`` (send None when there is
        none), filled from them (of ``recv``, what the call reads), and the callback that
        copies the result back (what the call writes)."""
        host = self.host
        if host is None or self.host_busy:
            host = (None if send is None else device.pinned(send.size, send.dtype),
                    device.pinned(recv.size, recv.dtype))
            if self.host is None:
                self.host = host
        mine = host is self.host
        self.host_busy |= mine
        host_send, host_recv = host
        if send is not None:
            device.to_host(send, host_send)
        reads, writes = self.recv_regions
        device.to_host(recv, host_recv, reads)
        return host_send, host_recv, CopyBack(self, host_recv, recv, writes, mine)


class CopyBack:
    """The end of a staged call (its operation's ``on_done``): copies what the call wrote
    from the pinned receive buffer ``host`` to the device array ``recv`` -- the regions of
    ``writes`` that :meth:`deliver` has not copied already, so that each byte goes down once
    -- then frees the call's pinned buffers for the next call (``mine``: they are the
    prepared call's own)."""

    __slots__ = ("prepared", "host", "recv", "left", "mine")

    def __init__(self, prepared: Prepared, host: np.ndarray, recv: Any,
                 writes: tuple[tuple[int, int], ...], mine: bool):
        self.prepared, self.host, self.recv, self.mine = prepared, host, recv, mine
        self.left = _intervals(writes)      # [start, stop) pairs not copied yet, in order

    def deliver(self, regions: Any) -> None:
        """Copy ``regions`` ((offset, count) pairs) of the result to the device now, as far
        as the call writes them and they have not gone down yet (:mod:`hpccoll.streaming`:
        each region before it is handed over)."""
        left = self.left
        down = [(start, stop - start) for offset, count in regions if count and left
                for start, stop in _cut(left, offset, offset + count)]
        device.to_device(self.host, self.recv, down)

    def __call__(self) -> None:
        left, self.left = self.left, []
        device.to_device(self.host, self.recv, [(a, b - a) for a, b in left])
        if self.mine:
            self.prepared.host_busy = False


def _intervals(regions: Any) -> list[tuple[int, int]]:
    """(offset, count) pairs as sorted, disjoint [start, stop) pairs (overlaps merged)."""
    merged: list[tuple[int, int]] = []
    for start, stop in sorted((o, o + c) for o, c in regions if c > 0):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _cut(left: list[tuple[int, int]], start: int, stop: int) -> list[tuple[int, int]]:
    """Remove [start, stop) from ``left`` (sorted, disjoint [start, stop) pairs, changed in
    place); return the parts removed, in order."""
    i = bisect.bisect_right(left, start, key=_first)
    if i and left[i - 1][1] > start:
        i -= 1
    j, taken, kept = i, [], []
    while j < len(left) and left[j][0] < stop:
        a, b = left[j]
        low, high = max(a, start), min(b, stop)
        taken.append((low, high))
        if a < low:
            kept.append((a, low))
        if high < b:
            kept.append((high, b))
        j += 1
    left[i:j] = kept
    return taken


_first = operator.itemgetter(0)


def staged_regions(spec: Collective, call: Call) -> tuple[tuple[tuple[int, int], ...],
                                                         tuple[tuple[int, int], ...]]:
    """Where a call reads and where it writes its receive buffer, as (offset, count) pairs of
    elements: staging copies just these.  It reads its input where that lies in the receive
    buffer (in place: the rank's own block(s); a broadcast's root: its buffer), nothing
    otherwise.  It writes the blocks of its result (alltoall's at their displacements, the
    gaps between them untouched; otherwise the whole buffer), less an input in place that a
    collective which does not reduce leaves as it is (allgather's own block, the root's
    buffer of a broadcast).  (Also what ``hpccoll bench -d cuda`` copies around MPI's own
    collective on staged device buffers.)"""
    source = spec.input(call)
    inside = source.buffer == RECV and source.count > 0
    reads = ((source.offset, source.count),) if inside else ()
    blocks = list(zip(call.rdispls, call.recvcounts)) if call.rdispls else \
        [(0, spec.sizes(call)[1])]
    if inside and not spec.reduces:
        blocks = [piece for offset, count in blocks
                  for piece in ((offset, min(offset + count, source.offset) - offset),
                                (max(offset, source.stop), offset + count -
                                 max(offset, source.stop)))]
    return reads, tuple((offset, count) for offset, count in blocks if count > 0)


def _native_starter(args: CallArgs, comm: MPI.Comm, form: Callable[[str], str]
                    ) -> Callable[[Any, Any], MPI.Request]:
    """``start(send, recv)`` for the MPI library's own collective in ``form`` (mpi4py's
    method name from the blocking one: :func:`nonblocking`, or ``_init`` added) on ``send``
    (None when there is none) and ``recv``, with the datatype, op and counts resolved once."""
    op = buffers.native_op(args.op, args.dtype) if args.op else None
    name, arguments = args.spec.native_args(args.call, buffers.mpi_datatype(args.dtype), op)
    method = getattr(comm, form(name))
    return lambda send, recv: method(*arguments(send, recv))


def _native_call(args: CallArgs, ctx: Context, label: str) -> NativeCall | None:
    """The call on the compiled executor (:mod:`hpccoll.runtime.native`) if it runs this
    one (:func:`~hpccoll.runtime.native.refusal` has no reason against it); None
    otherwise."""
    call = args.call
    op = buffers.native_op(args.op, args.dtype) if args.op else None
    if not native.runs(args.collective, args.dtype, int(native.vectors(call).max(initial=0)),
                       op):
        return None
    send_n, recv_n = args.spec.sizes(call)
    no_send = call.in_place or args.spec.one_buffer
    return NativeCall(call, label, ctx.comm, ctx, None if no_send else send_n,
                      None if ignores_recvbuf(args.spec, call.rank, call.root) else recv_n,
                      args.dtype, op)


def nothing() -> None:
    """Nothing to do (a callback that has no work)."""


def prepare(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, *, counts: Any = None,
            op: Any = None, root: Any = 0, algorithm: str = "auto",
            options: Mapping[str, Any] | None = None, form: str = "blocking"
            ) -> tuple[Prepared, Any, Any]:
    """Validate and plan a call (every check happens here, before any message), ``auto``
    resolved for calls made in ``form`` (:data:`~hpccoll.tuning.FORMS`); return the
    prepared call with the send (None when there is none) and receive arrays.  An identical
    call on the same communicator is served from a cache after a cheap signature check."""
    ctx = existing_context(comm) if isinstance(comm, MPI.Comm) else None
    key = signature(collective, sendbuf, recvbuf, counts, op, root, algorithm, options) \
        if isinstance(comm, MPI.Comm) else None
    if key is not None and form != "blocking" and algorithm == "auto":
        key = (form, key)               # (auto may resolve otherwise for another form)
    if key is not None:
        try:
            found = None if ctx is None else ctx.calls.get(key)
            hash(key)
        except TypeError:               # unhashable arguments: validation says what is wrong
            found = key = None
        if found is not None:
            if found.args.spec.vector:
                sendbuf, recvbuf = sendbuf[0], recvbuf[0]
            send = None if sendbuf is MPI.IN_PLACE else _array(sendbuf)
            return found, send, send[:0] if found.ignores_recv else _array(recvbuf)
    args, send, recv = validate(collective, comm, sendbuf, recvbuf, counts=counts, op=op,
                                root=root, options=options)
    resolve(args, algorithm, form)      # unknown names, constraints on p: before any message
    ctx = context(comm)                 # (collective on first use: duplicate, topology)
    args = replace(args, call=replace(args.call, topology=ctx.topology))
    algorithm = resolve(args, algorithm, form)
    prepared = Prepared(ctx, args, algorithm, buffers.kind(recv))
    if key is not None:
        ctx.remember(key, prepared)
    return prepared, send, recv


def _array(buf: Any) -> Any:
    """The array of an already validated buffer (a NumPy array is one; None stays None)."""
    return buf if buf is None or isinstance(buf, np.ndarray) else buffers.adapt(buf, "buffer")
