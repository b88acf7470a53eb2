"""``hpccoll.Comm``: an mpi4py communicator whose buffer collectives run hpccoll's algorithms.

The one-line adoption path for an mpi4py code::

    comm = hpccoll.Comm(MPI.COMM_WORLD)         # or algorithms={"allreduce": "ring", ...}
    comm.Allreduce(x, y, op=MPI.MAX)            # hpccoll's allreduce, algorithm "auto"
    comm.Send(...); comm.bcast(obj); ...        # everything else is mpi4py's own

:class:`Comm` is an ``MPI.Intracomm`` sharing the wrapped communicator's handle, so it goes
wherever mpi4py (or hpccoll) takes a communicator.  It overrides the buffer collectives hpccoll
implements (Allgather(v), Alltoall(v), Reduce_scatter(_block), Allreduce, Bcast, Reduce: the
``comm_methods`` of each collective's spec, made when the spec is added), in their blocking,
non-blocking (``I...``) and persistent (``..._init``) forms, with mpi4py's signatures and
buffer specifications (``buf``, ``[buf, MPI.DOUBLE]``, ``[buf, count, type]``,
``[buf, (count, displ), type]``, ``[buf, counts, displs, type]``, ... over any contiguous
buffer-protocol object or GPU array), read as mpi4py reads them and viewed, never copied, as
flat arrays of the datatype's NumPy type.

A call hpccoll cannot run goes to MPI's own collective with the same arguments, so its result
is always MPI's; the logger ``hpccoll`` says which call and why at DEBUG level (when the
method decides it, not on the alike calls after it).  Those are:
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

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from mpi4py import MPI

from . import api, registry
from .buffer_specs import READERS, Call, NotRun, check_mpi_takes
from .readings import NATIVE, NativeReading, Reading
from .runtime.entry import Entry
from .requests import Request, request_of
from .collectives import Collective, nonblocking, on_add, spec
from .context import check_comm

log = logging.getLogger("hpccoll")

_REQUIRED = object()


# ------------------------------------------------------------------- the generated methods

@dataclass(frozen=True)
class _Method:
    """One of mpi4py's buffer collectives, as a spec names it in ``comm_methods``: its
    blocking method's name and parameters after ``self`` ((name, default) pairs, _REQUIRED
    for none), of which the first ``buffers`` are its buffers."""

    name: str
    parameters: tuple[tuple[str, Any], ...]
    buffers: int


def _methods(collective: Collective) -> list[_Method]:
    """The mpi4py methods hpccoll.Comm runs as ``collective`` (its ``comm_methods``), with
    their parameters as mpi4py declares them: the buffers, the method's own extra ones, then
    ``op`` where the collective reduces and ``root`` where it is rooted."""
    buffers = ("buf",) if collective.one_buffer else ("sendbuf", "recvbuf")
    found = []
    for name, extra in collective.comm_methods.items():
        parameters = (*((b, _REQUIRED) for b in buffers), *extra,
                      *((("op", MPI.SUM),) if collective.reduces else ()),
                      *((("root", 0),) if collective.rooted else ()))
        found.append(_Method(name, parameters, len(buffers)))
    return found


class _LowerCase:
    """mpi4py's lower-case ``wait()`` (None) and ``test()`` (``(flag, None)``)."""

    __slots__ = ()

    def test(self, status: Any = None) -> tuple[bool, None]:
        return self.Test(status), None

    def wait(self, status: Any = None) -> None:
        self.Wait(status)


_test, _wait = Request.test, Request.wait      # (hpccoll's, which CommRequest renames)


class CommRequest(_LowerCase, Request):
    """What ``hpccoll.Comm``'s ``I...`` methods return: hpccoll's non-blocking collective
    (:class:`hpccoll.Request`, completed from C where it runs on the compiled native
    executor) with mpi4py's Request methods: ``Wait()``, ``Test()``, and the lower-case
    ``wait()`` (None) and ``test()`` (``(flag, None)``).  ``MPI.Request.Waitall`` and its
    kin do not take it (it is not an MPI request)."""

    __slots__ = ()

    def Test(self, status: Any = None) -> bool:
        return _test(self)

    def Wait(self, status: Any = None) -> bool:
        _wait(self)
        return True


class CommPrequest(_LowerCase):
    """What ``hpccoll.Comm``'s ``..._init`` methods return: hpccoll's persistent collective
    (:class:`hpccoll.PersistentRequest`) with mpi4py's Prequest methods: ``Start()``, then
    ``Wait()``/``Test()``, again and again; ``Free()`` releases it."""

    __slots__ = ("_request", "Start")

    def __init__(self, request: Any):
        self._request = request
        self.Start = request.start      # (its own method: no frame of this object's)

    def Test(self, status: Any = None) -> bool:
        return self._request.test()

    def Wait(self, status: Any = None) -> bool:
        self._request.wait()
        return True

    def Free(self) -> None:
        self._request.free()


