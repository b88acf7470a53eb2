"""MoE dispatch/combine (hpccoll.patterns.moe) against a single-process reference.

Every rank draws every rank's tokens, routing and weights from one seed, so each can compute
what a single process holding all of them expects: the rows each expert receives (by sending
rank, then priority order, slots past the capacity dropped) and each token's weighted sum of
its kept slots' expert outputs.  Cases: k = 1, 2, 4, experts that receive nothing, a rank with
no tokens, all slots of a token on one rank, user owner maps (a rank without experts among
them), capacity factors that drop slots, float32/float64 and the alltoallv algorithms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

RANKS = [1, 2, 3, 4]


def expert_fn(experts: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A different affine map per expert, so rows sent to a wrong expert show."""
    e = experts.astype(rows.dtype)[:, None]
    return rows * (e + 1) + e / 8


def inputs(seed, p, tokens, hidden, k, num_experts, dtype, routing):
    """Every rank's (x, expert_ids, weights)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(p):
        t = tokens[r]
        x = rng.standard_normal((t, hidden)).astype(dtype)
        if routing == "distinct":
            ids = np.argsort(rng.random((t, num_experts)), axis=1)[:, :k]
        elif routing == "repeat":                     # a token may pick an expert twice
            ids = rng.integers(0, num_experts, (t, k))
        else:                                         # only experts 0 and 1 ever chosen
            ids = rng.integers(0, min(2, num_experts), (t, k))
        w = rng.random((t, k))
        out.append((x, ids, w))
    return out


def reference(data, owner, num_experts, capacity_factor, dtype):
    """What a single process expects: per rank the dispatched rows and their experts, the
    combined output and the dropped slots."""
    p, hidden = len(data), data[0][0].shape[1]
    kept_rows = {e: [] for e in range(num_experts)}      # expert -> rows in arrival order
    kept_slots = []
    for x, ids, _ in data:
        t, k = ids.shape
        cap = math.inf if capacity_factor is None else \
            math.ceil(capacity_factor * t * k / num_experts)
        taken = {e: 0 for e in range(num_experts)}
        kept = np.zeros((t, k), bool)
        for j in range(k):
            for i in range(t):
                e = int(ids[i, j])
                if taken[e] < cap:
                    taken[e] += 1
                    kept[i, j] = True
                    kept_rows[e].append(x[i])
        kept_slots.append(kept)
    tokens, experts = [], []
    for q in range(p):
        mine = [e for e in range(num_experts) if owner[e] == q]
        rows = [row for e in mine for row in kept_rows[e]]
        tokens.append(np.array(rows, dtype).reshape(len(rows), hidden))
        experts.append(np.array([e for e in mine for _ in kept_rows[e]], np.int64))
    outputs = []
    for (x, ids, w), kept in zip(data, kept_slots):
        y = np.zeros_like(x)
        for j in range(ids.shape[1]):
            contrib = w[:, j, None].astype(dtype) * expert_fn(ids[:, j], x)
            y += np.where(kept[:, j, None], contrib, 0)
        outputs.append(y)
    dropped = [int((~kept).sum()) for kept in kept_slots]
    return tokens, experts, outputs, dropped


def cases(p):
    """(label, num_experts, k, tokens per rank, owner, capacity factor, dtype, routing)."""
    yield "contiguous k=2", 8, 2, [13 + 5 * r for r in range(p)], None, None, "float64", \
        "distinct"
    yield "k=1", 4, 1, [9] * p, None, None, "float32", "distinct"
    yield "k=4 repeats", 6, 4, [7 + r for r in range(p)], None, None, "float64", "repeat"
    yield "empty rank", 5, 2, [0] + [11] * (p - 1), None, None, "float32", "distinct"
    yield "all empty", 3, 2, [0] * p, None, None, "float64", "distinct"
    yield "idle experts", 7, 2, [10] * p, None, None, "float64", "skewed"
    yield "fewer experts than ranks", 1, 1, [6] * p, None, None, "float64", "distinct"
    yield "one owner", 6, 4, [8] * p, [p - 1] * 6, None, "float64", "distinct"
    yield "scattered owner", 9, 2, [12] * p, [(3 * e + 1) % p for e in range(9)], None, \
        "float32", "distinct"
    yield "capacity 1.0", 4, 2, [20 + 3 * r for r in range(p)], None, 1.0, "float64", \
        "skewed"
    yield "capacity 0.5 k=4", 8, 4, [15] * p, [(e * 5) % p for e in range(8)], 0.5, \
        "float32", "repeat"
    yield "capacity 1.0 k=1", 3, 1, [0] + [17] * (p - 1), None, 1.0, "float64", "distinct"
    yield "capacity 3.0 (none dropped)", 4, 2, [9] * p, None, 3.0, "float32", "distinct"


def algorithms(comm):
    from hpccoll import registry
    from hpccoll.collectives import uniform_call
    call = uniform_call("alltoallv", comm.size, comm.rank, 1)
    return [a.name for a in registry.algorithms("alltoallv") if a.violated(call) is None] + \
        ["native", "auto"]


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_dispatch_combine_match_reference_and_refuse_bad_arguments(mpi_ranks, comm):
    """One ``mpiexec`` launch per rank count: the cases against the reference, then the bad
    arguments (check_bad_arguments_raise_on_every_rank)."""
    check_dispatch_combine_match_reference(comm)
    check_bad_arguments_raise_on_every_rank(comm)
    check_auto_decides_alike_per_size_class(comm)


def check_auto_decides_alike_per_size_class(comm):
    """``auto``'s row algorithm: one for all ranks though only rank 0 sends rows (its size
    class decides), native below NATIVE_BELOW, tuning's choice above it, the environment's
    at any size; each run's result the same."""
    import os

    from hpccoll.patterns import combine, dispatch, moe
    rng = np.random.default_rng(11)
    x = rng.standard_normal((40 if comm.rank == 0 else 0, 6))
    ids, w = rng.integers(0, 4, (x.shape[0], 2)), rng.random((x.shape[0], 2))
    below, results = moe.NATIVE_BELOW, []
    try:
        for limit, forced in [(below, None), (0, None), (below, "pairwise")]:
            moe.NATIVE_BELOW = limit
            if forced:
                os.environ["HPCCOLL_ALLTOALLV_ALGORITHM"] = forced
            tokens, experts, handle = dispatch(x, ids, w, comm, 4)
            assert comm.allgather(handle.algorithm) == [handle.algorithm] * comm.size
            results.append((handle.algorithm, combine(expert_fn(experts, tokens), handle)))
    finally:
        moe.NATIVE_BELOW = below
        os.environ.pop("HPCCOLL_ALLTOALLV_ALGORITHM", None)
    assert results[0][0] == "native" and results[2][0] == "pairwise"
    assert results[1][0] in algorithms(comm)[:-2]               # a scheduled one
    for _, out in results[1:]:
        np.testing.assert_allclose(out, results[0][1], rtol=1e-12, atol=1e-12)


