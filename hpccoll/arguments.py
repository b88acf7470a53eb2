"""Checking a call's arguments, on every rank before its first message.

:func:`validate` turns the user's buffers, counts, op and root into a :class:`CallArgs`
through the collective's spec (:mod:`hpccoll.collectives`): TypeError for a wrong buffer kind
or dtype, ValueError for sizes, counts, ops, roots and algorithm constraints,
NotImplementedError for unsupported combinations.  :func:`signature` is the cheap key under
which a validated call is cached, and :func:`agree` the check mode (``HPCCOLL_CHECK=1``) that
confirms every rank passed matching arguments.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from mpi4py import MPI

from . import registry, tuning
from .collectives import SPECS, Collective, check_counts, spec
from .context import check_comm
from .runtime import buffers
from .runtime.agreement import gather_rows
from .runtime.progress import Guard, wait_requests
from .schedule import Call, offsets


@dataclass(frozen=True)
class CallArgs:
    """A validated call, without its buffers (it is cached and reused for later calls)."""

    spec: Collective
    call: Call
    dtype: np.dtype
    op: str | None
    nbytes: int          # the size ``auto`` decides on, in the benchmark convention

    @property
    def collective(self) -> str:
        return self.spec.name


def _vector(buffer_spec: Any, p: int, name: str) -> tuple[Any, tuple[int, ...], tuple[int, ...]]:
    """``[array, counts]``, ``[array, counts, displs]`` or mpi4py's ``[array, (counts, displs)]``
    (elements; displs default to the counts laid end to end)."""
    if not isinstance(buffer_spec, (list, tuple)) or len(buffer_spec) not in (2, 3):
        raise TypeError(f"{name} must be [array, counts], [array, counts, displs] or "
                        "[array, (counts, displs)]")
    array, counts = buffer_spec[0], buffer_spec[1]
    displs = buffer_spec[2] if len(buffer_spec) == 3 else None
    if displs is None and isinstance(counts, tuple) and len(counts) == 2 and \
            not isinstance(counts[0], (int, np.integer)):
        counts, displs = counts
    counts = check_counts(counts, p, f"{name} counts")
    displs = offsets(counts) if displs is None else check_counts(displs, p, f"{name} displs")
    return array, counts, displs


def _options(options: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    if options is None:
        return ()
    if not isinstance(options, Mapping):
        raise TypeError("options must be a mapping of planner option names to values")
    return tuple(sorted(options.items()))


def _root(root: Any, p: int) -> int:
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
        raise TypeError(f"root must be an integer rank, got {type(root).__name__}")
    if not 0 <= root < p:
        raise ValueError(f"root {root} is not a rank of the communicator (0..{p - 1})")
    return int(root)


def ignores_recvbuf(collective: Collective, rank: int, root: int) -> bool:
    """Whether this rank's recvbuf is insignificant (a reduce's non-root ranks)."""
    return collective.recv_at_root_only and rank != root


def validate(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, *, counts: Any = None,
             op: Any = None, root: Any = 0, options: Mapping[str, Any] | None = None
             ) -> tuple[CallArgs, Any, Any]:
    """Check a call completely; return it with the send and receive arrays (unwrapped from
    alltoallv's ``[array, counts, displs]``; send is None when there is none or in place;
    a receive buffer the rank does not use is an empty view of its send buffer)."""
    check_comm(comm)
    coll = spec(collective)
    p, rank = comm.Get_size(), comm.Get_rank()
    root = _root(root, p) if coll.rooted else 0
    in_place = sendbuf is MPI.IN_PLACE
    if in_place and not coll.in_place:
        allowed = " and ".join(c.name for c in SPECS.values() if c.in_place)
        raise NotImplementedError(f"MPI.IN_PLACE is supported for {allowed}, not {collective}")
    if coll.vector:
        sendbuf, sendcounts, sdispls = _vector(sendbuf, p, "sendbuf")
        recvbuf, recvcounts, rdispls = _vector(recvbuf, p, "recvbuf")
        counts = (sendcounts, sdispls, recvcounts, rdispls)
    has_send = not (in_place or coll.one_buffer)
    if has_send:
        sendbuf = _array(sendbuf, "sendbuf", writable=False)
    if ignores_recvbuf(coll, rank, root) and not in_place:
        recvbuf = sendbuf[:0]
    else:
        recvbuf = _array(recvbuf, "recvbuf" if not coll.one_buffer else "buf", writable=True)
    if has_send:
        if sendbuf.dtype != recvbuf.dtype:
            raise TypeError(f"sendbuf dtype {sendbuf.dtype} differs from recvbuf dtype "
                            f"{recvbuf.dtype}")
        if buffers.kind(sendbuf) != buffers.kind(recvbuf):
            raise TypeError(f"sendbuf is {buffers.kind(sendbuf)} memory and recvbuf "
                            f"{buffers.kind(recvbuf)} memory: pass both on the host or both "
                            "on the GPU")
        check_apart(sendbuf, recvbuf)
    dtype = recvbuf.dtype
    send_n = sendbuf.size if has_send else None
    recv_n = recvbuf.size
    call = coll.make_call(p, rank, send_n, recv_n, counts, in_place=in_place,
                          itemsize=dtype.itemsize, options=_options(options), root=root)
    want_send, want_recv = coll.sizes(call)
    if not coll.exact_sizes:
        for name, have, want in (("sendbuf", send_n, want_send), ("recvbuf", recv_n, want_recv)):
            if have < want:
                raise ValueError(f"{name} has {have} elements; its counts and displs reach "
                                 f"element {want}")
    else:
        wrong = [(name, have, want) for name, have, want in
                 (("recvbuf", recv_n, want_recv), ("sendbuf", send_n, want_send))
                 if have is not None and have != want]
        if wrong:
            need = ", ".join(f"{name} {want}" for name, _, want in wrong)
            have = ", ".join(f"{name} {have}" for name, have, _ in wrong)
            raise ValueError(f"{collective} on {p} rank(s) with counts {list(call.counts)} "
                             f"needs {need} elements, got {have}")
    op_name = buffers.check_op(op, dtype) if coll.reduces else None
    nbytes = coll.message_count(coll.decision_call(call)) * dtype.itemsize
    args = CallArgs(coll, call, dtype, op_name, nbytes)
    return args, sendbuf if has_send else None, recvbuf


def _array(buf: Any, name: str, writable: bool) -> Any:
    """The checked array hpccoll works on for the user's ``buf`` (:func:`buffers.adapt`)."""
    array = buffers.adapt(buf, name)
    if buffers.kind(array) == buffers.DEVICE:
        buffers.check_device(buf, name, writable=writable)
    buffers.check_array(array, name, writable=writable)
    return array