def _prepare(call: Call, comm: MPI.Comm, algorithm: str, reading: Reading | None,
             form: str = "blocking") -> tuple[api.Prepared, Any, Any]:
    """``call`` (made in ``form``) validated and prepared (:func:`hpccoll.api.prepare`);
    its reading (if any) keeps the validated call to run again when the same call comes
    back."""
    prepared, send, recv = api.prepare(call.collective, comm, call.send, call.recv,
                                       counts=call.counts, op=call.op, root=call.root,
                                       algorithm=algorithm, form=form)
    if reading is not None:
        reading.last = api.LastCall.of(prepared, comm, call.send if send is None else send,
                                       recv, send, recv, None, call.op, call.root, algorithm,
                                       None)
    return prepared, send, recv


def _run_blocking(call: Call, comm: MPI.Comm, algorithm: str, reading: Reading | None
                  ) -> None:
    api.run_prepared(*_prepare(call, comm, algorithm, reading))


def _start(call: Call, comm: MPI.Comm, algorithm: str, reading: Reading | None
           ) -> CommRequest:
    prepared, send, recv = _prepare(call, comm, algorithm, reading, "nonblocking")
    return CommRequest(prepared.start(send, recv, prepared.ctx.next_slot()))


def _init(call: Call, comm: MPI.Comm, algorithm: str, reading: Reading | None
          ) -> CommPrequest:
    return CommPrequest(api.init_collective(call.collective, comm, call.send, call.recv,
                                        counts=call.counts, op=call.op, root=call.root,
                                        algorithm=algorithm))


@dataclass(frozen=True)
class _Form:
    """Blocking, non-blocking or persistent: the method's name, its extra parameters, how
    hpccoll runs a call (``run(call, plain communicator, algorithm, reading)`` -> the
    method's result), and what the method's C entry serves (:func:`_with_signature`)."""

    name: Callable[[str], str]
    extra: tuple[tuple[str, Any], ...]
    run: Callable[[Call, MPI.Comm, str, Reading | None], Any]
    entry: str


BLOCKING = _Form(lambda m: m, (), _run_blocking, "repeats")
NONBLOCKING = _Form(nonblocking, (), _start, "starts")
FORMS = (BLOCKING, NONBLOCKING,
         _Form(lambda m: m + "_init", (("info", MPI.INFO_NULL),), _init, ""))


def _with_signature(name: str, parameters: tuple[tuple[str, Any], ...],
                    serve: Callable[[Any, tuple], Any], entry: str) -> Callable:
    """A function ``name(self, <parameters>)`` that returns ``serve(self, (<the arguments>,))``
    unless the method's C entry, ``self._entries[name]``, served the call with the arguments
    (:mod:`.runtime.entry`; ``entry``: "repeats" of a blocking method, then None; "starts"
    of a non-blocking one, then the request it returned; "" none): Python binds the
    arguments (and raises TypeError as for any function), with the parameters' names and
    defaults for ``help()`` and IDEs."""
    defaults = {f"_default{i}": d for i, (_, d) in enumerate(parameters) if d is not _REQUIRED}
    declared = ", ".join(p if d is _REQUIRED else f"{p}=_default{i}"
                         for i, (p, d) in enumerate(parameters))
    passed = "".join(f"{p}, " for p, _ in parameters)
    served = {"repeats": f"    if self._entries[{name!r}]({passed}):\n        return None\n",
              "starts": f"    started = self._entries[{name!r}]({passed})\n"
                        "    if started:\n        return started\n", "": ""}[entry]
    namespace = {"serve": serve, **defaults}
    exec(f"def {name}(self, {declared}):\n{served}    return serve(self, ({passed}))\n",
         namespace)
    return namespace[name]


def _serve_with(entry: Entry, reading: Reading | NativeReading | None, blocking: bool
                ) -> None:
    """Let ``entry`` serve the repeats (``blocking``) or the starts of the call ``reading``
    read (and ran), where it has a pattern and a validated call to run again; else let it
    serve none."""
    last = getattr(reading, "last", None)
    if last is None or reading.pattern is None:
        entry.disarm()
    elif blocking:
        last.serve(entry, reading.pattern)
    else:
        last.serve_starts(entry, reading.pattern, CommRequest)


