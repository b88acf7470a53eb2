"""The public collectives: validate -> choose the algorithm -> cached plan -> execute.

Each collective exists in three forms, like MPI's: blocking (``allgather``), non-blocking
(``iallgather`` returns a :class:`Request`) and persistent (``allgather_init`` returns a
:class:`PersistentRequest` to ``start``/``wait`` many times).  Arguments are checked on every
rank before the first message, so bad input given alike on all ranks raises the same error
everywhere: TypeError for a wrong buffer kind or dtype, ValueError for sizes, counts, ops and
algorithm constraints, NotImplementedError for unsupported combinations.
"""

from __future__ import annotations

import bisect
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

import numpy as np
from mpi4py import MPI

from . import registry, settings, tuning
from .runtime import buffers, kernels
from .runtime.executor import Operation, Plan
from .runtime.progress import deadline_from, note_ranks_per_host, wait_requests
from .runtime.window import NodeWindow
from .schedule import Call, buffer_sizes, offsets
from .topology import Topology, detect as detect_topology, from_spec as topology_from_spec
from .verify import IN_PLACE_COLLECTIVES

PLANS_PER_COMM = 128
CALLS_PER_COMM = 256
BLOCKING_TAGS = (0, 1 << 8)     # blocking calls run one at a time: tags 0..255 by step


class Context:
    """hpccoll's state for one user communicator: a private duplicate, the plan cache and the
    tag-slot counter of non-blocking and persistent operations."""

    def __init__(self, comm: MPI.Comm, topology: Topology):
        self.comm = comm
        self.topology = topology
        self.window: NodeWindow | None = None
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()
        self.calls: OrderedDict[tuple, Prepared] = OrderedDict()
        tag_ub = comm.Get_attr(MPI.TAG_UB) or 32767
        self.tag_span = 1 << 16 if tag_ub >= 1 << 20 else 1 << 8
        self.slots = (tag_ub + 1) // self.tag_span
        self.slot = 0

    def next_tags(self) -> tuple[int, int]:
        """(base, span) tags for a non-blocking or persistent operation: slot 0 is for the
        blocking calls, the others rotate; every rank starts operations in the same order,
        so every rank draws the same slot."""
        self.slot = self.slot % (self.slots - 1) + 1
        return self.slot * self.tag_span, self.tag_span

    def remember(self, key: tuple, prepared: "Prepared") -> None:
        self.calls[key] = prepared
        while len(self.calls) > CALLS_PER_COMM:
            self.calls.popitem(last=False)

    def plan(self, key: tuple, make: Callable[[], Plan]) -> Plan:
        found = self.plans.get(key)
        if found is None:
            found = self.plans[key] = make()
            while len(self.plans) > PLANS_PER_COMM:
                self.plans.popitem(last=False)[1].free()
        else:
            self.plans.move_to_end(key)
        return found

    def node_window(self) -> NodeWindow:
        """The shared window of this rank's node (made on first use: collective)."""
        if self.window is None:
            self.window = NodeWindow(self.comm, self.topology.regions[0])
        return self.window

    def free(self) -> None:
        for plan in self.plans.values():
            plan.free()
        self.plans.clear()
        self.calls.clear()
        if self.window is not None:
            self.window.free()
        self.comm.Free()


def _delete_context(comm: MPI.Comm, keyval: int, context: Context) -> None:
    context.free()


_KEYVAL: int | None = None


def existing_context(comm: MPI.Comm) -> Context | None:
    """The :class:`Context` of ``comm`` if it has one already (no communication)."""
    return None if _KEYVAL is None else comm.Get_attr(_KEYVAL)


def context(comm: MPI.Comm) -> Context:
    """The :class:`Context` of ``comm``, creating its private duplicate on first use (a
    collective call, guarded by the deadline like every other)."""
    global _KEYVAL
    if _KEYVAL is None:
        _KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete_context)
    found = comm.Get_attr(_KEYVAL)
    if found is None:
        dup, request = comm.Idup()
        wait_requests([request], "creating hpccoll's private communicator (Comm.Idup)")
        host = dup.Split_type(MPI.COMM_TYPE_SHARED)
        note_ranks_per_host(host.Get_size())
        host.Free()
        found = Context(dup, detect_topology(dup))
        comm.Set_attr(_KEYVAL, found)
    return found


