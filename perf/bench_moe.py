"""MoE dispatch + combine (hpccoll.patterns.moe) against a naive NumPy + mpi4py version.

Every rank holds T tokens of H float32 and routes each to k distinct experts of E (split
contiguously over the ranks); the experts are the identity, so one iteration is dispatch
then combine.  Variants, run in turn in every iteration so that load from elsewhere on the
host hits them alike:

* ``naive``: NumPy bucketing (``np.lexsort`` of the slots by destination rank and expert,
  fancy-index gathers), ``comm.Alltoall`` of the counts, ``comm.Alltoallv`` of the rows and
  of their expert ids, ``np.argsort`` of the received ids to group them; combine inverts the
  permutations with fancy indexing, ``comm.Alltoallv`` back, and sums ``w * rows`` over k;
* ``hpccoll/<algorithm>``: :func:`hpccoll.patterns.dispatch` and :func:`combine` with that
  ``hpccoll.alltoallv`` algorithm (every registered one that serves p, ``native`` and
  ``auto``).

A fresh routing every iteration (as in training: the counts change every step, so no
alltoallv plan is reused across iterations).  Each rank times a variant after an untimed
barrier; an iteration's time is the slowest rank's; the table gives the median over
iterations, per token (per rank's token), the ratio naive / variant of those medians, and
the median (p25-p75) over iterations of each iteration's ratio ("paired": the variants of
one iteration run back to back, so load from elsewhere moves both).
"packing" is the time of the local kernels alone (the counting-sort pack, the regrouping
by expert and back, the weighted sum) on the same data, and its share of hpccoll/auto's
dispatch + combine; the naive version's local NumPy work is timed the same way.
The outputs of every variant are compared with the naive one's before timing.  Last, the
dispatch's row exchange alone, per ``hpccoll.alltoallv`` algorithm, and padded to the largest
block for the fixed-size ``hpccoll.alltoall`` (``bruck``, the log-round algorithm that
alltoallv does not have, and ``pairwise``).

Usage: mpiexec -n P python perf/bench_moe.py [--tokens 256,4096] [--hidden 512]
       [--experts 16] [--k 2] [--iters 15] [--warmup 3] [--algorithms native,auto]
       [--totals-only]
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import time  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import hpccoll  # noqa: E402
from hpccoll import registry  # noqa: E402
from hpccoll.collectives import uniform_call  # noqa: E402
from hpccoll.patterns import combine, default_owner, dispatch, moe, moe_kernels  # noqa: E402


def naive_dispatch(x, ids, w, comm, owner):
    """Bucket with NumPy sorts, exchange with mpi4py; returns the grouped rows and state."""
    p, k, hidden = comm.Get_size(), ids.shape[1], x.shape[1]
    slot_expert = ids.reshape(-1)
    dest = owner[slot_expert]
    order = np.lexsort((slot_expert, dest))
    send = x[order // k]
    counts = np.bincount(dest, minlength=p).astype(np.int64)
    recv_counts = np.empty(p, np.int64)
    comm.Alltoall(counts, recv_counts)
    total = int(recv_counts.sum())
    recv = np.empty((total, hidden), x.dtype)
    comm.Alltoallv([send, counts * hidden], [recv, recv_counts * hidden])
    recv_expert = np.empty(total, np.int64)
    comm.Alltoallv([np.ascontiguousarray(slot_expert[order]), counts],
                   [recv_expert, recv_counts])
    group = np.argsort(recv_expert, kind="stable")
    return recv[group], recv_expert[group], (comm, order, counts, recv_counts, group, w)


def naive_combine(out, state):
    comm, order, counts, recv_counts, group, w = state
    hidden = out.shape[1]
    outgoing = np.empty_like(out)
    outgoing[group] = out
    back = np.empty((int(counts.sum()), hidden), out.dtype)
    comm.Alltoallv([outgoing, recv_counts * hidden], [back, counts * hidden])
    slots = np.empty_like(back)
    slots[order] = back
    tokens, k = w.shape
    return np.einsum("tkh,tk->th", slots.reshape(tokens, k, hidden), w.astype(out.dtype))


def routing(rng, tokens, experts, k):
    ids = np.argsort(rng.random((tokens, experts)), axis=1)[:, :k]
    w = rng.random((tokens, k))
    return ids, w / w.sum(axis=1, keepdims=True)


def algorithms(comm) -> list[str]:
    call = uniform_call("alltoallv", comm.Get_size(), comm.Get_rank(), 1)
    return [a.name for a in registry.algorithms("alltoallv") if a.violated(call) is None] + \
        ["native", "auto"]


def slowest(comm, seconds: float) -> float:
    return comm.allreduce(seconds, op=MPI.MAX)


def timed(comm, run: Callable[[], object]) -> float:
    comm.Barrier()
    start = time.perf_counter()
    run()
    return slowest(comm, time.perf_counter() - start)


def local_kernels(x, ids, w, owner, handle) -> Callable[[], None]:
    """The local work of hpccoll's dispatch + combine on this data, without messages."""
    bucket = moe._bucket_order(owner)
    received = np.empty((int(handle.recv_rows.sum()), x.shape[1]), x.dtype)
    back = np.empty((int(handle.send_rows.sum()) + len(handle.send_rows), x.shape[1]),
                    x.dtype)
    out = np.empty_like(x)
    weights = w.astype(x.dtype)

    def run():
        moe_kernels.pack(x, ids, bucket, None)
        grouped = moe_kernels.regroup(received, handle.recv_rows, True)
        moe_kernels.regroup(grouped, handle.recv_rows, False, gap=1)
        moe_kernels.kernels()["weighted_sum"](out, back, handle.positions, weights)
    return run


