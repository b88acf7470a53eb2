"""The public collectives: validate -> choose the algorithm -> cached plan -> execute.

Each collective of :data:`hpccoll.collectives.SPECS` exists in three forms, like MPI's,
made from its spec at import (:func:`_define`): blocking (``NAME``), non-blocking (``iNAME``
returns a :class:`Request`) and persistent (``NAME_init`` returns a
:class:`PersistentRequest` to ``start``/``wait`` many times).  Arguments are checked on every
rank before the first message (:mod:`hpccoll.arguments`), so bad input given alike on all
ranks raises the same error everywhere; a validated blocking call that repeats runs again at
once (:class:`LastCall`), served by the collective's C entry where it runs compiled
(:mod:`hpccoll.runtime.entry`).
"""

from __future__ import annotations

import linecache
import weakref
from typing import Any, Mapping

import numpy as np
from mpi4py import MPI

from . import settings
from .collectives import Collective, on_add
from .arguments import copied
from .prepared import Prepared, nothing, prepare
from .requests import PersistentRequest, Request, request_of
from .runtime.entry import ANY, ARRAY, EQUAL, SAME, SPEC, Dispatched, Entry, copy_bound
from .runtime.libmpi import PENDING
from .runtime.native import NativeCall
from .runtime.progress import COMPLETED
from .runtime.scheduled import Runner


