"""Numba kernels of the runtime: elementwise reductions, one-pass reductions of equally spaced
rows (the executor's strided reductions and the shared allreduce), and packing of block lists.

Numba is imported on first use (not at ``import hpccoll``) and its compiled kernels are cached
on disk.  The reduction ops are MPI's predefined arithmetic, logical and bitwise ones; each is
defined once, as its scalar combination (:data:`SCALARS`) and the NumPy ufunc computing it
(:data:`UFUNCS`), and both kernel families (pairwise and rows) are written once and generated
per op (:func:`_pairwise`, :func:`_rows`), Numba specialising them per dtype.  float16 has no
Numba arithmetic on the CPU, so it falls back to NumPy's ufuncs.  Packing moves unsigned words
as wide as the blocks' sizes, offsets and addresses allow (up to 8 bytes, chosen once per plan
by :func:`block_mover`), so its two kernels serve every dtype.
"""

from __future__ import annotations

import math
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator

import numpy as np

# op -> x op y on two scalars, as the kernels compute it: the logical ops give 0/1 (true/false)
# in the elements' dtype, as MPI's LAND, LOR and LXOR do
SCALARS: dict[str, Callable[[Any, Any], Any]] = {
    "sum": lambda x, y: x + y,
    "prod": lambda x, y: x * y,
    "min": lambda x, y: min(x, y),
    "max": lambda x, y: max(x, y),
    "land": lambda x, y: (x != 0) & (y != 0),
    "lor": lambda x, y: (x != 0) | (y != 0),
    "lxor": lambda x, y: (x != 0) ^ (y != 0),
    "band": lambda x, y: x & y,
    "bor": lambda x, y: x | y,
    "bxor": lambda x, y: x ^ y,
}
OPS = tuple(SCALARS)
# the NumPy ufunc of each op (host fallbacks, CuPy by the same name, MPI user-defined ops); a
# logical ufunc writes its true/false into an ``out`` of the elements' dtype as 1/0
UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
          "land": np.logical_and, "lor": np.logical_or, "lxor": np.logical_xor,
          "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}
# the element kinds (NumPy's dtype.kind) each op is defined on, as MPI defines them: SUM and PROD
# on numbers, MIN and MAX not on complex ones, the logical and bitwise ops on integers (and on
# booleans: MPI has LAND, LOR and LXOR for C_BOOL; the bitwise ops equal them there)
OP_KINDS = {"sum": "iufc", "prod": "iufc", "min": "iuf", "max": "iuf",
         **dict.fromkeys(("land", "lor", "lxor", "band", "bor", "bxor"), "iub")}
KIND_NAMES = {"i": "integer", "u": "unsigned integer", "f": "floating-point", "c": "complex",
              "b": "boolean"}


def applies(op: str, dtype: np.dtype) -> bool:
    """Whether reduction ``op`` is defined on elements of ``dtype``."""
    return np.dtype(dtype).kind in OP_KINDS[op]


Reducer = Callable[[np.ndarray, np.ndarray, np.ndarray], None]


def combine(op: str, x: Any, y: Any) -> Any:
    """``x op y`` inside the kernels, host and device, ``op`` a name Numba knows when it
    compiles the caller (a constant of the caller's closure); :func:`register_combine` gives
    a Numba target its implementation."""
    return SCALARS[op](x, y)


def register_combine(overload: Callable, compile_scalar: Callable) -> None:
    """Make :func:`combine` known to one Numba target: ``overload`` is the target's
    ``@overload``, ``compile_scalar(f)`` a scalar function compiled for it.  The op is a
    string literal there, so each kernel compiles to its op's expression alone."""
    compiled: dict[str, Callable] = {}

    @overload(combine, prefer_literal=True)
    def _typed_combine(op, x, y):
        name = getattr(op, "literal_value", None)
        if name not in SCALARS:
            return None
        if name not in compiled:
            compiled[name] = compile_scalar(SCALARS[name])
        scalar = compiled[name]
        return lambda op, x, y: scalar(x, y)


@lru_cache(maxsize=None)
def _jit() -> Callable:
    """The decorator of the kernels (``njit``, cached on disk, without the GIL), after making
    :func:`combine` known to Numba's CPU target.  A constant (not a jitted function) in the
    generated kernels' closures keeps the disk cache valid across runs: the cache's key
    includes the closure's contents."""
    from numba import njit
    from numba.extending import overload

    register_combine(overload, njit(inline="always"))

    @overload(reduce_pair, prefer_literal=True)
    def _typed_reduce_pair(op, dst, a, b):
        return reduce_pair

    @overload(reduce_strided, prefer_literal=True)
    def _typed_reduce_strided(op, dst, flat, stride, p):
        return reduce_strided

    return njit(cache=True, nogil=True)


_compiling = threading.RLock()
_compiling_depth = 0        # (how deep this process is in compiling(): only the outermost locks)


