"""``hpccoll.Comm``: an mpi4py communicator whose buffer collectives run hpccoll's algorithms.

The one-line adoption path for an mpi4py code::

    comm = hpccoll.Comm(MPI.COMM_WORLD)         # or algorithms={"allreduce": "ring", ...}
    comm.Allreduce(x, y, op=MPI.MAX)            # hpccoll's allreduce, algorithm "auto"
    comm.Send(...); comm.bcast(obj); ...        # everything else is mpi4py's own

:class:`Comm` is an ``MPI.Intracomm`` sharing the wrapped communicator's handle, so it goes
wherever mpi4py (or hpccoll) takes a communicator.  It overrides the buffer collectives hpccoll
implements (Allgather(v), Alltoall(v), Reduce_scatter(_block), Allreduce, Bcast, Reduce), in
their blocking, non-blocking (``I...``) and persistent (``..._init``) forms, with mpi4py's
signatures and buffer specifications (``buf``, ``[buf, MPI.DOUBLE]``, ``[buf, count, type]``,
``[buf, (count, displ), type]``, ``[buf, counts, displs, type]``, ... over any contiguous
buffer-protocol object or GPU array), read as mpi4py reads them and viewed, never copied, as
flat arrays of the datatype's NumPy type.

A call hpccoll cannot run goes to MPI's own collective with the same arguments, so its result
is always MPI's; the logger ``hpccoll`` says which call and why at DEBUG level.  Those are:
ops hpccoll lacks (MAXLOC, MINLOC, REPLACE, NO_OP, user-defined), datatypes without a NumPy
element type hpccoll supports (derived, pair types, long double, ...), reductions on the
untyped MPI.BYTE and MPI.PACKED, send and receive types that differ in a transfer, layouts
hpccoll's collectives lack (IN_PLACE alltoall(v) and reduce_scatter(_block), allgatherv
displacements other than the counts laid end to end), buffers it cannot view (not contiguous,
read-only where MPI writes, None or MPI.BOTTOM), and inter-communicators (``hpccoll.Comm`` of
one is an :class:`InterComm`, whose collectives are all MPI's).  Each rank decides from its
own arguments, so ranks must pass alike datatypes, ops and layouts (as MPI requires; the one
per-rank layout to keep alike is Allgatherv's receive displacements); a read-only buffer at a
broadcast's root, which mpi4py allows, is broadcast by hpccoll from a copy.  Bad arguments
raise the error types mpi4py raises (TypeError, ValueError) or hpccoll's, on every rank before
any message.

Communicators made from a ``Comm`` (Dup, Clone, Idup, Split, Create, ...) are plain mpi4py
ones: wrap them again to use hpccoll there.  ``Free()`` frees the communicator (the handle is
shared, so the wrapped object is freed too: the user asked for it); dropping a ``Comm`` frees
nothing.
"""

from __future__ import annotations

import inspect
import logging
import operator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np
from mpi4py import MPI

from . import api, registry
from .collectives import spec
from .context import check_comm
from .runtime import buffers
from .schedule import offsets

log = logging.getLogger("hpccoll")

_REQUIRED = object()
_SUPPORTED = frozenset(buffers.SUPPORTED_DTYPES)     # (a set: dtype == dtype is slow)


class _Native(Exception):
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
            hasattr(obj, "__cuda_array_interface__"):
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
        raise _Native(f"{msg!r} as a buffer")
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
    """(NumPy type, untyped) of an MPI datatype (or mpi4py's type code); _Native if hpccoll
    has no element type for it."""
    if isinstance(datatype, str):
        try:
            datatype = MPI.Datatype.fromcode(datatype)
        except (ValueError, KeyError):
            raise _Native(f"type code {datatype!r} names no MPI datatype") from None
    if not isinstance(datatype, MPI.Datatype):
        raise _Native(f"{type(datatype).__name__} as a datatype")
    if not datatype.is_predefined:
        raise _Native("a derived datatype")
    dtype, untyped, name = _predefined_type(datatype.handle)
    if dtype is None:
        raise _Native(f"{name} has no NumPy element type hpccoll supports")
    return dtype, untyped


