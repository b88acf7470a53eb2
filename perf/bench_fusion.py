"""Bidirectional operator fusion (the SW-IntraCC paper, Tables 3 and 4) with NumPy on CPU.

Two patterns of a tensor-parallel transformer layer, each unfused (private arrays and an
ordinary hpccoll collective, ``native`` or ``ring``) and fused (the zero-copy
:mod:`hpccoll.shared` objects: the producer writes into the shared segment, the consumer
reads from it):

* AG: LayerNorm -> AllGather -> GEMM.  Each rank normalises its (s, h) rows; all p*s rows
  are gathered; a GEMM multiplies them by an (h, k) weight.  Unfused: LayerNorm into a
  private array, ``hpccoll.allgather`` into a private result, GEMM on it.  Fused: LayerNorm
  into ``SharedAllgather.local``, ``run()``, GEMM straight from ``.result``.
* RS: GEMM -> ReduceScatter -> Dropout.  Each rank computes a partial (m, h) product; the
  partials are summed and rank r keeps rows r*m/p..; dropout on them.  Unfused: GEMM into a
  private array, ``hpccoll.reduce_scatter``, dropout.  Fused: GEMM into
  ``SharedAllreduce.local``, ``run()`` (every rank reduces its chunk over all slots), dropout
  straight from rank r's rows of ``.result``.

Times: each iteration runs every variant in turn (so load from elsewhere on the host hits
them alike); each rank times its three stages, with an untimed barrier between the
producer and the collective (so the collective is not charged for a slower producer); the
iteration's time is the slowest rank's; the table gives the median over iterations of the
communication + hand-off stage (end of the producer to start of the consumer) and of the
whole pattern (producer + that + consumer).  Smaller sizes run more iterations (``--iters``
at the largest size, up to 8 times more below it).  Size = the collective's data: the
gathered result (AG), the reduced vector (RS), float32.  A data check (fused against
unfused) runs apart from the timed loop.  It ends with the one-pass multi-source reduction
kernel (``kernels.reduce_rows``) against NumPy.  BLAS runs one thread per rank (set before
NumPy is imported).

Usage: mpiexec -n P python perf/bench_fusion.py [--sizes 2M,8M,32M] [--iters 20]
       [--warmup 3] [--hidden 1024] [--json FILE] [--no-kernels]
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import hpccoll  # noqa: E402
from hpccoll.runtime import kernels  # noqa: E402
from hpccoll.shared import SharedAllgather, SharedAllreduce  # noqa: E402

PAPER_SAVING = {"AG": 59, "RS": 35}     # the SW-IntraCC paper's best savings of communication time, %
UNFUSED = ("native", "ring")
INNER = 64                             # GEMM dimension that is not the collective's
DROP = 0.1


def size_arg(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, out: np.ndarray) -> None:
    """out = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""
    np.subtract(x, x.mean(axis=1, keepdims=True), out=out)
    scale = 1.0 / np.sqrt(np.mean(out * out, axis=1, keepdims=True) + 1e-5)
    np.multiply(out, scale, out=out)
    np.multiply(out, gamma, out=out)
    np.add(out, beta, out=out)


def timed_rounds(comm: MPI.Comm, variants: dict, iters: int, warmup: int) -> dict:
    """{variant: (communication + hand-off us, whole us)}: the median over iterations of the
    slowest rank's time.  ``variants`` maps names to three callables (producer, collective,
    consumer); each iteration runs every variant in turn, so a change of the host's load
    hits them alike.  An untimed barrier after the producer aligns the ranks, so the
    collective is not charged for a slower producer; whole = the three stages."""
    times = np.zeros((len(variants), iters, 2))
    for i in range(warmup + iters):
        for v, (produce, communicate, consume) in enumerate(variants.values()):
            comm.Barrier()
            t0 = time.perf_counter()
            produce()
            produced = time.perf_counter() - t0
            comm.Barrier()
            t1 = time.perf_counter()
            communicate()
            t2 = time.perf_counter()
            consume()
            t3 = time.perf_counter()
            if i >= warmup:
                times[v, i - warmup] = (t2 - t1, produced + t3 - t1)
    slowest = np.zeros_like(times)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    return {name: (float(np.median(slowest[v, :, 0])) * 1e6,
                   float(np.median(slowest[v, :, 1])) * 1e6)
            for v, name in enumerate(variants)}