@contextmanager
def compiling() -> Iterator[None]:
    """Hold the lock of Numba's disk cache (a file in it) while compiling into it: of the
    processes on a node that need the same code at the same time -- the ranks of a launch on
    a cache without it -- the first to take the lock compiles it and saves it, and the
    others, waiting meanwhile, load it.  Numba neither locks its cache nor sees a compilation
    in progress elsewhere, so each rank would compile it, on a core of its own (64 ranks of a
    node: 64 times).  Reentrant within a process; where the lock file cannot be made or
    locked (a read-only cache, a file system without locks), compiling is unlocked."""
    global _compiling_depth
    with _compiling:
        held = _cache_lock() if _compiling_depth == 0 else -1
        _compiling_depth += 1
        try:
            yield
        finally:
            _compiling_depth -= 1
            if held >= 0:
                os.close(held)          # (releases the lock)


def _cache_lock() -> int:
    """The descriptor of the cache's lock file, locked (``flock``, exclusive: released when
    closed); -1 where it cannot be.  The cache is Numba's NUMBA_CACHE_DIR where set, else the
    ``__pycache__`` beside these sources (Numba's default)."""
    import fcntl
    from numba.core import config
    folder = config.CACHE_DIR or os.path.join(os.path.dirname(__file__), "__pycache__")
    try:
        os.makedirs(folder, exist_ok=True)
        held = os.open(os.path.join(folder, "hpccoll-compiling.lock"), os.O_RDWR | os.O_CREAT,
                       0o666)
    except OSError:
        return -1
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
    except OSError:
        os.close(held)
        return -1
    return held


def reduce_pair(op, dst, a, b):
    """``dst[i] = a[i] op b[i]``: the body of the pairwise kernels, callable from compiled
    code with ``op`` a constant there (:func:`_jit` registers it; Numba wants the typing's
    signature unannotated)."""
    for i in range(dst.size):
        dst[i] = combine(op, a[i], b[i])