class LastCall:
    """A blocking call validated once and served again without validation (:meth:`repeat`):
    the last call of each collective through :func:`run_collective`, and the last call of
    each method of an :class:`hpccoll.Comm`.

    A repeat is the same communicator, op, root and algorithm (the same objects, or equal
    ints and names), counts equal to the validated ones (a list or tuple, compared by value
    with a copy taken at validation, so a list changed in place is noticed; other counts
    objects never repeat) or that the caller confirmed equal, no options, and NumPy arrays,
    passed as they are or in buffer specs (``[array, counts(, displs)]`` of the vector
    collectives, whose other items are compared by value with a copy as counts are) --
    any arrays: what the prepared call depends on is checked on the arrays at each call
    (dtype; size, C layout, writability and overlap, by the compiled executor itself where
    it runs), and their addresses are read anew, so a buffer freed and its memory reused, or
    an array resized in place, is still served right or validated afresh.  The prepared call
    stays valid while its context keeps it in its validated calls (listed there under
    itself): a context freed, revoked, recovered or given another topology drops them, and
    so does every change of the settings (check mode validates and agrees on every call:
    no call is remembered in check mode); the validating path then raises or prepares anew.
    On one rank a scheduled algorithm's result is the send buffer (or, in place, what the
    receive buffer holds): a repeat on the very arrays validated here (weak references), of
    the shape they had, is NumPy's copy of one into the other (``alone``); any other array
    takes the path above."""

    __slots__ = ("comm", "no_send", "send_rest", "recv_rest", "op", "root", "counts",
                 "algorithm", "prepared", "ctx", "calls", "executor", "starter", "send_n",
                 "recv_n", "dtype", "ignores_recv", "alone", "sent", "received", "shape",
                 "moves_nothing", "tag", "entry", "pattern")

    def __init__(self, prepared: Prepared, comm: MPI.Comm, sendbuf: Any, op: Any, root: Any,
                 algorithm: str, send: Any, recv: Any, counts: list | tuple | None = None,
                 send_rest: list | tuple | None = None, recv_rest: list | tuple | None = None):
        """``send_rest``/``recv_rest``: copies of the items after the array of a buffer
        passed as a spec (None: passed as an array)."""
        self.comm, self.op, self.root, self.counts = comm, op, root, counts
        self.no_send = sendbuf if send is None else nothing    # IN_PLACE, or None (one buffer)
        self.send_rest, self.recv_rest = send_rest, recv_rest
        self.algorithm, self.prepared = algorithm, prepared
        # the compiled executor a repeat runs on (the native call, or the runner of the
        # binding the last run used) and the one a non-blocking start runs on (the native
        # call's twin, made at the first start: a blocking repeat may come meanwhile; the
        # same runner)
        self.executor: NativeCall | Runner | None = prepared.compiled
        self.starter: NativeCall | Runner | None = None
        self.ctx, self.calls = prepared.ctx, prepared.ctx.calls
        self.send_n = None if send is None else send.size
        self.recv_n, self.dtype = recv.size, recv.dtype
        self.ignores_recv = prepared.ignores_recv       # recv at root only, elsewhere: send[:0]
        self.moves_nothing = prepared.moves_nothing
        self.tag = prepared.tag()
        # one rank's scheduled call of one size each way (no vector form: its counts place the
        # blocks), whose result is the send buffer (prepared.local_copy), on arrays of a shape
        self.alone = prepared.local_copy and (send is None or send.shape == recv.shape)
        self.sent = self.received = nothing
        if self.alone:          # (weak references, as the plan's binding holds these arrays)
            self.sent = nothing if send is None else weakref.ref(send)
            self.received = weakref.ref(recv)
        self.shape = recv.shape
        self.entry: Entry | None = None     # the C entry serving this call's repeats,
        self.pattern: tuple | None = None   # and its pattern of their arguments
        prepared.ctx.remember(prepared, prepared)

    @staticmethod
    def of(prepared: Prepared, comm: Any, sendbuf: Any, recvbuf: Any, send: Any, recv: Any,
           counts: Any, op: Any, root: Any, algorithm: str, options: Any) -> LastCall | None:
        """The last call to remember for this one, if it can repeat (NumPy arrays on the
        host, as they are or in specs of plain numbers, counts None or a list or tuple, no
        options, not in check mode)."""
        send_rest = recv_rest = None
        try:
            if send is not None and type(sendbuf) is not np.ndarray:
                send_rest = _spec_rest(sendbuf)
            if not prepared.ignores_recv and type(recvbuf) is not np.ndarray:
                recv_rest = _spec_rest(recvbuf)
        except LookupError:
            return None
        if type(counts) not in _COUNTS_TYPES or options is not None or \
                not isinstance(comm, MPI.Comm) or prepared.on_device or not settings.fast:
            return None
        return LastCall(prepared, comm, sendbuf, op, root, algorithm, send, recv,
                        None if counts is None else type(counts)(counts), send_rest, recv_rest)

    def repeat(self, send: np.ndarray | None, recv: np.ndarray) -> bool:
        """Run the call again on ``send`` (None: in place, or none) and ``recv`` (ignored
        where the rank receives nothing) of the validated dtype: True when done, False
        (nothing sent) if the arrays are not as validated or the call no longer is."""
        if self.prepared not in self.calls:
            return False
        if self.ignores_recv:
            recv = None
        elif self.alone and self.copy_alone(send, recv):
            return True
        if self.moves_nothing:
            return (recv is None or recv.size == 0) and (send is None or send.size == 0)
        executor = self.executor
        if executor is not None:
            run = executor.start(send, recv, self.tag, executor.polls)
            if run is not None:
                if run is not COMPLETED:
                    run.wait()
                return True
        return self.run(send, recv)

    def start(self, send: np.ndarray | None, recv: Any) -> Any:
        """The call started again, non-blocking, on ``send`` and ``recv`` (as
        :meth:`repeat` takes them) if they are as validated: its operation (``test()``,
        ``wait()``); None (nothing sent) if not."""
        if self.prepared not in self.calls:
            return None
        prepared, ctx = self.prepared, self.ctx
        if self.ignores_recv:
            recv = None
        if self.moves_nothing:
            if send is not None and send.size or recv is not None and recv.size:
                return None
            ctx.next_slot()
            return COMPLETED
        if self.alone and self.copy_alone(send, recv):
            ctx.next_slot()
            return COMPLETED
        starter = self.starter
        if starter is None and prepared.compiled is not None:
            starter = self.starter = prepared.compiled.twin()
        if starter is not None:
            run = starter.start(send, recv, self.tag + ctx.upcoming_slot(), 0)
            if run is not None:
                ctx.next_slot()             # (drawn on every start, as every rank draws it)
                return run
        if recv is None:
            recv = send[:0]
        if not self.alike(send, self.send_n) or not self.alike(recv, self.recv_n, True):
            return None
        operation = prepared.start(send, recv, ctx.next_slot())
        self.learn(operation)
        return operation

    def copy_alone(self, send: np.ndarray | None, recv: np.ndarray) -> bool:
        """One rank's repeat on the very arrays validated, of the shapes they had: done
        (NumPy's copy of ``send`` into ``recv``, if not in place); False (nothing done) if
        the arrays are others."""
        if send is self.sent() and recv is self.received() and recv.shape == self.shape and \
                (send is None or send.shape == self.shape):
            if send is not None:
                recv[...] = send
            return True
        return False

    def run(self, send: np.ndarray | None, recv: np.ndarray | None) -> bool:
        """Run the repeat through the prepared call (on the scheduled executor, or mpi4py's)
        if its buffers are as validated; False (nothing done) if not."""
        if recv is None:
            recv = send[:0]
        if not self.alike(send, self.send_n) or not self.alike(recv, self.recv_n, True):
            return False
        operation = self.prepared.start(send, recv)
        operation.wait()
        self.learn(operation)
        return True

    def learn(self, operation: Any) -> None:
        """A scheduled call's ``operation`` ran on the compiled executor: its binding's
        runner serves the next repeats and starts."""
        if self.prepared.compiled is None:
            self.executor = self.starter = getattr(operation, "runner", None)
            if self.entry is not None:
                self.serve(self.entry, self.pattern)

    busy = False        # (as an executor's: this call's own repeat, a copy, never in flight)

    def serve(self, entry: Entry, pattern: tuple | None = None) -> None:
        """Let ``entry`` serve this call's blocking repeats, whose arguments match
        ``pattern`` (:mod:`.runtime.entry`; None: the public function's, :meth:`arguments`):
        on the compiled executor, or with no executor where the repeat is one rank's copy of
        the send buffer (nothing, in place) or moves nothing.  It declines every call where
        the repeat runs on the Python executor."""
        self.entry, self.pattern = entry, pattern
        executor = self.executor
        if self.alone or self.moves_nothing:    # (the entry copies, or does nothing)
            executor, polls, bound = self, 0, copy_bound(self.dtype, self.send_n, self.recv_n)
        elif executor is None:
            entry.disarm()
            return
        else:
            polls, bound = executor.polls, executor.bound
        entry.arm(self.pattern_of(pattern), (self.calls, self.prepared, executor, bound,
                                             self.finish, polls, self.tag))

    def serve_starts(self, entry: Entry, pattern: tuple | None = None,
                     request: type[Request] = Request) -> None:
        """Let ``entry`` serve this call's non-blocking starts whose arguments match
        ``pattern`` (as :meth:`serve`'s) where they run on the compiled native executor, or
        run no executor (one rank's copy, a call that moves nothing: done at the start):
        what :meth:`start` does, returning the ``request`` (a
        :class:`~hpccoll.requests.Request`) that completes the run from C; else let it serve
        none."""
        compiled = self.prepared.compiled
        if self.alone or self.moves_nothing:    # (done at the start: nothing to finish)
            arming = (self, copy_bound(self.dtype, self.send_n, self.recv_n), None, 0)
        elif type(compiled) is NativeCall and not isinstance(compiled.bound, Dispatched):
            starter = self.starter
            if starter is None:
                starter = self.starter = compiled.twin()
            arming = (starter, starter.bound, starter.resume, starter.polls)
        else:
            entry.disarm()
            return
        ctx = self.ctx
        entry.arm(self.pattern_of(pattern), (self.calls, self.prepared, *arming, self.tag),
                  (ctx, request, PENDING, ctx.slots, ctx.tag_span))

    def pattern_of(self, pattern: tuple | None) -> tuple:
        """The pattern an entry serves: ``pattern`` (None: the public function's,
        :meth:`arguments`), its receive buffer anything where the rank receives nothing."""
        if pattern is None:
            return self.arguments()
        if self.ignores_recv:
            return tuple((ANY, None, -1) if item[2] == 1 else item for item in pattern)
        return pattern

    def arguments(self) -> tuple:
        """The pattern of this call's arguments as the public function passes them to its
        entry: (comm, sendbuf, recvbuf, counts, op, root, algorithm, options)."""
        if self.send_n is None:
            send = (SAME, self.no_send, -1)
        else:
            send = (ARRAY, None, 0) if self.send_rest is None else (SPEC, self.send_rest, 0)
        if self.ignores_recv:
            recv = (ANY, None, -1)
        else:
            recv = (ARRAY, None, 1) if self.recv_rest is None else (SPEC, self.recv_rest, 1)
        return ((SAME, self.comm, -1), send, recv, (EQUAL, self.counts, -1),
                (SAME, self.op, -1), (EQUAL, self.root, -1), (EQUAL, self.algorithm, -1),
                (SAME, None, -1))

    def finish(self, code: int, send: np.ndarray | None, recv: np.ndarray | None) -> None:
        """Complete the repeat the C entry left in flight with ``code`` on the executor."""
        self.executor.resume(code, send, recv, self.tag).wait()

    def alike(self, array: np.ndarray | None, size: int | None, write: bool = False) -> bool:
        """Whether ``array`` is as validated: size, C layout (and writable)."""
        if array is None:
            return True
        flags = array.flags
        return array.size == size and flags.c_contiguous and (flags.writeable or not write) \
            and array.dtype is self.dtype


