"""The two out_linear schemes of "一种 TP-SP-EP 混合并行策略" (a TP-SP-EP hybrid parallel
strategy) with NumPy on CPU: times and bytes per rank.

After the column-parallel linear, rank r holds Y_r, the hidden shard S x h_r of Y (S x H,
float32).  Both schemes end with rank r holding rows S_r (``np.array_split``) of Z = Y W, W
being H x H:

* scheme 1 (row-parallel out_linear + all_reduce + slice): rank r holds the row shard W_r
  (h_r x H), computes the partial Z_r = Y_r W_r (S x H), all ranks sum the partials by an
  allreduce and rank r keeps its rows (a view).  Variants: ``hpccoll.allreduce`` ring (the
  article's V1 assumes a ring) and auto, MPI's ``Allreduce``; and ``hpccoll.reduce_scatter``
  ring, which produces only the rows kept (so the allreduce's second half is not needed);
* scheme 2 (all2all + replicated out_linear): ``tp_to_sp(Y_r)`` (S_r x H) then Z_r = Ŷ_r W
  with the whole W on every rank.  Variants: ``tp_to_sp`` with alltoall(v) pairwise and auto,
  and MPI's ``Alltoallv`` with the transpose by NumPy slice assignment (the reference).

Both schemes do the same multiply-adds per rank (S H H / N).  Bytes per rank: counted from the
messages of the algorithm's planned programs (every rank's :class:`~hpccoll.schedule.Call`,
planned by the registered planner; the sum of the Send sizes a rank issues, and of those
addressed to it), the largest over the ranks of sent + received, beside the article's
V1 = 2(N-1)/N S H d and V2 = V1/N (which count sent + received).  ``auto`` is resolved to the
algorithm it picks for the call; MPI's own collectives (their algorithm is the MPI library's)
and ``csc`` (through the node's shared segment, no messages) are not counted.

Times: each iteration runs every variant in turn (load from elsewhere hits them alike); each
rank times the exchange (collective with its packing and slicing) and the whole scheme
(exchange + multiply); the iteration's time is the slowest rank's; the table gives the medians.
The results are checked against scheme 1 with MPI's Allreduce before timing.  BLAS runs one
thread per rank (set before NumPy is imported).

Usage: mpiexec -n P python perf/bench_resharding.py [--seq 1024,4096] [--hidden 256,1024]
       [--iters 10] [--warmup 2] [--json FILE]
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import hpccoll  # noqa: E402
from hpccoll import arguments, registry  # noqa: E402
from hpccoll.patterns import split_counts, tp_to_sp  # noqa: E402
from hpccoll.schedule import offsets  # noqa: E402

DTYPE = np.dtype(np.float32)


def traffic_bytes(comm: MPI.Comm, collective: str, send, recv, algorithm: str,
                  **kwargs) -> tuple[str, int | None]:
    """(the algorithm run, the largest sent + received bytes of any rank) for this call,
    from the planned programs of all ranks; None for MPI's own collective and for the
    shared-segment algorithms, whose data moves through memory, not messages."""
    args, _, _ = arguments.validate(collective, comm, send, recv, **kwargs)
    name = arguments.resolve(args, algorithm)
    calls = comm.allgather(args.call)
    if name == registry.NATIVE:
        return name, None
    programs = [registry.get(collective, name).planner(call) for call in calls]
    moved = [0] * len(programs)
    for rank, program in enumerate(programs):
        for _, message in program.messages():
            if message.peer != rank:
                moved[rank] += message.count * DTYPE.itemsize
                moved[message.peer] += message.count * DTYPE.itemsize
    if len(programs) > 1 and not any(moved):
        return name, None               # through a node-shared segment (csc): no messages
    return name, max(moved)


class Case:
    """One (N, S, H): the inputs, and for each variant its exchange and multiply."""

    def __init__(self, comm: MPI.Comm, S: int, H: int):
        self.comm, self.S, self.H = comm, S, H
        p, r = comm.size, comm.rank
        rng = np.random.default_rng(7)                       # the same Y and W on every rank
        Y = rng.standard_normal((S, H), dtype=np.float32)
        self.W = rng.standard_normal((H, H), dtype=np.float32) / np.sqrt(H)
        self.seq, self.hid = split_counts(S, p), split_counts(H, p)
        s0, h0 = offsets(self.seq)[r], offsets(self.hid)[r]
        self.rows = slice(s0, s0 + self.seq[r])
        self.Y_r = np.ascontiguousarray(Y[:, h0:h0 + self.hid[r]])
        self.W_r = np.ascontiguousarray(self.W[h0:h0 + self.hid[r]])
        self.partial = np.empty((S, H), np.float32)
        self.summed = np.empty((S, H), np.float32)
        self.mine = np.empty((self.seq[r], H), np.float32)

    # scheme 1: multiply, then the exchange
    def scheme1(self, exchange: Callable[[], np.ndarray]) -> tuple[Callable, Callable]:
        return lambda: np.matmul(self.Y_r, self.W_r, out=self.partial), exchange

    def allreduce(self, algorithm: str) -> np.ndarray:
        if algorithm == "MPI":
            self.comm.Allreduce(self.partial, self.summed)
        else:
            hpccoll.allreduce(self.comm, self.partial.reshape(-1), self.summed.reshape(-1),
                              algorithm=algorithm)
        return self.summed[self.rows]

    def reduce_scatter(self, algorithm: str) -> np.ndarray:
        hpccoll.reduce_scatter(self.comm, self.partial.reshape(-1), self.mine.reshape(-1),
                               recvcounts=[s * self.H for s in self.seq], algorithm=algorithm)
        return self.mine

    # scheme 2: the exchange, then multiply
    def scheme2(self, exchange: Callable[[], np.ndarray]) -> tuple[Callable, Callable]:
        return exchange, lambda y: y @ self.W

    def alltoall_mpi(self) -> np.ndarray:
        """The reference: MPI's Alltoallv of the contiguous row blocks, NumPy's transpose."""
        r, H = self.comm.rank, self.H
        sendcounts = [s * self.hid[r] for s in self.seq]
        recvcounts = [self.seq[r] * h for h in self.hid]
        recv = np.empty(sum(recvcounts), np.float32)
        self.comm.Alltoallv([self.Y_r, sendcounts], [recv, recvcounts])
        out = np.empty((self.seq[r], H), np.float32)
        for at, h, start in zip(offsets(self.hid), self.hid, offsets(recvcounts)):
            out[:, at:at + h] = recv[start:start + self.seq[r] * h].reshape(-1, h)
        return out

    def variants(self) -> dict[str, tuple[int, tuple[Callable, Callable]]]:
        return {
            "1 allreduce ring": (1, self.scheme1(lambda: self.allreduce("ring"))),
            "1 allreduce auto": (1, self.scheme1(lambda: self.allreduce("auto"))),
            "1 MPI Allreduce": (1, self.scheme1(lambda: self.allreduce("MPI"))),
            "1 reduce_scatter ring": (1, self.scheme1(lambda: self.reduce_scatter("ring"))),
            "2 tp_to_sp pairwise": (2, self.scheme2(lambda: tp_to_sp(self.Y_r, self.comm,
                                                                     algorithm="pairwise"))),
            "2 tp_to_sp auto": (2, self.scheme2(lambda: tp_to_sp(self.Y_r, self.comm))),
            "2 MPI Alltoallv": (2, self.scheme2(self.alltoall_mpi)),
        }

    def run(self, scheme: int, parts: tuple[Callable, Callable]) -> tuple[np.ndarray, float,
                                                                           float]:
        """One run: (this rank's rows of Z, exchange seconds, total seconds)."""
        first, second = parts
        t0 = time.perf_counter()
        if scheme == 1:
            first()
            t1 = time.perf_counter()
            z = second()
            t2 = time.perf_counter()
            return z, t2 - t1, t2 - t0
        y = first()
        t1 = time.perf_counter()
        z = second(y)
        t2 = time.perf_counter()
        return z, t1 - t0, t2 - t0

    def bytes(self, name: str) -> tuple[str, int | None]:
        """The algorithm a variant's collective runs and its bytes (see the module)."""
        comm, S, H, r = self.comm, self.S, self.H, self.comm.rank
        flat = self.partial.reshape(-1)
        if name.startswith("1 allreduce"):
            return traffic_bytes(comm, "allreduce", flat, self.summed.reshape(-1),
                                 name.split()[-1], op=MPI.SUM)
        if name.startswith("1 reduce_scatter"):
            return traffic_bytes(comm, "reduce_scatter", flat, self.mine.reshape(-1), "ring",
                                 counts=[s * H for s in self.seq], op=MPI.SUM)
        if name.startswith("2 tp_to_sp"):
            sendcounts = [s * self.hid[r] for s in self.seq]
            recvcounts = [self.seq[r] * h for h in self.hid]
            even = S % comm.size == 0 and H % comm.size == 0
            send = np.empty(sum(sendcounts), np.float32)
            recv = np.empty(sum(recvcounts), np.float32)
            algorithm = "auto" if name.endswith("auto") else "pairwise"
            if even:
                return traffic_bytes(comm, "alltoall", send, recv, algorithm)
            return traffic_bytes(comm, "alltoallv", [send, sendcounts],
                                 [recv, recvcounts], algorithm)
        return "MPI", None


def median_max(comm: MPI.Comm, values: list[float]) -> float:
    """The median over iterations of the slowest rank's time."""
    slowest = np.empty(len(values))
    comm.Allreduce(np.array(values), slowest, op=MPI.MAX)
    return float(np.median(slowest))


def bench(comm: MPI.Comm, S: int, H: int, iters: int, warmup: int) -> list[dict]:
    case = Case(comm, S, H)
    variants = case.variants()
    reference = case.run(1, variants["1 MPI Allreduce"][1])[0].copy()
    for name, (scheme, parts) in variants.items():            # the data check
        if not np.allclose(case.run(scheme, parts)[0], reference, rtol=1e-3,
                           atol=1e-3 * np.sqrt(H)):
            raise SystemExit(f"rank {comm.rank}: {name} differs from scheme 1 (MPI Allreduce)"
                             f" at S={S} H={H}")
    times = {name: ([], []) for name in variants}
    for i in range(warmup + iters):
        for name, (scheme, parts) in variants.items():
            comm.Barrier()
            _, exchange, total = case.run(scheme, parts)
            if i >= warmup:
                times[name][0].append(exchange)
                times[name][1].append(total)
    p, d = comm.size, DTYPE.itemsize
    v1 = 2 * (p - 1) / p * S * H * d
    rows = []
    for name, (scheme, _) in variants.items():
        algorithm, moved = case.bytes(name)
        rows.append({"ranks": p, "S": S, "H": H, "variant": name, "algorithm": algorithm,
                     "bytes": moved, "paper_bytes": v1 if scheme == 1 else v1 / p,
                     "exchange_s": median_max(comm, times[name][0]),
                     "total_s": median_max(comm, times[name][1])})
    return rows


def table(rows: list[dict]) -> str:
    """The rows as Markdown, with each variant's times over those of ``tp_to_sp`` auto in the
    same run and case."""
    lines = ["| N | S | H | variant (algorithm) | bytes/rank sent+recv | paper V | "
             "exchange ms | total ms | exchange / tp_to_sp auto | total / tp_to_sp auto |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        base = next(o for o in rows if o["variant"] == "2 tp_to_sp auto"
                    and (o["S"], o["H"]) == (row["S"], row["H"]))
        moved = "—" if row["bytes"] is None else f"{row['bytes'] / 2**20:.2f} MiB"
        lines.append(f"| {row['ranks']} | {row['S']} | {row['H']} | {row['variant']} "
                     f"({row['algorithm']}) | {moved} | {row['paper_bytes'] / 2**20:.2f} MiB | "
                     f"{row['exchange_s'] * 1e3:.2f} | {row['total_s'] * 1e3:.2f} | "
                     f"{row['exchange_s'] / base['exchange_s']:.2f} | "
                     f"{row['total_s'] / base['total_s']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", default="1024,4096", help="sequence lengths S")
    parser.add_argument("--hidden", default="256,1024", help="hidden sizes H")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", help="write the rows here (rank 0)")
    options = parser.parse_args()
    comm = MPI.COMM_WORLD
    rows = []
    for S in (int(v) for v in options.seq.split(",")):
        for H in (int(v) for v in options.hidden.split(",")):
            rows += bench(comm, S, H, options.iters, options.warmup)
    if comm.rank == 0:
        print(f"{comm.size} ranks, float32, {options.iters} iterations (median of the slowest "
              "rank); data checked against scheme 1 with MPI's Allreduce")
        print(table(rows))
        if options.json:
            with open(options.json, "w") as out:
                json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
