"""Unit tests for the sequence placements (hpccoll.patterns.sharding.positions, the tasp layout
above all), the row assembly of sequence-parallel attention and its argument checks (one
process: MPI.COMM_SELF).  Values against NumPy are checked in tests/mpi/test_mpi_attention.py."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from hpccoll.hamiltonian import decompose
from hpccoll.patterns.sequence_attention import _whole_rows, attention, attention_backward
from hpccoll.patterns.sharding import LAYOUTS, positions, split_counts

LENGTHS = [0, 1, 2, 5, 7, 16, 17, 48, 100, 101]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ranks", range(1, 10))
def test_positions_are_a_permutation(layout, ranks):
    for length in LENGTHS + [ranks - 1, 2 * ranks, 2 * ranks + 1]:
        held = positions(length, ranks, layout)
        assert len(held) == ranks
        together = np.concatenate(held)
        assert np.array_equal(np.sort(together), np.arange(length)), (length, held)


@pytest.mark.parametrize("ranks", range(1, 10))
def test_tasp_holds_the_zigzag_rows_head_and_tail_parts_interleaved(ranks):
    cycles = len(decompose(ranks))
    for length in LENGTHS + [2 * ranks * cycles, 3 * 2 * ranks * cycles + 5]:
        chunks = np.array_split(np.arange(length), 2 * ranks)
        for rank, (tasp, zigzag) in enumerate(zip(positions(length, ranks, "tasp"),
                                                  positions(length, ranks, "zigzag"))):
            assert sorted(tasp) == sorted(zigzag)
            head = np.array_split(chunks[rank], cycles)
            tail = np.array_split(chunks[2 * ranks - 1 - rank], cycles)
            expected = []
            for part in range(cycles):
                expected += list(head[part]) + list(tail[part])
            assert list(tasp) == expected


def test_tasp_examples():
    # 2 ranks, 1 cycle: the zigzag placement itself
    assert [list(rows) for rows in positions(8, 2, "tasp")] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    # 3 ranks, 2 cycles, 12 rows in 6 chunks of 2: head and tail halves interleaved
    assert [list(rows) for rows in positions(12, 3, "tasp")] == \
        [[0, 10, 1, 11], [2, 8, 3, 9], [4, 6, 5, 7]]


def causal_work(queries: np.ndarray, keys: np.ndarray) -> int:
    """(query, key) pairs with key <= query."""
    return int(np.sum(keys[None, :] <= queries[:, None]))


@pytest.mark.parametrize("layout", ["zigzag", "tasp"])
@pytest.mark.parametrize("ranks", range(1, 9))
def test_causal_work_is_balanced_in_total(layout, ranks):
    length = 2 * ranks * len(decompose(ranks)) * 3
    held = positions(length, ranks, layout)
    everything = np.arange(length)
    assert len({causal_work(rows, everything) for rows in held}) == 1
    if ranks > 1:
        contiguous = positions(length, ranks, "contiguous")
        assert len({causal_work(rows, everything) for rows in contiguous}) == ranks


@pytest.mark.parametrize("ranks", range(2, 9))
def test_tasp_causal_work_is_balanced_for_every_chunk(ranks):
    """Every chunk the multiring allgather sends round a cycle (a rank's block cut into k even
    parts) costs every other rank the same causal work: each step is balanced, not only the
    total (the point of TASP's zig-zag placement)."""
    cycles = len(decompose(ranks))
    length = 2 * ranks * cycles * 2
    held = positions(length, ranks, "tasp")
    work = {causal_work(held[rank], chunk)
            for source in range(ranks) for chunk in np.array_split(held[source], cycles)
            for rank in range(ranks) if rank != source}
    assert len(work) == 1, work


def test_whole_rows_assembles_rows_from_any_cut():
    """Element pieces cut without regard to rows, arriving in any order: every row is
    reported exactly once, when its last element arrives."""
    rng = np.random.default_rng(0)
    for rows, width in [(1, 1), (5, 1), (7, 3), (10, 8), (3, 20)]:
        for _ in range(20):
            cuts = np.unique(np.concatenate(([0, rows * width],
                                             rng.integers(0, rows * width, 6))))
            pieces = [slice(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
            arrived = np.zeros(rows * width, bool)
            partial: dict[int, int] = {}
            reported = []
            for index in rng.permutation(len(pieces)):
                arrived[pieces[index]] = True
                got = _whole_rows(pieces[index], width, partial)
                for row in range(got.start, got.stop):
                    assert arrived[row * width:(row + 1) * width].all()
                reported += range(got.start, got.stop)
            assert sorted(reported) == list(range(rows)) and not partial


def test_split_counts_unchanged():
    assert split_counts(10, 4) == [3, 3, 2, 2]


def test_bad_arguments_raise_before_any_message():
    comm = MPI.COMM_SELF
    x = np.zeros((6, 2, 4))
    cases = [
        (TypeError, dict(q=x.tolist())),
        (TypeError, dict(q=x.astype(np.int64), k=x.astype(np.int64),
                         v=x.astype(np.int64))),
        (ValueError, dict(k=np.zeros((6, 2, 5)))),
        (ValueError, dict(v=np.zeros((5, 2, 4)))),
        (ValueError, dict(v=x.astype(np.float32))),
        (ValueError, dict(q=np.zeros(6), k=np.zeros(6), v=np.zeros(6))),
        (ValueError, dict(q=np.zeros((6, 0)), k=np.zeros((6, 0)), v=np.zeros((6, 0)))),
        (ValueError, dict(layout="contiguous")),
        (TypeError, dict(causal=1)),
        (TypeError, dict(scale=float("nan"))),
        (TypeError, dict(scale="0.5")),
        (TypeError, dict(comm=comm.py2f())),
    ]
    for error, change in cases:
        arguments = dict(q=x, k=x, v=x, comm=comm, layout="tasp", causal=False, scale=None)
        arguments.update(change)
        q, k, v, where = (arguments.pop(name) for name in ("q", "k", "v", "comm"))
        with pytest.raises(error):
            attention(q, k, v, where, **arguments)
    out, lse = attention(x, x, x, comm, return_lse=True)
    with pytest.raises(ValueError, match="lse"):
        attention_backward(x, x, x, x, out, lse[:, :1], comm)
    with pytest.raises(ValueError, match="out"):
        attention_backward(x, x, x, x, out[:3], lse, comm)