def _flat(buf: Any, writable: bool) -> Any:
    """The buffer's memory as a flat array (a view, never a copy); _Native where there is no
    such view (mpi4py then takes the buffer, or says what is wrong with it)."""
    if not isinstance(buf, np.ndarray) and buffers.device.is_device(buf):
        array = buffers.adapt(buf, "buffer")
        if not buffers.device.contiguous(array):
            raise _Native("a non-contiguous device buffer")
        return buffers.flat(array)
    if isinstance(buf, np.ndarray):
        flags = buf.flags
        if flags.c_contiguous:
            array = buf if buf.ndim == 1 else buf.reshape(-1)
        elif flags.f_contiguous:
            array = buf.reshape(-1, order="F")
        else:
            raise _Native("a non-contiguous buffer")
    else:
        try:
            array = np.frombuffer(buf, np.uint8)
            array = array.view(np.asarray(memoryview(buf)).dtype) if array.size else array
        except (TypeError, ValueError, BufferError):
            raise _Native(f"a {type(buf).__name__} hpccoll cannot view as an array") from None
    if writable and not _writable(array):
        raise _Native("a read-only buffer where MPI writes")
    return array


def _writable(array: Any) -> bool:
    return not isinstance(array, np.ndarray) or array.flags.writeable   # device: writable


def _elements(buf: Any, datatype: Any, writable: bool) -> tuple[Any, bool, int]:
    """(flat view of the buffer in the datatype's element type, untyped, bytes left over
    after the last whole element)."""
    array = _flat(buf, writable)
    if datatype is None:
        if array.dtype not in _SUPPORTED:
            raise _Native(f"elements of type {array.dtype}, which hpccoll does not support")
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

class _Call(NamedTuple):
    """A call hpccoll runs: ``api.run_collective``'s arguments."""

    collective: str
    send: Any
    recv: Any
    counts: Any = None
    op: Any = None
    root: Any = 0


def _send(sendbuf: Any, blocks: int = 0) -> _Buffer | None:
    return None if sendbuf is MPI.IN_PLACE else _simple(sendbuf, blocks, writable=False)


def _array(buffer: _Buffer | None) -> Any:
    return MPI.IN_PLACE if buffer is None else buffer.array


def _no_in_place(sendbuf: Any, collective: str) -> None:
    if sendbuf is MPI.IN_PLACE:
        raise _Native(f"MPI.IN_PLACE {collective} (hpccoll's {collective} has no in-place "
                      "form)")


def _transfer(send: _Buffer | None, recv: _Buffer) -> None:
    """A transfer between elements of one type; MPI also matches other type signatures."""
    if send is not None and send.array.dtype != recv.array.dtype:
        raise _Native(f"send elements {send.array.dtype} and receive elements "
                      f"{recv.array.dtype} differ")


def _reduction(op: Any, send: _Buffer | None, recv: _Buffer | None) -> str:
    """The name of the op hpccoll reduces with; _Native for the ops and types it lacks."""
    name = buffers.op_name(op)
    if name is None:
        raise _Native(f"op {buffers.op_label(op)} is not one hpccoll reduces with")
    given = [b for b in (send, recv) if b is not None]
    if any(b.untyped for b in given):
        raise _Native("a reduction on untyped elements (MPI.BYTE, MPI.PACKED): MPI says "
                      "which ops it allows")
    if len(given) == 2 and send.array.dtype != recv.array.dtype:
        raise ValueError("mismatch in send and receive MPI datatypes")
    return name


def _allgather(comm, sendbuf, recvbuf):
    recv = _simple(recvbuf, comm.Get_size(), writable=True)
    send = _send(sendbuf)
    _transfer(send, recv)
    return _Call("allgather", _array(send), recv.array)