def measure(comm, variants: dict, outputs: dict, iters: int, warmup: int) -> list:
    """Rows (variant, comm us, whole us, #wrong): the timed rounds, then a data check apart
    from them (every variant once more; its output against the first variant's)."""
    timings = timed_rounds(comm, variants, iters, warmup)
    rows, reference = [], None
    for name, stages in variants.items():
        for stage in stages:
            stage()
        if reference is None:
            reference = outputs[name].copy()
        close = np.isclose(outputs[name], reference, rtol=1e-4, atol=1e-3)
        rows.append((name, *timings[name], int(np.count_nonzero(~close))))
    return rows


def allgather_pattern(comm, nbytes, hidden, iters, warmup):
    """Rows (variant, comm us, whole us, #wrong) for LayerNorm -> AllGather -> GEMM."""
    p, r = comm.size, comm.rank
    rows_per_rank = max(1, nbytes // (4 * hidden * p))
    rng = np.random.default_rng(r)
    x = rng.standard_normal((rows_per_rank, hidden), dtype=np.float32)
    gamma = rng.standard_normal(hidden, dtype=np.float32)
    beta = rng.standard_normal(hidden, dtype=np.float32)
    weight = np.random.default_rng(99).standard_normal((hidden, INNER), dtype=np.float32)
    variants, outputs = {}, {}
    for algorithm in UNFUSED:
        y = np.empty((rows_per_rank, hidden), np.float32)
        gathered = np.empty((p * rows_per_rank, hidden), np.float32)
        out = outputs[algorithm] = np.empty((p * rows_per_rank, INNER), np.float32)
        variants[algorithm] = (
            lambda y=y: layernorm(x, gamma, beta, y),
            lambda y=y, g=gathered, a=algorithm: hpccoll.allgather(comm, y, g, algorithm=a),
            lambda g=gathered, out=out: np.matmul(g, weight, out=out))
    with SharedAllgather(comm, (rows_per_rank, hidden), np.float32) as ag:
        out = outputs["fused"] = np.empty((p * rows_per_rank, INNER), np.float32)
        variants["fused"] = (lambda: layernorm(x, gamma, beta, ag.local), ag.run,
                             lambda: np.matmul(ag.result.reshape(-1, hidden), weight, out=out))
        return measure(comm, variants, outputs, iters, warmup)


def reduce_scatter_pattern(comm, nbytes, hidden, iters, warmup):
    """Rows (variant, comm us, whole us, #wrong) for GEMM -> ReduceScatter -> Dropout."""
    p, r = comm.size, comm.rank
    rows = max(p, nbytes // (4 * hidden) // p * p)
    mine = slice(r * rows // p, (r + 1) * rows // p)
    rng = np.random.default_rng(r)
    a = rng.standard_normal((rows, INNER), dtype=np.float32)
    b = rng.standard_normal((INNER, hidden), dtype=np.float32)
    keep = np.random.default_rng(7 + r).random((rows // p, hidden)) >= DROP
    mask = (keep / (1 - DROP)).astype(np.float32)
    variants, outputs = {}, {}
    for algorithm in UNFUSED:
        partial = np.empty((rows, hidden), np.float32)
        block = np.empty((rows // p, hidden), np.float32)
        out = outputs[algorithm] = np.empty((rows // p, hidden), np.float32)
        variants[algorithm] = (
            lambda z=partial: np.matmul(a, b, out=z),
            lambda z=partial, blk=block, alg=algorithm:
                hpccoll.reduce_scatter(comm, z, blk, algorithm=alg),
            lambda blk=block, out=out: np.multiply(blk, mask, out=out))
    with SharedAllreduce(comm, (rows, hidden), np.float32) as ar:
        out = outputs["fused"] = np.empty((rows // p, hidden), np.float32)
        variants["fused"] = (lambda: np.matmul(a, b, out=ar.local), ar.run,
                             lambda: np.multiply(ar.result[mine], mask, out=out))
        return measure(comm, variants, outputs, iters, warmup)


def kernel_rows(repeat: int = 15):
    """(p, n, reduce_rows us, its kernel with the set-up hoisted us, np.add.reduce us,
    successive np.add us) over a strided view of p padded float32 slots, as SharedAllreduce
    reduces them (it builds the flat view once and calls the kernel)."""
    def best(fn):
        fn()
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return min(samples) * 1e6
    out = []
    for n in (1 << 14, 1 << 20):
        for p in (2, 4, 8):
            slots = np.random.default_rng(p).standard_normal((p, n + 16), dtype=np.float32)
            rows, dst = slots[:, :n], np.empty(n, np.float32)

            def successive():
                np.add(rows[0], rows[1], out=dst)
                for i in range(2, p):
                    np.add(dst, rows[i], out=dst)
            flat = slots.reshape(-1)[:(p - 1) * (n + 16) + n]
            kernel = kernels.row_kernels()["sum"]
            out.append((p, n, best(lambda: kernels.reduce_rows("sum", dst, rows)),
                        best(lambda: kernel(dst, flat, n + 16, p)),
                        best(lambda: np.add.reduce(rows, axis=0, out=dst)), best(successive)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="2M,8M,32M")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--json", default=None)
    parser.add_argument("--no-kernels", action="store_true")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    p, r = comm.size, comm.rank
    sizes = [size_arg(s) for s in args.sizes.split(",")]
    hpccoll.get_topology(comm)
    records, wrong = [], 0
    for pattern, run in (("AG", allgather_pattern), ("RS", reduce_scatter_pattern)):
        for nbytes in sizes:
            iters = args.iters * min(8, max(1, max(sizes) // nbytes))
            rows = run(comm, nbytes, args.hidden, iters, args.warmup)
            base = {name: (c, w) for name, c, w, _ in rows}
            for name, comm_us, whole_us, bad in rows:
                wrong += bad
                records.append({"pattern": pattern, "bytes": nbytes, "variant": name,
                                "comm_us": comm_us, "whole_us": whole_us, "wrong": bad,
                                "comm_saving_vs": {k: 100 * (1 - comm_us / v[0])
                                                   for k, v in base.items() if k != name},
                                "whole_saving_vs": {k: 100 * (1 - whole_us / v[1])
                                                    for k, v in base.items() if k != name}})
    kernel = kernel_rows() if r == 0 and not args.no_kernels else []
    if r == 0:
        report(args, p, records, kernel)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"command": command(p), "ranks": p, "host": host(),
                           "rows": records, "reduce_rows": kernel}, f, indent=1)
    return 1 if comm.allreduce(wrong) else 0


def command(p: int) -> str:
    return f"mpiexec -n {p} python perf/bench_fusion.py " + " ".join(sys.argv[1:])


def host() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.machine()}, {os.cpu_count()} cores, load average {load:.1f} at the "
            f"end, Python {platform.python_version()}, NumPy {np.__version__}, "
            f"{MPI.Get_library_version().splitlines()[0].strip()}")


def report(args, p, records, kernel) -> None:
    print(f"`{command(p)}`  ({host()}; BLAS threads per rank: "
          f"{os.environ['OPENBLAS_NUM_THREADS']})\n")
    print(f"SW-IntraCC paper (Sunway card, 4 core groups): fusion saves up to {PAPER_SAVING['AG']}% of "
          f"CSC-AG's and {PAPER_SAVING['RS']}% of CSC-RS's communication time.  Here: one "
          f"CPU host, {p} MPI ranks, NumPy float32, hidden {args.hidden}, GEMM inner "
          f"dimension {INNER}; median over {args.iters} (largest size) to {8 * args.iters} "
          f"iterations of the slowest rank, variants interleaved.\n")
    print("| pattern | size | variant | comm + hand-off (us) | whole (us) | comm saving vs "
          "native / ring | whole saving vs native / ring | #wrong |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for rec in records:
        fused = rec["variant"] == "fused"
        saving = (lambda key: " / ".join(f"{rec[key][k]:.0f}%" for k in UNFUSED)) if fused \
            else (lambda key: "")
        print(f"| {rec['pattern']} | {rec['bytes'] >> 20} MiB | {rec['variant']} | "
              f"{rec['comm_us']:.0f} | {rec['whole_us']:.0f} | {saving('comm_saving_vs')} | "
              f"{saving('whole_saving_vs')} | {rec['wrong']} |")
    if kernel:
        print("\nOne-pass reduction of p strided float32 slots (`kernels.reduce_rows`, "
              "single process, best of 15):\n")
        print("| p | elements | reduce_rows (us) | kernel, set-up hoisted (us) | "
              "np.add.reduce (us) | successive np.add (us) |")
        print("|---:|---:|---:|---:|---:|---:|")
        for p_, n, ours, hoisted, reduce_, successive in kernel:
            print(f"| {p_} | {n} | {ours:.0f} | {hoisted:.0f} | {reduce_:.0f} | "
                  f"{successive:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
