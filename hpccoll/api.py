"""The public collectives: validate -> choose the algorithm -> cached plan -> execute.

Each collective exists in three forms, like MPI's: blocking (``allgather``), non-blocking
(``iallgather`` returns a :class:`Request`) and persistent (``allgather_init`` returns a
:class:`PersistentRequest` to ``start``/``wait`` many times).  Arguments are checked on every
rank before the first message, so bad input given alike on all ranks raises the same error
everywhere: TypeError for a wrong buffer kind or dtype, ValueError for sizes, counts, ops and
algorithm constraints, NotImplementedError for unsupported combinations.
"""

from __future__ import annotations

import os
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
from mpi4py import MPI

from . import buffers, kernels, registry, tuning
from .executor import CollectiveTimeout, Operation, Plan, deadline_from, wait_requests
from .schedule import Call, buffer_sizes, offsets
from .verify import IN_PLACE_COLLECTIVES

PLANS_PER_COMM = 128


class Context:
    """hpccoll's state for one user communicator: a private duplicate, the plan cache and the
    tag-slot counter of non-blocking and persistent operations."""

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()
        tag_ub = comm.Get_attr(MPI.TAG_UB) or 32767
        self.tag_span = 1 << 16 if tag_ub >= 1 << 20 else 1 << 8
        self.slots = (tag_ub + 1) // self.tag_span
        self.slot = 0

    def next_slot(self) -> int:
        """A tag slot for a non-blocking or persistent operation (slot 0 is for blocking ones);
        every rank starts operations in the same order, so every rank draws the same slot."""
        self.slot = self.slot % (self.slots - 1) + 1
        return self.slot

    def plan(self, key: tuple, make: Callable[[], Plan]) -> Plan:
        found = self.plans.get(key)
        if found is None:
            found = self.plans[key] = make()
            while len(self.plans) > PLANS_PER_COMM:
                self.plans.popitem(last=False)[1].free()
        else:
            self.plans.move_to_end(key)
        return found

    def free(self) -> None:
        for plan in self.plans.values():
            plan.free()
        self.plans.clear()
        self.comm.Free()


def _delete_context(comm: MPI.Comm, keyval: int, context: Context) -> None:
    context.free()


_KEYVAL: int | None = None


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
        found = Context(dup)
        comm.Set_attr(_KEYVAL, found)
    return found


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


@dataclass
class _Args:
    """A validated call: what every later stage needs."""

    collective: str
    call: Call
    send: Any            # flat view, or None when in place
    recv: Any            # flat view
    dtype: np.dtype
    op: str | None
    nbytes: int          # the call's size in the benchmark convention


def _validate(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, *, counts: Any = None,
              op: Any = None, options: Mapping[str, Any] | None = None) -> _Args:
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
        if buffers.overlap(sendbuf, recvbuf):
            raise ValueError("sendbuf and recvbuf overlap; pass MPI.IN_PLACE as sendbuf to "
                             "work in place")
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
    else:
        if recv_n != want_recv or (not in_place and send_n != want_send):
            have = f"recvbuf {recv_n}" + ("" if in_place else f", sendbuf {send_n}")
            need = f"recvbuf {want_recv}" + ("" if in_place else f", sendbuf {want_send}")
            raise ValueError(f"{collective} on {p} ranks with counts {list(counts)} needs "
                             f"{need} elements, got {have}")
    op_name = buffers.check_op(op, dtype) if collective in ("reduce_scatter", "allreduce") \
        else None
    return _Args(collective, call, None if in_place else buffers.flat(sendbuf),
                 buffers.flat(recvbuf), dtype, op_name, message_count(call) * dtype.itemsize)


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

    def __init__(self, prepared: "_Prepared"):
        super().__init__(None)
        self._prepared = prepared
        self._slot = prepared.ctx.next_slot()

    def start(self) -> None:
        if self._operation is not None and not self._operation.done:
            raise RuntimeError("persistent collective started again before it completed")
        self._operation = self._prepared.start(self._slot, cache=True)

    def test(self) -> bool:
        return self._operation is None or self._operation.test()

    def wait(self) -> None:
        if self._operation is not None:
            self._operation.wait()

    def free(self) -> None:
        self._prepared.release(self._slot)


class _NativeOperation:
    """The MPI library's own non-blocking collective, with the same test/wait and deadline."""

    def __init__(self, args: _Args, comm: MPI.Comm, on_done: Callable[[], None]):
        self.on_done = on_done
        self.label = f"{args.collective}/native"
        self.done = False
        self.request = _start_native(args, comm)
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


def _start_native(args: _Args, comm: MPI.Comm) -> MPI.Request:
    t = buffers.mpi_datatype(args.dtype)
    call, recv = args.call, [args.recv, t]
    send = MPI.IN_PLACE if args.send is None else [args.send, t]
    coll = args.collective
    if coll == "allgather":
        counts = call.counts
        if len(set(counts)) == 1:
            return comm.Iallgather(send, recv)
        return comm.Iallgatherv(send, [args.recv, counts, offsets(counts), t])
    if coll == "alltoall":
        return comm.Ialltoall(send, recv)
    if coll == "alltoallv":
        return comm.Ialltoallv([args.send, call.counts, call.sdispls, t],
                               [args.recv, call.recvcounts, call.rdispls, t])
    op = buffers.native_op(args.op, args.dtype)
    if coll == "reduce_scatter":
        return comm.Ireduce_scatter(send, recv, list(call.counts), op=op)
    return comm.Iallreduce(send, recv, op=op)


