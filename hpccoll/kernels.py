"""Numba kernels for the executor: elementwise reductions and packing of block lists.

Numba is imported on first use (not at ``import hpccoll``) and its compiled kernels are cached
on disk.  Reductions have one kernel per operation, specialised by Numba per dtype; float16
has no Numba arithmetic on the CPU, so it falls back to NumPy's ufuncs.  Packing works on
unsigned words of the element size (:func:`as_words`), so four compiled kernels serve every
dtype.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

OPS = ("sum", "prod", "min", "max")
UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}

Reducer = Callable[[np.ndarray, np.ndarray, np.ndarray], None]


@lru_cache(maxsize=None)
def _numba_kernels() -> dict[str, Callable]:
    from numba import njit

    jit = njit(cache=True, nogil=True)

    @jit
    def sum_kernel(dst, a, b):
        for i in range(dst.size):
            dst[i] = a[i] + b[i]

    @jit
    def prod_kernel(dst, a, b):
        for i in range(dst.size):
            dst[i] = a[i] * b[i]

    @jit
    def min_kernel(dst, a, b):
        for i in range(dst.size):
            dst[i] = min(a[i], b[i])

    @jit
    def max_kernel(dst, a, b):
        for i in range(dst.size):
            dst[i] = max(a[i], b[i])

    @jit
    def gather(out, src, starts, counts):
        at = 0
        for k in range(starts.size):
            s, c = starts[k], counts[k]
            for j in range(c):
                out[at + j] = src[s + j]
            at += c

    @jit
    def scatter(src, out, starts, counts):
        at = 0
        for k in range(starts.size):
            s, c = starts[k], counts[k]
            for j in range(c):
                out[s + j] = src[at + j]
            at += c

    return {"sum": sum_kernel, "prod": prod_kernel, "min": min_kernel, "max": max_kernel,
            "gather": gather, "scatter": scatter}


def reducer(op: str, dtype: np.dtype) -> Reducer:
    """``f(dst, a, b)``: ``dst[:] = a op b`` elementwise; ``dst`` may be ``a`` or ``b``."""
    if np.dtype(dtype) == np.float16:
        ufunc = UFUNCS[op]
        return lambda dst, a, b: ufunc(a, b, out=dst)
    return _numba_kernels()[op]


def reduce_numpy(op: str) -> Reducer:
    """The NumPy equivalent of :func:`reducer` (the baseline the kernels are measured against)."""
    ufunc = UFUNCS[op]
    return lambda dst, a, b: ufunc(a, b, out=dst)


WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.uint64}


def as_words(array: np.ndarray) -> np.ndarray:
    """``array`` viewed as unsigned integers of its item size (64-bit words for 16-byte
    items), so packing moves whole elements, not bytes, with one kernel per word size."""
    return array.view(WORDS[array.dtype.itemsize])


def word_scale(itemsize: int) -> int:
    """Words per element in :func:`as_words` views."""
    return 2 if itemsize == 16 else 1


def gather(out: np.ndarray, src: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> None:
    """Concatenate the blocks ``src[starts[k]:starts[k]+counts[k]]`` into ``out`` (1-D
    arrays of one dtype; offsets and counts in its elements)."""
    _numba_kernels()["gather"](out, src, starts, counts)


def scatter(src: np.ndarray, out: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> None:
    """Inverse of :func:`gather`: spread consecutive elements of ``src`` over ``out``'s blocks."""
    _numba_kernels()["scatter"](src, out, starts, counts)
