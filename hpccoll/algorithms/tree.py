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

from ..registry import Cost, register
from ..schedule import (RECV, SCRATCH, Call, Program, Recv, Reduce, Region, Send, Step,
                        even_split, offsets, one_rank, segment_count, segments)

CHAIN_SEGMENT_BYTES = 256 << 10


def _real(call: Call, v: int) -> int:
    """The rank of relative rank ``v``."""
    return (v + call.root) % call.p


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


def _blocks(n: int, p: int, first: int, stop: int, buffer: str) -> Region:
    """Blocks ``first..stop-1`` of the vector cut into p even blocks, as one region."""
    at = offsets(even_split(n, p)) + (n,)
    return Region(buffer, at[first], at[min(stop, p)] - at[first])


def _transfer(step: dict, peer: int, region: Region, receive: bool,
              arrival: tuple = ()) -> None:
    """Add a send (or a receive, with on-arrival ops) of ``region`` to ``step``; nothing for
    an empty region (both sides see the same counts)."""
    if region.count:
        if receive:
            step["recvs"].append(Recv(peer, (region,), arrival))
        else:
            step["sends"].append(Send(peer, (region,)))


def _program(steps: list[dict], scratch: int = 0) -> Program:
    return Program(tuple(Step(tuple(s["sends"]), tuple(s["recvs"])) for s in steps), scratch)


def _new_steps(count: int) -> list[dict]:
    return [{"sends": [], "recvs": []} for _ in range(count)]


# ------------------------------------------------------------------------------ broadcast

@register("bcast", "binomial", family="tree", source="classic binomial tree",
          cost=Cost("ceil(log2(p))", "n * ceil(log2(p))", "⌈log₂p⌉(α + nβ)"))
def plan_binomial_bcast(call: Call) -> Program:
    """Binomial-tree broadcast: in round s every rank that has the data sends it all to the
    rank 2^s further on, so the holders double each round.

    Rounds ceil(log2 p); the root sends n ceil(log2 p); time ceil(log2 p)(alpha + n beta).
    Best for small messages."""
    p, v, n = call.p, _relative(call), call.counts[0]
    whole = Region(RECV, 0, n)
    steps = _new_steps(_rounds(p))
    for s, step in enumerate(steps):
        mask = 1 << s
        if v < mask and v + mask < p:
            _transfer(step, _real(call, v + mask), whole, receive=False)
        elif mask <= v < 2 * mask:
            _transfer(step, _real(call, v - mask), whole, receive=True)
    return _program(steps)


def _scatter_steps(call: Call, buffer: str) -> list[dict]:
    """Binomial scatter of the p blocks from the root: in round s (halving masks) a rank that
    holds blocks v..v+2m-1 sends the upper half to v+m; afterwards rank v holds block v."""
    p, v, n = call.p, _relative(call), call.counts[0]
    steps = _new_steps(_rounds(p))
    for s, step in enumerate(steps):
        mask = 1 << (len(steps) - 1 - s)
        if v % (2 * mask) == 0 and v + mask < p:
            _transfer(step, _real(call, v + mask),
                      _blocks(n, p, v + mask, v + 2 * mask, buffer), receive=False)
        elif v % (2 * mask) == mask:
            _transfer(step, _real(call, v - mask), _blocks(n, p, v, v + mask, buffer),
                      receive=True)
    return steps


def _gather_steps(call: Call, buffer: str) -> list[dict]:
    """The mirror of :func:`_scatter_steps`: block v of every rank v gathered to the root."""
    p, v, n = call.p, _relative(call), call.counts[0]
    steps = _new_steps(_rounds(p))
    for s, step in enumerate(steps):
        mask = 1 << s
        if v % (2 * mask) == mask:
            _transfer(step, _real(call, v - mask), _blocks(n, p, v, v + mask, buffer),
                      receive=False)
        elif v % (2 * mask) == 0 and v + mask < p:
            _transfer(step, _real(call, v + mask),
                      _blocks(n, p, v + mask, v + 2 * mask, buffer), receive=True)
    return steps


@register("bcast", "scatter_allgather", family="tree",
          source="van de Geijn: scatter + ring allgather",
          cost=Cost("ceil(log2(p)) + p - 1", "2 * (p - 1) * n / p",
                    "(⌈log₂p⌉ + p-1)α + 2(p-1)/p·nβ"))
