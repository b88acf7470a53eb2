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
    for op in kernels.OPS:
        if np.dtype(dtype).kind == "c" and op in ("min", "max"):
            continue
        want = kernels.UFUNCS[op](a, b)
        got = np.empty_like(a)
        kernels.reducer(op, a.dtype)(got, a, b)
        assert np.array_equal(got, want), op
        acc = a.copy()
        kernels.reducer(op, a.dtype)(acc, acc, b)       # accumulating in place
        assert np.array_equal(acc, want), op


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