class _Prepared:
    """A validated call with its algorithm chosen, ready to start (again and again)."""

    def __init__(self, comm: MPI.Comm, args: _Args, algorithm: str):
        self.ctx = context(comm)
        self.args = args
        self.algorithm = algorithm
        self.staged = buffers.kind(args.recv) == "cupy" and not buffers.gpu_aware()
        self.host: tuple[Any, Any] | None = None
        if algorithm != registry.NATIVE:
            key = (args.collective, algorithm, args.call, args.dtype)
            planner = registry.get(args.collective, algorithm).planner
            label = f"{args.collective}/{algorithm}"
            self.plan = self.ctx.plan(key, lambda: Plan(planner(args.call), args.dtype, label))
            self.reduce = kernels.reducer(args.op, args.dtype) if args.op else None
            if buffers.kind(args.recv) == "cupy" and not self.staged:
                import cupy
                ufunc = getattr(cupy, kernels.UFUNCS[args.op].__name__) if args.op else None
                self.reduce = (lambda dst, a, b: ufunc(a, b, out=dst)) if ufunc else None

    def _buffers(self) -> tuple[Any, Any]:
        """The arrays MPI works on: the user's, or host copies when a CuPy call is staged."""
        send, recv = self.args.send, self.args.recv
        if not self.staged:
            return send, recv
        buffers.synchronize(recv)
        host_send = None if send is None else buffers.to_host(send)
        host_recv = buffers.to_host(recv) if send is None else np.empty(recv.shape, recv.dtype)
        self.host = (host_send, host_recv)
        return self.host

    def _finished(self) -> None:
        if self.staged and self.host is not None:
            self.args.recv.set(self.host[1])
            self.host = None

    def start(self, slot: int, cache: bool) -> Any:
        if _checking():
            agree(self.ctx.comm, self.args, self.algorithm)
        send, recv = self._buffers()
        if self.algorithm == registry.NATIVE:
            args = self.args if not self.staged else _replace_buffers(self.args, send, recv)
            return _NativeOperation(args, self.ctx.comm, self._finished)
        binding = self.plan.binding(self.ctx.comm, send, recv,
                                    (slot * self.ctx.tag_span, self.ctx.tag_span), cache)
        return Operation(binding, self.reduce, self._finished).start()

    def release(self, slot: int) -> None:
        if self.algorithm == registry.NATIVE:
            return
        for key, binding in list(self.plan.bindings.items()):
            if key[2] == (slot * self.ctx.tag_span, self.ctx.tag_span):
                del self.plan.bindings[key]
                binding.free()


def _replace_buffers(args: _Args, send: Any, recv: Any) -> _Args:
    return _Args(args.collective, args.call, send, recv, args.dtype, args.op, args.nbytes)


def _checking() -> bool:
    return os.environ.get("HPCCOLL_CHECK", "").strip() not in ("", "0")


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
        p = call.p
        theirs = np.zeros(p, np.int64)
        wait_requests([comm.Ialltoall(np.array(call.counts, np.int64), theirs)],
                      "HPCCOLL_CHECK count exchange")
        bad = np.flatnonzero(theirs != np.array(call.recvcounts))
        mine = np.append(mine, len(bad))
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


def prepare(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, *, counts: Any = None,
            op: Any = None, algorithm: str = "auto",
            options: Mapping[str, Any] | None = None) -> _Prepared:
    """Validate a call and plan it (every check happens here, before any message)."""
    args = _validate(collective, comm, sendbuf, recvbuf, counts=counts, op=op, options=options)
    return _Prepared(comm, args, resolve(args, algorithm))


def _run(prepared: _Prepared) -> None:
    prepared.start(0, cache=True).wait()


def _start(prepared: _Prepared) -> Request:
    return Request(prepared.start(prepared.ctx.next_slot(), cache=False))


# ------------------------------------------------------------------------- the collectives

def allgather(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, recvcounts: Any = None,
              algorithm: str = "auto", options: Mapping[str, Any] | None = None) -> None:
    """Every rank's ``sendbuf`` concatenated in rank order into every rank's ``recvbuf``
    (``recvcounts`` for uneven blocks, as Allgatherv; ``MPI.IN_PLACE`` as sendbuf takes the
    own block from its place in ``recvbuf``)."""
    _run(prepare("allgather", comm, sendbuf, recvbuf, counts=recvcounts, algorithm=algorithm,
                 options=options))


def alltoall(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, algorithm: str = "auto",
             options: Mapping[str, Any] | None = None) -> None:
    """Block j of ``sendbuf`` goes to rank j, landing as block ``rank`` of its ``recvbuf``."""
    _run(prepare("alltoall", comm, sendbuf, recvbuf, algorithm=algorithm, options=options))