def set_topology(comm: MPI.Comm, topology: Topology | str) -> Topology:
    """Use ``topology`` (a :class:`~hpccoll.topology.Topology`, a spec such as
    ``"nodes=2,ppn=4"``, or a JSON file) for ``comm`` instead of the detected one.  Every rank
    must pass the same; the first use of ``comm`` by hpccoll is collective."""
    _check_comm(comm)
    if isinstance(topology, str):
        topology = topology_from_spec(topology, comm.Get_size())
    elif not isinstance(topology, Topology):
        raise TypeError("topology must be a Topology or a spec string")
    if topology.size != comm.Get_size():
        raise ValueError(f"topology describes {topology.size} ranks, the communicator has "
                         f"{comm.Get_size()}")
    ctx = context(comm)
    if topology != ctx.topology:
        ctx.topology = topology
        ctx.calls.clear()
        for plan in ctx.plans.values():
            plan.free()
        ctx.plans.clear()
        if ctx.window is not None:
            ctx.window.free()
            ctx.window = None
    return topology


def topology(comm: MPI.Comm) -> Topology:
    """The topology hpccoll uses for ``comm`` (detected on first use, or set)."""
    _check_comm(comm)
    return context(comm).topology


# ------------------------------------------------------------------------- argument checking

def _check_comm(comm: Any) -> None:
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm must be an mpi4py intracommunicator, got {type(comm).__name__}")


def _counts(counts: Any, p: int, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(c) for c in counts)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of {p} integers") from None
    if len(values) != p:
        raise ValueError(f"{name} has {len(values)} entries, the communicator has {p} ranks")
    if any(c < 0 for c in values):
        raise ValueError(f"{name} has negative entries: {list(values)}")
    return values


def _vector(spec: Any, p: int, name: str) -> tuple[Any, tuple[int, ...], tuple[int, ...]]:
    """``[array, counts]``, ``[array, counts, displs]`` or mpi4py's ``[array, (counts, displs)]``
    (elements; displs default to the counts laid end to end)."""
    if not isinstance(spec, (list, tuple)) or len(spec) not in (2, 3):
        raise TypeError(f"{name} must be [array, counts], [array, counts, displs] or "
                        "[array, (counts, displs)]")
    array, counts, displs = spec[0], spec[1], spec[2] if len(spec) == 3 else None
    if displs is None and isinstance(counts, tuple) and len(counts) == 2 and \
            not isinstance(counts[0], (int, np.integer)):
        counts, displs = counts
    counts = _counts(counts, p, f"{name} counts")
    displs = offsets(counts) if displs is None else _counts(displs, p, f"{name} displs")
    return array, counts, displs


