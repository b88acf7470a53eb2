"""Rooted collectives: broadcast and reduce over a binomial tree, van de Geijn's
scatter-allgather (and its mirror, reduce-scatter-gather) and a pipelined chain.

Ranks are renumbered relative to the root (``v = (rank - root) mod p``), so every schedule is
written for root 0.  A reduce is the mirror of its broadcast: the same tree or chain walked
from the leaves to the root, each inner rank combining what its children sent with its own
input in a scratch accumulator (the root's accumulator is its receive buffer).

Cost notation: p ranks, n the elements of the vector, alpha the per-message start-up, beta
the per-element time, gamma the per-element reduction time, k the chain's segments.
"""

from __future__ import annotations

from ..registry import Cost, register, segment_option
from ..schedule import (RECV, SCRATCH, Call, Program, ProgramBuilder, Reduce, Region, blocks,
                        even_split, one_rank, relabel, segment_count, segments, sequence, span)

CHAIN_SEGMENT_BYTES = 256 << 10


def _from_root(call: Call, program: Program) -> Program:
    """A program written for relative ranks (the root is 0) run by the real ranks."""
    return relabel(program, [(v + call.root) % call.p for v in range(call.p)])


def _relative(call: Call) -> int:
    return (call.rank - call.root) % call.p


def _rounds(p: int) -> int:
    return (p - 1).bit_length()         # ceil(log2 p)


def _accumulator(call: Call, n: int) -> tuple[Region, int]:
    """Where a reducing rank accumulates the vector (the root's receive buffer, else
    scratch) and the scratch offset after it."""
    if call.rank == call.root:
        return Region(RECV, 0, n), 0
    return Region(SCRATCH, 0, n), n


def _pieces(call: Call, buffer: str) -> list[Region]:
    """The vector in ``buffer`` cut into p even blocks (block v: relative rank v's)."""
    return blocks(buffer, even_split(call.counts[0], call.p))


# ------------------------------------------------------------------------------ broadcast

@register("bcast", "binomial", family="tree", options=(), source="classic binomial tree",
          cost=Cost("ceil(log2(p))", "n * ceil(log2(p))", "⌈log₂p⌉(α + nβ)"))
def plan_binomial_bcast(call: Call) -> Program:
    """Binomial-tree broadcast: in round s every rank that has the data sends it all to the
    rank 2^s further on, so the holders double each round.

    Rounds ceil(log2 p); the root sends n ceil(log2 p); time ceil(log2 p)(alpha + n beta).
    Best for small messages."""
    p, v = call.p, _relative(call)
    whole = Region(RECV, 0, call.counts[0])
    plan = ProgramBuilder(_rounds(p))
    for s in range(_rounds(p)):
        mask = 1 << s
        if v < mask and v + mask < p:
            plan[s].send(v + mask, whole)
        elif mask <= v < 2 * mask:
            plan[s].recv(v - mask, whole)
    return _from_root(call, plan.program())


def _scatter(call: Call, pieces: list[Region]) -> Program:
    """Binomial scatter of the p blocks from the root (relative ranks): in round s (halving
    masks) a rank holding blocks v..v+2m-1 sends the upper half to v+m; then rank v holds
    block v."""
    p, v = call.p, _relative(call)
    plan = ProgramBuilder(_rounds(p))
    for s in range(_rounds(p)):
        mask = 1 << (_rounds(p) - 1 - s)
        if v % (2 * mask) == 0 and v + mask < p:
            plan[s].send(v + mask, span(pieces, v + mask, v + 2 * mask))
        elif v % (2 * mask) == mask:
            plan[s].recv(v - mask, span(pieces, v, v + mask))
    return plan.program()


def _gather(call: Call, pieces: list[Region]) -> Program:
    """The mirror of :func:`_scatter`: block v of every relative rank v gathered to the root."""
    p, v = call.p, _relative(call)
    plan = ProgramBuilder(_rounds(p))
    for s in range(_rounds(p)):
        mask = 1 << s
        if v % (2 * mask) == mask:
            plan[s].send(v - mask, span(pieces, v, v + mask))
        elif v % (2 * mask) == 0 and v + mask < p:
            plan[s].recv(v + mask, span(pieces, v + mask, v + 2 * mask))
    return plan.program()


@register("bcast", "scatter_allgather", family="tree", options=(),
          source="van de Geijn: scatter + ring allgather",
          cost=Cost("ceil(log2(p)) + p - 1", "2 * (p - 1) * n / p",
                    "(⌈log₂p⌉ + p-1)α + 2(p-1)/p·nβ"))
def plan_scatter_allgather_bcast(call: Call) -> Program:
    """Scatter-allgather broadcast (van de Geijn): a binomial scatter of p blocks, then a
    ring allgather of them.

    Rounds ceil(log2 p) + p - 1; the root sends 2(p-1)/p n; time
    (ceil(log2 p) + p - 1) alpha + 2(p-1)/p n beta: for long messages."""
    p, v = call.p, _relative(call)
    pieces = _pieces(call, RECV)
    ring = ProgramBuilder(p - 1)
    for k in range(p - 1):
        ring[k].send((v + 1) % p, pieces[(v - k) % p])
        ring[k].recv((v - 1) % p, pieces[(v - k - 1) % p])
    return _from_root(call, sequence(_scatter(call, pieces), ring.program()))


def _chain_segments(call: Call, region: Region) -> list[Region]:
    return segments(region, segment_count(call, CHAIN_SEGMENT_BYTES)) if region.count else []


@register("bcast", "chain", family="tree", source="pipelined chain",
          options=(segment_option("256 KiB"),),
          cost=Cost("p - 1", "n * min(1, p - 1)", "(p+k-2)(α + n/k·β), k segments"))
