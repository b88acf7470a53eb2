"""The log-round planners that look their blocks' edges up instead of listing all p blocks
(Rabenseifner's allreduce, its Swing variant, recursive halving; Bruck's and PAT's
allgathers) give, rank for rank, the same programs as the formulation that listed them (kept
here as the reference): the same steps, messages, regions, local operations and scratch."""

from __future__ import annotations

import pytest

from hpccoll import registry
from hpccoll.algorithms.hypercube import (_Fold, _doubling, _folded_allreduce, _sit_out,
                                          even_edges, window)
from hpccoll.algorithms.bruck import bruck_allgather_rounds
from hpccoll.algorithms.pat import aggregation, pat_rounds
from hpccoll.algorithms.swing import _in_swing_numbering
from hpccoll.collectives import uniform_call
from hpccoll.schedule import (RECV, SCRATCH, SEND, Call, Copy, Program, ProgramBuilder, Reduce,
                              Region, Send, Step, allgather_blocks, even_split, merge_adjacent,
                              one_rank, reduce_scatter_blocks, span, split)

RANKS = [*range(1, 71), 128, 255, 256, 1000]


# ------------------------------------------- the reference: every block listed (O(p) a rank)

def listed_halving(fold, counts, held, accumulate, landing, last_into, steps):
    held_blocks, kept_blocks = split(held, counts), split(accumulate, counts)
    j = fold.new
    for k in range(fold.rounds):
        mask = fold.size >> (k + 1)
        keep_lo = j & ~(mask - 1)
        give_lo = keep_lo ^ mask
        mine = span(held_blocks, keep_lo, keep_lo + mask)
        keep = span(kept_blocks, keep_lo, keep_lo + mask)
        slot = Region(SCRATCH, landing, keep.count)
        targets = last_into if k == fold.rounds - 1 and last_into is not None else [keep]
        ops, at = [], 0
        for dst in targets:
            ops.append(Reduce(dst, (mine.sub(at, dst.count), slot.sub(at, dst.count))))
            at += dst.count
        give = span(held_blocks, give_lo, give_lo + mask)
        steps[fold.first + k].exchange(fold.real(j ^ mask), give, slot, *ops)
        held_blocks = kept_blocks


def listed_half(counts, fold):
    half = fold.size // 2
    return max(sum(counts[:half]), sum(counts[half:])) if half else 0


def listed_rabenseifner(call, fold, steps, source, result):
    rank, n = call.rank, result.count
    counts = even_split(n, fold.size)
    scratch = listed_half(counts, fold)
    held = source
    if fold.pairs:
        landing = result if not call.in_place else Region(SCRATCH, 0, n)
        scratch = max(scratch, landing.stop if landing.buffer == SCRATCH else 0)
        steps[0].recv(rank + 1, landing, on_arrival=(Reduce(result, (source, landing)),))
        held = result
        steps[-1].send(rank + 1, result)
    listed_halving(fold, counts, held, result, 0, None, steps)
    reduced = split(result, counts)
    _doubling(fold, steps, fold.first + fold.rounds, lambda lo, hi: span(reduced, lo, hi))
    return scratch


def listed_recursive_halving(call):
    p, rank, counts = call.p, call.rank, call.counts
    total = sum(counts)
    fold = _Fold(p, rank)
    _, result = reduce_scatter_blocks(call)
    held = Region(SEND, 0, total)
    if p == 1:
        return one_rank(held, result)
    steps = fold.builder(fold.rounds)
    if fold.sits_out:
        return _sit_out(steps, rank - 1, held, result)
    vector = Region(SCRATCH, 0, total)
    last_into = [result]
    if fold.pairs:
        steps[0].recv(rank + 1, vector, on_arrival=(Reduce(vector, (vector, held)),))
        held = vector
        second = split(vector, counts)[rank + 1]
        last_into.append(second)
        steps[-1].send(rank + 1, second)
    new_counts = tuple(sum(counts[slice(*fold.ranks(j, j + 1))]) for j in range(fold.size))
    listed_halving(fold, new_counts, held, vector, total, last_into, steps)
    return steps.program(total + listed_half(new_counts, fold))


def listed_offset_allgather(call, rounds):
    p, rank = call.p, call.rank
    result, source = allgather_blocks(call)
    steps = ProgramBuilder()
    for distance, delivered in rounds:
        step = steps.step()
        step.send((rank - distance) % p,
                  *merge_adjacent(result[(rank + s - distance) % p] for s in delivered))
        step.recv((rank + distance) % p,
                  *merge_adjacent(result[(rank + s) % p] for s in delivered))
    program = steps.program()
    if call.in_place:
        return program
    own = result[rank]

    def from_source(r):
        inside = r.buffer == own.buffer and own.offset <= r.offset and r.stop <= own.stop
        return source.sub(r.offset - own.offset, r.count) if inside else r
    first = program.steps[0] if program.steps else Step()
    first = Step(tuple(Send(s.peer, tuple(map(from_source, s.regions))) for s in first.sends),
                 first.recvs, first.local + ((Copy(source, own),) if own.count else ()))
    return Program((first, *program.steps[1:]), program.scratch, program.window)


# ------------------------------------------------------------------------------------ tests

