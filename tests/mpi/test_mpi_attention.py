"""Sequence-parallel attention (hpccoll.patterns.attention, in hpccoll.patterns.sequence_attention) against single-process NumPy
attention, and shard/unshard of every placement, under real MPI.

Every rank builds the same full Q, K, V (seeded), takes its shard, and compares its share of
the distributed result with its rows of the reference: float64, relative error < 1e-10.
"""

from __future__ import annotations

import numpy as np
import pytest

RANKS = [1, 2, 3, 4]
TOLERANCE = 1e-10


def by_head(x):
    heads = x.shape[1] if x.ndim == 3 else 1
    return x.reshape(x.shape[0], heads, x.shape[-1]).transpose(1, 0, 2)


def from_heads(x, shape):
    return x.transpose(1, 0, 2).reshape(shape)


def reference(q, k, v, dout, causal, scale):
    """Full attention in one process: out, lse and the gradients dq, dk, dv for ``dout``."""
    qh, kh, vh, dh = (by_head(x) for x in (q, k, v, dout))
    scores = qh @ kh.transpose(0, 2, 1) * scale
    if causal:
        scores = np.where(np.tri(len(q), dtype=bool), scores, -np.inf)
    top = scores.max(axis=2, keepdims=True)
    weights = np.exp(scores - top)
    total = weights.sum(axis=2, keepdims=True)
    probs = weights / total
    lse = (top + np.log(total))[:, :, 0].T.reshape(q.shape[:-1])
    dprobs = dh @ vh.transpose(0, 2, 1)
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=2, keepdims=True))
    grads = (probs @ vh, dscores @ kh * scale, dscores.transpose(0, 2, 1) @ qh * scale,
             probs.transpose(0, 2, 1) @ dh)
    return (from_heads(grads[0], q.shape), lse,
            *(from_heads(g, shape) for g, shape in zip(grads[1:], (q.shape, k.shape, v.shape))))


def attention_module():
    from hpccoll.patterns import sequence_attention
    return sequence_attention


def inputs(length, shape, seed, count=3, dtype="float64"):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((length, *shape)).astype(dtype) for _ in range(count)]


def relative_error(got, want):
    return np.abs(got - want).max(initial=0) / max(np.abs(want).max(initial=0), 1e-300)


def lengths_for(p):
    """Divisible and not, shorter than the rank count, and divisible by 2p x cycles."""
    from hpccoll.hamiltonian import decompose
    return sorted({1, 2, max(p - 1, 1), 13, 4 * p, 2 * p * len(decompose(p)) * 2, 67})


def check_forward(comm, lengths, shapes, stream_too=True):
    from hpccoll.patterns import ATTENTION_LAYOUTS, attention, shard
    worst = 0.0
    for length in lengths:
        for shape in shapes:
            q, k, v = inputs(length, shape, seed=length)
            for causal in (False, True):
                for scale in (None, 0.7):
                    s = 1 / np.sqrt(shape[-1]) if scale is None else scale
                    want, want_lse, *_ = reference(q, k, v, q, causal, s)
                    for layout, (placement, _) in ATTENTION_LAYOUTS.items():
                        local = [shard(x, comm, placement) for x in (q, k, v)]
                        for stream in (True, False) if stream_too else (True,):
                            out, lse = attention(*local, comm, layout=layout, causal=causal,
                                                 scale=scale, return_lse=True, stream=stream)
                            case = f"S={length} {shape} causal={causal} {layout} {stream}"
                            assert out.shape == local[0].shape and out.dtype == np.float64
                            for got, full in ((out, want), (lse, want_lse)):
                                error = relative_error(got, shard(full, comm, placement))
                                assert error < TOLERANCE, f"{case}: {error}"
                                worst = max(worst, error)
    return worst


# Each test function is one ``mpiexec`` launch per rank count: it runs several groups of
# cases (the check_* functions), not one launch each.

@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_attention_matches_numpy(mpi_ranks, comm, monkeypatch):
    """float64 of every shape and layout, float32 and one head, then bad arguments."""
    worst = check_forward(comm, lengths_for(comm.size), [(5,), (3, 4)])
    assert worst > 0 or comm.size == 1       # the comparison saw rounding, not nothing
    check_float32_and_1_head_3d(comm)
    check_bad_arguments_raise_on_every_rank(comm)
    # causal pieces cut into blocks of 3 rows (256 by default: more than these lengths)
    monkeypatch.setattr(attention_module(), "CAUSAL_BLOCK", 3)
    check_forward(comm, [13, 67], [(3, 4)], stream_too=False)


@pytest.mark.mpi(ranks=[8], timeout=300)
def test_attention_at_8_ranks(mpi_ranks, comm):
    check_forward(comm, [3, 8, 61, 2 * 8 * 7], [(3, 4)], stream_too=False)


def check_float32_and_1_head_3d(comm):
    from hpccoll.patterns import ATTENTION_LAYOUTS, attention, shard
    for shape in [(1, 8), (8,)]:
        q, k, v = inputs(29, shape, seed=3, dtype="float32")
        want, *_ = reference(*(x.astype(np.float64) for x in (q, k, v, q)), True,
                             1 / np.sqrt(8))
        for layout, (placement, _) in ATTENTION_LAYOUTS.items():
            out = attention(*(shard(x, comm, placement) for x in (q, k, v)), comm,
                            layout=layout, causal=True)
            assert out.dtype == np.float32
            assert relative_error(out, shard(want, comm, placement)) < 1e-5


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_attention_backward_matches_numpy(mpi_ranks, comm, monkeypatch):
    for block in (256, 3):                                      # 3: causal pieces in blocks
        monkeypatch.setattr(attention_module(), "CAUSAL_BLOCK", block)
        check_backward(comm)