def check_apart(send: Any, recv: Any) -> tuple[int, int]:
    """The buffers' addresses (0 for no send buffer); ValueError if their memory overlaps."""
    send_at, recv_at = 0 if send is None else buffers.address(send), buffers.address(recv)
    if send is not None and send.nbytes and recv.nbytes and \
            send_at < recv_at + recv.nbytes and recv_at < send_at + send.nbytes:
        raise ValueError("sendbuf and recvbuf overlap; pass MPI.IN_PLACE as sendbuf to "
                         "work in place")
    return send_at, recv_at


def resolve(args: CallArgs, algorithm: str, form: str = "blocking") -> str:
    """The algorithm name that will run: ``auto`` resolved for a call made in ``form``
    (:data:`~hpccoll.tuning.FORMS`); ValueError if unknown or if its constraints do not
    hold for this call."""
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a name, got {type(algorithm).__name__}")
    if algorithm == "auto":
        return tuning.choose(args.spec.decision_call(args.call), args.nbytes, form)
    if algorithm == registry.NATIVE:
        return algorithm
    reason = registry.get(args.collective, algorithm).violated(args.call)
    if reason is not None:
        raise ValueError(f"algorithm {algorithm!r} cannot serve {args.collective} on "
                         f"{args.call.p} ranks: it requires {reason}")
    return algorithm


def _buffer_key(buf: Any, writable: bool) -> tuple | str | None:
    if buf is None or buf is MPI.IN_PLACE:
        return None if buf is None else "in place"
    if not isinstance(buf, np.ndarray):
        found = buffers.key(buf)
        if found is None:
            raise TypeError("not cacheable")
        return found
    flags = buf.flags
    return (type(buf), buf.dtype, buf.size, flags.c_contiguous) + \
        ((flags.writeable,) if writable else ())


def _vector_key(buffer_spec: Any, writable: bool) -> tuple:
    """The key of alltoallv's ``[array, counts(, displs)]`` (or ``[array, (counts, displs)]``)."""
    array, *layout = buffer_spec
    return (_buffer_key(array, writable), *map(frozen, layout))


