"""TP <-> SP resharding, the switch of "一种 TP-SP-EP 混合并行策略" (a TP-SP-EP hybrid parallel
strategy, scheme 2): after a column-parallel linear each rank holds a hidden shard of the
activations; one all-to-all turns it into a sequence shard, on which the out_linear runs with
the whole weight; and back.

Run: mpiexec -n 4 python examples/resharding.py

Every rank builds the same full arrays (one seed), so each check compares with NumPy's slices
of them.  It prints each check with its result and exits with status 1 if any fails.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from hpccoll.patterns import sp_to_tp, tp_to_sp


def rows_of(length: int, ranks: int, rank: int) -> np.ndarray:
    """The rows rank ``rank`` holds of a contiguously split axis (``np.array_split``)."""
    return np.array_split(np.arange(length), ranks)[rank]


def main() -> int:
    comm = MPI.COMM_WORLD
    p, r = comm.size, comm.rank
    rng = np.random.default_rng(0)
    results = []

    def check(what: str, ok: bool) -> None:
        everywhere = comm.allreduce(bool(ok), op=MPI.LAND)
        results.append(everywhere)
        if r == 0:
            print(f"[{'ok' if everywhere else 'FAILED'}] {what}")

    # 1. B x S x H: the hidden shard of each rank to its sequence shard, and back
    B, S, H = 2, 10, 6 * p + 1                       # H not divisible by N: alltoallv
    Y = rng.standard_normal((B, S, H)).astype(np.float32)
    y = Y[:, :, rows_of(H, p, r)]                     # this rank's TP shard (B, S, H_r)
    z = tp_to_sp(y, comm)                             # its SP shard (B, S_r, H)
    check(f"tp_to_sp of ({B}, {S}, {H}) on {p} ranks: rank r holds rows "
          f"np.array_split(range({S}), {p})[r] with the whole hidden",
          np.array_equal(z, Y[:, rows_of(S, p, r)]))
    check("sp_to_tp gives every rank its hidden shard back",
          np.array_equal(sp_to_tp(z, comm, hidden=H), y))

    # 2. the paper's scheme 2 against scheme 1: the same rows of Z = Y W
    W = (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32)
    scheme2 = z @ W                                   # replicated out_linear on the SP shard
    partial = y @ W[rows_of(H, p, r)]                 # scheme 1: row-parallel out_linear ...
    summed = np.empty_like(partial)
    comm.Allreduce(partial, summed)                   # ... all_reduce ...
    scheme1 = summed[:, rows_of(S, p, r)]             # ... and slice
    check("scheme 2 (all2all + replicated out_linear) equals scheme 1 (row-parallel "
          "out_linear + all_reduce + slice)", np.allclose(scheme2, scheme1, atol=1e-4))

    # 3. B x S x heads x d: the heads split over the ranks, sequence axis 1
    heads, d, S = 2 * p, 4, 3 * p + 2                 # S not divisible by N either
    Q = rng.standard_normal((B, S, heads, d)).astype(np.float64)
    q = Q[:, :, rows_of(heads, p, r)]
    per_sequence = tp_to_sp(q, comm, axis=1)
    check(f"(B, S, heads, d) = {Q.shape} with axis=1: rank r gets its rows with all "
          f"{heads} heads", np.array_equal(per_sequence, Q[:, rows_of(S, p, r)]))
    check("and back to its heads", np.array_equal(sp_to_tp(per_sequence, comm, hidden=heads,
                                                           axis=1), q))

    # 4. a sequence shorter than the number of ranks: the last ranks hold no rows
    S = max(p - 1, 1)
    short = np.arange(S * H, dtype=np.int64).reshape(S, H)
    mine = tp_to_sp(short[:, rows_of(H, p, r)], comm, algorithm="pairwise")
    held = comm.allgather(len(mine))
    check(f"S = {S} rows on {p} ranks, alltoallv pairwise: the ranks hold {held} rows, "
          "NumPy's slices", np.array_equal(mine, short[rows_of(S, p, r)]))

    # 5. bad input: every rank raises the same ValueError before any payload moves
    try:
        sp_to_tp(z, comm, hidden=H + 1)
        raised = "nothing"
    except ValueError as error:
        raised = str(error)
    check(f"a wrong hidden size raises on every rank alike: {raised[:70]}...",
          len(set(comm.allgather(raised))) == 1 and raised != "nothing")

    if r == 0:
        print(f"{sum(results)} of {len(results)} checks passed on {p} ranks")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
