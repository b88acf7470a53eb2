"""Reading mpi4py's buffer specifications and buffer-collective calls, for :class:`hpccoll.Comm`.

:data:`READERS` read a call of each of mpi4py's buffer collectives as mpi4py reads it --
``buf``, ``[buf, MPI.DOUBLE]``, ``[buf, count, type]``, ``[buf, (count, displ), type]``,
``[buf, counts, displs, type]``, ... over any contiguous buffer-protocol object or GPU array
-- into the :class:`Call` hpccoll runs, the buffers viewed (never copied) as flat arrays of
the datatype's NumPy type; :class:`NotRun` where MPI's own collective must serve the call.

:mod:`hpccoll.readings` reads the same call again cheaply.
"""

from __future__ import annotations

import operator
from functools import lru_cache
from typing import Any, Callable, NamedTuple

import numpy as np
from mpi4py import MPI

from .runtime import buffers
from .schedule import offsets

_SUPPORTED = frozenset(buffers.SUPPORTED_DTYPES)     # (a set: dtype == dtype is slow)


class NotRun(Exception):
    """Raised while reading a call that hpccoll does not run; MPI's own collective serves it
    (the message is the reason, logged)."""


# --------------------------------------------------------------------- reading buffer specs

class _Buffer(NamedTuple):
    """A buffer spec read: ``array`` is the flat view of its elements (the part a simple spec
    covers, the whole buffer for a vector one, with its ``counts`` and ``displs``)."""

    array: Any
    untyped: bool = False          # MPI.BYTE or MPI.PACKED: no arithmetic type
    counts: tuple[int, ...] = ()
    displs: tuple[int, ...] = ()


def _is_buffer(obj: Any) -> bool:
    if isinstance(obj, np.ndarray) or hasattr(obj, "__dlpack__") or \
            buffers.device.cuda_interface(obj) is not None:
        return True
    try:
        memoryview(obj)
    except TypeError:
        return False
    return True


def _unpack(msg: Any, vector: bool) -> tuple[Any, Any, Any, Any]:
    """(buffer, count(s), displacement(s), datatype) of an mpi4py buffer spec, as mpi4py reads
    it: ``[buf, type]``, ``[buf, count(s)]``, ``[buf, (count(s), displ(s))(, type)]``,
    ``[buf, count(s), type]``, ``[buf, count(s), displ(s), type]`` (a vector spec's pair only
    as a tuple)."""
    if msg is None or msg is MPI.BOTTOM or msg is MPI.IN_PLACE:
        raise NotRun(f"{msg!r} as a buffer")
    if isinstance(msg, np.ndarray):
        return msg, None, None, None
    if isinstance(msg, (list, tuple)):
        pair = tuple if vector else (tuple, list)
        count = displ = datatype = None
        if len(msg) == 2:
            buf, count = msg
            if isinstance(count, (MPI.Datatype, str)):
                count, datatype = None, count
            elif isinstance(count, pair):
                count, displ = count
        elif len(msg) == 3:
            buf, count, datatype = msg
            if isinstance(count, pair):
                count, displ = count
        elif len(msg) == 4:
            buf, count, displ, datatype = msg
        else:
            raise ValueError("message: expecting 2 to 4 items")
        return buf, count, displ, datatype
    if _is_buffer(msg):
        return msg, None, None, None
    raise TypeError("message: expecting buffer or list/tuple")


@lru_cache(maxsize=None)
def _predefined_type(handle: int) -> tuple[np.dtype | None, bool, str]:
    """(NumPy element type hpccoll runs, or None; untyped; name) of a predefined datatype."""
    from mpi4py.util import dtlib
    datatype = MPI.Datatype.fromhandle(handle)
    name = datatype.Get_name() or repr(datatype)
    try:
        dtype = dtlib.to_numpy_dtype(datatype)
    except (ValueError, KeyError, TypeError, MPI.Exception):
        return None, False, name
    untyped = datatype in (MPI.BYTE, MPI.PACKED)
    return (dtype if dtype in _SUPPORTED else None), untyped, name


def _element_type(datatype: Any) -> tuple[np.dtype, bool]:
    """(NumPy type, untyped) of an MPI datatype (or mpi4py's type code); NotRun if hpccoll
    has no element type for it."""
    if isinstance(datatype, str):
        try:
            datatype = MPI.Datatype.fromcode(datatype)
        except (ValueError, KeyError):
            raise NotRun(f"type code {datatype!r} names no MPI datatype") from None
    if not isinstance(datatype, MPI.Datatype):
        raise NotRun(f"{type(datatype).__name__} as a datatype")
    if not datatype.is_predefined:
        raise NotRun("a derived datatype")
    dtype, untyped, name = _predefined_type(datatype.handle)
    if dtype is None:
        raise NotRun(f"{name} has no NumPy element type hpccoll supports")
    return dtype, untyped


