"""What each collective means: one spec per collective.

A :class:`Collective` says everything about a collective that is not an algorithm: the
:class:`~hpccoll.schedule.Call` made from a user's buffers and counts (with their checks), the
buffer sizes a call needs, where a rank's input lies, the result on integer data (the one
oracle of the verifier, the benchmark's data check and the tests), the MPI library's own
collective (mpi4py's method, hence the C function the compiled native executor posts), the
mpi4py methods :class:`hpccoll.Comm` runs as it, and the benchmarks' conventions (OSU message
size, bus-bandwidth factor).  Every other module iterates over :data:`SPECS`, and the public
functions (blocking, non-blocking, persistent), the package's names and ``hpccoll.Comm``'s
methods are made from it; adding a collective is one spec here (or :func:`add`) plus its
planners.  Nothing here imports MPI at module level.
"""

from __future__ import annotations

import operator
import random
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .schedule import RECV, SEND, Call, Region, even_split, offsets

# the element types every collective takes (those with an MPI datatype and Numba kernels; which
# reductions apply to which is kernels.OP_KINDS: booleans take the logical and bitwise ones)
SUPPORTED_DTYPES = tuple(np.dtype(t) for t in (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "complex64", "complex128", "bool"))

NativeArgs = Callable[[Any, Any], tuple]       # (send, recv) -> mpi4py call arguments


def check_counts(counts: Any, p: int, name: str) -> tuple[int, ...]:
    """``counts`` as ``p`` non-negative integers; TypeError/ValueError saying what is wrong."""
    try:
        values = tuple(operator.index(c) for c in counts)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of {p} integers, got {counts!r}") from None
    if len(values) != p:
        raise ValueError(f"{name} has {len(values)} entries, the communicator has {p} ranks")
    if any(c < 0 for c in values):
        raise ValueError(f"{name} has negative entries: {list(values)}")
    return values


