"""The local parts of MoE dispatch/combine: the owner map, the capacity, the counting-sort
packing, the block regrouping and the argument checks, against NumPy (no messages), and the
reuse of the internal buffers (on a duplicate of COMM_SELF)."""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll.patterns import moe, moe_kernels


def test_default_owner_splits_experts_contiguously():
    for experts, ranks in [(8, 4), (10, 4), (3, 4), (1, 1), (7, 3)]:
        owner = moe.default_owner(experts, ranks)
        for rank, held in enumerate(np.array_split(np.arange(experts), ranks)):
            np.testing.assert_array_equal(np.flatnonzero(owner == rank), held)


def test_expert_capacity():
    assert moe.expert_capacity(None, 100, 2, 8) is None
    assert moe.expert_capacity(1.0, 100, 2, 8) == 25
    assert moe.expert_capacity(1.25, 10, 2, 8) == 4          # ceil(3.125)
    assert moe.expert_capacity(0.5, 0, 2, 8) == 0


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("capacity", [None, 0, 1, 3])
def test_pack_is_a_stable_counting_sort_with_capacity(k, capacity):
    rng = np.random.default_rng(k * 10 + (capacity or 0))
    tokens, hidden, experts = 50, 3, 6
    x = rng.standard_normal((tokens, hidden))
    ids = rng.integers(0, experts, (tokens, k))
    owner = np.array([2, 0, 1, 0, 2, 1])
    bucket = moe._bucket_order(owner)
    # buckets follow owner, then expert id
    np.testing.assert_array_equal(np.argsort(bucket), np.lexsort((np.arange(6), owner)))
    send, kept, positions = moe_kernels.pack(x, ids, bucket, capacity)
    # reference: slots in priority order (k index, then token), stable-sorted by bucket
    slot_token = np.tile(np.arange(tokens), k)
    slot_expert = ids.T.reshape(-1)
    rank_in_expert = np.zeros(slot_expert.size, np.int64)
    for e in range(experts):
        at = np.flatnonzero(slot_expert == e)
        rank_in_expert[at] = np.arange(at.size)
    keep = rank_in_expert < (np.inf if capacity is None else capacity)
    order = np.flatnonzero(keep)[np.argsort(bucket[slot_expert[keep]], kind="stable")]
    np.testing.assert_array_equal(send, x[slot_token[order]])
    np.testing.assert_array_equal(kept, np.bincount(bucket[slot_expert[keep]],
                                                    minlength=experts))
    want_positions = np.full(slot_token.size, -1)
    want_positions[order] = np.arange(order.size)
    np.testing.assert_array_equal(positions, want_positions.reshape(k, tokens).T)


def test_regroup_round_trip():
    rng = np.random.default_rng(3)
    block_rows = rng.integers(0, 4, (3, 5))
    block_rows[1, 2] = 0
    rows = rng.standard_normal((int(block_rows.sum()), 2))
    # label each row (source, expert) in source-major order, then sort expert-major
    labels = [(s, e) for s in range(3) for e in range(5) for _ in range(block_rows[s, e])]
    want = rows[sorted(range(len(labels)), key=lambda i: (labels[i][1], labels[i][0]))]
    grouped = moe_kernels.regroup(rows, block_rows, to_experts=True)
    np.testing.assert_array_equal(grouped, want)
    np.testing.assert_array_equal(moe_kernels.regroup(grouped, block_rows, to_experts=False), rows)
    # two free rows ahead of each source's blocks
    spaced = moe_kernels.regroup(grouped, block_rows, to_experts=False, gap=2)
    starts = np.cumsum(block_rows.sum(axis=1) + 2) - block_rows.sum(axis=1)
    data_rows = np.concatenate([np.arange(a, a + n) for a, n in
                                zip(starts, block_rows.sum(axis=1))])
    assert spaced.shape == (rows.shape[0] + 6, 2)
    np.testing.assert_array_equal(spaced[data_rows], rows)
    one_source = rows[:block_rows[0].sum()]       # one source: the orders agree, no copy
    assert moe_kernels.regroup(one_source, block_rows[:1], True) is one_source


@pytest.mark.parametrize("change, error, pattern", [
    (dict(x=np.zeros((4, 2), np.int32)), TypeError, "dtype int32"),
    (dict(x=np.zeros(4)), TypeError, "2-D"),
    (dict(expert_ids=np.zeros((3, 2), np.int64)), ValueError, "tokens=4"),
    (dict(expert_ids=np.zeros((4, 2))), ValueError, "integer array"),
    (dict(expert_ids=np.full((4, 2), 5)), ValueError, r"\[0, 5\)"),
    (dict(weights=np.zeros((4, 1))), ValueError, "weights"),
    (dict(capacity_factor=0.0), ValueError, "capacity_factor"),
    (dict(capacity_factor=True), ValueError, "capacity_factor"),
])
def test_bad_arguments_are_named(change, error, pattern):
    args = dict(x=np.zeros((4, 2)), expert_ids=np.zeros((4, 2), np.int64),
                weights=np.ones((4, 2)), num_experts=5, capacity_factor=None)
    args.update(change)
    with pytest.raises(error, match=pattern):
        moe._check_tokens(**args)


@pytest.mark.parametrize("num_experts, owner, pattern", [
    (0, None, "num_experts"), (2.0, None, "num_experts"), (3, [0, 1], "owner"),
    (3, [0.0, 1.0, 0.0], "owner"), (5, [0, 1, 0, 2, 0], "outside"),
    (3, [0, -1, 0], "outside")])
def test_bad_owner_maps_are_named(num_experts, owner, pattern):
    with pytest.raises(ValueError, match=pattern):
        moe._owner_map(owner, num_experts, 2)
    np.testing.assert_array_equal(moe._owner_map([1, 0, 1], 3, 2), [1, 0, 1])


def test_dispatch_and_combine_reuse_their_buffers_but_never_a_failed_calls(monkeypatch):
    """The buffers that stay inside dispatch and combine (the send rows, the rows sent back
    and received back) are the context's spares: the next call reuses them, and a call that
    fails does not hand its own back (an abandoned transfer may still write them)."""
    from mpi4py import MPI

    from hpccoll.context import context
    from hpccoll.patterns import combine, dispatch
    comm = MPI.COMM_SELF.Dup()
    try:
        rng = np.random.default_rng(5)
        x = rng.standard_normal((300, 24))
        ids, w = rng.integers(0, 4, (300, 2)), rng.random((300, 2))
        want = x * w.sum(axis=1, keepdims=True)          # identity experts
        np.testing.assert_allclose(combine(*dispatch(x, ids, w, comm, 4)[::2]), want)
        spares = context(comm).spares
        held = dict(spares)
        assert sorted(held) == ["moe.back", "moe.outgoing", "moe.send"]
        np.testing.assert_allclose(combine(*dispatch(x, ids, w, comm, 4)[::2]), want)
        assert all(spares[role] is buffer for role, buffer in held.items())

        def fails(*args, **kwargs):
            raise RuntimeError("the row exchange failed")
        with monkeypatch.context() as patch:
            patch.setattr(moe, "_exchange_rows", fails)
            with pytest.raises(RuntimeError, match="row exchange failed"):
                dispatch(x, ids, w, comm, 4)
        assert "moe.send" not in spares
        tokens, experts, handle = dispatch(x, ids, w, comm, 4)
        assert not np.shares_memory(spares["moe.send"], held["moe.send"])
        np.testing.assert_allclose(combine(tokens, handle), want)
    finally:
        comm.Free()
