"""Broadcast and reduce, every registered algorithm and every root, against the native MPI
collective under real MPI: blocking, non-blocking and persistent forms, IN_PLACE at the
root, a reduce whose non-root ranks pass no receive buffer, and the argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from mpi_cases import check, data, mpi_op, ops_for, segmented

RANKS = [1, 2, 3, 4]   # 3: a root's tree with an odd, non-power-of-two size; 5 and 7 in
#                           test_mpi_new_algorithms.py (Bine's trees)
SIZES = [0, 7, 70000]
DTYPES = ["float32", "float64", "int16", "uint8", "complex128"]


def cases(p: int):
    """(root, dtype): every root with float64, every dtype with the last rank as root."""
    return [(root, "float64") for root in range(p - 1)] + [(p - 1, d) for d in DTYPES]


def algorithms_for(collective: str) -> list[str]:
    from hpccoll import registry
    return [a.name for a in registry.algorithms(collective)] + ["native"]


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_bcast_matches_native(mpi_ranks, comm):
    import hpccoll
    p, r = comm.size, comm.rank
    for name in algorithms_for("bcast"):
        for root, dtype in cases(p):
            for n in SIZES:
                want = data(root, n, dtype)
                got = want.copy() if r == root else np.zeros(n, dtype)
                hpccoll.bcast(comm, got, root=root, algorithm=name,
                              options=None if name == "native" else
                              segmented("bcast", name, 4096))
                check(got, want, f"{name} root {root} {dtype} n={n}")
        # non-blocking and persistent forms
        want = data(p - 1, 3000, "float64")
        got = want.copy() if r == p - 1 else np.zeros_like(want)
        hpccoll.ibcast(comm, got, root=p - 1, algorithm=name).wait()
        check(got, want, f"ibcast {name}")
        persistent = hpccoll.bcast_init(comm, got, root=p - 1, algorithm=name)
        for round_ in range(3):
            want = data(p - 1, 3000, "float64", salt=round_)
            got[:] = want if r == p - 1 else 0
            persistent.start()
            persistent.wait()
            check(got, want, f"bcast_init {name} round {round_}")
        persistent.free()


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_reduce_matches_native(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    for name in algorithms_for("reduce"):
        for root, dtype in cases(p):
            # the root shapes the tree, the op only the arithmetic: every op at one root
            for op in ops_for(dtype) if root == p - 1 else ["sum"]:
                for n in SIZES:
                    send = data(r, n, dtype, op)
                    want = np.zeros(n, dtype)
                    comm.Reduce(send, want, op=mpi_op(op), root=root)
                    got = np.full(n, 99, dtype)
                    hpccoll.reduce(comm, send, got if r == root else None, op=op, root=root,
                                   algorithm=name)
                    if r == root:
                        check(got, want, f"{name} root {root} {dtype} {op} n={n}")
            # IN_PLACE at the root; the other ranks pass a receive buffer, which stays as is
            send = data(r, 5000, "int64")
            want = np.zeros_like(send)
            comm.Reduce(send, want, root=root)
            mine = send.copy()
            hpccoll.reduce(comm, MPI.IN_PLACE if r == root else send, mine, root=root,
                           algorithm=name, options=segmented("reduce", name, 1024))
            check(mine, want if r == root else send, f"{name} IN_PLACE root {root}")
        send = data(r, 3000, "float32")
        want = np.zeros_like(send)
        comm.Reduce(send, want, root=0)
        got = np.zeros_like(send)
        hpccoll.ireduce(comm, send, got, root=0, algorithm=name).wait()
        if r == 0:
            check(got, want, f"ireduce {name}")
        persistent = hpccoll.reduce_init(comm, send, got, op=MPI.MAX, root=0, algorithm=name)
        comm.Reduce(send, want, op=MPI.MAX, root=0)
        for _ in range(3):
            got[:] = 0
            persistent.start()
            persistent.wait()
            if r == 0:
                check(got, want, f"reduce_init {name}")
        persistent.free()


@pytest.mark.mpi(ranks=[2, 3], timeout=120)
def test_rooted_argument_errors_on_every_rank(mpi_ranks, comm):
    import hpccoll
    from mpi4py import MPI
    p, r = comm.size, comm.rank
    buf = np.arange(1 << 20, dtype=np.float64)
    before = buf.copy()
    for root, error in ((p, ValueError), (-1, ValueError), (1.0, TypeError), ("0", TypeError)):
        with pytest.raises(error, match="root"):
            hpccoll.bcast(comm, buf, root=root)
        with pytest.raises(error, match="root"):
            hpccoll.reduce(comm, buf, np.empty_like(buf), root=root)
    with pytest.raises(ValueError, match="unknown algorithm"):
        hpccoll.bcast(comm, buf, algorithm="ring")
    with pytest.raises(TypeError, match="buf must be"):
        hpccoll.bcast(comm, MPI.IN_PLACE)
    with pytest.raises(ValueError, match="needs recvbuf"):
        hpccoll.reduce(comm, buf, np.empty(10), root=r)      # the root's recvbuf is too small
    with pytest.raises(TypeError, match="dtype"):
        hpccoll.reduce(comm, buf, np.empty(buf.size, np.float32), root=r)
    with pytest.raises(ValueError, match="IN_PLACE is the root's sendbuf only"):
        hpccoll.reduce(comm, MPI.IN_PLACE, buf, root=(r + 1) % p)
    with pytest.raises(TypeError, match="buf must be"):
        hpccoll.bcast(comm, [1, 2, 3])
    assert np.array_equal(buf, before)
    # the communicator is still usable: every rank raised before any message
    hpccoll.bcast(comm, buf, root=0, algorithm="binomial")
    assert np.array_equal(buf, before)