def _allgatherv(comm, sendbuf, recvbuf):
    recv = _vector(recvbuf, comm.Get_size(), writable=True)
    if recv.displs != tuple(offsets(recv.counts)):
        raise _Native("receive displacements other than the counts laid end to end")
    send = _send(sendbuf)
    _transfer(send, recv)
    return _Call("allgather", _array(send), recv.array[:sum(recv.counts)], recv.counts)


def _alltoall(comm, sendbuf, recvbuf):
    _no_in_place(sendbuf, "alltoall")
    p = comm.Get_size()
    recv = _simple(recvbuf, p, writable=True)
    send = _send(sendbuf, p)
    _transfer(send, recv)
    return _Call("alltoall", send.array, recv.array)


def _alltoallv(comm, sendbuf, recvbuf):
    _no_in_place(sendbuf, "alltoallv")
    p = comm.Get_size()
    recv = _vector(recvbuf, p, writable=True)
    send = _vector(sendbuf, p, writable=False)
    _transfer(send, recv)
    return _Call("alltoallv", [send.array, send.counts, send.displs],
                 [recv.array, recv.counts, recv.displs])


def _reduce_scatter_block(comm, sendbuf, recvbuf, op):
    _no_in_place(sendbuf, "reduce_scatter")
    recv = _simple(recvbuf, 0, writable=True)
    send = _send(sendbuf, comm.Get_size())
    return _Call("reduce_scatter", send.array, recv.array, op=_reduction(op, send, recv))


def _reduce_scatter(comm, sendbuf, recvbuf, recvcounts, op):
    _no_in_place(sendbuf, "reduce_scatter")
    recv = _simple(recvbuf, 0, writable=True)
    send = _send(sendbuf)
    name = _reduction(op, send, recv)
    if recvcounts is None:          # as mpi4py: every rank's receive count, gathered
        gathered = np.zeros(comm.Get_size(), np.int64)
        comm.Allgather(np.array([recv.array.size], np.int64), gathered)
        recvcounts = gathered.tolist()
    return _Call("reduce_scatter", send.array, recv.array, recvcounts, name)


def _allreduce(comm, sendbuf, recvbuf, op):
    recv = _simple(recvbuf, 0, writable=True)
    send = _send(sendbuf)
    return _Call("allreduce", _array(send), recv.array, op=_reduction(op, send, recv))


def _bcast(comm, buf, root):
    array = _simple(buf, 0, writable=comm.Get_rank() != root).array
    if not _writable(array):
        # the root's buffer is only read, as mpi4py allows, but hpccoll's algorithms may
        # write it (its own values): they get a copy, so every rank runs hpccoll's bcast
        array = array.copy()
    return _Call("bcast", None, array, root=root)


def _reduce(comm, sendbuf, recvbuf, op, root):
    at_root = comm.Get_rank() == root
    if sendbuf is MPI.IN_PLACE and not at_root:
        raise ValueError("MPI.IN_PLACE is the root's sendbuf only in reduce")
    recv = _simple(recvbuf, 0, writable=True) if at_root else None     # MPI ignores it
    send = _send(sendbuf)
    return _Call("reduce", _array(send), None if recv is None else recv.array,
                 op=_reduction(op, send, recv), root=root)


# ------------------------------------------------------------------- the generated methods

@dataclass(frozen=True)
class _Collective:
    """One of mpi4py's buffer collectives: its blocking method's name and parameters after
    ``self`` ((name, default) pairs, _REQUIRED for none), and the reader of its calls."""

    method: str
    parameters: tuple[tuple[str, Any], ...]
    read: Callable[..., _Call]


_BUFFERS = (("sendbuf", _REQUIRED), ("recvbuf", _REQUIRED))
_OP = ("op", MPI.SUM)
COLLECTIVES = (
    _Collective("Allgather", _BUFFERS, _allgather),
    _Collective("Allgatherv", _BUFFERS, _allgatherv),
    _Collective("Alltoall", _BUFFERS, _alltoall),
    _Collective("Alltoallv", _BUFFERS, _alltoallv),
    _Collective("Reduce_scatter_block", _BUFFERS + (_OP,), _reduce_scatter_block),
    _Collective("Reduce_scatter", _BUFFERS + (("recvcounts", None), _OP), _reduce_scatter),
    _Collective("Allreduce", _BUFFERS + (_OP,), _allreduce),
    _Collective("Bcast", (("buf", _REQUIRED), ("root", 0)), _bcast),
    _Collective("Reduce", _BUFFERS + (_OP, ("root", 0)), _reduce),
)