_last_calls: dict[str, LastCall] = {}       # collective -> its last blocking call
_entries: dict[str, Entry] = {}             # collective -> the C entry of its repeats
_last_starts: dict[str, LastCall] = {}      # collective -> its last non-blocking call
_start_entries: dict[str, Entry] = {}       # collective -> the C entry of its starts
_NDARRAY = np.ndarray                       # (read on every call)
_COUNTS_TYPES = (type(None), list, tuple)    # counts a repeat compares by value
_SPEC_TYPES = (list, tuple)                 # buffer specs a repeat compares by value
_NOT_AGAIN = (nothing, nothing)


def _spec_rest(buffer: Any) -> list | tuple:
    """A copy of the items after the array of ``buffer``, a spec ``[array, counts(,
    displs)]`` of plain numbers; LookupError where a repeat cannot compare them (no such
    spec, NumPy arrays among the numbers)."""
    if type(buffer) not in _SPEC_TYPES or not buffer or type(buffer[0]) is not np.ndarray:
        raise LookupError("not an array, nor a spec of one")
    return copied(buffer[1:])


def _again(last: LastCall | None, comm: Any, sendbuf: Any, recvbuf: Any, counts: Any, op: Any,
           root: Any, algorithm: str, options: Any) -> tuple[Any, Any]:
    """The (send, recv) arrays for :meth:`LastCall.repeat` or :meth:`LastCall.start` if this
    call may be ``last`` again (the arrays still to be checked there), :data:`_NOT_AGAIN`
    if not."""
    if last is None or comm is not last.comm or op is not last.op or \
            algorithm != last.algorithm or root != last.root or counts is not last.counts and \
            (type(counts) is not type(last.counts) or counts != last.counts) or \
            options is not None:
        return _NOT_AGAIN
    if last.send_n is None:
        if sendbuf is not last.no_send:
            return _NOT_AGAIN
        sendbuf = None
    else:
        if last.send_rest is not None:
            if not _same_spec(sendbuf, last.send_rest):
                return _NOT_AGAIN
            sendbuf = sendbuf[0]
        if type(sendbuf) is not _NDARRAY or sendbuf.dtype is not last.dtype:
            return _NOT_AGAIN
    if last.ignores_recv:
        return sendbuf, recvbuf
    if last.recv_rest is not None:
        if not _same_spec(recvbuf, last.recv_rest):
            return _NOT_AGAIN
        recvbuf = recvbuf[0]
    if type(recvbuf) is _NDARRAY and recvbuf.dtype is last.dtype:
        return sendbuf, recvbuf
    return _NOT_AGAIN