def check_dispatch_combine_match_reference(comm):
    from hpccoll.patterns import MoEHandle, combine, default_owner, dispatch
    p, r = comm.size, comm.rank
    hidden = 5
    names = algorithms(comm)
    for number, (label, num_experts, k, tokens, owner, capacity, dtype, routing) in \
            enumerate(cases(p)):
        data = inputs(number, p, tokens, hidden, k, num_experts, dtype, routing)
        owner_map = default_owner(num_experts, p) if owner is None else np.array(owner)
        want_tokens, want_experts, want_out, want_dropped = reference(
            data, owner_map, num_experts, capacity, dtype)
        if capacity is not None and capacity <= 1 and sum(tokens):
            assert sum(want_dropped) > 0, f"{label}: the case should drop slots"
        x, ids, w = data[r]
        for name in names:
            what = f"{label} ({name}, rank {r} of {p})"
            got, got_experts, handle = dispatch(x, ids, w, comm, num_experts, owner=owner,
                                                capacity_factor=capacity, algorithm=name)
            assert isinstance(handle, MoEHandle)
            assert got.dtype == dtype and got.shape == want_tokens[r].shape, what
            np.testing.assert_array_equal(got, want_tokens[r], err_msg=what)
            np.testing.assert_array_equal(got_experts, want_experts[r], err_msg=what)
            np.testing.assert_array_equal(np.repeat(handle.experts, handle.expert_rows),
                                          got_experts, err_msg=what)
            assert handle.capacity == (None if capacity is None else math.ceil(
                capacity * ids.size / num_experts)), what
            assert handle.dropped == want_dropped[r], what
            assert handle.dropped_total == sum(want_dropped), what
            out = combine(expert_fn(got_experts, got), handle)
            assert out.dtype == dtype and out.shape == x.shape, what
            tol = 1e-5 if dtype == "float32" else 1e-12
            np.testing.assert_allclose(out, want_out[r], rtol=tol, atol=tol, err_msg=what)