def _options(options: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    if options is None:
        return ()
    if not isinstance(options, Mapping):
        raise TypeError("options must be a mapping of planner option names to values")
    return tuple(sorted(options.items()))


@dataclass(frozen=True)
class _Args:
    """A validated call, without its buffers (it is cached and reused for later calls)."""

    collective: str
    call: Call
    dtype: np.dtype
    op: str | None
    nbytes: int          # the call's size in the benchmark convention


def _validate(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, *, counts: Any = None,
              op: Any = None, options: Mapping[str, Any] | None = None
              ) -> tuple[_Args, Any, Any]:
    """Check a call completely; return it with the send and receive arrays (unwrapped from
    alltoallv's ``[array, counts, displs]``; send is None when in place)."""
    _check_comm(comm)
    p, rank = comm.Get_size(), comm.Get_rank()
    in_place = sendbuf is MPI.IN_PLACE
    if in_place and collective not in IN_PLACE_COLLECTIVES:
        raise NotImplementedError(f"MPI.IN_PLACE is supported for "
                                  f"{' and '.join(IN_PLACE_COLLECTIVES)}, not {collective}")
    sdispls = rdispls = recvcounts = ()
    if collective == "alltoallv":
        sendbuf, sendcounts, sdispls = _vector(sendbuf, p, "sendbuf")
        recvbuf, recvcounts, rdispls = _vector(recvbuf, p, "recvbuf")
    buffers.check_array(recvbuf, "recvbuf", writable=True)
    if not in_place:
        buffers.check_array(sendbuf, "sendbuf", writable=False)
        if sendbuf.dtype != recvbuf.dtype:
            raise TypeError(f"sendbuf dtype {sendbuf.dtype} differs from recvbuf dtype "
                            f"{recvbuf.dtype}")
        if buffers.kind(sendbuf) != buffers.kind(recvbuf):
            raise TypeError("sendbuf and recvbuf must both be NumPy or both CuPy arrays")
        _check_apart(sendbuf, recvbuf)
    dtype = recvbuf.dtype
    send_n = None if in_place else sendbuf.size
    recv_n = recvbuf.size
    if collective == "allgather":
        if counts is None:
            n = recv_n // p if in_place else send_n
            counts = (n,) * p
        counts = _counts(counts, p, "recvcounts")
    elif collective == "alltoall":
        if send_n != recv_n or recv_n % p:
            raise ValueError(f"alltoall needs sendbuf and recvbuf of equal size divisible by "
                             f"{p} ranks, got {send_n} and {recv_n} elements")
        counts = (recv_n // p,) * p
        recvcounts, sdispls = counts, offsets(counts)
        rdispls = sdispls
    elif collective == "alltoallv":
        counts = sendcounts
    elif collective == "reduce_scatter":
        counts = (recv_n,) * p if counts is None else _counts(counts, p, "recvcounts")
    else:
        counts = (recv_n,)
    call = Call(collective, p, rank, counts, recvcounts, sdispls, rdispls, in_place,
                dtype.itemsize, None, _options(options))
    want_send, want_recv = buffer_sizes(call)
    if collective == "alltoallv":
        for name, have, want in (("sendbuf", send_n, want_send), ("recvbuf", recv_n, want_recv)):
            if have < want:
                raise ValueError(f"{name} has {have} elements; its counts and displs reach "
                                 f"element {want}")
    elif recv_n != want_recv or (not in_place and send_n != want_send):
        have = f"recvbuf {recv_n}" + ("" if in_place else f", sendbuf {send_n}")
        need = f"recvbuf {want_recv}" + ("" if in_place else f", sendbuf {want_send}")
        raise ValueError(f"{collective} on {p} rank(s) with counts {list(counts)} needs "
                         f"{need} elements, got {have}")
    op_name = buffers.check_op(op, dtype) if collective in ("reduce_scatter", "allreduce") \
        else None
    args = _Args(collective, call, dtype, op_name, message_count(call) * dtype.itemsize)
    return args, None if in_place else sendbuf, recvbuf


def _check_apart(send: Any, recv: Any) -> tuple[int, int]:
    """The buffers' addresses (0 for no send buffer); ValueError if their memory overlaps."""
    send_at, recv_at = 0 if send is None else buffers.address(send), buffers.address(recv)
    if send is not None and send.nbytes and recv.nbytes and \
            send_at < recv_at + recv.nbytes and recv_at < send_at + send.nbytes:
        raise ValueError("sendbuf and recvbuf overlap; pass MPI.IN_PLACE as sendbuf to "
                         "work in place")
    return send_at, recv_at


def message_count(call: Call) -> int:
    """The call's size in elements as the benchmarks count it (OSU): the block a rank
    contributes (allgather), sends to one peer (alltoall; the largest for alltoallv), or the
    whole vector (allreduce; reduce_scatter's input)."""
    if call.collective == "allgather":
        return call.counts[call.rank]
    if call.collective in ("alltoall", "alltoallv"):
        return max(call.counts, default=0)
    return sum(call.counts)


def resolve(args: _Args, algorithm: str) -> str:
    """The algorithm name that will run: ``auto`` resolved; ValueError if unknown or if its
    constraints do not hold for this call."""
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a name, got {type(algorithm).__name__}")
    if algorithm == "auto":
        return tuning.choose(args.call, args.nbytes)
    if algorithm == registry.NATIVE:
        return algorithm
    reason = registry.get(args.collective, algorithm).violated(args.call)
    if reason is not None:
        raise ValueError(f"algorithm {algorithm!r} cannot serve {args.collective} on "
                         f"{args.call.p} ranks: it requires {reason}")
    return algorithm


# ------------------------------------------------------------------------------- execution

class Request:
    """A started collective: ``test()`` makes progress without blocking, ``wait()`` completes."""

    def __init__(self, operation: Any):
        self._operation = operation

    def test(self) -> bool:
        return self._operation.test()

    def wait(self) -> None:
        self._operation.wait()


class PersistentRequest(Request):
    """A collective planned once and run many times on the same buffers: ``start()`` then
    ``wait()`` (or ``test()``), again and again; ``free()`` releases its MPI requests."""

    def __init__(self, prepared: "Prepared", sendbuf: Any, recvbuf: Any):
        super().__init__(None)
        self._prepared, self._send, self._recv = prepared, sendbuf, recvbuf
        self._tags = prepared.ctx.next_tags()

    def start(self) -> None:
        if self._operation is not None and not self._operation.done:
            raise RuntimeError("persistent collective started again before it completed")
        self._operation = self._prepared.start(self._send, self._recv, self._tags, cache=True)

    def test(self) -> bool:
        return self._operation is None or self._operation.test()

    def wait(self) -> None:
        if self._operation is not None:
            self._operation.wait()

    def free(self) -> None:
        self._prepared.release(self._tags)


class _NativeOperation:
    """The MPI library's own non-blocking collective, with the same test/wait and deadline."""

    def __init__(self, label: str, request: MPI.Request, on_done: Callable[[], None]):
        self.label, self.request, self.on_done = label, request, on_done
        self.done = False
        self.deadline = deadline_from(time.monotonic())

    def test(self) -> bool:
        if not self.done and self.request.Test():
            self.done = True
            self.on_done()
        elif not self.done and self.deadline is not None and time.monotonic() > self.deadline:
            self.wait()
        return self.done

    def wait(self) -> None:
        if not self.done:
            wait_requests([self.request], self.label, deadline=self.deadline)
            self.done = True
            self.on_done()


def _native_starter(args: _Args, comm: MPI.Comm) -> Callable[[Any, Any], MPI.Request]:
    """``start(send, recv)`` for the MPI library's own non-blocking collective (send None
    when in place), with the datatype, op and counts resolved once."""
    t = buffers.mpi_datatype(args.dtype)
    call, coll = args.call, args.collective

    def specs(send: Any, recv: Any) -> tuple[Any, Any]:
        return MPI.IN_PLACE if send is None else [send, t], [recv, t]
    if coll == "allgather":
        counts = call.counts
        if len(set(counts)) == 1:
            return lambda send, recv: comm.Iallgather(*specs(send, recv))
        displs = offsets(counts)
        return lambda send, recv: comm.Iallgatherv(specs(send, recv)[0],
                                                   [recv, counts, displs, t])
    if coll == "alltoall":
        return lambda send, recv: comm.Ialltoall(*specs(send, recv))
    if coll == "alltoallv":
        return lambda send, recv: comm.Ialltoallv([send, call.counts, call.sdispls, t],
                                                  [recv, call.recvcounts, call.rdispls, t])
    op = buffers.native_op(args.op, args.dtype)
    if coll == "reduce_scatter":
        counts = list(call.counts)
        return lambda send, recv: comm.Ireduce_scatter(*specs(send, recv), counts, op=op)
    return lambda send, recv: comm.Iallreduce(*specs(send, recv), op=op)


class Prepared:
    """A validated call with its algorithm chosen and planned; ``start`` runs it on buffers
    of the validated kind, dtype and sizes (cached and reused by later identical calls)."""

    def __init__(self, ctx: Context, args: _Args, algorithm: str, array_kind: str):
        self.ctx = ctx
        self.args = args
        self.algorithm = algorithm
        self.staged = array_kind == "cupy" and not buffers.gpu_aware()
        self.plan: Plan | None = None
        self.reduce = None
        if algorithm == registry.NATIVE:
            self.start_native = _native_starter(args, ctx.comm)
            self.label = f"{args.collective}/native"
        else:
            key = (args.collective, algorithm, args.call, args.dtype)
            planner = registry.get(args.collective, algorithm).planner
            label = f"{args.collective}/{algorithm}"
            self.plan = ctx.plan(key, lambda: Plan(planner(args.call), args.dtype, label))
            if args.op:
                self.reduce = kernels.reduction(args.op, args.dtype) \
                    if array_kind == "numpy" or self.staged else buffers.device_reduction(args.op)

    def start(self, send: Any, recv: Any, tags: tuple[int, int], cache: bool) -> Any:
        """Start on ``send``/``recv`` (send None when in place); returns the operation.
        ValueError, before any message, if the two buffers overlap."""
        addresses = _check_apart(send, recv)
        if settings.current.check:
            agree(self.ctx.comm, self.args, self.algorithm)
        on_done = _nothing
        if self.staged:
            send, recv, on_done = _stage_on_host(send, recv)
        if self.plan is None:
            return _NativeOperation(self.label, self.start_native(send, recv), on_done)
        window = self.ctx.node_window() if self.plan.program.window else None
        binding = self.plan.binding(self.ctx.comm, send, recv, addresses, tags, cache, window)
        return Operation(binding, self.reduce, on_done).start()

    def release(self, tags: tuple[int, int]) -> None:
        """Free the persistent requests made for tag range ``tags``."""
        if self.plan is not None:
            self.plan.release(tags)


def _nothing() -> None:
    pass


def _stage_on_host(send: Any, recv: Any) -> tuple[Any, Any, Callable[[], None]]:
    """Host copies of CuPy buffers for an MPI that cannot read device memory, and the
    callback that copies the result back."""
    buffers.synchronize(recv)
    host_send = None if send is None else buffers.to_host(send)
    host_recv = buffers.to_host(recv)
    return host_send, host_recv, lambda: recv.set(host_recv)


def agree(comm: MPI.Comm, args: _Args, algorithm: str) -> None:
    """Check mode (``HPCCOLL_CHECK=1``): one small collective confirms every rank called the
    same collective with the same algorithm, dtype, op and counts; for alltoallv that every
    rank's sendcounts match its peers' recvcounts.  Raises ValueError on every rank if not."""
    call = args.call
    shared = (args.collective, algorithm, args.dtype.str, args.op, call.in_place,
              call.counts if args.collective not in ("alltoall", "alltoallv") else (),
              call.options)
    mine = np.array([zlib.crc32(repr(shared).encode())], np.int64)
    if args.collective == "alltoallv":
        theirs = np.zeros(call.p, np.int64)
        wait_requests([comm.Ialltoall(np.array(call.counts, np.int64), theirs)],
                      "HPCCOLL_CHECK count exchange")
        mine = np.append(mine, np.count_nonzero(theirs != np.array(call.recvcounts)))
    everyone = np.zeros((call.p, len(mine)), np.int64)
    wait_requests([comm.Iallgather(mine, everyone)], "HPCCOLL_CHECK agreement")
    differ = np.flatnonzero(everyone[:, 0] != everyone[0, 0]).tolist()
    if differ:
        raise ValueError(f"HPCCOLL_CHECK: ranks {differ} called {args.collective} differently "
                         f"from rank 0 (collective, algorithm, dtype, op or counts differ); "
                         f"this rank: {shared}")
    if args.collective == "alltoallv":
        wrong = np.flatnonzero(everyone[:, 1]).tolist()
        if wrong:
            raise ValueError(f"HPCCOLL_CHECK: alltoallv counts disagree: ranks {wrong} expect "
                             "recvcounts that their peers' sendcounts do not match")


def _signature(collective: str, sendbuf: Any, recvbuf: Any, counts: Any, op: Any,
               algorithm: Any, options: Any) -> tuple | None:
    """Everything validation depends on, cheaply read, as a cache key; None when the call
    is not cacheable (alltoallv, or arguments that are not even arrays)."""
    if collective == "alltoallv":
        return None
    try:
        flags = recvbuf.flags
        recv = (type(recvbuf), recvbuf.dtype, recvbuf.size, flags.c_contiguous, flags.writeable)
        send = None if sendbuf is MPI.IN_PLACE else \
            (type(sendbuf), sendbuf.dtype, sendbuf.size, sendbuf.flags.c_contiguous)
        return (collective, algorithm, send, recv, None if counts is None else tuple(counts),
                op if isinstance(op, str) or op is None else buffers.op_name(op),
                None if options is None else tuple(sorted(options.items())))
    except (AttributeError, TypeError):
        return None


def prepare(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, *, counts: Any = None,
            op: Any = None, algorithm: str = "auto", options: Mapping[str, Any] | None = None
            ) -> tuple[Prepared, Any, Any]:
    """Validate and plan a call (every check happens here, before any message); return the
    prepared call with the send (None when in place) and receive arrays.  An identical call
    on the same communicator is served from a cache after a cheap signature check."""
    ctx = existing_context(comm) if isinstance(comm, MPI.Comm) else None
    key = _signature(collective, sendbuf, recvbuf, counts, op, algorithm, options) \
        if ctx is not None else None
    if key is not None:
        found = ctx.calls.get(key)
        if found is not None:
            return found, None if sendbuf is MPI.IN_PLACE else sendbuf, recvbuf
    args, send, recv = _validate(collective, comm, sendbuf, recvbuf, counts=counts, op=op,
                                 options=options)
    resolve(args, algorithm)            # unknown names and constraints on p: before any message
    ctx = context(comm)                 # (collective on first use: duplicate, topology)
    args = replace(args, call=replace(args.call, topology=ctx.topology))
    algorithm = resolve(args, algorithm)
    prepared = Prepared(ctx, args, algorithm, buffers.kind(recv))
    if key is not None:
        ctx.remember(key, prepared)
    return prepared, send, recv


def _run(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, **kw: Any) -> None:
    prepared, send, recv = prepare(collective, comm, sendbuf, recvbuf, **kw)
    prepared.start(send, recv, BLOCKING_TAGS, cache=True).wait()


def _start(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, **kw: Any) -> Request:
    prepared, send, recv = prepare(collective, comm, sendbuf, recvbuf, **kw)
    return Request(prepared.start(send, recv, prepared.ctx.next_tags(), cache=False))


def _init(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, **kw: Any
          ) -> PersistentRequest:
    prepared, send, recv = prepare(collective, comm, sendbuf, recvbuf, **kw)
    return PersistentRequest(prepared, send, recv)


# ------------------------------------------------------------------------- the collectives

def allgather(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, recvcounts: Any = None,
              algorithm: str = "auto", options: Mapping[str, Any] | None = None) -> None:
    """Every rank's ``sendbuf`` concatenated in rank order into every rank's ``recvbuf``
    (``recvcounts`` for uneven blocks, as Allgatherv; ``MPI.IN_PLACE`` as sendbuf takes the
    own block from its place in ``recvbuf``)."""
    _run("allgather", comm, sendbuf, recvbuf, counts=recvcounts, algorithm=algorithm,
         options=options)


def allgather_stream(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *,
                     recvcounts: Any = None, algorithm: str = "ring",
                     options: Mapping[str, Any] | None = None
                     ) -> Iterator[list[tuple[int, slice]]]:
    """:func:`allgather` as an iterator for overlapping computation with communication: after
    each step it yields ``[(source rank, slice of recvbuf), ...]`` for the data that step
    delivered (the own block comes with the first), with the next step's transfers already in
    flight.  ``ring`` yields one block per step, ``multiring`` one chunk per cycle."""
    prepared, send, recv = prepare("allgather", comm, sendbuf, recvbuf, counts=recvcounts,
                                   algorithm=algorithm, options=options)
    if prepared.plan is None:
        raise NotImplementedError("allgather_stream needs a scheduled algorithm, not native")
    operation = prepared.start(send, recv, BLOCKING_TAGS, cache=True)
    counts = prepared.args.call.counts
    starts = offsets(counts)
    for regions in operation.stream():
        pieces = []
        for offset, count in regions:      # cut at block boundaries: one source per piece
            stop = offset + count
            source = bisect.bisect_right(starts, offset) - 1
            while offset < stop:
                end = min(stop, starts[source] + counts[source])
                if end > offset:
                    pieces.append((source, slice(offset, end)))
                offset, source = max(offset, end), source + 1
        yield pieces


def alltoall(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, algorithm: str = "auto",
             options: Mapping[str, Any] | None = None) -> None:
    """Block j of ``sendbuf`` goes to rank j, landing as block ``rank`` of its ``recvbuf``."""
    _run("alltoall", comm, sendbuf, recvbuf, algorithm=algorithm, options=options)


def alltoallv(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, algorithm: str = "auto",
              options: Mapping[str, Any] | None = None) -> None:
    """All-to-all with per-peer counts: ``sendbuf = [array, sendcounts(, sdispls)]``,
    ``recvbuf = [array, recvcounts(, rdispls)]`` in elements (or mpi4py's
    ``[array, (counts, displs)]``)."""
    _run("alltoallv", comm, sendbuf, recvbuf, algorithm=algorithm, options=options)


def reduce_scatter(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, recvcounts: Any = None,
                   op: Any = MPI.SUM, algorithm: str = "auto",
                   options: Mapping[str, Any] | None = None) -> None:
    """Elementwise reduction of every rank's ``sendbuf``; rank r receives block r (equal
    blocks of ``recvbuf.size``, or ``recvcounts``)."""
    _run("reduce_scatter", comm, sendbuf, recvbuf, counts=recvcounts, op=op,
         algorithm=algorithm, options=options)


def allreduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, op: Any = MPI.SUM,
              algorithm: str = "auto", options: Mapping[str, Any] | None = None) -> None:
    """Elementwise reduction of every rank's ``sendbuf`` into every rank's ``recvbuf``
    (``MPI.IN_PLACE`` as sendbuf reduces ``recvbuf`` in place)."""
    _run("allreduce", comm, sendbuf, recvbuf, op=op, algorithm=algorithm, options=options)


def iallgather(comm, sendbuf, recvbuf, *, recvcounts=None, algorithm="auto",
               options=None) -> Request:
    """Non-blocking :func:`allgather`."""
    return _start("allgather", comm, sendbuf, recvbuf, counts=recvcounts, algorithm=algorithm,
                  options=options)


def ialltoall(comm, sendbuf, recvbuf, *, algorithm="auto", options=None) -> Request:
    """Non-blocking :func:`alltoall`."""
    return _start("alltoall", comm, sendbuf, recvbuf, algorithm=algorithm, options=options)


def ialltoallv(comm, sendbuf, recvbuf, *, algorithm="auto", options=None) -> Request:
    """Non-blocking :func:`alltoallv`."""
    return _start("alltoallv", comm, sendbuf, recvbuf, algorithm=algorithm, options=options)


def ireduce_scatter(comm, sendbuf, recvbuf, *, recvcounts=None, op=MPI.SUM, algorithm="auto",
                    options=None) -> Request:
    """Non-blocking :func:`reduce_scatter`."""
    return _start("reduce_scatter", comm, sendbuf, recvbuf, counts=recvcounts, op=op,
                  algorithm=algorithm, options=options)


def iallreduce(comm, sendbuf, recvbuf, *, op=MPI.SUM, algorithm="auto",
               options=None) -> Request:
    """Non-blocking :func:`allreduce`."""
    return _start("allreduce", comm, sendbuf, recvbuf, op=op, algorithm=algorithm,
                  options=options)


def allgather_init(comm, sendbuf, recvbuf, *, recvcounts=None, algorithm="auto",
                   options=None) -> PersistentRequest:
    """Persistent :func:`allgather`: plan once, ``start()``/``wait()`` many times."""
    return _init("allgather", comm, sendbuf, recvbuf, counts=recvcounts, algorithm=algorithm,
                 options=options)


def alltoall_init(comm, sendbuf, recvbuf, *, algorithm="auto", options=None
                  ) -> PersistentRequest:
    """Persistent :func:`alltoall`."""
    return _init("alltoall", comm, sendbuf, recvbuf, algorithm=algorithm, options=options)


def alltoallv_init(comm, sendbuf, recvbuf, *, algorithm="auto", options=None
                   ) -> PersistentRequest:
    """Persistent :func:`alltoallv`."""
    return _init("alltoallv", comm, sendbuf, recvbuf, algorithm=algorithm, options=options)


def reduce_scatter_init(comm, sendbuf, recvbuf, *, recvcounts=None, op=MPI.SUM,
                        algorithm="auto", options=None) -> PersistentRequest:
    """Persistent :func:`reduce_scatter`."""
    return _init("reduce_scatter", comm, sendbuf, recvbuf, counts=recvcounts, op=op,
                 algorithm=algorithm, options=options)


def allreduce_init(comm, sendbuf, recvbuf, *, op=MPI.SUM, algorithm="auto",
                   options=None) -> PersistentRequest:
    """Persistent :func:`allreduce`."""
    return _init("allreduce", comm, sendbuf, recvbuf, op=op, algorithm=algorithm,
                 options=options)