def _same_spec(buffer: Any, rest: list | tuple) -> bool:
    """Whether ``buffer`` is a spec whose items after the array equal ``rest``, as plain
    numbers (NumPy arrays among them never do)."""
    try:
        return type(buffer) in _SPEC_TYPES and buffer[1:] == rest
    except (TypeError, ValueError):         # (arrays compared with numbers)
        return False


def run_collective(collective: str, comm: Any, sendbuf: Any, recvbuf: Any,
                   counts: Any = None, op: Any = None, root: Any = 0, algorithm: str = "auto",
                   options: Mapping[str, Any] | None = None) -> None:
    """The blocking call of ``collective`` by name (keywords as :func:`prepare`'s): a repeat
    of the last one served at once (:class:`LastCall`), any other validated and prepared."""
    last = _last_calls.get(collective)
    arrays = _again(last, comm, sendbuf, recvbuf, counts, op, root, algorithm, options)
    if arrays is not _NOT_AGAIN and last.repeat(*arrays):
        return
    prepared, send, recv = _validated(_last_calls, collective, comm, sendbuf, recvbuf, counts, op,
                                      root, algorithm, options)
    last = _last_calls.get(collective)
    if last is not None and last.prepared is prepared:
        last.serve(_entries[collective])
    run_prepared(prepared, send, recv)