def alltoallv(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, algorithm: str = "auto",
              options: Mapping[str, Any] | None = None) -> None:
    """All-to-all with per-peer counts: ``sendbuf = [array, sendcounts(, sdispls)]``,
    ``recvbuf = [array, recvcounts(, rdispls)]`` in elements, as mpi4py's ``Alltoallv``."""
    _run(prepare("alltoallv", comm, sendbuf, recvbuf, algorithm=algorithm, options=options))


def reduce_scatter(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, recvcounts: Any = None,
                   op: Any = MPI.SUM, algorithm: str = "auto",
                   options: Mapping[str, Any] | None = None) -> None:
    """Elementwise reduction of every rank's ``sendbuf``; rank r receives block r (equal
    blocks of ``recvbuf.size``, or ``recvcounts``)."""
    _run(prepare("reduce_scatter", comm, sendbuf, recvbuf, counts=recvcounts, op=op,
                 algorithm=algorithm, options=options))


def allreduce(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *, op: Any = MPI.SUM,
              algorithm: str = "auto", options: Mapping[str, Any] | None = None) -> None:
    """Elementwise reduction of every rank's ``sendbuf`` into every rank's ``recvbuf``
    (``MPI.IN_PLACE`` as sendbuf reduces ``recvbuf`` in place)."""
    _run(prepare("allreduce", comm, sendbuf, recvbuf, op=op, algorithm=algorithm,
                 options=options))


def iallgather(comm, sendbuf, recvbuf, *, recvcounts=None, algorithm="auto", options=None) -> Request:
    """Non-blocking :func:`allgather`."""
    return _start(prepare("allgather", comm, sendbuf, recvbuf, counts=recvcounts,
                          algorithm=algorithm, options=options))


def ialltoall(comm, sendbuf, recvbuf, *, algorithm="auto", options=None) -> Request:
    """Non-blocking :func:`alltoall`."""
    return _start(prepare("alltoall", comm, sendbuf, recvbuf, algorithm=algorithm,
                          options=options))


def ialltoallv(comm, sendbuf, recvbuf, *, algorithm="auto", options=None) -> Request:
    """Non-blocking :func:`alltoallv`."""
    return _start(prepare("alltoallv", comm, sendbuf, recvbuf, algorithm=algorithm,
                          options=options))


def ireduce_scatter(comm, sendbuf, recvbuf, *, recvcounts=None, op=MPI.SUM, algorithm="auto",
                    options=None) -> Request:
    """Non-blocking :func:`reduce_scatter`."""
    return _start(prepare("reduce_scatter", comm, sendbuf, recvbuf, counts=recvcounts, op=op,
                          algorithm=algorithm, options=options))


def iallreduce(comm, sendbuf, recvbuf, *, op=MPI.SUM, algorithm="auto", options=None) -> Request:
    """Non-blocking :func:`allreduce`."""
    return _start(prepare("allreduce", comm, sendbuf, recvbuf, op=op, algorithm=algorithm,
                          options=options))


def allgather_init(comm, sendbuf, recvbuf, *, recvcounts=None, algorithm="auto",
                   options=None) -> PersistentRequest:
    """Persistent :func:`allgather`: plan once, ``start()``/``wait()`` many times."""
    return PersistentRequest(prepare("allgather", comm, sendbuf, recvbuf, counts=recvcounts,
                                     algorithm=algorithm, options=options))


def alltoall_init(comm, sendbuf, recvbuf, *, algorithm="auto", options=None) -> PersistentRequest:
    """Persistent :func:`alltoall`."""
    return PersistentRequest(prepare("alltoall", comm, sendbuf, recvbuf, algorithm=algorithm,
                                     options=options))


def alltoallv_init(comm, sendbuf, recvbuf, *, algorithm="auto", options=None) -> PersistentRequest:
    """Persistent :func:`alltoallv`."""
    return PersistentRequest(prepare("alltoallv", comm, sendbuf, recvbuf, algorithm=algorithm,
                                     options=options))


def reduce_scatter_init(comm, sendbuf, recvbuf, *, recvcounts=None, op=MPI.SUM,
                        algorithm="auto", options=None) -> PersistentRequest:
    """Persistent :func:`reduce_scatter`."""
    return PersistentRequest(prepare("reduce_scatter", comm, sendbuf, recvbuf,
                                     counts=recvcounts, op=op, algorithm=algorithm,
                                     options=options))


def allreduce_init(comm, sendbuf, recvbuf, *, op=MPI.SUM, algorithm="auto",
                   options=None) -> PersistentRequest:
    """Persistent :func:`allreduce`."""
    return PersistentRequest(prepare("allreduce", comm, sendbuf, recvbuf, op=op,
                                     algorithm=algorithm, options=options))


__all__ = ["allgather", "alltoall", "alltoallv", "reduce_scatter", "allreduce",
           "iallgather", "ialltoall", "ialltoallv", "ireduce_scatter", "iallreduce",
           "allgather_init", "alltoall_init", "alltoallv_init", "reduce_scatter_init",
           "allreduce_init", "Request", "PersistentRequest", "CollectiveTimeout", "prepare"]