def compared_ranks(p):
    """The ranks whose programs are compared at p ranks: every rank to 256; at 1000 (the
    reference costs O(p) a rank) both ends, both sides of the power of two below p (whose
    ranks fold in or sit out), and every 37th between."""
    if p <= 256:
        return range(p)
    size = 1 << (p.bit_length() - 1)
    return sorted({*range(0, p, 37), 1, 2, p - 2, p - 1, p - size - 1, p - size, size - 1,
                   size, size + 1})


def vector_lengths(p):
    """Lengths below, at and past p' (with and without a remainder), and empty; past 100
    ranks (ranks compared at O(p) a rank for the reference) one past p' with a
    remainder."""
    size = 1 << (p.bit_length() - 1)
    if p > 100:
        return [3 * size + size // 2 + 1]
    return sorted({0, 1, size - 1, size, size + 1, 3 * size + size // 2 + 1, 1000})


@pytest.mark.parametrize("p", RANKS)
def test_rabenseifner_and_swing_allreduce_same_as_listed(p):
    rabenseifner = registry.get("allreduce", "rabenseifner").planner
    swing = registry.get("allreduce", "swing").planner
    compared = 0
    for n in vector_lengths(p):
        for in_place in (False, True):
            for rank in compared_ranks(p):
                call = uniform_call("allreduce", p, rank, n, in_place=in_place)
                assert rabenseifner(call) == _folded_allreduce(call, 2, listed_rabenseifner), \
                    (p, n, in_place, rank)
                assert swing(call) == _folded_allreduce(
                    call, 2, _in_swing_numbering(listed_rabenseifner, False)), \
                    (p, n, in_place, rank)
                compared += 1
    assert compared == 2 * len(compared_ranks(p)) * len(vector_lengths(p))


@pytest.mark.parametrize("p", RANKS)
def test_recursive_halving_reduce_scatter_same_as_listed(p):
    planner = registry.get("reduce_scatter", "recursive_halving").planner
    uneven = tuple((3 * r) % 7 for r in range(p))     # zeros among them
    for counts in ((uneven,) if p > 100 else (tuple(range(p)), uneven, (5,) * p)):
        for rank in compared_ranks(p):
            call = Call("reduce_scatter", p, rank, counts)
            assert planner(call) == listed_recursive_halving(call), (p, counts[:4], rank)


def test_even_edges_are_even_split_offsets():
    for n, parts in ((0, 1), (7, 4), (1000, 1024), (65536, 8192), (12345, 64)):
        edges = even_edges(n, parts)
        counts = even_split(n, parts)
        assert [edges(i + 1) - edges(i) for i in range(parts)] == list(counts)
        assert edges(0) == 0 and edges(parts) == n
        assert window(Region(SEND, 10, n), edges, 1, parts) == Region(SEND, 10 + counts[0],
                                                                       n - counts[0])


def test_the_comparison_sees_a_different_message():
    """A reference that sends one block too few differs: the equality above can fail."""
    call = uniform_call("allreduce", 8, 3, 64)

    def one_short(call, fold, steps, source, result):
        used = listed_rabenseifner(call, fold, steps, source, result)
        sends = steps[0].sends
        sends[0] = type(sends[0])(sends[0].peer, (sends[0].regions[0].sub(0, 1),))
        return used
    assert registry.get("allreduce", "rabenseifner").planner(call) != \
        _folded_allreduce(call, 2, one_short)


@pytest.mark.parametrize("p", RANKS)
def test_bruck_and_pat_allgather_same_as_listed(p):
    bruck = registry.get("allgather", "bruck").planner
    pat = registry.get("allgather", "pat").planner
    uneven = tuple((3 * r) % 7 for r in range(p))     # zeros among them
    small = (("buffer_bytes", 512),)      # PAT capped: 8 blocks of 6 elements, 64 of 1
    cases = [(uneven, False, small)] if p > 100 else \
        [(counts, in_place, options) for counts in ((1,) * p, uneven)
         for in_place in (False, True) for options in ((), small)]
    for counts, in_place, options in cases:
        for rank in compared_ranks(p):
            call = Call("allgather", p, rank, counts, in_place=in_place, options=options)
            assert pat(call) == listed_offset_allgather(call, pat_rounds(p, aggregation(call))), \
                (p, counts[:4], in_place, options, rank)
            assert bruck(call) == listed_offset_allgather(call, bruck_allgather_rounds(p)), \
                (p, counts[:4], in_place, rank)


def test_a_wrapping_run_is_two_regions():
    """Bruck's last round at p = 7 on rank 5 (in place, blocks of 1..7 elements)."""
    call = Call("allgather", 7, 5, (1, 2, 3, 4, 5, 6, 7), in_place=True)
    last = registry.get("allgather", "bruck").planner(call).steps[-1]
    # offsets 4..6 at distance 4: received from rank 2, blocks 5 + 4.. = 2, 3, 4 (one run);
    # sent to rank 1, blocks 5 + 0.. = 5, 6, 0 (wraps: two regions)
    assert last.recvs[0].peer == 2 and last.recvs[0].regions == (Region(RECV, 3, 12),)
    assert last.sends[0].peer == 1 and last.sends[0].regions == (Region(RECV, 15, 13),
                                                                 Region(RECV, 0, 1))