def _validated(last_calls: dict[str, LastCall], collective: str, comm: Any, sendbuf: Any,
               recvbuf: Any, counts: Any, op: Any, root: Any, algorithm: str, options: Any,
               form: str = "blocking") -> tuple[Prepared, Any, Any]:
    """The call (made in ``form``) validated and prepared (:func:`prepare`), kept in
    ``last_calls`` as the collective's last call if it can repeat (:meth:`LastCall.of`)."""
    prepared, send, recv = prepare(collective, comm, sendbuf, recvbuf, counts=counts, op=op,
                                   root=root, algorithm=algorithm, options=options, form=form)
    last = LastCall.of(prepared, comm, sendbuf, recvbuf, send, recv, counts, op, root,
                       algorithm, options)
    if last is not None:
        last_calls[collective] = last
    return prepared, send, recv


def run_prepared(prepared: Prepared, send: Any, recv: Any) -> None:
    """Run a prepared blocking call on its validated arrays (on the compiled executor where
    it runs the call)."""
    if settings.fast:
        if prepared.moves_nothing:
            prepared.ctx.check()
            return
        compiled = prepared.compiled
        if compiled is not None:
            prepared.ctx.check()
            run = compiled.start(send, recv, 0, compiled.polls)
            if run is not None:
                run.wait()
                return
    prepared.start(send, recv).wait()


def start_collective(collective: str, comm: Any, sendbuf: Any, recvbuf: Any,
                     counts: Any = None, op: Any = None, root: Any = 0, algorithm: str = "auto",
                     options: Mapping[str, Any] | None = None) -> Request:
    """The non-blocking call of ``collective`` by name (keywords as :func:`prepare`'s): a
    repeat of the last one started again at once (:meth:`LastCall.start`), any other
    validated and prepared."""
    last = _last_starts.get(collective)
    arrays = _again(last, comm, sendbuf, recvbuf, counts, op, root, algorithm, options)
    if arrays is not _NOT_AGAIN:
        started = last.start(*arrays)
        if started is not None:
            return request_of(started)
    prepared, send, recv = _validated(_last_starts, collective, comm, sendbuf, recvbuf, counts,
                                      op, root, algorithm, options, "nonblocking")
    last = _last_starts.get(collective)
    if last is not None and last.prepared is prepared:
        last.serve_starts(_start_entries[collective])
    return Request(prepared.start(send, recv, prepared.ctx.next_slot()))


