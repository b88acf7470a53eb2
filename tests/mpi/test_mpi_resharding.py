"""TP <-> SP resharding under real MPI: every rank builds the same full array (seeded), holds its
hidden shard, and the results of tp_to_sp and sp_to_tp are compared with NumPy's slices of the
full array; bad inputs raise the same error on every rank and leave the communicator usable."""

from __future__ import annotations

import numpy as np
import pytest

from mpi_cases import data

RANKS = [1, 2, 3, 4]
DTYPES = ["float32", "float64", "float16", "int8", "int64", "uint16", "complex64", "bool"]
# (shape, sequence axis): B x S x H, S x H, B x S x heads x d, more batch axes; S < N, zero,
# uneven and even lengths
SHAPES = [((2, 8, 12), -2), ((8, 12), -2), ((5, 7), -2), ((1, 3), 0), ((3, 2, 9), 1),
          ((2, 12, 4, 3), -3), ((2, 7, 5, 2), 1), ((2, 2, 6, 8, 2), 2), ((0, 4, 4), -2),
          ((4, 0), -2), ((2, 16, 0), 1), ((1, 40, 24), -2)]


def full_array(shape, dtype, salt):
    n = int(np.prod(shape))
    values = data(0, n, dtype if dtype != "bool" else "uint8", salt=salt)
    return (values % 2 if dtype == "bool" else values).astype(dtype).reshape(shape)


def algorithms(S, H, p):
    """auto, and the explicit all-to-all algorithms that can serve the exchange."""
    even = S % p == 0 and H % p == 0
    names = ["direct", "pairwise"] + (["ring", "bruck", "native"] if even else ["native"])
    if p & (p - 1) == 0:
        names.append("xor")
    return ["auto"] + names


@pytest.mark.mpi(ranks=RANKS, timeout=300)
def test_tp_to_sp_and_back_match_numpy_and_refuse_bad_input(mpi_ranks, comm):
    """One ``mpiexec`` launch per rank count: the exchanges against NumPy, then bad input."""
    check_tp_to_sp_and_back_match_numpy(comm)
    check_bad_input_raises_the_same_error_on_every_rank(comm)


def check_tp_to_sp_and_back_match_numpy(comm):
    from hpccoll.patterns import sp_to_tp, tp_to_sp
    p, r = comm.size, comm.rank
    for case, ((shape, axis), dtype) in enumerate(zip(SHAPES * 2, DTYPES * 3)):
        full = full_array(shape, dtype, case)
        ax = axis % len(shape)
        S, H = shape[ax], shape[ax + 1]
        y = np.take(full, np.array_split(np.arange(H), p)[r], axis=ax + 1)
        want = np.take(full, np.array_split(np.arange(S), p)[r], axis=ax)
        for name in algorithms(S, H, p):
            what = f"{shape} axis {axis} {dtype} {name}"
            z = tp_to_sp(y, comm, axis=axis, algorithm=name)
            assert z.dtype == y.dtype and z.shape == want.shape, what
            assert np.array_equal(z, want), what
            back = sp_to_tp(z, comm, hidden=H, axis=axis, algorithm=name)
            assert back.shape == y.shape and np.array_equal(back, y), what
    # a non-contiguous shard, and random shapes (the same on every rank: one seed)
    full = full_array((3, 10, 8), "float64", 99)
    y = np.asfortranarray(np.take(full, np.array_split(np.arange(8), p)[r], axis=2))
    assert np.array_equal(tp_to_sp(y, comm, axis=1),
                          np.take(full, np.array_split(np.arange(10), p)[r], axis=1))
    rng = np.random.default_rng(5)
    for case in range(25):
        lead = tuple(rng.integers(1, 3, rng.integers(0, 3)))
        inner = tuple(rng.integers(1, 4, rng.integers(0, 2)))
        S, H = (int(v) for v in rng.integers(0, 3 * p + 2, 2))
        shape = lead + (S, H) + inner
        full = full_array(shape, "int32", 100 + case)
        ax = len(lead)
        y = np.take(full, np.array_split(np.arange(H), p)[r], axis=ax + 1)
        z = tp_to_sp(y, comm, axis=ax)
        assert np.array_equal(z, np.take(full, np.array_split(np.arange(S), p)[r], axis=ax))
        assert np.array_equal(sp_to_tp(z, comm, hidden=H, axis=ax - len(shape)), y), shape