def copied(items: Any) -> Any:
    """A deep copy of nested lists and tuples of plain values (counts, displacements,
    datatypes), which compares by value with what a later call passes, even if the user
    changed the originals in place; LookupError if a NumPy array is among them."""
    if type(items) is list:
        return [copied(item) for item in items]
    if type(items) is tuple:
        return tuple(copied(item) for item in items)
    if isinstance(items, np.ndarray):
        raise LookupError("an array among the numbers")
    return items


def frozen(value: Any) -> Any:
    """Counts and displacements (nested sequences or arrays of integers) as nested tuples."""
    if isinstance(value, np.ndarray):
        return tuple(value.tolist())
    if isinstance(value, (list, tuple)):
        return tuple(map(frozen, value))
    return value


def signature(collective: str, sendbuf: Any, recvbuf: Any, counts: Any, op: Any,
              root: Any, algorithm: Any, options: Any) -> tuple | None:
    """Everything validation depends on, cheaply read, as a cache key; None when the call
    is not cacheable (arguments that are not even arrays)."""
    try:
        if spec(collective).vector:
            return (collective, algorithm, _vector_key(sendbuf, False),
                    _vector_key(recvbuf, True),
                    None if options is None else tuple(sorted(options.items())))
        return (collective, algorithm, _buffer_key(sendbuf, False), _buffer_key(recvbuf, True),
                None if counts is None else tuple(counts),
                op if isinstance(op, str) or op is None else buffers.op_name(op), root,
                None if options is None else tuple(sorted(options.items())))
    except (AttributeError, TypeError, ValueError):
        return None


def _alike(args: CallArgs, algorithm: str) -> tuple:
    """What every rank must pass alike: the collective, algorithm, dtype, op, options and
    what the collective's spec says (:meth:`~hpccoll.collectives.Collective.alike`)."""
    return (args.collective, algorithm, args.dtype.str, args.op, args.spec.alike(args.call),
            args.call.options)


def identity(args: CallArgs, algorithm: str) -> int:
    """A number every rank computes alike for the same call, and most likely differently
    when ranks disagree on what they must pass alike: it shifts the call's tags, so that
    transfers of ranks that disagree do not match (they time out instead of exchanging wrong
    data), and check mode compares it."""
    return zlib.crc32(repr(_alike(args, algorithm)).encode())


def agree(comm: MPI.Comm, args: CallArgs, algorithm: str, guard: Guard) -> None:
    """Check mode (``HPCCOLL_CHECK=1``): one small collective confirms every rank called the
    same collective with the same algorithm, dtype, op and what its spec says ranks must pass
    alike; for alltoallv that every rank's sendcounts match its peers' recvcounts.  Raises
    ValueError on every rank if not, naming the ranks (for alltoallv's counts, each rank's
    first peer that disagrees and both counts) (``guard``: the context revoked on a
    timeout)."""
    call = args.call
    shared = _alike(args, algorithm)
    mine = np.array([identity(args, algorithm)], np.int64)
    if args.spec.vector:
        theirs = np.zeros(call.p, np.int64)
        counts = np.array(call.counts, np.int64)
        wait_requests([comm.Ialltoall(counts, theirs)], "HPCCOLL_CHECK count exchange",
                      memory=(counts, theirs), guard=guard)
        expected = np.array(call.recvcounts, np.int64)
        wrong = np.flatnonzero(theirs != expected)
        first = wrong[0] if wrong.size else 0
        mine = np.append(mine, [wrong.size, first, theirs[first], expected[first]])
    everyone = gather_rows(comm, mine, "HPCCOLL_CHECK agreement", guard)
    differ = np.flatnonzero(everyone[:, 0] != everyone[0, 0]).tolist()
    if differ:
        raise ValueError(f"HPCCOLL_CHECK: ranks {differ} called {args.collective} differently "
                         f"from rank 0 (collective, algorithm, dtype, op, counts or root "
                         f"differ); this rank: {shared}")
    if args.spec.vector:
        wrong = [f"rank {peer} sends {sent} element(s) to rank {rank}, which expects "
                 f"{expected} (recvcounts[{peer}])" + (f" and {count - 1} more pair(s)"
                                                      if count > 1 else "")
                 for rank, (_, count, peer, sent, expected) in enumerate(everyone.tolist())
                 if count]
        if wrong:
            raise ValueError("HPCCOLL_CHECK: alltoallv counts disagree: " + "; ".join(wrong))
