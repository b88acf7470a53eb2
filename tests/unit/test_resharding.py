"""TP <-> SP resharding planned for all ranks in one process (no MPI): every rank's plan is
run with the all-to-all done by hand between the ranks' buffers, and the results compared
with slices of the full array taken by NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hpccoll.patterns.resharding import _describe, _plan


def describe_all(arrays, axis, hidden=-1):
    """The agreement's table: every rank's description, as the ranks allgather them."""
    return np.stack([_describe(a, axis, hidden) for a in arrays]).tobytes()


def run_all(arrays, axis, to_sp, hidden=-1, algorithm="auto"):
    """Every rank's pack, the exchange (block j of rank i's send buffer to rank j) and
    every rank's unpack, from the ranks' plans."""
    descriptions = describe_all(arrays, axis, hidden)
    plans = [_plan(descriptions, r, axis, to_sp, algorithm) for r in range(len(arrays))]
    sends = []
    for array, plan in zip(arrays, plans):
        flat = np.ascontiguousarray(array).reshape(-1)
        send = flat
        if plan.pack is not None:
            send = np.full(sum(plan.sendcounts), 99, array.dtype)
            plan.pack.copy(send, flat)
        sends.append(send)
    outs = []
    for r, plan in enumerate(plans):
        recv = np.concatenate([send[p.sdispls[r]:p.sdispls[r] + p.sendcounts[r]]
                               for send, p in zip(sends, plans)])
        assert recv.size == sum(plan.recvcounts)
        out = np.full(plan.shape, 99, arrays[0].dtype)
        if plan.unpack is None:
            out.reshape(-1)[:] = recv
        else:
            plan.unpack.copy(out.reshape(-1), recv)
        outs.append(out)
    return plans, outs


SHAPES = [((5, 8), -2), ((8, 8), -2), ((3, 7, 5), -2), ((2, 9, 4), 1), ((2, 6, 3, 4), -3),
          ((2, 2, 5, 3, 2), 2), ((1, 3), 0), ((0, 4, 6), 1), ((4, 0), 0), ((3, 0, 5), 1)]
DTYPES = ["float32", "float64", "int8", "uint16", "complex128", "bool", "float16"]


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_tp_to_sp_and_back_match_numpy(p):
    rng = np.random.default_rng(p)
    for (shape, axis), dtype in zip(SHAPES * 2, DTYPES * 3):
        full = (rng.integers(0, 100, shape) % 2 if dtype == "bool"
                else rng.integers(-50, 50, shape)).astype(dtype)
        ax = axis % len(shape)
        S, H = shape[ax], shape[ax + 1]
        hidden = np.array_split(np.arange(H), p)
        seq = np.array_split(np.arange(S), p)
        tp = [np.take(full, hidden[r], axis=ax + 1) for r in range(p)]
        plans, sp = run_all(tp, axis, True)
        for r in range(p):
            np.testing.assert_array_equal(sp[r], np.take(full, seq[r], axis=ax),
                                          err_msg=f"{shape} {dtype} p={p} rank {r}")
        uneven = S % p or H % p
        assert {plan.collective for plan in plans} == {"alltoallv" if uneven else "alltoall"}
        _, back = run_all(sp, axis, False, hidden=H)
        for r in range(p):
            np.testing.assert_array_equal(back[r], tp[r])


def test_contiguous_blocks_are_not_packed():
    # no batch axes: rank r's blocks for the ranks lie end to end in its shard already
    tp = [np.zeros((10, 3)), np.zeros((10, 3)), np.zeros((10, 2))]
    plans, _ = run_all(tp, -2, True)
    assert all(plan.pack is None and plan.unpack is not None for plan in plans)
    plans, _ = run_all([np.zeros((10, 3)), np.zeros((10, 3)), np.zeros((9, 3))], -2, False,
                       hidden=3)
    assert all(plan.pack is not None and plan.unpack is None for plan in plans)
    plans, _ = run_all([np.zeros((2, 6, 5))], -2, True)       # one rank: no copies at all
    assert plans[0].pack is None and plans[0].unpack is None


def test_non_contiguous_input():
    full = np.arange(2 * 12 * 6, dtype=np.int64).reshape(2, 12, 6)
    tp = [np.asfortranarray(full[:, :, :3]), full[:, :, 3:]]
    _, sp = run_all(tp, 1, True)
    np.testing.assert_array_equal(sp[0], full[:, :6])
    np.testing.assert_array_equal(sp[1], full[:, 6:])


def test_mismatches_raise_the_same_error_for_every_rank():
    def errors(arrays, axis=-2, to_sp=True, hidden=-1, algorithm="auto"):
        descriptions = describe_all(arrays, axis, hidden)
        found = []
        for r in range(len(arrays)):
            with pytest.raises((ValueError, TypeError)) as info:
                _plan(descriptions, r, axis, to_sp, algorithm)
            found.append((info.type, str(info.value)))
        assert len(set(found)) == 1, found
        return found[0]

    kind, text = errors([np.zeros((6, 3)), np.zeros((5, 3))])
    assert kind is ValueError and "whole sequence" in text and "[6, 5]" in text
    kind, text = errors([np.zeros((6, 2)), np.zeros((6, 3))])        # H=5 splits 3, 2
    assert "array_split" in text and "[3, 2]" in text
    kind, text = errors([np.zeros((6, 3), np.float32), np.zeros((6, 3))])
    assert "dtype" in text and "<f4" in text
    kind, text = errors([np.zeros((2, 6, 3)), np.zeros((3, 6, 3))])
    assert "every axis but" in text
    kind, text = errors([np.zeros((6, 3)), [[0.0] * 3] * 6])
    assert kind is TypeError and "rank 1" in text
    kind, text = errors([np.zeros((6, 3)), np.zeros((6, 3))], axis=-1)
    assert "no hidden axis" in text
    kind, text = errors([np.zeros((6, 3)), np.zeros((6, 3))], axis=2)
    assert "no axis 2" in text
    kind, text = errors([np.zeros((6, 3), object)] * 2)
    assert "Python objects" in text
    kind, text = errors([np.zeros((3, 8)), np.zeros((3, 8))], to_sp=False, hidden=7)
    assert "whole hidden axis of 7" in text
    kind, text = errors([np.zeros((2, 8)), np.zeros((3, 8))], to_sp=False, hidden=8)
    assert "[2, 3]" in text and "[3, 2]" in text
    kind, text = errors([np.zeros((6, 3)), np.zeros((5, 3))], to_sp=False, hidden=-2)
    assert "hidden must be" in text
    kind, text = errors([np.zeros((7, 4)), np.zeros((7, 4))], algorithm="bruck")
    assert "alltoallv" in text and "bruck" in text      # S=7 over 2 ranks: uneven blocks
    kind, text = errors([np.zeros((8, 4)), np.zeros((8, 4))], algorithm="nonsense")
    assert "nonsense" in text


@settings(max_examples=150, deadline=None)
@given(p=st.integers(1, 6), lead=st.lists(st.integers(0, 3), max_size=2),
       S=st.integers(0, 13), H=st.integers(0, 11),
       inner=st.lists(st.integers(1, 3), max_size=2),
       dtype=st.sampled_from(["float32", "int16", "complex64", "uint8"]))
def test_round_trip_property(p, lead, S, H, inner, dtype):
    """Any batch axes, sequence and hidden lengths (S < N, 0 and uneven included) and trailing
    axes: TP -> SP gives NumPy's slices, SP -> TP gives the TP shards back."""
    shape = (*lead, S, H, *inner)
    ax = len(lead)
    full = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape).astype(dtype)
    tp = [np.take(full, rows, axis=ax + 1) for rows in np.array_split(np.arange(H), p)]
    _, sp = run_all(tp, ax - len(shape), True)
    for rows, got in zip(np.array_split(np.arange(S), p), sp):
        np.testing.assert_array_equal(got, np.take(full, rows, axis=ax))
    _, back = run_all(sp, ax, False, hidden=H)
    for want, got in zip(tp, back):
        np.testing.assert_array_equal(got, want)