def check_bad_arguments_raise_on_every_rank(comm):
    from hpccoll.patterns import combine, dispatch
    p, r = comm.size, comm.rank
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 32))
    ids = rng.integers(0, 8, (64, 2))
    w = rng.random((64, 2))
    bad_here = r == p - 1                               # only the last rank is wrong
    bad = [   # (what the failing rank's message says, the change)
        (r"expert ids must lie in \[0, 8\)", dict(expert_ids=np.where(bad_here, 8, ids))),
        (r"expert ids must lie in \[0, 8\)", dict(expert_ids=np.where(bad_here, -1, ids))),
        ("weights must be a real array", dict(weights=w[:, :1] if bad_here else w)),
        ("x has dtype int32", dict(x=x.astype(np.int32) if bad_here else x)),
        ("weights must be a real array", dict(weights=w.astype(complex) if bad_here else w)),
        ("capacity_factor must be", dict(capacity_factor=-1.0 if bad_here else 1.0)),
    ]
    for message, change in bad:
        args = dict(x=x, expert_ids=ids, weights=w, num_experts=8, owner=None,
                    capacity_factor=None)
        args.update(change)
        pattern = f"failed on rank {p - 1}: " + (message if bad_here else "bad arguments")
        with pytest.raises((ValueError, TypeError), match=pattern):
            dispatch(args["x"], args["expert_ids"], args["weights"], comm,
                     args["num_experts"], owner=args["owner"],
                     capacity_factor=args["capacity_factor"])
    # arguments each rank gave validly but differently from the others
    if p > 1:
        for label, change in [("hidden size", dict(x=x[:, :16] if bad_here else x)),
                              ("owner", dict(owner=(np.arange(8) % p)[::1 if bad_here else -1])),
                              ("capacity", dict(capacity_factor=2.0 if bad_here else None)),
                              ("algorithm", dict(algorithm="direct" if bad_here else "pairwise"))]:
            args = dict(x=x, num_experts=8, owner=None, capacity_factor=None,
                        algorithm="auto")
            args.update(change)
            with pytest.raises(ValueError, match=f"ranks \\[{p - 1}\\] differ from rank 0"):
                dispatch(args["x"], ids, w, comm, args["num_experts"], owner=args["owner"],
                         capacity_factor=args["capacity_factor"],
                         algorithm=args["algorithm"])
    # an algorithm alltoallv does not have: hpccoll's own error, on every rank
    with pytest.raises(ValueError, match="unknown algorithm 'bruck' for alltoallv"):
        dispatch(x, ids, w, comm, 8, algorithm="bruck")
    # NumPy scalars on one rank, Python numbers on the others: the same arguments
    tokens, _, handle = dispatch(x, ids, w, comm, np.int64(8) if bad_here else 8,
                                 capacity_factor=np.float32(2.0) if bad_here else 2)
    assert handle.capacity == 32 and handle.dropped_total == 0
    # combine: a wrong output shape on one rank
    tokens, experts, handle = dispatch(x, ids, w, comm, 8)
    wrong = tokens[:, :-1] if bad_here else tokens
    with pytest.raises(ValueError, match=f"moe.combine failed on rank {p - 1}"):
        combine(wrong, handle)
    # and everything still works afterwards
    out = combine(tokens * 2, handle)
    np.testing.assert_allclose(out, 2 * x * w.sum(axis=1)[:, None], rtol=1e-12)
