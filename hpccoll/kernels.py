"""Numba kernels for the executor: elementwise reductions and packing of block lists.

Numba is imported on first use (not at ``import hpccoll``) and its compiled kernels are cached
on disk.  Reductions have one kernel per operation, specialised by Numba per dtype; float16
has no Numba arithmetic on the CPU, so it falls back to NumPy's ufuncs.  Packing works on
unsigned words of the element size (:func:`as_words`), so four compiled kernels serve every
dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Reduction:
    """How the executor reduces with one op on one dtype: ``pair(dst, a, b)``, and ``rows(dst,
    flat, stride, p)`` over p equally spaced sources in one pass where a kernel exists (see
    :func:`row_kernels`; None for float16 and device arrays)."""

    pair: Reducer
    rows: Callable | None = None


def reduction(op: str, dtype: np.dtype) -> Reduction:
    """The host :class:`Reduction` of ``op`` on ``dtype``."""
    rows = None if np.dtype(dtype) == np.float16 else row_kernels()[op]
    return Reduction(reducer(op, dtype), rows)


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


@lru_cache(maxsize=None)
def row_kernels() -> dict[str, Callable]:
    """The kernels behind :func:`reduce_rows`, for callers that reduce the same memory many
    times and build ``flat`` once: ``f(dst, flat, stride, p)`` sets ``dst`` (C-contiguous)
    to row 0 op ... op row p-1, row i being ``flat[i*stride : i*stride + dst.size]`` of a
    C-contiguous 1-D ``flat``; one pass over the sources, 16 KiB of ``dst`` at a time so the
    accumulator stays in L1 and the inner loops vectorise.  Not for float16."""
    from numba import njit

    jit = njit(cache=True, nogil=True)

    @jit
    def rows_sum(dst, flat, stride, p):
        chunk = max(256, 16384 // dst.itemsize)
        for j0 in range(0, dst.size, chunk):
            m = min(chunk, dst.size - j0)
            d, a = dst[j0:j0 + m], flat[j0:j0 + m]
            for j in range(m):
                d[j] = a[j]
            for i in range(1, p):
                s = flat[i * stride + j0:i * stride + j0 + m]
                for j in range(m):
                    d[j] = d[j] + s[j]

    @jit
    def rows_prod(dst, flat, stride, p):
        chunk = max(256, 16384 // dst.itemsize)
        for j0 in range(0, dst.size, chunk):
            m = min(chunk, dst.size - j0)
            d, a = dst[j0:j0 + m], flat[j0:j0 + m]
            for j in range(m):
                d[j] = a[j]
            for i in range(1, p):
                s = flat[i * stride + j0:i * stride + j0 + m]
                for j in range(m):
                    d[j] = d[j] * s[j]

    @jit
    def rows_min(dst, flat, stride, p):
        chunk = max(256, 16384 // dst.itemsize)
        for j0 in range(0, dst.size, chunk):
            m = min(chunk, dst.size - j0)
            d, a = dst[j0:j0 + m], flat[j0:j0 + m]
            for j in range(m):
                d[j] = a[j]
            for i in range(1, p):
                s = flat[i * stride + j0:i * stride + j0 + m]
                for j in range(m):
                    d[j] = min(d[j], s[j])

    @jit
    def rows_max(dst, flat, stride, p):
        chunk = max(256, 16384 // dst.itemsize)
        for j0 in range(0, dst.size, chunk):
            m = min(chunk, dst.size - j0)
            d, a = dst[j0:j0 + m], flat[j0:j0 + m]
            for j in range(m):
                d[j] = a[j]
            for i in range(1, p):
                s = flat[i * stride + j0:i * stride + j0 + m]
                for j in range(m):
                    d[j] = max(d[j], s[j])

    return {"sum": rows_sum, "prod": rows_prod, "min": rows_min, "max": rows_max}


def reduce_rows(op: str, dst: np.ndarray, rows: np.ndarray) -> None:
    """``dst[:] = rows[0] op rows[1] op ... op rows[-1]`` for a 2-D ``rows`` (p, n), such as a
    strided view of p slots of a shared segment: one pass over the p sources (not p - 1
    separate additions), L1-sized chunks of ``dst`` accumulated by a Numba kernel.  ``dst``
    (1-D, n elements, C-contiguous) may be ``rows[0]`` but must not overlap the other rows.
    float16, rows that are not contiguous along n, and a strided ``dst`` use NumPy's
    ``ufunc.reduce``.  Cost: p*n reads + n writes; a few us of Python set-up when ``rows``
    is a strided view (``as_strided``)."""
    p, n = rows.shape
    if p == 0:
        raise ValueError("reduce_rows needs at least one row")
    if dst.shape != (n,):
        raise ValueError(f"dst has shape {dst.shape}, rows need ({n},)")
    if n == 0:
        return
    item = rows.itemsize
    if rows.dtype == np.float16 or dst.dtype != rows.dtype or not dst.flags.c_contiguous \
            or rows.strides[1] != item or rows.strides[0] < 0 or rows.strides[0] % item:
        if p == 1:
            dst[...] = rows[0]
        else:
            UFUNCS[op].reduce(rows, axis=0, out=dst)
        return
    stride = rows.strides[0] // item
    if rows.flags.c_contiguous:
        flat = rows.reshape(-1)
    else:
        flat = np.lib.stride_tricks.as_strided(rows, shape=((p - 1) * stride + n,),
                                               strides=(item,))
    row_kernels()[op](dst, flat, stride, p)
