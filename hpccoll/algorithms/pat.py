"""PAT, NCCL's Parallel Aggregated Trees (NCCL 2.23, "New Scaling Algorithm and
Initialization with NCCL 2.23"): allgather and reduce-scatter for any p, as Bruck's schedule
with the dimension order reversed and a bounded number of blocks per message.

Blocks move under offsets as in :mod:`hpccoll.algorithms.bruck` (rank r holds block r + s at
offset s); block r + s reaches rank r over a binomial tree whose hops are the set bits of s,
highest first, so every source's block is broadcast down a tree of its own and the p trees
run side by side, aggregated into shared messages.  With P = 2^ceil(log2 p) and A blocks per
message (a power of two, at most P/2), the offsets fall into the P/A classes s mod P/A:

* class 0 (the multiples of P/A) goes first, as Bruck's rounds in reverse: distances P/2,
  P/4, ..., P/A, each round delivering the odd multiples of its distance;
* then classes c = 1, 2, ..., P/A - 1, one round each: the (up to A) offsets of class c all
  have the same lowest set bit, so they arrive together from distance 2^(lowest bit of c),
  after their parents (class c minus that bit) have.

With A = P/2 this is Bruck's allgather with the distances reversed: the long-distance hops
carry one block and the largest message (p/2 blocks) goes to the nearest rank, so the last
round is not the long one.  A smaller A bounds every message by A blocks (NCCL sizes A to its
staging buffer; here option ``buffer_bytes``) at the price of more rounds: log2 A + P/A - 1.
The reduce-scatter runs the same rounds in reverse with partial sums, each finished and sent
before the class it feeds, so at most about A log2(P/A) partial sums are held at once: the
in-flight buffer space is logarithmic in p for a given message bound.  Cost notation as in
:mod:`hpccoll.algorithms.ring`.
"""

from __future__ import annotations

import operator

from ..registry import Cost, Option, register
from ..schedule import Call, Program
from .bruck import OffsetRound, integer_at_least, offset_allgather, offset_reduce_scatter

BUFFER_BYTES = 1 << 20


BUFFER = Option("buffer_bytes", "a positive integer", "1 MiB",
                "the bytes of blocks a message carries at most (its in-flight buffer)",
                lambda value: integer_at_least(value, 1))


def aggregation(call: Call) -> int:
    """Blocks per message: the largest power of two whose blocks (the largest of the call's)
    fit option ``buffer_bytes`` (default 1 MiB), at least 1 and at most P/2."""
    half = (1 << (call.p - 1).bit_length()) // 2
    block = max(call.counts, default=0) * call.itemsize
    fits = operator.index(call.option("buffer_bytes", BUFFER_BYTES)) // block if block else half
    blocks = 1
    while 2 * blocks <= min(fits, half):
        blocks *= 2
    return blocks


def pat_rounds(p: int, blocks: int) -> list[OffsetRound]:
    """The allgather rounds of PAT at ``blocks`` blocks per message (see the module's
    description): class 0 by reversed Bruck rounds, then one round per other class."""
    classes = max(1, (1 << (p - 1).bit_length()) // max(blocks, 1))
    rounds = []
    distance = (1 << (p - 1).bit_length()) // 2
    while distance >= classes:
        rounds.append((distance, tuple(range(distance, p, 2 * distance))))
        distance //= 2
    for c in range(1, min(classes, p)):
        rounds.append((c & -c, tuple(range(c, p, classes))))
    return rounds


_TIME = "⌈log2 p⌉α + (p-1)nβ{} while p/2 blocks fit buffer_bytes; else log2 A + P/A - 1 rounds"


@register("allgather", "pat", family="pat", options=(BUFFER,),
          source="NCCL 2.23 PAT (Parallel Aggregated Trees)",
          cost=Cost("ceil(log2(p))", "(p - 1) * n", _TIME.format("")))
def plan_pat_allgather(call: Call) -> Program:
    """PAT allgather: Bruck's rounds with the distances reversed (the farthest first, one
    block; the nearest last, p/2 blocks), messages capped at A blocks.

    Rounds ceil(log2 p) when A = P/2 (P = 2^ceil(log2 p)), log2 A + P/A - 1 (fewer where
    classes lie beyond p) for smaller A; bytes sent per rank (p-1)n; time ceil(log2 p) alpha
    + (p-1) n beta.  A is the largest power of two with A blocks within option
    ``buffer_bytes`` (default 1 MiB).  Uneven blocks, IN_PLACE, any p; no scratch: every
    block lands in its place, messages are packed from strided blocks.
    """
    return offset_allgather(call, pat_rounds(call.p, aggregation(call)))


@register("reduce_scatter", "pat", family="pat", options=(BUFFER,),
          source="NCCL 2.23 PAT (Parallel Aggregated Trees)",
          cost=Cost("ceil(log2(p))", "(p - 1) * n", _TIME.format(" + (p-1)nγ")))
def plan_pat_reduce_scatter(call: Call) -> Program:
    """PAT reduce-scatter: the PAT allgather's rounds in reverse with partial sums: the
    nearest rank first (p/2 partial sums), the farthest last (one), messages capped at A blocks.

    Rounds and bytes as the PAT allgather; time ceil(log2 p) alpha + (p-1) n (beta + gamma).
    Uneven recvcounts, any p.  Scratch: one message's landing area (A blocks) and the partial
    sums in progress, about A log2(P/A) blocks (with A = 1 a logarithmic bound).
    """
    return offset_reduce_scatter(call, pat_rounds(call.p, aggregation(call)))