def _collective_method(collective: _Method, form: _Form) -> Callable:
    """The method of ``collective`` in ``form``.  A call is read from its arguments (as
    mpi4py reads them) into the call hpccoll runs; the method's last call that could be
    read cheaply again is kept as a :class:`Reading`, so that the same call again -- the
    same spec forms and numbers, on NumPy arrays like the ones before -- skips the reading,
    and, blocking, the validation too: it runs the validated call again at once."""
    name = form.name(collective.name)
    parameters = collective.parameters + form.extra
    used, buffers = len(collective.parameters), collective.buffers
    read = READERS[collective.name]
    run, blocking, nonblocking_form = form.run, form is BLOCKING, form is NONBLOCKING

    def serve(self: _Collectives, values: tuple) -> Any:
        reading = self._readings.get(name)
        if reading is not None:
            arrays = reading.arrays(values)
            if arrays is NATIVE:            # (logged when it was decided)
                return getattr(self._mpi, name)(self, *values)
            if arrays is not None:
                last = reading.last
                if blocking:
                    if last is not None and last.repeat(*arrays):
                        return None
                elif nonblocking_form:
                    if last is not None:
                        started = last.start(*arrays)
                        if started is not None:
                            return request_of(started, CommRequest)
                else:
                    return run(reading.call.again(*arrays), self._plain,
                               self._algorithms.get(reading.call.collective, "auto"), None)
        if form.entry:
            self._entries[name].disarm()
        try:
            call = self._read(read, values[:used])
        except NotRun as reason:
            log.debug("hpccoll.Comm.%s: MPI's own collective (%s)", name, reason)
            check_mpi_takes(values[:buffers], name, reason)
            self._readings[name] = NativeReading.of(values, reason, buffers)
            return getattr(self._mpi, name)(self, *values)
        reading = self._readings[name] = Reading.of(call, values, buffers, bool(form.entry))
        result = run(call, self._plain, self._algorithms.get(call.collective, "auto"), reading)
        if form.entry:
            _serve_with(self._entries[name], reading, blocking)
        return result

    method = _with_signature(name, parameters, serve, form.entry)
    method.__qualname__ = name
    method.__doc__ = (f"mpi4py's {name}, run by hpccoll (by MPI's own collective where "
                      "hpccoll cannot run the call: see hpccoll.comm).")
    return method


def _plain_method(name: str) -> Callable:
    def method(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._plain, name)(*args, **kwargs)

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
    """The overridden collectives, shared by :class:`Comm` and :class:`InterComm`: they run
    on ``_plain``, a plain mpi4py communicator of the same handle, and keep each method's
    last reading (:class:`Reading`) in ``_readings``."""

    _mpi: type = MPI.Comm              # the mpi4py class of the plain communicator
    _algorithms: dict[str, str]
    _plain: MPI.Comm
    _readings: dict[str, Reading | NativeReading | None]
    _entries: defaultdict[str, Entry]   # the C entry of each blocking method's repeats

    @property
    def algorithms(self) -> dict[str, str]:
        """The algorithm chosen per collective (the others are ``auto``)."""
        return dict(self._algorithms)

    def _read(self, read: Callable[..., Call], values: list) -> Call:
        """The call hpccoll runs, read from ``values`` by ``read``; NotRun when MPI's own
        collective must serve it."""
        check_comm(self._plain)
        return read(self._plain, *values)

    def Free(self) -> None:
        """mpi4py's Free: frees the communicator (the handle is shared, so the wrapped
        object is freed too: the user asked for it)."""
        self._mpi.Free(self)
        self._plain, self._readings, self._entries = self._mpi(self), {}, defaultdict(Entry)


def _new(cls: type, comm: Any, algorithms: Any) -> Any:
    if comm is not None and not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator, got {type(comm).__name__}")
    checked = check_algorithms(algorithms)
    self = cls._mpi.__new__(cls, comm)
    self._algorithms = checked
    self._plain, self._readings, self._entries = cls._mpi(self), {}, defaultdict(Entry)
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

    def _read(self, read: Callable[..., Call], values: list) -> Call:
        raise NotRun("an inter-communicator")


def _refuse_unread(collective: Collective) -> None:
    """A collective naming an mpi4py method that has no reader in
    :data:`~hpccoll.buffer_specs.READERS` is not added."""
    unread = [name for name in collective.comm_methods if name not in READERS]
    if unread:
        raise ValueError(f"collective {collective.name!r}: hpccoll.Comm has no reader of "
                         f"mpi4py's {', '.join(unread)} (hpccoll.buffer_specs.READERS)")


def _define(collective: Collective) -> None:
    """Give :class:`Comm` (and :class:`InterComm`) the three forms of every mpi4py method
    ``collective`` names in ``comm_methods``."""
    for method in _methods(collective):
        for form in FORMS:
            made = _collective_method(method, form)
            setattr(_Collectives, made.__name__, made)


on_add(_define, check=_refuse_unread)
for _name in ("Clone", "Dup", "Dup_with_info", "Idup", "Idup_with_info"):
    setattr(_Collectives, _name, _plain_method(_name))
del _name