class Collective(ABC):
    """The definition of one collective; subclasses fill in the collective-specific parts.

    Counts are in elements.  ``send`` and ``recv`` sizes are what the user's buffers must hold
    (send is 0 when the input comes from the receive buffer)."""

    name = ""
    mpi_name = ""            # mpi4py's blocking method of the native collective
    # mpi4py's blocking methods hpccoll.Comm runs as this collective (each read by its reader
    # in buffer_specs.READERS; none: Comm leaves it to mpi4py), each with the parameters it
    # takes between its buffers and the op and root the flags give, as (name, default) pairs
    comm_methods: Mapping[str, tuple[tuple[str, Any], ...]] = {}
    reduces = False          # takes a reduction op
    in_place = False         # MPI.IN_PLACE allowed as sendbuf
    rooted = False           # takes a root
    vector = False           # buffers given as [array, counts, displs] (alltoallv)
    exact_sizes = True       # buffers must have exactly the sizes (not at least)
    one_buffer = False       # one buffer, passed as recvbuf (bcast)
    recv_at_root_only = False   # recvbuf significant at the root only (reduce)
    # the public functions (:mod:`hpccoll.api` makes them from these): their docstring, and
    # the keyword naming the user's counts (None: the collective takes none)
    doc = ""
    counts_keyword: str | None = None

    @property
    def functions(self) -> tuple[str, str, str]:
        """The names of the collective's public functions: blocking, non-blocking and
        persistent (``allreduce``, ``iallreduce``, ``allreduce_init``)."""
        return self.name, "i" + self.name, self.name + "_init"

    # ------------------------------------------------------------------- calls and buffers
    @abstractmethod
    def make_call(self, p: int, rank: int, send_n: int | None, recv_n: int, counts: Any,
                  **fields: Any) -> Call:
        """The call of a rank whose buffers hold ``send_n`` (None: IN_PLACE) and ``recv_n``
        elements, with the user's ``counts`` (None where the collective derives them)."""

    @abstractmethod
    def sizes(self, call: Call) -> tuple[int, int]:
        """(send, recv) buffer sizes ``call`` needs."""

    def input(self, call: Call) -> Region:
        """Where this rank's input lies (its send buffer, or its place in the receive buffer
        when in place)."""
        send, _ = self.sizes(replace(call, in_place=False))
        return Region(call.input, 0, send)

    def uniform_call(self, p: int, rank: int, n: int, **fields: Any) -> Call:
        """The call with ``n`` elements per block (the unit of the algorithms' cost
        formulas: per rank, per peer, or the whole vector)."""
        return Call(self.name, p, rank, (n,) * p, **fields)

    def bench_call(self, p: int, rank: int, n: int, **fields: Any) -> Call:
        """The call of an ``n``-element message in the OSU benchmarks' convention."""
        return self.uniform_call(p, rank, n, **fields)

    def message_count(self, call: Call) -> int:
        """The call's size in elements as the benchmarks count it (inverse of bench_call)."""
        return call.counts[0]

    def decision_call(self, call: Call) -> Call:
        """The call ``auto`` decides on.  Every rank must choose the same algorithm, so this
        is made of what every rank knows alike: the call itself where ranks pass alike
        counts (its :meth:`message_count` is then the same on every rank too)."""
        return call

    def data_count(self, call: Call) -> int:
        """Elements per rank that algbw counts (nccl-tests' convention)."""
        return self.message_count(call)

    def alike(self, call: Call) -> tuple:
        """What every rank must pass alike (checked in HPCCOLL_CHECK mode)."""
        return call.counts, call.in_place, call.root

    def busbw_factor(self, p: int) -> float:
        """busbw / algbw: the fraction of the data a rank must move in any algorithm."""
        return 1.0 if p == 1 else (p - 1) / p

    # ------------------------------------------------------------------------ definitions
    def random_calls(self, p: int, rng: random.Random, counts: tuple[int, int],
                     uniform: bool, **fields: Any) -> list[Call]:
        """One call per rank of a random instance, block counts drawn from ``counts``."""
        if uniform:
            n = rng.randint(*counts)
            return [self.uniform_call(p, r, n, **fields) for r in range(p)]
        drawn = tuple(rng.randint(*counts) for _ in range(p))
        return [Call(self.name, p, r, drawn, **fields) for r in range(p)]

    def expected(self, calls: Sequence[Call], inputs: Sequence[np.ndarray]
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per rank: (expected receive buffer, mask of the elements the collective defines),
        for integer ``inputs`` (what each rank's :meth:`input` region holds)."""
        out = []
        for call in calls:
            recv_n = self.sizes(call)[1]
            want = np.zeros(recv_n, np.int64)
            defined = self.result(call, calls, inputs, want)
            out.append((want, np.ones(recv_n, bool) if defined is None else defined))
        return out

    @abstractmethod
    def result(self, call: Call, calls: Sequence[Call], inputs: Sequence[np.ndarray],
               want: np.ndarray) -> np.ndarray | None:
        """Write ``call``'s rank's result into ``want``; return the defined mask (None: all)."""

    # ------------------------------------------------------------------------------ native
    def native_method(self, call: Call) -> str:
        """mpi4py's blocking method of the MPI library's own collective for ``call``
        (:func:`nonblocking` names its non-blocking form, ``MPI_`` + that its C function)."""
        return self.mpi_name

    def native_args(self, call: Call, mpi_type: Any, op: Any) -> tuple[str, NativeArgs]:
        """(:meth:`native_method`, ``args(send, recv)``) of the MPI library's own collective
        for ``call`` (send None when in place)."""
        from mpi4py import MPI

        def args(send: Any, recv: Any) -> tuple:
            return (MPI.IN_PLACE if send is None else [send, mpi_type], [recv, mpi_type]) + \
                (() if op is None else (op,))
        return self.native_method(call), args


class Allgather(Collective):
    name, mpi_name, in_place = "allgather", "Allgather", True
    comm_methods = {"Allgather": (), "Allgatherv": ()}
    counts_keyword = "recvcounts"
    doc = """Every rank's ``sendbuf`` concatenated in rank order into every rank's ``recvbuf``
    (``recvcounts`` for uneven blocks, as Allgatherv; ``MPI.IN_PLACE`` as sendbuf takes the
    own block from its place in ``recvbuf``)."""

    def make_call(self, p, rank, send_n, recv_n, counts, **fields):
        if counts is None:
            n = recv_n // p if send_n is None else send_n
            counts = (n,) * p
        return Call(self.name, p, rank, check_counts(counts, p, "recvcounts"), **fields)

    def sizes(self, call):
        return (0 if call.in_place else call.counts[call.rank]), sum(call.counts)

    def input(self, call):
        count = call.counts[call.rank]
        return Region(RECV, offsets(call.counts)[call.rank], count) if call.in_place else \
            Region(SEND, 0, count)

    def message_count(self, call):
        return max(call.counts, default=0)     # the largest block: alike on every rank

    def data_count(self, call):
        return sum(call.counts)

    def result(self, call, calls, inputs, want):
        want[:] = np.concatenate(inputs) if len(inputs) else want

    def native_method(self, call):
        return self.mpi_name if len(set(call.counts)) <= 1 else "Allgatherv"

    def native_args(self, call, mpi_type, op):
        if self.native_method(call) == self.mpi_name:       # equal blocks: Allgather
            return super().native_args(call, mpi_type, op)
        from mpi4py import MPI
        spec = [call.counts, offsets(call.counts), mpi_type]
        return self.native_method(call), lambda send, recv: (
            MPI.IN_PLACE if send is None else [send, mpi_type], [recv, *spec])


class Alltoall(Collective):
    name, mpi_name = "alltoall", "Alltoall"
    comm_methods = {"Alltoall": ()}
    doc = "Block j of ``sendbuf`` goes to rank j, landing as block ``rank`` of its ``recvbuf``."

    def make_call(self, p, rank, send_n, recv_n, counts, **fields):
        if send_n != recv_n or recv_n % p:
            raise ValueError(f"alltoall needs sendbuf and recvbuf of equal size divisible by "
                             f"{p} ranks, got {send_n} and {recv_n} elements")
        return self.uniform_call(p, rank, recv_n // p, **fields)

    def uniform_call(self, p, rank, n, **fields):
        counts = (n,) * p
        displs = offsets(counts)
        return Call(self.name, p, rank, counts, counts, displs, displs, **fields)

    def sizes(self, call):
        send = max((d + n for d, n in zip(call.sdispls, call.counts)), default=0)
        recv = max((d + n for d, n in zip(call.rdispls, call.recvcounts)), default=0)
        return send, recv

    def message_count(self, call):
        return max(call.counts, default=0)

    def data_count(self, call):
        return sum(call.counts)

    def random_calls(self, p, rng, counts, uniform, **fields):
        return super().random_calls(p, rng, counts, True, **fields)

    def result(self, call, calls, inputs, want):
        defined = np.zeros(len(want), bool)
        for i, other in enumerate(calls):
            n, d, sd = call.recvcounts[i], call.rdispls[i], other.sdispls[call.rank]
            want[d:d + n] = inputs[i][sd:sd + n]
            defined[d:d + n] = True
        return defined


class Alltoallv(Alltoall):
    name, mpi_name, vector, exact_sizes = "alltoallv", "Alltoallv", True, False
    comm_methods = {"Alltoallv": ()}
    doc = """All-to-all with per-peer counts: ``sendbuf = [array, sendcounts(, sdispls)]``,
    ``recvbuf = [array, recvcounts(, rdispls)]`` in elements (or mpi4py's
    ``[array, (counts, displs)]``)."""

    def alike(self, call):
        return ()               # counts differ by rank: the check mode exchanges them

    def decision_call(self, call):
        # a rank knows only its own counts: auto decides as for one element per peer, which
        # every rank derives alike
        return replace(self.uniform_call(call.p, call.rank, 1), itemsize=call.itemsize,
                       topology=call.topology, options=call.options)

    def make_call(self, p, rank, send_n, recv_n, counts, **fields):
        sendcounts, sdispls, recvcounts, rdispls = counts
        return Call(self.name, p, rank, sendcounts, recvcounts, sdispls, rdispls, **fields)

    def random_calls(self, p, rng, counts, uniform, **fields):
        if uniform:
            return super().random_calls(p, rng, counts, True, **fields)
        matrix = [[rng.randint(*counts) for _ in range(p)] for _ in range(p)]

        def displs(sizes: list[int]) -> tuple[int, ...]:
            order = list(range(p))
            rng.shuffle(order)          # blocks in any order, with gaps between them
            out, at = [0] * p, 0
            for j in order:
                at += rng.randint(0, 1)
                out[j] = at
                at += sizes[j]
            return tuple(out)

        calls = []
        for r in range(p):
            recvcounts = [matrix[i][r] for i in range(p)]
            calls.append(Call(self.name, p, r, tuple(matrix[r]), tuple(recvcounts),
                              displs(matrix[r]), displs(recvcounts), **fields))
        return calls

    def native_args(self, call, mpi_type, op):
        send_spec = (call.counts, call.sdispls, mpi_type)
        recv_spec = (call.recvcounts, call.rdispls, mpi_type)
        return self.native_method(call), lambda send, recv: ([send, *send_spec], [recv, *recv_spec])


class ReduceScatter(Collective):
    name, mpi_name, reduces = "reduce_scatter", "Reduce_scatter", True
    comm_methods = {"Reduce_scatter_block": (), "Reduce_scatter": (("recvcounts", None),)}
    counts_keyword = "recvcounts"
    doc = """Elementwise reduction of every rank's ``sendbuf``; rank r receives block r (equal
    blocks of ``recvbuf.size``, or ``recvcounts``)."""

    def make_call(self, p, rank, send_n, recv_n, counts, **fields):
        counts = (recv_n,) * p if counts is None else check_counts(counts, p, "recvcounts")
        return Call(self.name, p, rank, counts, **fields)

    def sizes(self, call):
        return (0 if call.in_place else sum(call.counts)), call.counts[call.rank]

    def bench_call(self, p, rank, n, **fields):
        return Call(self.name, p, rank, even_split(n, p), **fields)

    def message_count(self, call):
        return sum(call.counts)

    def result(self, call, calls, inputs, want):
        start = offsets(call.counts)[call.rank]
        want[:] = sum(x[start:start + call.counts[call.rank]] for x in inputs)

    def native_args(self, call, mpi_type, op):
        name, args = super().native_args(call, mpi_type, op)
        counts = list(call.counts)
        return name, lambda send, recv: (*args(send, recv)[:2], counts, op)


class Allreduce(Collective):
    name, mpi_name, reduces, in_place = "allreduce", "Allreduce", True, True
    comm_methods = {"Allreduce": ()}
    doc = """Elementwise reduction of every rank's ``sendbuf`` into every rank's ``recvbuf``
    (``MPI.IN_PLACE`` as sendbuf reduces ``recvbuf`` in place)."""

    def make_call(self, p, rank, send_n, recv_n, counts, **fields):
        # the input sets the vector's length, so a receive buffer of another size is the one
        # named wrong
        return Call(self.name, p, rank, (recv_n if send_n is None else send_n,), **fields)

    def uniform_call(self, p, rank, n, **fields):
        return Call(self.name, p, rank, (n,), **fields)

    def sizes(self, call):
        return (0 if call.in_place else call.counts[0]), call.counts[0]

    def busbw_factor(self, p):
        return 1.0 if p == 1 else 2 * (p - 1) / p

    def random_calls(self, p, rng, counts, uniform, **fields):
        if uniform:
            return super().random_calls(p, rng, counts, True, **fields)
        n = rng.randint(counts[0] * p, counts[1] * p + p)
        return [self.uniform_call(p, r, n, **fields) for r in range(p)]

    def result(self, call, calls, inputs, want):
        want[:] = sum(inputs)


class Bcast(Allreduce):
    """Broadcast: the root's buffer to every rank's (one buffer, passed as recvbuf)."""

    name, mpi_name, reduces, in_place, rooted = "bcast", "Bcast", False, False, True
    comm_methods = {"Bcast": ()}
    one_buffer = True
    doc = "The root's ``buf`` into every rank's ``buf`` (like ``comm.Bcast(buf, root)``)."

    def sizes(self, call):
        return 0, call.counts[0]

    def input(self, call):
        return Region(RECV, 0, call.counts[0] if call.rank == call.root else 0)

    def busbw_factor(self, p):
        return 1.0

    def random_calls(self, p, rng, counts, uniform, **fields):
        root = rng.randrange(p)
        return super().random_calls(p, rng, counts, uniform, **fields, root=root)

    def result(self, call, calls, inputs, want):
        want[:] = inputs[call.root]

    def native_args(self, call, mpi_type, op):
        root = call.root
        return self.native_method(call), lambda send, recv: ([recv, mpi_type], root)


class Reduce(Allreduce):
    """Reduction to the root: every rank's sendbuf reduced into the root's recvbuf (the
    other ranks' recvbuf is not used; MPI.IN_PLACE as sendbuf at the root)."""

    name, mpi_name, rooted, recv_at_root_only = "reduce", "Reduce", True, True
    comm_methods = {"Reduce": ()}
    doc = """Elementwise reduction of every rank's ``sendbuf`` into the root's ``recvbuf`` (not used
    on the other ranks, where it may be None; ``MPI.IN_PLACE`` as the root's sendbuf reduces
    its ``recvbuf`` in place), like ``comm.Reduce(sendbuf, recvbuf, op, root)``."""

    def alike(self, call):
        return call.counts, call.root       # only the root may be in place

    def decision_call(self, call):
        return replace(call, in_place=False)    # (the root's IN_PLACE is its own)

    def make_call(self, p, rank, send_n, recv_n, counts, **fields):
        if fields.get("in_place") and rank != fields.get("root", 0):
            raise ValueError("MPI.IN_PLACE is the root's sendbuf only in reduce")
        return super().make_call(p, rank, send_n, recv_n, counts, **fields)

    def sizes(self, call):
        n = call.counts[0]
        return (0 if call.in_place else n), (n if call.rank == call.root else 0)

    def input(self, call):
        return Region(call.input, 0, call.counts[0])

    def busbw_factor(self, p):
        return 1.0

    def random_calls(self, p, rng, counts, uniform, **fields):
        root = rng.randrange(p)
        in_place = fields.pop("in_place", False)
        calls = super().random_calls(p, rng, counts, uniform, **fields, root=root)
        return [replace(c, in_place=in_place and c.rank == root) for c in calls]

    def result(self, call, calls, inputs, want):
        if call.rank == call.root:
            want[:] = sum(inputs)

    def native_args(self, call, mpi_type, op):
        from mpi4py import MPI
        root = call.root
        return self.native_method(call), lambda send, recv: (
            MPI.IN_PLACE if send is None else [send, mpi_type],
            [recv, mpi_type] if call.rank == root else None, op, root)


SPECS: dict[str, Collective] = {c.name: c for c in (
    Allgather(), Alltoall(), Alltoallv(), ReduceScatter(), Allreduce(), Bcast(), Reduce())}
NAMES = tuple(SPECS)
_listeners: list[Callable[[Collective], None]] = []
_checks: list[Callable[[Collective], None]] = []


def add(collective: Collective) -> None:
    """Add a collective: its spec joins :data:`SPECS` (and :data:`NAMES`, and so the
    package's public names), and every module that builds something per collective (the
    public functions, ``hpccoll.Comm``'s methods, the settings variable) is told
    (:func:`on_add`).  First every check given to :func:`on_add` may refuse it with
    ValueError (a name taken: a collective's, the package's or :mod:`hpccoll.api`'s; an
    mpi4py method ``hpccoll.Comm`` cannot read), and a refused spec leaves nothing behind.
    Its planners then register in :mod:`hpccoll.registry` as any family's."""
    global NAMES
    if not collective.name.isidentifier() or collective.name in SPECS:
        raise ValueError(f"cannot add collective {collective.name!r}: "
                         f"{'it exists' if collective.name in SPECS else 'not an identifier'}")
    for check in _checks:
        check(collective)
    SPECS[collective.name] = collective
    NAMES = tuple(SPECS)
    for listener in _listeners:
        listener(collective)


def on_add(listener: Callable[[Collective], None] | None,
           check: Callable[[Collective], None] | None = None) -> None:
    """Call ``listener(spec)`` for every collective in :data:`SPECS` now and every one
    :func:`add` adds later, ``check(spec)`` (which may raise ValueError) before it, and
    before :func:`add` adds anything."""
    for collective in list(SPECS.values()):
        for call in (check, listener):
            if call is not None:
                call(collective)
    if check is not None:
        _checks.append(check)
    if listener is not None:
        _listeners.append(listener)


def spec(name: str) -> Collective:
    """The spec of collective ``name``; ValueError naming the known ones."""
    try:
        return SPECS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown collective {name!r}; known: {', '.join(NAMES)}") from None


def nonblocking(method: str) -> str:
    """mpi4py's name of the non-blocking form of a blocking collective (Bcast -> Ibcast)."""
    return "I" + method[0].lower() + method[1:]


def uniform_call(collective: str, p: int, rank: int, count: int, **fields: Any) -> Call:
    """The :class:`Call` of ``collective`` with ``count`` elements per block."""
    return spec(collective).uniform_call(p, rank, count, **fields)