def _flat(buf: Any, writable: bool) -> Any:
    """The buffer's memory as a flat array (a view, never a copy); NotRun where there is no
    such view (mpi4py then takes the buffer, or says what is wrong with it)."""
    if not isinstance(buf, np.ndarray) and buffers.device.is_device(buf):
        if not buffers.device.available():
            raise NotRun(f"a {type(buf).__name__} with a CUDA array interface and no CUDA "
                         "driver here, so not GPU memory: MPI takes its pointer, as mpi4py "
                         "does")
        if writable and buffers.device.read_only(buf):
            raise NotRun("a read-only buffer where MPI writes")
        array = buffers.adapt(buf, "buffer")
        if not buffers.device.contiguous(array):
            raise NotRun("a non-contiguous device buffer")
        return buffers.flat(array)
    if isinstance(buf, np.ndarray):
        flags = buf.flags
        if flags.c_contiguous:
            array = buf if buf.ndim == 1 else buf.reshape(-1)
        elif flags.f_contiguous:
            array = buf.reshape(-1, order="F")
        else:
            raise NotRun("a non-contiguous buffer")
    else:
        try:
            array = np.frombuffer(buf, np.uint8)
            array = array.view(np.asarray(memoryview(buf)).dtype) if array.size else array
        except (TypeError, ValueError, BufferError):
            raise NotRun(f"a {type(buf).__name__} hpccoll cannot view as an array") from None
    if writable and not _writable(array):
        raise NotRun("a read-only buffer where MPI writes")
    return array


def _writable(array: Any) -> bool:
    return not isinstance(array, np.ndarray) or array.flags.writeable   # device: writable


def _elements(buf: Any, datatype: Any, writable: bool) -> tuple[Any, bool, int]:
    """(flat view of the buffer in the datatype's element type, untyped, bytes left over
    after the last whole element)."""
    array = _flat(buf, writable)
    if datatype is None:
        if array.dtype not in _SUPPORTED:
            raise NotRun(f"elements of type {array.dtype}, which hpccoll does not support")
        return array, False, 0
    dtype, untyped = _element_type(datatype)
    if array.dtype == dtype:
        return array, untyped, 0
    raw = array.reshape(-1).view(np.uint8)
    spare = raw.size % dtype.itemsize
    return raw[:raw.size - spare].view(dtype), untyped, spare


def _count(value: Any, what: str) -> int:
    count = operator.index(value)
    if count < 0:
        raise ValueError(f"message: negative {what} {count}")
    return count


def _simple(msg: Any, blocks: int, writable: bool) -> _Buffer:
    """A buffer spec of one count (per block, for ``blocks`` > 1 as in Allgather's receive
    and Alltoall's buffers): its elements from the displacement on, as many as it covers."""
    buf, count, displ, datatype = _unpack(msg, vector=False)
    array, untyped, spare = _elements(buf, datatype, writable)
    displ = 0 if displ is None else _count(displ, "displacement")
    if displ > array.size:
        raise ValueError(f"message: displacement {displ} out of bounds, number of datatype "
                         f"entries {array.size}")
    rest, blocks = array.size - displ, max(blocks, 1)
    if count is None:
        if spare:
            raise ValueError(f"message: cannot infer count, buffer length "
                             f"{array.nbytes + spare} is not a multiple of datatype extent "
                             f"{array.itemsize}")
        if rest % blocks:
            raise ValueError(f"message: cannot infer count, number of entries {rest} is not "
                             f"a multiple of required number of blocks {blocks}")
        count = rest // blocks
    else:
        count = _count(count, "count")
    if count * blocks > rest:
        raise ValueError(f"message: {blocks} block(s) of count {count} from displacement "
                         f"{displ} need {displ + count * blocks} entries, the buffer has "
                         f"{array.size}")
    if displ or count * blocks < rest:
        array = array[displ:displ + count * blocks]
    return _Buffer(array, untyped)


def _per_rank(values: Any, p: int, what: str) -> tuple[int, ...]:
    """mpi4py's counts or displacements: one integer for every rank, or a sequence of p."""
    if isinstance(values, (int, np.integer)):
        return (_count(values, what),) * p if what == "count" else \
            tuple(_count(values, what) * i for i in range(p))
    values = list(values)
    if len(values) != p:
        raise ValueError(f"expecting {p} items, got {len(values)}")
    return tuple(_count(v, what) for v in values)


