"""The executor's Numba kernels agree with NumPy for every dtype and op."""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll.runtime import buffers, kernels


@pytest.mark.parametrize("dtype", [d.name for d in buffers.SUPPORTED_DTYPES])
def test_reductions_match_numpy(dtype):
    rng = np.random.default_rng(0)
    a = rng.integers(-5, 6, 37).astype(dtype)
    b = rng.integers(-5, 6, 37).astype(dtype)
    ran = []
    for op in kernels.OPS:
        if not kernels.applies(op, dtype):
            continue
        want = kernels.UFUNCS[op](a, b).astype(dtype)    # logical ufuncs: true/false as 1/0
        got = np.empty_like(a)
        kernels.reducer(op, a.dtype)(got, a, b)
        assert np.array_equal(got, want), op
        acc = a.copy()
        kernels.reducer(op, a.dtype)(acc, acc, b)       # accumulating in place
        assert np.array_equal(acc, want), op
        ran.append(op)
    kind = np.dtype(dtype).kind
    assert len(ran) == {"c": 2, "f": 4, "b": 6}.get(kind, 10), ran


# x, y and x op y for the logical and bitwise ops, written out: MPI's logical ops give 1 or 0
# in the elements' type, its bitwise ops work on the two's complement bits
LOGICAL_AND_BITWISE = {
    "land": ([5, 0, -3, 0, 1], [2, 0, 0, 7, -1], [1, 0, 0, 0, 1]),
    "lor": ([5, 0, -3, 0, 1], [2, 0, 0, 7, -1], [1, 0, 1, 1, 1]),
    "lxor": ([5, 0, -3, 0, 1], [2, 0, 0, 7, -1], [0, 0, 1, 1, 0]),
    "band": ([12, 0, -1, 6, 5], [10, 7, 9, 3, -2], [8, 0, 9, 2, 4]),
    "bor": ([12, 0, -1, 6, 5], [10, 7, 9, 3, -2], [14, 7, -1, 7, -1]),
    "bxor": ([12, 0, -1, 6, 5], [10, 7, 9, 3, -2], [6, 7, -10, 5, -5]),
}


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_logical_and_bitwise_values(dtype):
    for op, (x, y, want) in LOGICAL_AND_BITWISE.items():
        a, b = np.array(x, dtype), np.array(y, dtype)
        got = np.full(5, 99, dtype)
        kernels.reducer(op, a.dtype)(got, a, b)
        assert got.tolist() == want, op
        # the one-pass kernel over three rows: (x op y) op x, and p = 1 copies its row
        rows = np.stack([a, b, a])
        kernels.reduce_rows(op, got, rows)
        assert np.array_equal(got, kernels.UFUNCS[op].reduce(rows, axis=0).astype(dtype)), op
        kernels.reduce_rows(op, got, rows[:1])
        assert got.tolist() == x, op


def test_booleans_reduce_logically_and_bitwise():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    want = {"land": [1, 0, 0, 0], "lor": [1, 1, 1, 0], "lxor": [0, 1, 1, 0]}
    for op in ("land", "lor", "lxor", "band", "bor", "bxor"):
        expected = np.array(want[buffers.BOOLEAN_TWINS.get(op, op)], bool)
        got = np.empty(4, bool)
        kernels.reducer(op, np.dtype(bool))(got, a, b)
        assert np.array_equal(got, expected), op
        rows = np.stack([a, np.zeros(4, bool), b])[::2]        # rows 0 and 2: a, b
        kernels.reduce_rows(op, got, rows)                      # the Numba kernel
        assert np.array_equal(got, expected), op
        strided = np.zeros(8, bool)[::2]
        kernels.reduce_rows(op, strided, rows)                  # NumPy's ufunc.reduce
        assert np.array_equal(strided, expected), op


