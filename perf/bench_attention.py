"""Sequence-parallel attention (hpccoll.patterns.attention): communication against computation
per layout, and the overlap that streaming the K/V allgather achieves.

For each sequence length S, causal or not, and layout (``ring``, ``zigzag``, ``tasp``), all
times the slowest rank's, median over iterations each started after a barrier:

- ``comm``: the blocking ``hpccoll.allgather`` of the [k | v] rows with the layout's algorithm
  (``ring`` or ``multiring``) alone;
- ``compute``: the blockwise online-softmax attention of the local queries over the gathered
  rows, in the pieces the stream delivers, without communication (the slowest rank's: a
  causal ``ring`` shows its imbalance here);
- ``CCR = comm / compute`` (the TASP paper's communication-computation ratio);
- ``blocking``: ``attention(..., stream=False)`` (allgather first, then compute);
- ``stream``: ``attention(...)`` (compute on each arrived piece while the next is in flight);
- ``hidden = (blocking - stream) / min(comm, compute)``: the share of the time that could be
  hidden that was (0: no overlap, 1: all of it); ``speedup = blocking / stream``.

Inputs: random float32 (``--dtype``), ``--heads`` heads of ``--dim`` per rank row.  One BLAS
thread per rank (``OPENBLAS_NUM_THREADS`` and ``OMP_NUM_THREADS`` default to 1 here): with a
rank per core, more threads only contend.

Usage: mpiexec -n P python perf/bench_attention.py [-S 512,1024,2048] [--heads 2] [--dim 64]
       [--dtype float32] [-i 5] [--min-time 0.1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402  (after the thread counts are set)
from mpi4py import MPI

import hpccoll
from hpccoll.patterns import ATTENTION_LAYOUTS, attention, shard
from hpccoll.patterns.sequence_attention import (_agree, _arrivals, _by_head, _kv_rows, _kv_split,
                                        _Softmax, _split)
from hpccoll.tools.bench import time_runs


def measure(comm: MPI.Intracomm, q: np.ndarray, k: np.ndarray, v: np.ndarray, layout: str,
            causal: bool, iterations: int, min_time: float) -> dict:
    """The times (microseconds) and ratios of one cell (see the module docstring)."""
    setup = _agree(comm, {"q": q, "k": k, "v": v}, layout, causal, None)
    send = _kv_rows(k, v)
    gathered = np.empty((len(setup.gathered), send.shape[1]), send.dtype)
    counts = [len(rows) * send.shape[1] for rows in setup.held]
    pieces = list(_split(_arrivals(comm, setup, send, gathered, True), causal))
    queries = _by_head(q) * setup.scale
    heads = queries.shape[0]

    def communicate() -> None:
        hpccoll.allgather(comm, send.reshape(-1), gathered.reshape(-1), recvcounts=counts,
                          algorithm=setup.algorithm)

    def compute() -> None:
        softmax = _Softmax(queries, setup.mine, causal)
        for rows in pieces:
            softmax.add(*_kv_split(gathered, rows, heads), setup.gathered[rows])
        softmax.result()

    def run(stream: bool):
        return lambda: attention(q, k, v, comm, layout=layout, causal=causal, stream=stream)

    times = {name: time_runs(comm, [body], iterations, 1, min_time=min_time)[0].median_us
             for name, body in (("comm", communicate), ("compute", compute),
                                ("blocking", run(False)), ("stream", run(True)))}
    hideable = min(times["comm"], times["compute"])
    return {**times, "ccr": times["comm"] / times["compute"],
            "hidden": (times["blocking"] - times["stream"]) / hideable,
            "speedup": times["blocking"] / times["stream"], "pieces": len(pieces)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-S", "--lengths", default="512,1024,2048")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("-i", "--iterations", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.1)
    parser.add_argument("--json")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(0)
    rows = []
    if comm.rank == 0:
        print(f"# {comm.size} ranks, heads={args.heads}, d={args.dim}, {args.dtype}; "
              "times in us, slowest rank, median")
        print(f"{'S':>6} {'causal':>6} {'layout':>7} {'comm':>9} {'compute':>9} {'CCR':>6} "
              f"{'blocking':>9} {'stream':>9} {'hidden':>7} {'speedup':>7} {'pieces':>6}")
    for length in (int(s) for s in args.lengths.split(",")):
        full = [rng.standard_normal((length, args.heads, args.dim)).astype(args.dtype)
                for _ in range(3)]
        for causal in (False, True):
            for layout, (placement, _) in ATTENTION_LAYOUTS.items():
                q, k, v = (shard(x, comm, placement) for x in full)
                cell = measure(comm, q, k, v, layout, causal, args.iterations, args.min_time)
                rows.append({"ranks": comm.size, "S": length, "causal": causal,
                             "layout": layout, **cell})
                if comm.rank == 0:
                    print(f"{length:>6} {str(causal):>6} {layout:>7} {cell['comm']:>9.0f} "
                          f"{cell['compute']:>9.0f} {cell['ccr']:>6.3f} "
                          f"{cell['blocking']:>9.0f} {cell['stream']:>9.0f} "
                          f"{cell['hidden']:>7.2f} {cell['speedup']:>7.2f} "
                          f"{cell['pieces']:>6}", flush=True)
    if args.json and comm.rank == 0:
        with open(args.json, "w") as out:
            json.dump({"heads": args.heads, "dim": args.dim, "dtype": args.dtype,
                       "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