def naive_local(x, ids, w, owner, state, arrived) -> Callable[[], None]:
    """The naive version's local NumPy work on this data (``arrived``: the expert ids as
    received), without messages."""
    _, order, counts, _, group, _ = state
    received = np.empty((group.size, x.shape[1]), x.dtype)
    back = np.empty((int(counts.sum()), x.shape[1]), x.dtype)
    tokens, k = ids.shape

    def run():
        slot_expert = ids.reshape(-1)
        bucketed = np.lexsort((slot_expert, owner[slot_expert]))
        x[bucketed // k]
        slot_expert[bucketed]
        grouped = received[np.argsort(arrived, kind="stable")]
        outgoing = np.empty_like(grouped)
        outgoing[group] = grouped
        slots = np.empty_like(back)
        slots[order] = back
        np.einsum("tkh,tk->th", slots.reshape(tokens, k, -1), w.astype(x.dtype))
    return run


def payload_exchanges(comm, send, handle, names, iters, warmup) -> dict[str, float]:
    """The dispatch's row exchange alone: ``hpccoll.alltoallv`` with each algorithm, and
    the rows padded to the largest block of any rank pair and sent by ``hpccoll.alltoall``
    (``bruck``, ``pairwise``), padding and unpadding included; each checked against
    ``comm.Alltoallv`` first."""
    hidden = send.shape[1]
    send_rows, recv_rows = handle.send_rows, handle.recv_rows.sum(axis=1)
    received = np.empty((int(recv_rows.sum()), hidden), send.dtype)
    largest = comm.allreduce(int(send_rows.max()), op=MPI.MAX)
    p = len(send_rows)
    padded_send = np.zeros((p, largest, hidden), send.dtype)
    padded_recv = np.empty_like(padded_send)
    send_at, recv_at = np.cumsum(send_rows) - send_rows, np.cumsum(recv_rows) - recv_rows

    def padded(name):
        for d in range(p):
            padded_send[d, :send_rows[d]] = send[send_at[d]:send_at[d] + send_rows[d]]
        hpccoll.alltoall(comm, padded_send.reshape(-1), padded_recv.reshape(-1),
                         algorithm=name)
        for s in range(p):
            received[recv_at[s]:recv_at[s] + recv_rows[s]] = padded_recv[s, :recv_rows[s]]

    runs = {f"alltoallv/{name}": lambda name=name: hpccoll.alltoallv(
        comm, [send.reshape(-1), send_rows * hidden],
        [received.reshape(-1), recv_rows * hidden], algorithm=name) for name in names}
    runs.update({f"padded alltoall/{name}": lambda name=name: padded(name)
                 for name in ("bruck", "pairwise")})
    want = np.empty_like(received)
    comm.Alltoallv([send, send_rows * hidden], [want, recv_rows * hidden])
    for label, run in runs.items():
        received[...] = np.nan
        run()
        if not np.array_equal(received, want):
            raise SystemExit(f"{label} delivered wrong rows")
    times = {label: [] for label in runs}
    for i in range(iters + warmup):
        for label, run in runs.items():
            seconds = timed(comm, run)
            if i >= warmup:
                times[label].append(seconds)
    return {label: float(np.median(t)) for label, t in times.items()}


def bench(comm, tokens, hidden, experts, k, iters, warmup, names, extras=True):
    rank, p = comm.Get_rank(), comm.Get_size()
    owner = default_owner(experts, p)
    rng = np.random.default_rng(1000 + rank)
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    routes = [routing(rng, tokens, experts, k) for _ in range(iters + warmup)]

    ids, w = routes[0]
    want = naive_combine(*naive_dispatch(x, ids, w, comm, owner)[::2])
    for name in names:
        rows, _, handle = dispatch(x, ids, w, comm, experts, algorithm=name)
        if not np.allclose(combine(rows, handle), want, rtol=1e-5, atol=1e-5):
            raise SystemExit(f"hpccoll/{name} differs from the naive version")

    variants: dict[str, Callable] = {"naive": lambda ids, w: naive_combine(
        *naive_dispatch(x, ids, w, comm, owner)[::2])}
    for name in names:
        variants[f"hpccoll/{name}"] = lambda ids, w, name=name: combine(
            *dispatch(x, ids, w, comm, experts, algorithm=name)[::2])
    times = {label: [] for label in variants}
    for i, (ids, w) in enumerate(routes):
        for label, run in variants.items():
            seconds = timed(comm, lambda: run(ids, w))
            if i >= warmup:
                times[label].append(seconds)
    if not extras:
        return times, None, None

    ids, w = routes[0]
    _, _, handle = dispatch(x, ids, w, comm, experts)
    _, grouped_experts, state = naive_dispatch(x, ids, w, comm, owner)
    arrived = np.empty_like(grouped_experts)
    arrived[state[4]] = grouped_experts
    local = {"hpccoll": local_kernels(x, ids, w, owner, handle),
             "naive": naive_local(x, ids, w, owner, state, arrived)}
    local_times = {label: [] for label in local}
    for i in range(iters + warmup):
        for label, run in local.items():
            seconds = timed(comm, run)
            if i >= warmup:
                local_times[label].append(seconds)
    send = moe_kernels.pack(x, ids, moe._bucket_order(owner), None)[0]
    exchanges = payload_exchanges(comm, send, handle, names, iters, warmup)
    return (times, {label: float(np.median(t)) for label, t in local_times.items()},
            exchanges)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="256,4096", help="tokens per rank, a list")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--algorithms", help="the hpccoll variants, a comma list (default: "
                        "every alltoallv algorithm that serves P, native and auto)")
    parser.add_argument("--totals-only", action="store_true",
                        help="time dispatch + combine only (not the local work, not the row "
                             "exchange alone)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    names = args.algorithms.split(",") if args.algorithms else algorithms(comm)
    if comm.Get_rank() == 0:
        print(f"# MoE dispatch+combine, {comm.Get_size()} ranks, H={args.hidden} float32, "
              f"E={args.experts}, k={args.k}, identity experts, fresh routing per iteration, "
              f"median of {args.iters} iterations (slowest rank)")
    for tokens in (int(t) for t in args.tokens.split(",")):
        times, local, exchanges = bench(comm, tokens, args.hidden, args.experts, args.k,
                                        args.iters, args.warmup, names, not args.totals_only)
        totals = {label: float(np.median(t)) for label, t in times.items()}
        if comm.Get_rank() == 0:
            megabytes = tokens * args.k * args.hidden * 4 / 2**20
            print(f"\nT={tokens} tokens/rank ({megabytes:.1f} MiB of slots sent per rank "
                  "each way)")
            print(f"{'variant':<20} {'ms':>9} {'us/token':>9} {'naive/this':>11} "
                  f"{'paired':>7} {'(p25-p75)':>11}")
            for label, seconds in totals.items():
                # the same iteration's naive time over this variant's, per iteration
                paired = np.array(times["naive"]) / np.array(times[label])
                q25, q50, q75 = np.percentile(paired, [25, 50, 75])
                print(f"{label:<20} {seconds * 1e3:9.3f} {seconds / tokens * 1e6:9.3f} "
                      f"{totals['naive'] / seconds:11.2f} {q50:7.2f} ({q25:.2f}-{q75:.2f})")
            if local is None:
                continue
            mine = "hpccoll/auto" if "hpccoll/auto" in totals else f"hpccoll/{names[-1]}"
            ours = totals[mine]
            print(f"local work: hpccoll kernels {local['hpccoll'] * 1e3:.3f} ms "
                  f"({100 * local['hpccoll'] / ours:.0f}% of {mine}), naive NumPy "
                  f"{local['naive'] * 1e3:.3f} ms ({100 * local['naive'] / totals['naive']:.0f}"
                  f"% of naive); naive/hpccoll local {local['naive'] / local['hpccoll']:.2f}")
            print("dispatch's row exchange alone (one routing, repeated):")
            fastest = min(exchanges.values())
            for label, seconds in exchanges.items():
                print(f"  {label:<26} {seconds * 1e3:9.3f} ms  {seconds / fastest:5.2f}x "
                      "the fastest")


if __name__ == "__main__":
    main()