def reduce_strided(op, dst, flat, stride, p):
    """The body of the row kernels (:func:`row_kernels`), callable as :func:`reduce_pair`."""
    chunk = max(256, 16384 // dst.itemsize)
    for j0 in range(0, dst.size, chunk):
        m = min(chunk, dst.size - j0)
        d, a = dst[j0:j0 + m], flat[j0:j0 + m]
        for j in range(m):
            d[j] = a[j]
        for i in range(1, p):
            s = flat[i * stride + j0:i * stride + j0 + m]
            for j in range(m):
                d[j] = combine(op, d[j], s[j])


def _pairwise(op: str) -> Reducer:
    """The kernel ``f(dst, a, b)``: ``dst[i] = a[i] op b[i]``."""

    @_jit()
    def pairwise(dst, a, b):
        reduce_pair(op, dst, a, b)
    return pairwise


def _rows(op: str) -> Callable:
    """The kernel ``f(dst, flat, stride, p)`` of :func:`row_kernels` for ``op``."""

    @_jit()
    def rows(dst, flat, stride, p):
        reduce_strided(op, dst, flat, stride, p)
    return rows


@lru_cache(maxsize=None)
def _numba_kernels() -> dict[str, Callable]:
    """The pairwise reduction kernel of every op, and the two packing kernels."""
    jit = _jit()

    @jit
    def move_blocks(dst, src, starts, width, gather):
        # Blocks of `width` words between their places starts[k] in a buffer and one packed
        # run: gather packs (dst is the packed run), otherwise they are spread back.  The one-
        # and two-word cases are written out: a loop of unknown length costs more than the
        # copy of such a block.
        for k in range(starts.size):
            if gather:
                d, s = k * width, starts[k]
            else:
                d, s = starts[k], k * width
            if width == 1:
                dst[d] = src[s]
            elif width == 2:
                dst[d] = src[s]
                dst[d + 1] = src[s + 1]
            else:
                for j in range(width):
                    dst[d + j] = src[s + j]

    @jit
    def move_runs(dst, src, starts, counts, gather):
        # The same for blocks of different sizes.
        at = 0
        for k in range(starts.size):
            if gather:
                d, s = at, starts[k]
            else:
                d, s = starts[k], at
            for j in range(counts[k]):
                dst[d + j] = src[s + j]
            at += counts[k]

    return {**{op: _pairwise(op) for op in OPS}, "move_blocks": move_blocks,
            "move_runs": move_runs}


def computes(dtype: np.dtype) -> bool:
    """Whether compiled code (the kernels here, the compiled executors) computes with
    ``dtype``: not NumPy's float16, which Numba lacks on the CPU (NumPy's ufuncs reduce it)."""
    return np.dtype(dtype) != np.float16


COMPUTABLE = "iufc"     # element kinds compiled copies and reductions take (booleans: reducing)


def work_refusal(dtype: np.dtype, reduces: bool, window: bool = False) -> str | None:
    """Why compiled code does not run the local work of a schedule (copies, packing,
    reductions) on ``dtype`` that ``reduces`` or not, through a node's shared ``window`` or
    not: a shared window (its node synchronisation is Python's), a dtype it does not
    compute with (:func:`computes`), element kinds other than integers, floats and complex
    (booleans only when reducing); None: it does.  (What the compiled scheduled executor
    needs of a call before the MPI library, which ``hpccoll explain`` reports even where no
    library is loaded.)"""
    if window:
        return "shared-window algorithms synchronise the node in Python"
    dtype = np.dtype(dtype)
    if not computes(dtype) or dtype.kind not in COMPUTABLE and not (dtype.kind == "b" and
                                                                     reduces):
        return f"the compiled executor takes no {dtype}"
    return None


def reducer(op: str, dtype: np.dtype) -> Reducer:
    """``f(dst, a, b)``: ``dst[:] = a op b`` elementwise; ``dst`` may be ``a`` or ``b``."""
    if not computes(dtype):
        ufunc = UFUNCS[op]
        return lambda dst, a, b: ufunc(a, b, out=dst)
    return _numba_kernels()[op]


@dataclass(frozen=True)
class Reduction:
    """How the executor reduces with one op on one dtype: ``pair(dst, a, b)``, and ``rows(dst,
    flat, stride, p)`` over p equally spaced sources in one pass where a kernel exists (see
    :func:`row_kernels`; None for float16 and device arrays), and ``op`` for compiled code
    (None where it has no kernel: float16, device arrays)."""

    pair: Reducer
    rows: Callable | None = None
    op: str | None = None       # the op's name where compiled code can reduce with it


def reduction(op: str, dtype: np.dtype) -> Reduction:
    """The host :class:`Reduction` of ``op`` on ``dtype``."""
    if not computes(dtype):
        return Reduction(reducer(op, dtype))
    return Reduction(reducer(op, dtype), row_kernels()[op], op)


# Mean bytes per block from which one slice copy (memcpy) per block beats the word loop, by the
# loop's word size (perf/results/kernels.md: the loop moves 1- and 2-byte words one at a time).
SLICES_FROM = {1: 1024, 2: 2048, 4: 16384, 8: 65536}


def block_mover(packed: Any, buffer: Any, starts: np.ndarray, counts: np.ndarray,
                gather: bool) -> tuple[Callable, tuple]:
    """``(function, arguments)`` that concatenates the blocks ``buffer[starts[k]:][:counts[k]]``
    into ``packed`` (``gather``) or spreads ``packed`` back over them, for 1-D arrays of one
    dtype with offsets and counts in its elements; chosen once, when a plan is bound to its
    buffers.  Host blocks move as unsigned words of the widest size (up to 8 bytes) that
    divides every block's offset and size and both arrays' addresses, by one Numba loop
    (:func:`_numba_kernels`: ``move_blocks`` for blocks of one size, ``move_runs`` otherwise);
    large blocks (``SLICES_FROM``) and device arrays as one slice copy each."""
    starts, counts = np.asarray(starts, np.int64), np.asarray(counts, np.int64)
    slices = move_slices, (packed, buffer, list(zip(starts.tolist(), counts.tolist())), gather)
    if not isinstance(packed, np.ndarray):
        return slices
    itemsize = packed.itemsize
    word = math.gcd(8, packed.ctypes.data, buffer.ctypes.data,
                    int(np.gcd.reduce(np.concatenate([starts, counts]))) * itemsize)
    if packed.nbytes >= SLICES_FROM[word] * len(counts):
        return slices
    starts_w = starts * itemsize // word
    counts_w = counts * itemsize // word
    words = np.dtype(f"u{word}")
    limit = int((starts + counts).max(initial=0))
    packed_w, buffer_w = packed.view(words), buffer[:limit].view(words)
    dst, src = (packed_w, buffer_w) if gather else (buffer_w, packed_w)
    kernel = _numba_kernels()
    if (counts_w == counts_w[:1]).all():
        width = int(counts_w[0]) if counts_w.size else 0
        return kernel["move_blocks"], (dst, src, starts_w, width, gather)
    return kernel["move_runs"], (dst, src, starts_w, counts_w, gather)


def move_slices(packed: Any, buffer: Any, blocks: list[tuple[int, int]], gather: bool) -> None:
    """One slice copy per ``(start, count)`` block between ``buffer`` and ``packed``."""
    at = 0
    for s, c in blocks:
        if gather:
            packed[at:at + c] = buffer[s:s + c]
        else:
            buffer[s:s + c] = packed[at:at + c]
        at += c


@lru_cache(maxsize=None)
def row_kernels() -> dict[str, Callable]:
    """The kernels behind :func:`reduce_rows`, for callers that reduce the same memory many
    times and build ``flat`` once: ``f(dst, flat, stride, p)`` sets ``dst`` (C-contiguous)
    to row 0 op ... op row p-1, row i being ``flat[i*stride : i*stride + dst.size]`` of a
    C-contiguous 1-D ``flat``; one pass over the sources, 16 KiB of ``dst`` at a time so the
    accumulator stays in L1 and the inner loops vectorise.  Not for float16."""
    return {op: _rows(op) for op in OPS}


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
    if not computes(rows.dtype) or dst.dtype != rows.dtype or not dst.flags.c_contiguous \
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
