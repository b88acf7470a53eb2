"""A mixture-of-experts layer over expert parallelism with hpccoll.patterns.dispatch/combine.

Run: mpiexec -n 4 python examples/moe.py

Every rank holds 64 tokens of a sequence sharded over the ranks; a router picks each token's
top-2 of 8 experts (softmax weights); the experts, small two-layer FFNs, are split
contiguously over the ranks, and each rank runs only its own experts on the rows dispatch
hands it.  Checks, printed by rank 0 (the exit status is 1 if any fails on any rank):

1. dispatch returns rows grouped by expert in ascending id, only experts of this rank;
2. combine gives every token the router-weighted sum of its experts' outputs, equal to the
   dense computation of the same layer on this rank alone (every expert on every token);
3. with capacity_factor=1.0 slots past an expert's capacity are dropped: the output equals
   the dense one with the dropped slots left out, handle.dropped_total is the sum of every
   rank's handle.dropped, and no expert gets more than its capacity from any rank.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from hpccoll.patterns import combine, default_owner, dispatch

TOKENS, HIDDEN, FFN, EXPERTS, K = 64, 32, 64, 8, 2


def layer_weights():
    """Router and expert weights, drawn alike on every rank from one seed."""
    rng = np.random.default_rng(0)
    router = rng.standard_normal((HIDDEN, EXPERTS))
    w1 = rng.standard_normal((EXPERTS, HIDDEN, FFN)) / np.sqrt(HIDDEN)
    w2 = rng.standard_normal((EXPERTS, FFN, HIDDEN)) / np.sqrt(FFN)
    return router, w1, w2


def route(x, router):
    """Top-K experts of each token and their softmax weights (renormalised over the K)."""
    logits = x @ router
    ids = np.argsort(-logits, axis=1)[:, :K]
    top = np.take_along_axis(logits, ids, axis=1)
    weights = np.exp(top - top.max(axis=1, keepdims=True))
    return ids, weights / weights.sum(axis=1, keepdims=True)


def expert(e, rows, w1, w2):
    return np.maximum(rows @ w1[e], 0) @ w2[e]


def run_experts(tokens, token_experts, w1, w2):
    """Each of this rank's experts on its contiguous group of rows."""
    out = np.empty_like(tokens)
    for e in np.unique(token_experts):
        group = token_experts == e
        out[group] = expert(e, tokens[group], w1, w2)
    return out


def dense(x, ids, weights, w1, w2, kept):
    """The layer on this rank alone: every token through its kept experts, weighted."""
    y = np.zeros_like(x)
    for j in range(K):
        for e in range(EXPERTS):
            take = (ids[:, j] == e) & kept[:, j]
            y[take] += weights[take, j, None] * expert(e, x[take], w1, w2)
    return y


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    router, w1, w2 = layer_weights()
    x = np.random.default_rng(100 + rank).standard_normal((TOKENS, HIDDEN))
    ids, weights = route(x, router)
    owner = default_owner(EXPERTS, ranks)
    results = []

    tokens, token_experts, handle = dispatch(x, ids, weights, comm, EXPERTS)
    grouped = bool(np.all(np.diff(token_experts) >= 0) and np.all(owner[token_experts] == rank))
    results.append(("1. rows grouped by ascending expert id, own experts only", grouped,
                    f"{len(tokens)} rows for experts {sorted(set(token_experts.tolist()))}"))

    y = combine(run_experts(tokens, token_experts, w1, w2), handle)
    want = dense(x, ids, weights, w1, w2, np.ones_like(ids, bool))
    error = float(np.abs(y - want).max())
    results.append(("2. combine equals the dense layer", error < 1e-10,
                    f"max |difference| {error:.1e}, dropped {handle.dropped_total}"))

    tokens, token_experts, handle = dispatch(x, ids, weights, comm, EXPERTS,
                                             capacity_factor=1.0)
    y = combine(run_experts(tokens, token_experts, w1, w2), handle)
    want = dense(x, ids, weights, w1, w2, handle.positions >= 0)
    error = float(np.abs(y - want).max())
    total = comm.allreduce(handle.dropped)
    per_source_ok = bool(np.all(handle.recv_rows <= handle.capacity))
    results.append(("3. capacity 1.0: output without the dropped slots, drops counted",
                    error < 1e-10 and total == handle.dropped_total and per_source_ok,
                    f"max |difference| {error:.1e}, capacity {handle.capacity} slots per "
                    f"expert and rank, dropped {handle.dropped_total} of "
                    f"{comm.allreduce(ids.size)} slots"))

    everywhere = np.empty(len(results), np.int64)
    comm.Allreduce(np.array([passed for _, passed, _ in results], np.int64), everywhere,
                   op=MPI.MIN)
    if rank == 0:
        print(f"MoE layer: {ranks} ranks x {TOKENS} tokens, H={HIDDEN}, {EXPERTS} experts, "
              f"top-{K}")
        for (label, _, detail), passed in zip(results, everywhere):
            print(f"  {'PASS' if passed else 'FAIL'}  {label} (rank 0: {detail})")
    return 0 if everywhere.all() else 1


if __name__ == "__main__":
    sys.exit(main())