def _vector(msg: Any, p: int, writable: bool) -> _Buffer:
    """A buffer spec with counts and displacements per rank (Allgatherv's receive,
    Alltoallv's buffers); counts left out split the buffer as evenly as mpi4py does."""
    buf, counts, displs, datatype = _unpack(msg, vector=True)
    array, untyped, spare = _elements(buf, datatype, writable)
    if counts is None:
        if spare:
            raise ValueError(f"message: cannot infer count, buffer length "
                             f"{array.nbytes + spare} is not a multiple of datatype extent "
                             f"{array.itemsize}")
        counts = tuple(array.size // p + (array.size % p > i) for i in range(p))
    else:
        counts = _per_rank(counts, p, "count")
    displs = tuple(offsets(counts)) if displs is None else \
        _per_rank(displs, p, "displacement")
    reach = max((d + c for d, c in zip(displs, counts)), default=0)
    if reach > array.size:
        raise ValueError(f"message: counts {list(counts)} at displacements {list(displs)} "
                         f"reach entry {reach}, the buffer has {array.size}")
    return _Buffer(array, untyped, counts, displs)


# ----------------------------------------------------------------------- reading the calls

class Call(NamedTuple):
    """A call hpccoll runs: ``api.run_collective``'s arguments; ``repeatable`` False where
    reading it did more than view the arguments (a copy, a gather of counts), so that the
    same arguments again must be read again."""

    collective: str
    send: Any
    recv: Any
    counts: Any = None
    op: Any = None
    root: Any = 0
    repeatable: bool = True

    def again(self, send: Any, recv: Any) -> Call:
        """This call on the arrays ``send`` (None: none) and ``recv`` (None: not used) read
        from arguments like the ones this call was read from."""
        return self._replace(send=_like(self.send, send), recv=_like(self.recv, recv))


def _like(argument: Any, array: Any) -> Any:
    """``array`` in the place of the array of ``argument`` (an array, ``[array, counts,
    displs]``, MPI.IN_PLACE or None)."""
    if type(argument) is list:
        return [array, *argument[1:]]
    return argument if array is None else array


def _send(sendbuf: Any, blocks: int = 0) -> _Buffer | None:
    return None if sendbuf is MPI.IN_PLACE else _simple(sendbuf, blocks, writable=False)


def _array(buffer: _Buffer | None) -> Any:
    return MPI.IN_PLACE if buffer is None else buffer.array


def _no_in_place(sendbuf: Any, collective: str) -> None:
    if sendbuf is MPI.IN_PLACE:
        raise NotRun(f"MPI.IN_PLACE {collective} (hpccoll's {collective} has no in-place "
                      "form)")


def _transfer(send: _Buffer | None, recv: _Buffer) -> None:
    """A transfer between elements of one type; MPI also matches other type signatures."""
    if send is not None and send.array.dtype != recv.array.dtype:
        raise NotRun(f"send elements {send.array.dtype} and receive elements "
                      f"{recv.array.dtype} differ")


def _reduction(op: Any, send: _Buffer | None, recv: _Buffer | None) -> str:
    """The name of the op hpccoll reduces with; NotRun for the ops and types it lacks."""
    name = buffers.op_name(op)
    if name is None:
        raise NotRun(f"op {buffers.op_label(op)} is not one hpccoll reduces with")
    given = [b for b in (send, recv) if b is not None]
    if any(b.untyped for b in given):
        raise NotRun("a reduction on untyped elements (MPI.BYTE, MPI.PACKED): MPI says "
                      "which ops it allows")
    if len(given) == 2 and send.array.dtype != recv.array.dtype:
        raise ValueError("mismatch in send and receive MPI datatypes")
    return name


def _allgather(comm, sendbuf, recvbuf):
    recv = _simple(recvbuf, comm.Get_size(), writable=True)
    send = _send(sendbuf)
    _transfer(send, recv)
    return Call("allgather", _array(send), recv.array)


def _allgatherv(comm, sendbuf, recvbuf):
    recv = _vector(recvbuf, comm.Get_size(), writable=True)
    if recv.displs != tuple(offsets(recv.counts)):
        raise NotRun("receive displacements other than the counts laid end to end")
    send = _send(sendbuf)
    _transfer(send, recv)
    # (the buffer itself where all of it is received: a repeat compares it by identity)
    received = sum(recv.counts)
    array = recv.array if received == recv.array.size else recv.array[:received]
    return Call("allgather", _array(send), array, recv.counts)


def _alltoall(comm, sendbuf, recvbuf):
    _no_in_place(sendbuf, "alltoall")
    p = comm.Get_size()
    recv = _simple(recvbuf, p, writable=True)
    send = _send(sendbuf, p)
    _transfer(send, recv)
    return Call("alltoall", send.array, recv.array)


def _alltoallv(comm, sendbuf, recvbuf):
    _no_in_place(sendbuf, "alltoallv")
    p = comm.Get_size()
    recv = _vector(recvbuf, p, writable=True)
    send = _vector(sendbuf, p, writable=False)
    _transfer(send, recv)
    return Call("alltoallv", [send.array, send.counts, send.displs],
                 [recv.array, recv.counts, recv.displs])


def _reduce_scatter_block(comm, sendbuf, recvbuf, op):
    _no_in_place(sendbuf, "reduce_scatter")
    recv = _simple(recvbuf, 0, writable=True)
    send = _send(sendbuf, comm.Get_size())
    return Call("reduce_scatter", send.array, recv.array, op=_reduction(op, send, recv))


def _reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op):
    _no_in_place(sendbuf, "reduce_scatter")
    recv = _simple(recvbuf, 0, writable=True)
    send = _send(sendbuf)
    name = _reduction(op, send, recv)
    if recvcounts is None:          # as mpi4py: every rank's receive count, gathered
        gathered = np.zeros(comm.Get_size(), np.int64)
        comm.Allgather(np.array([recv.array.size], np.int64), gathered)
        return Call("reduce_scatter", send.array, recv.array, gathered.tolist(), name,
                    repeatable=False)
    return Call("reduce_scatter", send.array, recv.array, recvcounts, name)


