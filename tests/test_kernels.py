"""The executor's Numba kernels agree with NumPy for every dtype and op."""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll import buffers, kernels


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


@pytest.mark.parametrize("dtype", ["float16", "float32", "int64", "complex128", "uint8"])
def test_gather_and_scatter_move_whole_elements(dtype):
    rng = np.random.default_rng(1)
    src = rng.integers(0, 100, 50).astype(dtype)
    starts = np.array([40, 3, 17, 0, 49], np.int64)
    counts = np.array([5, 2, 0, 3, 1], np.int64)
    want = np.concatenate([src[s:s + c] for s, c in zip(starts, counts)])
    scale = kernels.word_scale(src.dtype.itemsize)
    packed = np.empty(len(want), dtype)
    kernels.gather(kernels.as_words(packed), kernels.as_words(src), starts * scale, counts * scale)
    assert np.array_equal(packed, want)
    back = np.zeros_like(src)
    kernels.scatter(kernels.as_words(packed), kernels.as_words(back), starts * scale,
                    counts * scale)
    for s, c in zip(starts, counts):
        assert np.array_equal(back[s:s + c], src[s:s + c])