class Request:
    """hpccoll's non-blocking collective with mpi4py's Request methods: ``Wait()``,
    ``Test()``, and the lower-case ``wait()`` (None) and ``test()`` (``(flag, None)``).
    ``MPI.Request.Waitall`` and its kin do not take it (it is not an MPI request)."""

    def __init__(self, request: Any):
        self._request = request

    def Test(self, status: Any = None) -> bool:
        return self._request.test()

    def Wait(self, status: Any = None) -> bool:
        self._request.wait()
        return True

    def test(self, status: Any = None) -> tuple[bool, None]:
        return self.Test(status), None

    def wait(self, status: Any = None) -> None:
        self.Wait(status)


class Prequest(Request):
    """hpccoll's persistent collective with mpi4py's Prequest methods: ``Start()``, then
    ``Wait()``/``Test()``, again and again; ``Free()`` releases it."""

    def Start(self) -> None:
        self._request.start()

    def Free(self) -> None:
        self._request.free()


@dataclass(frozen=True)
class _Form:
    """Blocking, non-blocking or persistent: the method's name, its extra parameters, and how
    hpccoll runs it (``api.run_collective``'s arguments -> the method's result)."""

    name: Callable[[str], str]
    extra: tuple[tuple[str, Any], ...]
    run: Callable[..., Any]


FORMS = (
    _Form(lambda m: m, (), api.run_collective),
    _Form(lambda m: "I" + m[0].lower() + m[1:], (), lambda *a, **k: Request(api.start_collective(*a, **k))),
    _Form(lambda m: m + "_init", (("info", MPI.INFO_NULL),),
          lambda *a, **k: Prequest(api.init_collective(*a, **k))),
)


def _binder(name: str, parameters: tuple[tuple[str, Any], ...]) -> Callable[..., list]:
    """``bind(args, kwargs)``: the arguments of a call by parameter, defaults filled in, as
    Python binds them (TypeError otherwise)."""
    names = [p for p, _ in parameters]
    defaults = [d for _, d in parameters]
    required = sum(d is _REQUIRED for d in defaults)

    def bind(args: tuple, kwargs: dict) -> list:
        given = len(args)
        if not kwargs and required <= given <= len(defaults):
            return [*args, *defaults[given:]]
        if given > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} arguments ({given} given)")
        values = [*args, *defaults[given:]]
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
            at = names.index(key)
            if at < given:
                raise TypeError(f"{name}() got multiple values for argument {key!r}")
            values[at] = value
        missing = [p for p, v in zip(names, values) if v is _REQUIRED]
        if missing:
            raise TypeError(f"{name}() missing required argument {missing[0]!r}")
        return values
    return bind


def _collective_method(collective: _Collective, form: _Form) -> Callable:
    name = form.name(collective.method)
    parameters = collective.parameters + form.extra
    used = len(collective.parameters)
    bind = _binder(name, parameters)

    def method(self, *args: Any, **kwargs: Any) -> Any:
        values = bind(args, kwargs)[:used]
        plain = self._mpi(self)
        try:
            call = self._read(collective, plain, values)
        except _Native as reason:
            log.debug("hpccoll.Comm.%s: MPI's own collective (%s)", name, reason)
            call = None
        if call is None:
            return getattr(self._mpi, name)(self, *args, **kwargs)
        return form.run(call.collective, plain, call.send, call.recv, counts=call.counts,
                        op=call.op, root=call.root,
                        algorithm=self._algorithms.get(call.collective, "auto"))

    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] +
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           default=inspect.Parameter.empty if d is _REQUIRED else d)
         for p, d in parameters])
    method.__doc__ = (f"mpi4py's {name}, run by hpccoll (by MPI's own collective where "
                      "hpccoll cannot run the call: see hpccoll.comm).")
    return method


