"""``hpccoll.Comm`` as a drop-in for an mpi4py communicator, under real MPI.

Every buffer-spec form mpi4py takes, on COMM_SELF, COMM_WORLD and a Split communicator, with
one algorithm of every family of every collective (``algorithms=``), ``auto`` and ``native``,
in the blocking, non-blocking and persistent forms, against the wrapped communicator's own
collective on the same arguments: every byte of the receive buffers must match, the parts MPI
leaves alone included.  Then every predefined op (hpccoll's, and MAXLOC, MINLOC and a
user-defined op through MPI's own collective), bad input (the same error on every rank before
any message), and the communicator's behaviour as an mpi4py object.  Each test function is one
``mpiexec`` launch per rank count and loops over its cases.
"""

from __future__ import annotations

import array
import gc
import logging

import numpy as np
import pytest

from mpi_cases import data

RANKS = [1, 2, 3, 4]
SENTINEL = 77          # what receive buffers hold before a call: parts MPI leaves alone keep it
FORMS = ("blocking", "nonblocking", "persistent")


class Records(logging.Handler):
    """The messages of the logger ``hpccoll`` while in a ``with`` block (at DEBUG level)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def __enter__(self):
        logger = logging.getLogger("hpccoll")
        self.level = logger.level
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        logger = logging.getLogger("hpccoll")
        logger.removeHandler(self)
        logger.setLevel(self.level)


def families(collective: str, p: int) -> list[str]:
    """One algorithm of every family of ``collective`` that serves ``p`` ranks."""
    from hpccoll import registry
    from hpccoll.collectives import uniform_call
    call = uniform_call(collective, p, 0, 1)
    chosen: dict[str, str] = {}
    for algorithm in registry.algorithms(collective):
        if algorithm.violated(call) is None:
            chosen.setdefault(algorithm.family, algorithm.name)
    return list(chosen.values())


def rounds(p: int) -> list[dict[str, str] | None]:
    """``algorithms=`` choices that together run one algorithm of every family of every
    collective (round i: each collective's i-th family), then ``auto`` (None) and native."""
    from hpccoll.collectives import NAMES
    per = {c: families(c, p) for c in NAMES}
    width = max(len(names) for names in per.values())
    return [{c: names[i % len(names)] for c, names in per.items()} for i in range(width)] + \
        [None, dict.fromkeys(NAMES, "native")]


def fresh(n: int, dtype, shape=None, order="C") -> np.ndarray:
    out = np.full(n, SENTINEL).astype(dtype)
    return out.reshape(shape, order=order) if shape else out


def placed(values: np.ndarray, size: int, at: int) -> np.ndarray:
    """A buffer of ``size`` sentinels holding ``values`` from element ``at``."""
    out = fresh(size, values.dtype)
    out[at:at + values.size] = values
    return out


def read_only(values: np.ndarray) -> np.ndarray:
    out = values.copy()
    out.setflags(write=False)
    return out


def buffer_specs(comm):
    """(method, label, make) for every buffer-spec form; ``make()`` returns the call's fresh
    arguments, the same on every call."""
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    last = p - 1
    x = data(r, 7, "float64")
    f32, i64, c128 = data(r, 3, "float32"), data(r, 4, "int64"), data(r, 6, "complex128")
    counts = [(3 * i + 1) % 4 for i in range(p)]             # uneven, with zeros
    total = sum(counts)
    gaps = [sum(counts[:i]) + i for i in range(p)]           # one element between blocks
    mine = data(r, counts[r], "int64")
    even = [(2 * p + 1) // p + ((2 * p + 1) % p > i) for i in range(p)]
    to_all = data(r, 2 * p, "float64")
    matrix = [[(3 * i + 5 * j) % 4 for j in range(p)] for i in range(p)]
    sendcounts, recvcounts = matrix[r], [matrix[i][r] for i in range(p)]
    sdispls = [sum(sendcounts[:j]) + j for j in range(p)]
    rdispls, reach = [0] * p, 0
    for j in reversed(range(p)):                  # blocks in reverse order, gaps of two
        rdispls[j] = reach
        reach += recvcounts[j] + 2
    v32 = data(r, sum(sendcounts) + p, "float32")
    block = data(r, 3 * p, "int32")
    products = data(r, total, "float64", "prod")
    short = data(r, 5, "int16")
    return [
        ("Allreduce", "bare float64", lambda: (x.copy(), fresh(7, "float64"))),
        ("Allreduce", "2-D float32, MAX", lambda: (
            data(r, 15, "float32").reshape(3, 5), fresh(15, "float32", (3, 5)), MPI.MAX)),
        ("Allreduce", "[buf, MPI.INT], PROD", lambda: (
            [data(r, 6, "int32", "prod"), MPI.INT], [fresh(6, "int32"), MPI.INT], MPI.PROD)),
        ("Allreduce", "[buf, count, type]", lambda: (
            [x.copy(), 4, MPI.DOUBLE], [fresh(9, "float64"), 4, MPI.DOUBLE])),
        ("Allreduce", "[buf, (count, displ), type]", lambda: (
            [x.copy(), (3, 2), MPI.DOUBLE], [fresh(9, "float64"), (3, 4), MPI.DOUBLE])),
        ("Allreduce", "[buf, count, displ, type]", lambda: (
            [x.copy(), 3, 2, MPI.DOUBLE], [fresh(9, "float64"), 3, 1, MPI.DOUBLE])),
        ("Allreduce", "[buf, count]", lambda: ([x.copy(), 5], [fresh(9, "float64"), 5])),
        ("Allreduce", "[buf, [count, displ]]", lambda: (
            [x.copy(), [2, 5]], [fresh(9, "float64"), [2, 0]])),
        ("Allreduce", "[buf, type code]", lambda: ([f32.copy(), "f"], [fresh(3, "float32"), "f"])),
        ("Allreduce", "array.array", lambda: (
            array.array("q", i64.tolist()), array.array("q", [SENTINEL] * 4))),
        ("Allreduce", "bytearray and memoryview as MPI.INT64_T", lambda: (
            [bytearray(i64.tobytes()), MPI.INT64_T], [memoryview(fresh(4, "int64")),
                                                     MPI.INT64_T])),
        ("Allreduce", "Fortran order", lambda: (
            np.asfortranarray(x[:6].reshape(2, 3)), fresh(6, "float64", (2, 3), "F"))),
        ("Allreduce", "float64 memory as MPI.INT, BXOR", lambda: (
            [x.copy(), MPI.INT], [fresh(14, "int32"), MPI.INT], MPI.BXOR)),
        ("Allreduce", "IN_PLACE", lambda: (MPI.IN_PLACE, x.copy())),
        ("Allreduce", "no elements", lambda: (np.zeros(0), np.zeros(0))),
        ("Allreduce", "complex128", lambda: (c128.copy(), fresh(6, "complex128"))),
        ("Allreduce", "bool, LOR", lambda: ((x > 0) & (r % 2 == 0), np.ones(7, bool), MPI.LOR)),
        ("Allgather", "bare", lambda: (f32, fresh(3 * p, "float32"))),
        ("Allgather", "2-D receive", lambda: (f32, fresh(3 * p, "float32", (p, 3)))),
        ("Allgather", "[buf, type]", lambda: ([f32, MPI.FLOAT], [fresh(3 * p, "float32"),
                                                                MPI.FLOAT])),
        ("Allgather", "[buf, count, type] in a larger buffer", lambda: (
            [f32, MPI.FLOAT], [fresh(3 * p + 2, "float32"), 3, MPI.FLOAT])),
        ("Allgather", "[buf, (count, displ), type]", lambda: (
            f32, [fresh(3 * p + 2, "float32"), (3, 1), MPI.FLOAT])),
        ("Allgather", "IN_PLACE", lambda: (MPI.IN_PLACE, placed(f32, 3 * p, 3 * r))),
        ("Allgather", "bool", lambda: (f32 > 0, np.zeros(3 * p, bool))),
        ("Allgather", "complex64, no elements", lambda: (
            np.zeros(0, "complex64"), np.zeros(0, "complex64"))),
        ("Allgatherv", "[buf, counts] uneven, zeros", lambda: (mine, [fresh(total, "int64"),
                                                                     counts])),
        ("Allgatherv", "[buf, (counts, displs)]", lambda: (
            mine, [fresh(total, "int64"), (counts, [sum(counts[:i]) for i in range(p)])])),
        ("Allgatherv", "[buf, counts, type]", lambda: (
            [mine, MPI.INT64_T], [fresh(total + 3, "int64"), counts, MPI.INT64_T])),
        ("Allgatherv", "[buf, counts, displs, type] with gaps (MPI's own)", lambda: (
            mine, [fresh(total + p, "int64"), counts, gaps, MPI.INT64_T])),
        ("Allgatherv", "bare receive: counts split as mpi4py does", lambda: (
            data(r, even[r], "int64"), fresh(2 * p + 1, "int64"))),
        ("Allgatherv", "[buf, count]", lambda: (data(r, 2, "uint16"), [fresh(2 * p, "uint16"),
                                                                      2])),
        ("Allgatherv", "[buf, (count, stride)] (MPI's own)", lambda: (
            data(r, 2, "uint16"), [fresh(3 * p, "uint16"), (2, 3)])),
        ("Allgatherv", "IN_PLACE", lambda: (
            MPI.IN_PLACE, [placed(mine, total, sum(counts[:r])), counts])),
        ("Alltoall", "bare", lambda: (to_all, fresh(2 * p, "float64"))),
        ("Alltoall", "2-D", lambda: (to_all.reshape(p, 2), fresh(2 * p, "float64", (p, 2)))),
        ("Alltoall", "[buf, count, type]", lambda: (
            [placed(to_all, 2 * p + 1, 0), 2, MPI.DOUBLE], [fresh(2 * p + 3, "float64"), 2,
                                                           MPI.DOUBLE])),
        ("Alltoall", "[buf, (count, displ), type]", lambda: (
            [placed(to_all, 2 * p + 1, 1), (2, 1), MPI.DOUBLE],
            [fresh(2 * p + 3, "float64"), (2, 2), MPI.DOUBLE])),
        ("Alltoall", "bool", lambda: (to_all > 0, np.zeros(2 * p, bool))),
        ("Alltoall", "IN_PLACE (MPI's own)", lambda: (MPI.IN_PLACE, to_all.copy())),
        ("Alltoallv", "[buf, counts, displs, type], [buf, (counts, displs)]", lambda: (
            [v32, sendcounts, sdispls, MPI.FLOAT], [fresh(reach, "float32"),
                                                    (recvcounts, rdispls)])),
        ("Alltoallv", "[buf, counts], [buf, counts, type]", lambda: (
            [v32, sendcounts], [fresh(sum(recvcounts), "float32"), recvcounts, MPI.FLOAT])),
        ("Alltoallv", "[buf, count]", lambda: ([v32[:p], 1], [fresh(p, "float32"), 1])),
        ("Alltoallv", "IN_PLACE (MPI's own)", lambda: (MPI.IN_PLACE, [v32[:p].copy(), 1])),
        ("Reduce_scatter_block", "bare", lambda: (block, fresh(3, "int32"))),
        ("Reduce_scatter_block", "2-D [buf, type], [buf, count, type], MIN", lambda: (
            [block.reshape(p, 3), MPI.INT], [fresh(5, "int32"), 3, MPI.INT], MPI.MIN)),
        ("Reduce_scatter_block", "IN_PLACE (MPI's own)", lambda: (MPI.IN_PLACE, block.copy())),
        ("Reduce_scatter", "recvcounts uneven, zeros, PROD", lambda: (
            products, fresh(counts[r], "float64"), counts, MPI.PROD)),
        ("Reduce_scatter", "recvcounts gathered", lambda: (products, fresh(counts[r], "float64"))),
        ("Reduce_scatter", "IN_PLACE (MPI's own)", lambda: (MPI.IN_PLACE, products.copy(),
                                                            counts)),
        ("Bcast", "bare, from the last rank", lambda: (c128.copy(), last)),
        ("Bcast", "[buf, count, type]", lambda: ([c128.real.copy(), 4, MPI.DOUBLE],)),
        ("Bcast", "bool", lambda: (c128.real > 0,)),
        ("Bcast", "read-only at the root", lambda: (
            read_only(c128) if r == 0 else c128.copy(), 0)),
        ("Reduce", "to rank 0", lambda: (short, fresh(5, "int16"))),
        ("Reduce", "to the last rank, None elsewhere, MAX", lambda: (
            [short, MPI.SHORT], [fresh(5, "int16"), MPI.SHORT] if r == last else None,
            MPI.MAX, last)),
        ("Reduce", "IN_PLACE at the root", lambda: (
            MPI.IN_PLACE if r == 0 else short, short.copy())),
    ]


def written(method: str, arguments: tuple) -> bytes:
    """The bytes of the buffer a call writes (the receive buffer; Bcast's one buffer)."""
    spec = arguments[0] if method == "Bcast" else arguments[1]
    buf = spec[0] if isinstance(spec, (list, tuple)) else spec
    return b"" if buf is None else memoryview(buf).tobytes(order="A")


def run(wrapped, method: str, arguments: tuple, form: str) -> None:
    """``method`` of ``wrapped`` in ``form``, through mpi4py's request interface."""
    from hpccoll.collectives import nonblocking
    if form == "blocking":
        getattr(wrapped, method)(*arguments)
    elif form == "nonblocking":
        request = getattr(wrapped, nonblocking(method))(*arguments)
        request.Test()
        assert request.Wait()
    else:
        request = getattr(wrapped, method + "_init")(*arguments)
        request.Start()
        request.Wait()
        assert request.Test()
        request.Free()


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_drop_in_for_mpi4py(mpi_ranks, comm):
    """One launch per rank count (a launch costs seconds): bad input first (nothing is sent,
    so the communicator stays healthy), the communicator as mpi4py sees it, then values."""
    check_bad_input(comm)
    check_communicator(comm)
    check_buffer_specs(comm)
    check_ops(comm)


def check_buffer_specs(comm):
    """Every buffer-spec form, on COMM_SELF, ``comm`` and a Split of it, with every family,
    auto and native, in the three forms, against the wrapped communicator's own call."""
    import hpccoll
    from mpi4py import MPI
    r = comm.rank
    split = comm.Split(r % 2, -r)            # renumbered: the highest world rank first
    try:
        for name, base in (("COMM_SELF", MPI.COMM_SELF), ("COMM_WORLD", comm),
                           ("Split", split)):
            for i, algorithms in enumerate(rounds(base.size)):
                wrapped = hpccoll.Comm(base, algorithms)
                for k, (method, label, make) in enumerate(buffer_specs(wrapped)):
                    form = FORMS[(i + k) % len(FORMS)]
                    arguments = make()
                    run(wrapped, method, arguments, form)
                    want = make()
                    getattr(MPI.Intracomm, method)(wrapped, *want)
                    assert written(method, arguments) == written(method, want), \
                        f"{name} {method} {label} ({form}, algorithms {algorithms})"
    finally:
        split.Free()


def op_data(rank: int, n: int, dtype: str, op: str) -> np.ndarray:
    """Exact inputs for ``op``: small integers (±1, ±2 for PROD), with zeros for the logical
    ops, any bits for the bitwise ones."""
    rng = np.random.default_rng(100 * rank + n)
    if op in ("land", "lor", "lxor"):
        return rng.integers(-1, 2, size=n).astype(dtype)
    if op in ("band", "bor", "bxor"):
        return rng.integers(0, 256, size=n).astype(dtype)
    return data(rank, n, dtype, op)


OP_DTYPES = {"sum": ["float16", "float32", "int16", "complex128"],
             "prod": ["float64", "int8", "complex64"],
             "min": ["float32", "uint16"], "max": ["float64", "int64"],
             **dict.fromkeys(["land", "lor", "lxor", "band", "bor", "bxor"],
                             ["int32", "uint8", "bool"])}


def check_ops(comm):
    """hpccoll's ops (MPI's logical and bitwise ones included: 0/1 in the elements' type)
    through one algorithm of every family, and MAXLOC, MINLOC, a user-defined op and a
    derived datatype through MPI's own collective, logged as such."""
    import hpccoll
    from hpccoll.runtime import buffers
    from mpi4py import MPI
    from mpi4py.util import dtlib
    p, r = comm.size, comm.rank
    counts = [(2 * i + 3) % 5 for i in range(p)]
    reducing = {c: families(c, p) for c in ("allreduce", "reduce_scatter", "reduce")}
    k = 0
    for name, dtypes in OP_DTYPES.items():
        for dtype in dtypes:
            k += 1
            wrapped = hpccoll.Comm(comm, {c: f[k % len(f)] for c, f in reducing.items()})
            op = getattr(MPI, name.upper())
            # MPI has no bitwise ops on C_BOOL: the reference is their logical twin
            native = buffers.native_op(name, np.dtype(dtype))
            what = f"{name} {dtype} {wrapped.algorithms}"
            send = op_data(r, 9, dtype, name)
            got, want = fresh(9, dtype), fresh(9, dtype)
            wrapped.Allreduce(send, got, op)
            comm.Allreduce(send, want, native)
            assert np.array_equal(got, want), f"Allreduce {what}: {got} != {want}"
            if name in ("land", "lor", "lxor") and p > 1:
                assert set(got.astype(int).tolist()) <= {0, 1}, what
            send = op_data(r, sum(counts), dtype, name)
            got, want = fresh(counts[r], dtype), fresh(counts[r], dtype)
            wrapped.Reduce_scatter(send, got, counts, op)
            comm.Reduce_scatter(send, want, counts, native)
            assert np.array_equal(got, want), f"Reduce_scatter {what}"
            send = op_data(r, 9, dtype, name)
            got, want = send.copy(), send.copy()
            wrapped.Reduce(MPI.IN_PLACE if r == p - 1 else send, got, op, root=p - 1)
            comm.Reduce(MPI.IN_PLACE if r == p - 1 else send, want, native, root=p - 1)
            assert np.array_equal(got, want), f"Reduce {what}"
    wrapped = hpccoll.Comm(comm)
    pairs = np.zeros(5, dtlib.to_numpy_dtype(MPI.DOUBLE_INT))
    pairs["f0"] = data(r, 5, "float64") % 3
    pairs["f1"] = r
    values = np.array(comm.allgather(pairs["f0"]))
    with Records() as records:
        for op, choose in ((MPI.MAXLOC, np.max), (MPI.MINLOC, np.min)):
            got = np.zeros_like(pairs)
            wrapped.Allreduce([pairs, MPI.DOUBLE_INT], [got, MPI.DOUBLE_INT], op)
            best = choose(values, axis=0)
            assert np.array_equal(got["f0"], best)
            assert np.array_equal(got["f1"], (values == best).argmax(axis=0))   # lowest rank
        user = MPI.Op.Create(lambda a, b, t: np.maximum(
            np.frombuffer(a, "int32"), np.frombuffer(b, "int32"),
            out=np.frombuffer(b, "int32")), commute=True)
        try:
            got = fresh(6, "int32")
            wrapped.Allreduce(data(r, 6, "int32"), got, user)
            want = fresh(6, "int32")
            comm.Allreduce(data(r, 6, "int32"), want, MPI.MAX)
            assert np.array_equal(got, want)
        finally:
            user.Free()
        twice = MPI.INT.Create_contiguous(2).Commit()
        try:
            got = fresh(6 * p, "int32")
            wrapped.Allgather([data(r, 6, "int32"), 3, twice], [got, 3, twice])
            want = fresh(6 * p, "int32")
            comm.Allgather(data(r, 6, "int32"), want)
            assert np.array_equal(got, want)
        finally:
            twice.Free()
    assert records.messages == [
        "hpccoll.Comm.Allreduce: MPI's own collective (MPI_DOUBLE_INT has no NumPy element "
        "type hpccoll supports)"] * 2 + [
        "hpccoll.Comm.Allreduce: MPI's own collective (op (a user-defined MPI.Op) is not one "
        "hpccoll reduces with)",
        "hpccoll.Comm.Allgather: MPI's own collective (a derived datatype)"]


def bad_calls(wrapped):
    """(what, exception, message pattern, call) for input that is bad on every rank; the
    receive buffer ``out`` must stay untouched."""
    import hpccoll
    from mpi4py import MPI
    p = wrapped.size
    x, out = data(0, 4, "float64"), np.zeros(4 * p + 4)
    cases = [
        ("counts of the wrong length", ValueError, f"expecting {p} items, got {p + 1}",
         lambda: wrapped.Allgatherv(x, [out, [4] * (p + 1)])),
        ("negative counts", ValueError, "negative count -1",
         lambda: wrapped.Alltoallv([x, [-1] * p], [out, [1] * p])),
        ("five items", ValueError, "message: expecting 2 to 4 items",
         lambda: wrapped.Allreduce([x, 4, 0, MPI.DOUBLE, 1], out[:4])),
        ("not a buffer", TypeError, "message: expecting buffer or list/tuple",
         lambda: wrapped.Allreduce(5, out[:4])),
        ("count past the end", ValueError, "need 5 entries, the buffer has 4",
         lambda: wrapped.Allreduce([x, 5, MPI.DOUBLE], [out, 5, MPI.DOUBLE])),
        ("float count", TypeError, "'float' object cannot be interpreted as an integer",
         lambda: wrapped.Allreduce([x, 2.0, MPI.DOUBLE], [out, 2, MPI.DOUBLE])),
        ("displacement past the end", ValueError, "displacement 9 out of bounds",
         lambda: wrapped.Allreduce([x, (1, 9), MPI.DOUBLE], [out, 1, MPI.DOUBLE])),
        ("counts past the end", ValueError, "reach entry",
         lambda: wrapped.Alltoallv([x, [5] * p], [out, [5] * p])),
        ("buffer not a whole number of elements", ValueError, "cannot infer count",
         lambda: wrapped.Allreduce([bytearray(12), MPI.DOUBLE], [out, MPI.DOUBLE])),
        ("sizes differ", ValueError, "needs recvbuf 4 elements, got recvbuf 5",
         lambda: wrapped.Allreduce(x, out[:5])),
        ("datatypes differ", ValueError, "mismatch in send and receive MPI datatypes",
         lambda: wrapped.Allreduce([x, MPI.DOUBLE], [out, 8, MPI.FLOAT])),
        ("op not defined on the type", ValueError, "op land is not defined for floating-point",
         lambda: wrapped.Allreduce(x, out[:4], MPI.LAND)),
        ("root out of range", ValueError, f"root {p} is not a rank",
         lambda: wrapped.Bcast(out, root=p)),
        ("unknown keyword", TypeError, "Allreduce\\(\\) got an unexpected keyword argument",
         lambda: wrapped.Allreduce(x, out[:4], bogus=1)),
        ("missing argument", TypeError,
         "Iallgather\\(\\) missing 1 required positional argument: 'recvbuf'",
         lambda: wrapped.Iallgather(x)),
        ("freed communicator", TypeError, "comm is MPI.COMM_NULL",
         lambda: hpccoll.Comm(MPI.COMM_NULL).Allreduce(x, out[:4])),
    ]
    if p > 1:
        cases.append(("blocks of unequal size", ValueError,
                      "not a multiple of required number of blocks",
                      lambda: wrapped.Allgather(x, out[:4 * p - 1])))
    if p & (p - 1):
        cases.append(("constraint", ValueError, f"'xor' cannot serve alltoall on {p} ranks",
                      lambda: hpccoll.Comm(wrapped, {"alltoall": "xor"}).Alltoall(
                          np.zeros(p), np.zeros(p))))
    return out, cases


def check_bad_input(comm):
    """Bad input raises the same error on every rank before any message, the receive buffer
    untouched; bad ``algorithms`` and communicators when the wrapper is made."""
    import hpccoll
    wrapped = hpccoll.Comm(comm)
    out, cases = bad_calls(wrapped)
    for what, error, pattern, call in cases:
        out[:] = np.arange(out.size)
        with pytest.raises(error, match=pattern) as raised:
            call()
        assert raised.type is error, what
        assert np.array_equal(out, np.arange(out.size)), f"{what}: the receive buffer changed"
    for algorithms, error, pattern in (
            ({"allreduce": "bogus"}, ValueError, "unknown algorithm 'bogus' for allreduce; "
                                                 "known: .*ring"),
            ({"allreduse": "ring"}, ValueError, "unknown collective 'allreduse'; known:"),
            (["ring"], TypeError, "algorithms must be a mapping"),
            ({"bcast": 3}, TypeError, r"algorithms\['bcast'\] must be an algorithm name")):
        with pytest.raises(error, match=pattern):
            hpccoll.Comm(comm, algorithms)
    with pytest.raises(TypeError, match="comm must be an mpi4py communicator, got int"):
        hpccoll.Comm(5)


def check_communicator(comm):
    """An mpi4py communicator: its own methods, mpi4py's and hpccoll's functions take it;
    what it makes is mpi4py's own; Free frees; an inter-communicator's calls are MPI's."""
    import hpccoll
    from hpccoll.comm import InterComm
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    wrapped = hpccoll.Comm(comm, {"allreduce": "ring", "bcast": "chain"})
    assert isinstance(wrapped, MPI.Intracomm) and wrapped == comm
    assert MPI.Comm.Compare(wrapped, comm) == MPI.IDENT
    assert wrapped.algorithms == {"allreduce": "ring", "bcast": "chain"}
    assert wrapped.allreduce(r) == p * (p - 1) // 2 and wrapped.bcast(r, root=p - 1) == p - 1
    total = np.zeros(3)
    for algorithm in ("native", "ring"):
        hpccoll.allreduce(wrapped, np.full(3, 1.0), total, algorithm=algorithm)
        assert total.tolist() == [p] * 3
    MPI.Intracomm.Allreduce(wrapped, np.full(3, 2.0), total)
    assert total.tolist() == [2 * p] * 3
    # communicators made from it are mpi4py's own; Free frees, dropping a wrapper does not
    duplicate, request = wrapped.Idup()
    request.Wait()
    for made in (wrapped.Dup(), wrapped.Clone(), wrapped.Split(0, r), duplicate):
        assert type(made) is MPI.Intracomm and MPI.Comm.Compare(made, comm) == MPI.CONGRUENT
        made.Free()
    sub = comm.Dup()
    hpccoll.Comm(sub).Allreduce(np.full(3, 1.0), total)
    gc.collect()
    sub.Allreduce(np.full(3, 1.0), total)
    owned = hpccoll.Comm(sub)
    owned.Free()
    assert owned == MPI.COMM_NULL
    with Records() as records:
        wrapped.Alltoall(MPI.IN_PLACE, np.zeros(p))
    assert records.messages == ["hpccoll.Comm.Alltoall: MPI's own collective (MPI.IN_PLACE "
                                "alltoall (hpccoll's alltoall has no in-place form))"]
    if p > 1:
        # an inter-communicator: every collective is MPI's own, logged as such
        local = comm.Split(r % 2, r)
        inter = local.Create_intercomm(0, comm, 1 - r % 2, 11)
        wrapped_inter = hpccoll.Comm(inter)
        assert isinstance(wrapped_inter, InterComm) and isinstance(wrapped_inter, MPI.Intercomm)
        got, want = np.zeros(2), np.zeros(2)
        with Records() as records:
            wrapped_inter.Allreduce(np.full(2, r + 1.0), got)
        inter.Allreduce(np.full(2, r + 1.0), want)
        assert np.array_equal(got, want) and records.messages == [
            "hpccoll.Comm.Allreduce: MPI's own collective (an inter-communicator)"]
        inter.Free()
        local.Free()
    # and it is healthy after all of it
    wrapped.Allreduce(np.full(3, float(r)), total)
    assert total.tolist() == [p * (p - 1) / 2] * 3