def plan_chain_bcast(call: Call) -> Program:
    """Pipelined chain broadcast: the vector cut into k segments (``segment_bytes``, default
    256 KiB) flows down the chain root, root+1, ...; rank v forwards segment j in step j + v.

    Rounds p + k - 2; every rank but the last sends n; time (p+k-2)(alpha + n/k beta):
    bandwidth-optimal for long messages."""
    p, v = call.p, _relative(call)
    pieces = _chain_segments(call, Region(RECV, 0, call.counts[0]))
    plan = ProgramBuilder(len(pieces) + p - 2 if pieces and p > 1 else 0)
    for j, piece in enumerate(pieces):
        if v > 0:
            plan[j + v - 1].recv(v - 1, piece)
        if v < p - 1:
            plan[j + v].send(v + 1, piece)
    return _from_root(call, plan.program())


# --------------------------------------------------------------------------------- reduce

@register("reduce", "binomial", family="tree", options=(), source="classic binomial tree",
          cost=Cost("ceil(log2(p))", "n * min(1, p - 1)", "⌈log₂p⌉(α + nβ + nγ)"))
def plan_binomial_reduce(call: Call) -> Program:
    """Binomial-tree reduce, the mirror of the binomial broadcast: in round s a rank whose
    lowest set bit (relative to the root) is s sends its partial result to the rank 2^s
    below, which combines it on arrival.

    Rounds ceil(log2 p); each rank sends n once; time ceil(log2 p)(alpha + n beta + n gamma)."""
    p, v, n = call.p, _relative(call), call.counts[0]
    partial = Region(call.input, 0, n)
    if p == 1 or not n:
        return one_rank(partial, Region(RECV, 0, n))
    acc, at = _accumulator(call, n)
    arriving = Region(SCRATCH, at, n)
    plan = ProgramBuilder(_rounds(p))
    for s in range(_rounds(p)):
        mask = 1 << s
        if v % (2 * mask) == mask:
            plan[s].send(v - mask, partial)
        elif v % (2 * mask) == 0 and v + mask < p:
            plan[s].recv(v + mask, arriving, on_arrival=(Reduce(acc, (partial, arriving)),))
            partial = acc
    return _from_root(call, plan.program(at + n if partial == acc else 0))


@register("reduce", "reduce_scatter_gather", family="tree", options=(),
          source="Rabenseifner: ring reduce-scatter + binomial gather",
          cost=Cost("p - 1 + ceil(log2(p))",
                    "n / p * (p - 1 + max(2 ** (ceil(log2(p)) - 2), p - 2 ** (ceil(log2(p)) - 1)))"
                    " if p > 1 else 0",
                    "(p-1 + ⌈log₂p⌉)α + (3/2)·nβ + (p-1)/p·nγ"))
def plan_reduce_scatter_gather_reduce(call: Call) -> Program:
    """Reduce-scatter-gather reduce (Rabenseifner), the mirror of scatter-allgather: a ring
    reduce-scatter leaves block v fully reduced on relative rank v, then a binomial gather
    brings the blocks to the root.

    Rounds p - 1 + ceil(log2 p); a rank sends at most (3/2) n; time
    (p - 1 + ceil(log2 p)) alpha + ~1.5 n beta + (p-1)/p n gamma: for long vectors."""
    p, v, n = call.p, _relative(call), call.counts[0]
    if p == 1 or not n:
        return one_rank(Region(call.input, 0, n), Region(RECV, 0, n))
    acc, at = _accumulator(call, n)
    own, partial = _pieces(call, call.input), _pieces(call, acc.buffer)
    arriving = Region(SCRATCH, at, -(-n // p))
    ring = ProgramBuilder(p - 1)
    for k in range(p - 1):
        out, into = (v - k - 1) % p, (v - k - 2) % p
        ring[k].send((v + 1) % p, own[out] if k == 0 else partial[out])
        landed = arriving.sub(0, partial[into].count)
        ring[k].recv((v - 1) % p, landed,
                     on_arrival=(Reduce(partial[into], (own[into], landed)),))
    gather = _gather(call, partial)
    return _from_root(call, sequence(ring.program(at + arriving.count), gather))


@register("reduce", "chain", family="tree", source="pipelined chain",
          options=(segment_option("256 KiB"),),
          cost=Cost("p - 1", "n * min(1, p - 1)", "(p+k-2)(α + n/k·β + n/k·γ), k segments"))
def plan_chain_reduce(call: Call) -> Program:
    """Pipelined chain reduce, the mirror of the chain broadcast: segments flow from the
    last rank of the chain to the root, each rank adding its own input to a segment as it
    passes (``segment_bytes``, default 256 KiB).

    Rounds p + k - 2; every rank but the root sends n; time (p+k-2)(alpha + n/k (beta +
    gamma))."""
    p, v, n = call.p, _relative(call), call.counts[0]
    if p == 1 or not n:
        return one_rank(Region(call.input, 0, n), Region(RECV, 0, n))
    acc, at = _accumulator(call, n)
    sources = _chain_segments(call, Region(call.input, 0, n))
    partials = _chain_segments(call, acc)
    arriving = Region(SCRATCH, at, sources[0].count)
    plan = ProgramBuilder(len(sources) + p - 2)
    last = v == p - 1
    for j, (own, partial) in enumerate(zip(sources, partials)):
        if not last:
            into = arriving.sub(0, own.count)
            plan[j + p - 2 - v].recv(v + 1, into, on_arrival=(Reduce(partial, (own, into)),))
        if v > 0:
            plan[j + p - 1 - v].send(v - 1, own if last else partial)
    return _from_root(call, plan.program(at + (0 if last else arriving.count)))
