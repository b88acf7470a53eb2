"""Numba kernels of the executor against their NumPy equivalents, in one process.

* regrouping: packing many small float32 blocks given by offset lists into one message (what
  the executor does for a multi-region send: bruck, hypercube, mesh, ring alltoall) -- what
  ``kernels.block_mover`` chooses for it (the Numba loop on the widest words that fit, or slice
  copies from ``kernels.SLICES_FROM``) against NumPy fancy indexing (``np.take`` with a
  precomputed index array) and against a Python loop of slice copies (``kernels.move_slices``);
* reduction: ``dst = a op b`` -- the Numba kernel against ``numpy.add(a, b, out=dst)``.

Usage: python perf/bench_kernels.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

from hpccoll.runtime import kernels


def timed(fn, repeat: int = 7, number: int | None = None) -> float:
    """Median seconds per call."""
    fn()
    if number is None:
        start, number = time.perf_counter(), 1
        while time.perf_counter() - start < 0.02:
            fn()
            number += 1
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def reduce_numpy(op: str):
    """The NumPy equivalent of ``kernels.reducer(op, dtype)``: ``f(dst, a, b)``."""
    ufunc = kernels.UFUNCS[op]
    return lambda dst, a, b: ufunc(a, b, out=dst)


def regroup_cases():
    """(blocks, bytes per block, counts): float32 blocks of one size, and of 1-16 elements
    (4-64 B, as alltoallv packs them), taken in random order from a buffer twice as large."""
    rng = np.random.default_rng(0)
    for blocks, block_bytes in [(64, 8), (256, 8), (1024, 8), (1024, 64), (4096, 16),
                                (1024, 1024), (256, 4096), (128, 16384), (64, 65536)]:
        yield blocks, str(block_bytes), np.full(blocks, block_bytes // 4, np.int64)
    for blocks in (256, 4096):
        yield blocks, "4-64", rng.integers(1, 17, blocks).astype(np.int64)


def regroup_timers(counts: np.ndarray):
    rng = np.random.default_rng(0)
    blocks, slot = len(counts), int(counts.max())
    src = rng.random(blocks * slot * 2, dtype=np.float32)
    starts = (rng.permutation(2 * blocks)[:blocks] * slot).astype(np.int64)
    out = np.empty(int(counts.sum()), np.float32)
    index = np.concatenate([np.arange(s, s + c) for s, c in zip(starts, counts)])
    move, arguments = kernels.block_mover(out, src, starts, counts, gather=True)

    def numba_gather():
        move(*arguments)

    def numpy_take():
        np.take(src, index, out=out)

    pairs = list(zip(starts.tolist(), counts.tolist()))

    def python_slices():
        kernels.move_slices(out, src, pairs, True)

    numba_gather()
    expected = out.copy()
    numpy_take()
    assert np.array_equal(out, expected)
    return numba_gather, numpy_take, python_slices


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print("# regrouping: pack blocks from an offset list into one buffer (time per pack, us)")
    print(f"# {'blocks':>7} {'bytes':>7} {'numba':>10} {'numpy take':>11} {'py slices':>10} "
          f"{'vs take':>8} {'vs slices':>9}")
    for blocks, size, counts in regroup_cases():
        t_numba, t_take, t_py = (timed(f) * 1e6 for f in regroup_timers(counts))
        rows.append({"kernel": "regroup", "blocks": blocks, "block_bytes": size,
                     "numba_us": t_numba, "numpy_take_us": t_take, "python_slices_us": t_py})
        print(f"  {blocks:>7} {size:>7} {t_numba:>10.2f} {t_take:>11.2f} {t_py:>10.2f} "
              f"{t_take / t_numba:>7.1f}x {t_py / t_numba:>8.1f}x")
    print("# reduction dst = a + b, float32 (time per call, us)")
    print(f"# {'elements':>9} {'numba':>10} {'numpy':>10} {'speedup':>8}")
    for n in [16, 1024, 65536, 1 << 20, 1 << 24]:
        a, b = np.ones(n, np.float32), np.full(n, 2, np.float32)
        dst = np.empty_like(a)
        numba_add, numpy_add = kernels.reducer("sum", a.dtype), reduce_numpy("sum")
        t_numba = timed(lambda: numba_add(dst, a, b)) * 1e6
        t_numpy = timed(lambda: numpy_add(dst, a, b)) * 1e6
        rows.append({"kernel": "reduce_sum_float32", "elements": n, "numba_us": t_numba,
                     "numpy_us": t_numpy})
        print(f"  {n:>9} {t_numba:>10.2f} {t_numpy:>10.2f} {t_numpy / t_numba:>7.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": {"python": platform.python_version(), "numpy": np.__version__,
                                "date": time.strftime("%Y-%m-%d %H:%M")}, "results": rows},
                      f, indent=1)


if __name__ == "__main__":
    main()