def check_backward(comm):
    from hpccoll.patterns import ATTENTION_LAYOUTS, attention, attention_backward, shard
    p = comm.size
    for length in sorted({1, max(p - 1, 1), 13, 4 * p, 40}):
        for shape in [(4,), (2, 3)]:
            q, k, v, dout = inputs(length, shape, seed=length + 1, count=4)
            for causal in (False, True):
                out_full, _, *grads = reference(q, k, v, dout, causal, 0.6)
                for layout, (placement, _) in ATTENTION_LAYOUTS.items():
                    local = [shard(x, comm, placement) for x in (q, k, v)]
                    out, lse = attention(*local, comm, layout=layout, causal=causal,
                                         scale=0.6, return_lse=True)
                    got = attention_backward(shard(dout, comm, placement), *local, out, lse,
                                             comm, layout=layout, causal=causal, scale=0.6)
                    for name, mine, full in zip("qkv", got, grads):
                        want = shard(full, comm, placement)
                        assert mine.shape == want.shape
                        # relative to the largest gradient (dq and dk vanish at S = 1)
                        scale = max(np.abs(g).max() for g in grads)
                        error = np.abs(mine - want).max(initial=0) / scale
                        assert error < TOLERANCE, \
                            f"d{name} S={length} {shape} causal={causal} {layout}: {error}"


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_shard_unshard_round_trip_and_bad_arguments(mpi_ranks, comm):
    check_shard_unshard_round_trip(comm)
    check_unshard_bad_arguments_raise_on_every_rank(comm)


def check_shard_unshard_round_trip(comm):
    from hpccoll.patterns import LAYOUTS, positions, shard, unshard
    p, r = comm.size, comm.rank
    for layout in LAYOUTS:
        for length in sorted({0, 1, max(p - 1, 1), 13, 4 * p, 67}):
            full = np.arange(length * 6, dtype=np.float64).reshape(length, 2, 3)
            for axis in (0, 1, -3):
                moved = np.moveaxis(full, 0, axis % 3)
                local = shard(moved, comm, layout, axis=axis)
                rows = positions(length, p, layout)[r]
                assert np.array_equal(local, np.take(moved, rows, axis=axis))
                assert np.array_equal(unshard(local, comm, layout, axis=axis), moved)


def check_bad_arguments_raise_on_every_rank(comm):
    """Problems only one rank can see reach every rank through the agreement, so all raise
    alike (no rank waits for a message that never comes); a good call works afterwards."""
    from hpccoll.patterns import attention, shard
    p, r = comm.size, comm.rank
    length = 4 * p
    q, k, v = inputs(length, (2, 3), seed=5)
    local = [shard(x, comm, "zigzag") for x in (q, k, v)]
    last = r == p - 1
    bad = [
        (ValueError, "not the zigzag placement",
         [np.concatenate((x, x[:1])) if last and p > 1 else x for x in local], {}),
        (ValueError, "rank", [local[0], local[1][:, :1] if last else local[1], local[2]], {}),
        (TypeError, "rank", [local[0].tolist() if last else local[0], *local[1:]], {}),
        (ValueError, "dtype", [x.astype(np.float32) if last and p > 1 else x for x in local],
         {}),
        (ValueError, "different", local, {"causal": last and p > 1}),
        (ValueError, "different", local, {"scale": 0.5 + last * (p > 1)}),
        (ValueError, "unknown attention layout", local, {"layout": "striped"}),
    ]
    for error, message, arrays, options in bad:
        if p == 1 and message in ("not the zigzag placement", "dtype", "different"):
            continue
        with pytest.raises(error, match=message):
            attention(*arrays, comm, **{"layout": "zigzag", **options})
    want, *_ = reference(q, k, v, q, True, 1 / np.sqrt(3))
    out = attention(*local, comm, layout="zigzag", causal=True)
    assert relative_error(out, shard(want, comm, "zigzag")) < TOLERANCE


def check_unshard_bad_arguments_raise_on_every_rank(comm):
    """unshard with one rank's arguments wrong (1 MiB shards): the same error on every rank,
    naming that rank, before the payload moves; a good call works afterwards."""
    from hpccoll.patterns import shard, unshard
    p, r = comm.size, comm.rank
    full = np.random.default_rng(2).standard_normal((1024 * p, 128))
    local = shard(full, comm, "zigzag")
    last = r == p - 1
    on_last = f"arguments on rank {p - 1}: "
    bad = [(TypeError, on_last + "expected a NumPy array", local.tolist() if last else local,
            {}),
           (ValueError, on_last + "axis 2 is out of range", local, {"axis": 2 if last else 0}),
           (ValueError, on_last + "unknown layout 'striped'", local,
            {"layout": "striped" if last else "zigzag"})]
    if p > 1:
        bad += [(ValueError, "differ in shape or dtype",
                 local.astype(np.float32) if last else local, {}),
                (ValueError, "not the zigzag layout", local[1:] if last else local, {})]
    for error, message, array, options in bad:
        with pytest.raises(error, match=message):
            unshard(array, comm, **{"layout": "zigzag", **options})
    assert np.array_equal(unshard(local, comm, "zigzag"), full)