def init_collective(collective: str, comm: Any, sendbuf: Any, recvbuf: Any, **kw: Any
                    ) -> PersistentRequest:
    """The persistent call of ``collective`` by name (keywords as :func:`prepare`'s)."""
    prepared, send, recv = prepare(collective, comm, sendbuf, recvbuf, form="persistent", **kw)
    return PersistentRequest(prepared, send, recv)


# ------------------------------------------------------------------------- the collectives
# Each collective's three public functions are made from its spec (hpccoll.collectives) as
# plain functions whose body is the one call they make, as if written out here: Python binds
# their arguments (keyword-only ones, defaults), and help() and inspect show their
# signatures, type hints and docstrings.

_OP_DEFAULT = MPI.SUM                       # the reductions' default op
_FORMS = (      # (function name, the call its body makes, return type, docstring)
    ("{name}", "if not _entry_{name}(comm, {buffers}, {rest}):\n        run_collective", "None",
     "{doc}"),
    ("i{name}", "return _start_{name}(comm, {buffers}, {rest}) or start_collective", "Request",
     "Non-blocking :func:`{name}`."),
    ("{name}_init", "return init_collective", "PersistentRequest",
     "Persistent :func:`{name}`: plan once, ``start()``/``wait()`` many times."),
)


def _parameters(spec: Collective) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The parameters of ``spec``'s functions: the positional ones (the communicator, the
    buffers) and the keyword-only ones as (name, default's source, type hint)."""
    positional = ["comm", *(["buf"] if spec.one_buffer else ["sendbuf", "recvbuf"])]
    keywords = [(spec.counts_keyword, "None", "Any")] if spec.counts_keyword else []
    if spec.reduces:
        keywords.append(("op", "_OP_DEFAULT", "Any"))
    if spec.rooted:
        keywords.append(("root", "0", "int"))
    keywords += [("algorithm", "'auto'", "str"), ("options", "None", "Mapping[str, Any] | None")]
    return positional, keywords


def _refuse_taken(spec: Collective) -> None:
    """A collective whose functions would have one of this module's names is not added."""
    taken = [name for name in spec.functions if name in globals()]
    if taken:
        raise ValueError(f"collective {spec.name!r}: hpccoll.api already has {taken}")


def _define(spec: Collective) -> None:
    """Define ``spec``'s blocking, non-blocking and persistent functions in this module;
    each passes its arguments straight to :func:`run_collective`, :func:`start_collective`
    or :func:`init_collective` (a one-buffer collective's buffer as recvbuf)."""
    positional, keywords = _parameters(spec)
    listed = ", ".join([*positional, "*", *(f"{name}={default}" for name, default, _ in keywords)])
    hints = {"comm": "MPI.Intracomm", **{name: "Any" for name in positional[1:]},
             **{name: hint for name, _, hint in keywords}}
    passed = {"counts": spec.counts_keyword or "None", "op": "op" if spec.reduces else "None",
              "root": "root" if spec.rooted else "0", "algorithm": "algorithm",
              "options": "options"}
    buffers = "None, buf" if spec.one_buffer else "sendbuf, recvbuf"
    _entries[spec.name] = globals()[f"_entry_{spec.name}"] = Entry()
    _start_entries[spec.name] = globals()[f"_start_{spec.name}"] = Entry()
    for function, call, returns, doc in _FORMS:
        function = function.format(name=spec.name)
        rest = ", ".join(f"{k}={v}" for k, v in passed.items()) \
            if call.endswith("init_collective") else ", ".join(passed.values())
        call = call.format(name=spec.name, buffers=buffers, rest=rest)
        source = f"def {function}({listed}):\n    {call}({spec.name!r}, comm, {buffers}, {rest})\n"
        where = f"<hpccoll.api: {function}>"        # (its source, for tracebacks and inspect)
        linecache.cache[where] = (len(source), None, source.splitlines(True), where)
        exec(compile(source, where, "exec"), globals())
        made = globals()[function]
        made.__doc__ = doc.format(name=spec.name, doc=spec.doc)
        made.__annotations__ = {**hints, "return": returns}


on_add(_define, check=_refuse_taken)