def _allreduce(comm, sendbuf, recvbuf, op):
    recv = _simple(recvbuf, 0, writable=True)
    send = _send(sendbuf)
    return Call("allreduce", _array(send), recv.array, op=_reduction(op, send, recv))


def _bcast(comm, buf, root):
    array = _simple(buf, 0, writable=comm.Get_rank() != root).array
    if not _writable(array):
        # the root's buffer is only read, as mpi4py allows, but hpccoll's algorithms may
        # write it (its own values): they get a copy, so every rank runs hpccoll's bcast
        return Call("bcast", None, array.copy(), root=root, repeatable=False)
    return Call("bcast", None, array, root=root)


def _reduce(comm, sendbuf, recvbuf, op, root):
    at_root = comm.Get_rank() == root
    if sendbuf is MPI.IN_PLACE and not at_root:
        raise ValueError("MPI.IN_PLACE is the root's sendbuf only in reduce")
    recv = _simple(recvbuf, 0, writable=True) if at_root else None     # MPI ignores it
    send = _send(sendbuf)
    return Call("reduce", _array(send), None if recv is None else recv.array,
                 op=_reduction(op, send, recv), root=root)


READERS: dict[str, Callable[..., Call]] = {
    "Allgather": _allgather, "Allgatherv": _allgatherv, "Alltoall": _alltoall,
    "Alltoallv": _alltoallv, "Reduce_scatter_block": _reduce_scatter_block,
    "Reduce_scatter": _reduce_scatter, "Allreduce": _allreduce, "Bcast": _bcast,
    "Reduce": _reduce,
}


def check_mpi_takes(values: tuple, method: str, reason: Exception) -> None:
    """Before a call goes to MPI's own collective (for ``reason``): TypeError if one of its
    buffer arguments ``values`` is GPU memory and the MPI library is not GPU-aware (it would
    read a device pointer as host memory); where it is, the calling thread waits for the
    work queued on those buffers' producer streams (:func:`device.buffer_producer`), as
    hpccoll's own calls do, since MPI reads and writes them at once."""
    on_device = []
    for value in values:
        buf = value[0] if isinstance(value, (list, tuple)) and value else value
        if buf is None or buf is MPI.IN_PLACE or isinstance(buf, np.ndarray) or \
                not buffers.device.is_device(buf) or not buffers.device.available():
            continue
        if not buffers.gpu_aware():
            raise TypeError(f"{method}: this call needs MPI's own collective ({reason}), and "
                            f"a {type(buf).__name__} in GPU memory cannot go to it: the MPI "
                            "library is not GPU-aware (MPIX_Query_cuda_support, or "
                            "HPCCOLL_GPU_AWARE=0); copy the buffer to the host for this call")
        on_device.append(buf)
    if on_device:
        buffers.device.wait_for_producers(on_device, host=True,
                                          of=buffers.device.buffer_producer)
