"""Sequence-parallel attention with hpccoll: every layout, causal or not, forward and backward,
checked against attention computed whole in one process.

Each rank makes the same full Q, K, V (seeded), keeps its shard of the sequence
(``hpccoll.patterns.shard`` with the layout's placement), runs ``attention`` (and
``attention_backward``) on the shards, gathers the result back (``unshard``) and compares it
with NumPy.  Prints one line per check; exits non-zero if any fails.

Run: mpiexec -n 4 python examples/attention.py
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from hpccoll.patterns import ATTENTION_LAYOUTS, attention, attention_backward, shard, unshard

TOLERANCE = 1e-10


def full_attention(q, k, v, dout, causal, scale):
    """Attention and its gradients in one process, (S, heads, d) arrays."""
    qh, kh, vh, dh = (x.transpose(1, 0, 2) for x in (q, k, v, dout))
    scores = qh @ kh.transpose(0, 2, 1) * scale
    if causal:
        scores = np.where(np.tri(len(q), dtype=bool), scores, -np.inf)
    probs = np.exp(scores - scores.max(axis=2, keepdims=True))
    probs /= probs.sum(axis=2, keepdims=True)
    dprobs = dh @ vh.transpose(0, 2, 1)
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=2, keepdims=True))
    results = (probs @ vh, dscores @ kh * scale, dscores.transpose(0, 2, 1) @ qh * scale,
               probs.transpose(0, 2, 1) @ dh)
    return [x.transpose(1, 0, 2) for x in results]


def main() -> int:
    comm = MPI.COMM_WORLD
    length, heads, dim = 1000 + comm.size + 1, 4, 16     # not a multiple of the rank count
    rng = np.random.default_rng(2025)
    q, k, v, dout = (rng.standard_normal((length, heads, dim)) for _ in range(4))
    failures = 0
    if comm.rank == 0:
        print(f"{comm.size} ranks, sequence {length}, {heads} heads of {dim}, float64; "
              f"relative error against single-process attention (must be < {TOLERANCE:g})")
    for causal in (False, True):
        want = full_attention(q, k, v, dout, causal, 1 / np.sqrt(dim))
        for layout, (placement, algorithm) in ATTENTION_LAYOUTS.items():
            local = [shard(x, comm, placement) for x in (q, k, v, dout)]
            out, lse = attention(*local[:3], comm, layout=layout, causal=causal,
                                 return_lse=True)
            grads = attention_backward(local[3], *local[:3], out, lse, comm, layout=layout,
                                       causal=causal)
            errors = [np.abs(unshard(got, comm, placement) - full).max() / np.abs(full).max()
                      for got, full in zip((out, *grads), want)]
            ok = max(errors) < TOLERANCE
            failures += not ok
            if comm.rank == 0:
                print(f"  {layout:6} ({placement} rows, {algorithm} allgather) "
                      f"causal={str(causal):5}  out {errors[0]:.1e}  dq {errors[1]:.1e}  "
                      f"dk {errors[2]:.1e}  dv {errors[3]:.1e}  {'ok' if ok else 'FAILED'}")
    failures = comm.allreduce(failures, op=MPI.MAX)
    if comm.rank == 0:
        print("all checks passed" if not failures else f"{failures} check(s) FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