def plan_scatter_allgather_bcast(call: Call) -> Program:
    """Scatter-allgather broadcast (van de Geijn): a binomial scatter of p blocks, then a
    ring allgather of them.

    Rounds ceil(log2 p) + p - 1; the root sends 2(p-1)/p n; time
    (ceil(log2 p) + p - 1) alpha + 2(p-1)/p n beta: for long messages."""
    p, v, n = call.p, _relative(call), call.counts[0]
    ring = _new_steps(p - 1)
    for k, step in enumerate(ring):
        _transfer(step, _real(call, v + 1), _blocks(n, p, (v - k) % p, (v - k) % p + 1, RECV),
                  receive=False)
        held = (v - k - 1) % p
        _transfer(step, _real(call, v - 1), _blocks(n, p, held, held + 1, RECV), receive=True)
    return _program(_scatter_steps(call, RECV) + ring)


def _chain_segments(call: Call, region: Region) -> list[Region]:
    return segments(region, segment_count(call, CHAIN_SEGMENT_BYTES)) if region.count else []


@register("bcast", "chain", family="tree", source="pipelined chain",
          cost=Cost("p - 1", "n * min(1, p - 1)", "(p+k-2)(α + n/k·β), k segments"))
def plan_chain_bcast(call: Call) -> Program:
    """Pipelined chain broadcast: the vector cut into k segments (``segment_bytes``, default
    256 KiB) flows down the chain root, root+1, ...; rank v forwards segment j in step j + v.

    Rounds p + k - 2; every rank but the last sends n; time (p+k-2)(alpha + n/k beta):
    bandwidth-optimal for long messages."""
    p, v = call.p, _relative(call)
    pieces = _chain_segments(call, Region(RECV, 0, call.counts[0]))
    steps = _new_steps(len(pieces) + p - 2 if pieces and p > 1 else 0)
    for j, piece in enumerate(pieces):
        if v > 0:
            _transfer(steps[j + v - 1], _real(call, v - 1), piece, receive=True)
        if v < p - 1:
            _transfer(steps[j + v], _real(call, v + 1), piece, receive=False)
    return _program(steps)


# --------------------------------------------------------------------------------- reduce

@register("reduce", "binomial", family="tree", source="classic binomial tree",
          cost=Cost("ceil(log2(p))", "n * min(1, p - 1)", "⌈log₂p⌉(α + nβ + nγ)"))
def plan_binomial_reduce(call: Call) -> Program:
    """Binomial-tree reduce, the mirror of the binomial broadcast: in round s a rank whose
    lowest set bit (relative to the root) is s sends its partial result to the rank 2^s
    below, which combines it on arrival.

    Rounds ceil(log2 p); each rank sends n once; time ceil(log2 p)(alpha + n beta + n gamma)."""
    p, v, n = call.p, _relative(call), call.counts[0]
    source = Region(call.input, 0, n)
    if p == 1 or not n:
        return one_rank(source, Region(RECV, 0, n))
    acc, at = _accumulator(call, n)
    arriving = Region(SCRATCH, at, n)
    steps = _new_steps(_rounds(p))
    partial = source
    for s, step in enumerate(steps):
        mask = 1 << s
        if v % (2 * mask) == mask:
            _transfer(step, _real(call, v - mask), partial, receive=False)
        elif v % (2 * mask) == 0 and v + mask < p:
            _transfer(step, _real(call, v + mask), arriving, receive=True,
                      arrival=(Reduce(acc, (partial, arriving)),))
            partial = acc
    return _program(steps, at + n if partial == acc else 0)


@register("reduce", "reduce_scatter_gather", family="tree",
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
    arriving = Region(SCRATCH, at, -(-n // p))

    def block(buffer: str, b: int) -> Region:
        return _blocks(n, p, b, b + 1, buffer)
    ring = _new_steps(p - 1)
    for k, step in enumerate(ring):
        out = (v - k - 1) % p
        _transfer(step, _real(call, v + 1), block(call.input if k == 0 else acc.buffer, out),
                  receive=False)
        into = (v - k - 2) % p
        part = block(acc.buffer, into)
        _transfer(step, _real(call, v - 1), arriving.sub(0, part.count), receive=True,
                  arrival=(Reduce(part, (block(call.input, into), arriving.sub(0, part.count))),))
    return _program(ring + _gather_steps(call, acc.buffer), at + arriving.count)


@register("reduce", "chain", family="tree", source="pipelined chain",
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
    steps = _new_steps(len(sources) + p - 2)
    last = v == p - 1
    for j, (own, partial) in enumerate(zip(sources, partials)):
        if not last:
            into = arriving.sub(0, own.count)
            _transfer(steps[j + p - 2 - v], _real(call, v + 1), into, receive=True,
                      arrival=(Reduce(partial, (own, into)),))
        if v > 0:
            _transfer(steps[j + p - 1 - v], _real(call, v - 1), own if last else partial,
                      receive=False)
    return _program(steps, at + (0 if last else arriving.count))