def test_ops_are_named_and_checked_as_mpi_defines_them():
    from mpi4py import MPI
    for op in kernels.OPS:
        assert buffers.op_name(getattr(MPI, op.upper())) == op
        assert buffers.op_name(op.upper()) == op
    assert buffers.op_name(MPI.MAXLOC) is None and buffers.op_name("maxloc") is None
    assert buffers.check_op(MPI.BXOR, np.dtype("uint16")) == "bxor"
    assert buffers.check_op(MPI.LAND, np.dtype(bool)) == "land"
    for op, dtype, kind in (("land", "float64", "floating-point"), ("band", "complex64", "complex"),
                            ("sum", "bool", "boolean"), ("max", "complex128", "complex")):
        with pytest.raises(ValueError, match=f"op {op} is not defined for {kind} dtype {dtype}"):
            buffers.check_op(op, np.dtype(dtype))
    with pytest.raises(ValueError, match=r"unsupported reduction op MPI\.MINLOC; use one of "
                                         r"MPI\.SUM, .*MPI\.BXOR"):
        buffers.check_op(MPI.MINLOC, np.dtype("int32"))
    # MPI has no bitwise ops on C_BOOL: the native collective gets their logical twins
    assert buffers.native_op("bxor", np.dtype(bool)) == MPI.LXOR
    assert buffers.native_op("bxor", np.dtype("int8")) == MPI.BXOR


def move_and_check(src: np.ndarray, starts, counts) -> tuple:
    """Packs the blocks of ``src`` with kernels.block_mover, checks the packed values, spreads
    them back into a zeroed copy and checks every block; returns the gather's arguments."""
    starts, counts = np.array(starts, np.int64), np.array(counts, np.int64)
    want = np.concatenate([src[s:s + c] for s, c in zip(starts, counts)])
    packed = np.zeros(len(want), src.dtype)
    move, arguments = kernels.block_mover(packed, src, starts, counts, gather=True)
    move(*arguments)
    assert np.array_equal(packed, want)
    back = np.zeros_like(src)
    move_back, back_arguments = kernels.block_mover(packed, back, starts, counts, gather=False)
    move_back(*back_arguments)
    covered = np.zeros(len(src), bool)
    for s, c in zip(starts, counts):
        covered[s:s + c] = True
    assert np.array_equal(back[covered], src[covered]) and not back[~covered].any()
    return arguments


@pytest.mark.parametrize("dtype", ["float16", "float32", "int64", "complex128", "uint8"])
def test_block_mover_moves_whole_elements(dtype):
    rng = np.random.default_rng(1)
    src = rng.integers(1, 100, 60).astype(dtype)
    move_and_check(src, [40, 3, 17, 0, 49], [5, 2, 0, 3, 1])        # sizes differ
    move_and_check(src, [40, 4, 12, 0, 52], [4, 4, 4, 4, 4])        # one size
    move_and_check(src, [5, 1, 9], [1, 1, 1])
    move_and_check(src, [2, 30], [2, 2])


def test_block_mover_uses_the_widest_word_that_fits():
    src = np.arange(64, dtype=np.float32) + 1
    assert move_and_check(src, [0, 8, 4], [2, 2, 2])[0].dtype == np.uint64
    assert move_and_check(src, [0, 8, 5], [2, 2, 2])[0].dtype == np.uint32   # odd offset
    assert move_and_check(src, [0, 8, 4], [2, 3, 2])[0].dtype == np.uint32   # odd size
    assert move_and_check(src[1:], [0, 8, 4], [2, 2, 2])[0].dtype == np.uint32  # address
    small = (np.arange(64) % 250 + 1).astype(np.int8)
    assert move_and_check(small, [0, 8, 16], [8, 8, 8])[0].dtype == np.uint64
    assert move_and_check(small, [0, 3, 16], [8, 8, 8])[0].dtype == np.uint8


def test_block_mover_reads_read_only_sources_and_copies_large_blocks_by_slices():
    src = np.arange(40000, dtype=np.float64) + 1
    src.flags.writeable = False
    move_and_check(src, [6, 2, 30], [2, 2, 4])
    move, _ = kernels.block_mover(np.empty(16384, src.dtype), src, np.array([0, 20000]),
                                  np.array([8192, 8192]), gather=True)
    assert move is kernels.move_slices                # 64 KiB blocks: one memcpy each
    move_and_check(src, [0, 20000], [8192, 8192])