def check_bad_input_raises_the_same_error_on_every_rank(comm):
    from hpccoll.patterns import sp_to_tp, tp_to_sp
    p, r = comm.size, comm.rank
    B, S, H = 4, 1024, 256                          # realistic sizes
    h = np.array_split(np.arange(H), p)[r].size
    s = np.array_split(np.arange(S), p)[r].size
    last = r == p - 1
    cases = [
        ("not an array", TypeError, f"rank {p - 1} is not a NumPy array",
         lambda: tp_to_sp(np.zeros((B, S, h)).tolist() if last else np.zeros((B, S, h)),
                          comm)),
        ("axis out of range", ValueError, "has no axis 3",
         lambda: tp_to_sp(np.zeros((B, S, h)), comm, axis=3)),
        ("no hidden axis", ValueError, "no hidden axis",
         lambda: tp_to_sp(np.zeros((B, S, h)), comm, axis=-1)),
        ("wrong hidden", ValueError, f"whole hidden axis of {H + 1}",
         lambda: sp_to_tp(np.zeros((B, s, H)), comm, hidden=H + 1)),
        ("hidden not an integer", TypeError, "hidden must be an integer",
         lambda: sp_to_tp(np.zeros((B, s, H)), comm, hidden=float(H))),
        ("negative hidden", ValueError, "hidden must be one size >= 0",
         lambda: sp_to_tp(np.zeros((B, s, H)), comm, hidden=-1)),
        ("unknown algorithm", ValueError, "'nonsense' is not one of",
         lambda: tp_to_sp(np.zeros((B, S, h)), comm, algorithm="nonsense")),
    ]
    if p > 1:       # shapes that do not fit together across the ranks
        cases += [
            ("dtype differs", ValueError, "agree in dtype",
             lambda: tp_to_sp(np.zeros((B, S, h), np.float32 if last else np.float64), comm)),
            ("batch differs", ValueError, "agree in dtype",
             lambda: tp_to_sp(np.zeros((B + last, S, h)), comm)),
            ("sequence differs", ValueError, "whole sequence",
             lambda: tp_to_sp(np.zeros((B, S + last, h)), comm)),
            ("hidden not array_split", ValueError, "array_split",
             lambda: tp_to_sp(np.zeros((B, S, h + last)), comm)),
            ("hidden differs", ValueError, "hidden must be one size",
             lambda: sp_to_tp(np.zeros((B, s, H)), comm, hidden=H + last)),
            ("sequence not array_split", ValueError, "sequence shards",
             lambda: sp_to_tp(np.zeros((B, s + last, H)), comm, hidden=H)),
            ("alltoall-only algorithm on uneven blocks", ValueError, "needs alltoallv",
             lambda: tp_to_sp(np.zeros((B, S + 1, h)), comm, algorithm="bruck")),
        ]
    for what, error, pattern, call in cases:
        with pytest.raises(error, match=pattern) as raised:
            call()
        assert raised.type is error, what
        messages = comm.allgather(str(raised.value))
        assert len(set(messages)) == 1, f"{what}: {messages}"
    # no message was left behind: a good exchange after all the bad ones
    full = np.arange(B * S * H, dtype=np.float64).reshape(B, S, H)
    y = full[:, :, np.array_split(np.arange(H), p)[r]]
    assert np.array_equal(tp_to_sp(y, comm), full[:, np.array_split(np.arange(S), p)[r]])