def _plain_method(name: str) -> Callable:
    def method(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._mpi(self), name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"mpi4py's {name}; the communicator it makes is a plain mpi4py one "
                      "(wrap it in hpccoll.Comm to use hpccoll there).")
    return method


def check_algorithms(algorithms: Mapping[str, str] | None) -> dict[str, str]:
    """``algorithms`` ({collective: algorithm name}) checked: TypeError/ValueError naming an
    unknown collective or algorithm (constraints on the call are checked by each call)."""
    if algorithms is None:
        return {}
    if not isinstance(algorithms, Mapping):
        raise TypeError("algorithms must be a mapping of collective names to algorithm names, "
                        "e.g. {'allreduce': 'ring'}")
    for collective, name in algorithms.items():
        spec(collective)
        if not isinstance(name, str):
            raise TypeError(f"algorithms[{collective!r}] must be an algorithm name, got "
                            f"{type(name).__name__}")
        if name not in ("auto", registry.NATIVE):
            registry.get(collective, name)
    return dict(algorithms)


class _Collectives:
    """The overridden collectives, shared by :class:`Comm` and :class:`InterComm`."""

    _mpi: type = MPI.Comm              # the mpi4py class of the plain communicator
    _algorithms: dict[str, str]

    @property
    def algorithms(self) -> dict[str, str]:
        """The algorithm chosen per collective (the others are ``auto``)."""
        return dict(self._algorithms)

    def _read(self, collective: _Collective, comm: MPI.Comm, values: list) -> _Call:
        """The call hpccoll runs, read from ``values`` on the plain ``comm``; _Native when
        MPI's own collective must serve it."""
        check_comm(comm)
        return collective.read(comm, *values)


def _new(cls: type, comm: Any, algorithms: Any) -> Any:
    if comm is not None and not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator, got {type(comm).__name__}")
    checked = check_algorithms(algorithms)
    self = cls._mpi.__new__(cls, comm)
    self._algorithms = checked
    return self


class Comm(_Collectives, MPI.Intracomm):
    """An mpi4py intracommunicator whose buffer collectives run hpccoll's algorithms (see the
    module's documentation); ``algorithms={"allreduce": "ring", ...}`` chooses them per
    collective (the others, and every one by default, ``auto``: ``HPCCOLL_<COLLECTIVE>_
    ALGORITHM``, the tuning tables, the cost model).  ``hpccoll.Comm`` of an
    inter-communicator is an :class:`InterComm`."""

    _mpi = MPI.Intracomm

    def __new__(cls, comm: Any = None, algorithms: Mapping[str, str] | None = None) -> Any:
        if cls is Comm and isinstance(comm, MPI.Comm) and comm != MPI.COMM_NULL and \
                comm.Is_inter():
            return InterComm(comm, algorithms)
        return _new(cls, comm, algorithms)


class InterComm(_Collectives, MPI.Intercomm):
    """``hpccoll.Comm`` of an inter-communicator: every collective is MPI's own (hpccoll's
    algorithms are for intracommunicators), logged as such."""

    _mpi = MPI.Intercomm

    def __new__(cls, comm: Any = None, algorithms: Mapping[str, str] | None = None) -> Any:
        return _new(cls, comm, algorithms)

    def _read(self, collective: _Collective, comm: MPI.Comm, values: list) -> _Call:
        raise _Native("an inter-communicator")


for _collective in COLLECTIVES:
    for _form in FORMS:
        _method = _collective_method(_collective, _form)
        setattr(_Collectives, _method.__name__, _method)
for _name in ("Clone", "Dup", "Dup_with_info", "Idup", "Idup_with_info"):
    setattr(_Collectives, _name, _plain_method(_name))
del _collective, _form, _method, _name
