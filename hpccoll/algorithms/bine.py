"""Bine trees (the paper "Bine Trees: Enhancing Collective Operations by Optimizing
Communication Locality", SC'25): broadcast and reduce over a binomial tree whose edges join
nearby ranks, built on negabinary numbering.

Ranks are numbered relative to the root and written in negabinary (base -2) with
d = ceil(log2 p) digits, which spell 2^d consecutive integers around 0.  A node receives in
step d - L, where L is the length of the run of equal digits its number ends with, from the
node whose last L digits are flipped; it then sends in each later step t to the node whose
last d - t digits are flipped.  The root (all zeros) first sends to the all-ones node, rho(d-1)
= 1 - 2 + 4 - ... ranks away, then nearer and nearer: a step-t edge spans |rho(d-1-t)| ~
2^(d-t)/3 ranks where a binomial tree's spans 2^(d-1-t), so subtrees are groups of nearby
ranks and most bytes stay in them.

Any p: the tree is cut to p consecutive integers around 0 that hold every member's parent
(such a range exists for every p; the highest one that keeps all the root's children is
taken), and integer x is the relative rank x mod p.  For p a power of two it is the whole
tree, mod p.

Butterflies (allgather, reduce-scatter, allreduce, alltoall): every rank is the root of a
Bine tree at once, rank b's tree being the one above moved to b: x -> x + b for even b,
x -> b - x (mirrored) for odd b.  A node x sends to its parent, in the reduce's step
L(x) - 1, the rank x + rho(L(x) - 1) for even x and x - rho(L(x) - 1) for odd x, so in step
u every rank of every tree talks to the same peer, r +/- rho(u), the Swing peer of
:mod:`hpccoll.algorithms.swing` (for even p, as moving by an even offset and mirroring keep
parities mod p).  A reduce-scatter runs the p trees' reduces together: in step u (nearest
peer first) rank r sends its peer the partial sums of the blocks b whose tree holds r at a
node with L = u + 1, one message; an allgather runs the p broadcasts (the same sets, in
reverse step order and direction); an allreduce is the one then the other.  Rank r plays
every node of the tree once (one per block), so it sends p - 1 blocks in each half, in
ceil(log2 p) steps, for any even p: the paper's construction for non-powers of two, without
the fold that Swing's and Rabenseifner's need.  For odd p the peers r +/- rho(u) mod p are
no pairing, and the paper's butterflies (and the paper authors' pico library, whose
any-count Bine butterflies require an even count) give no construction; hpccoll folds one
rank: the last rank e = p - 1 hands its data to its neighbour q = p - 2 in a first step,
ranks 0..p-2 (an even count) run the butterfly with q standing for both (blocks q and e, which
lie side by side, as one block), and q hands e its part in a last step: two more steps,
between neighbours, so the traffic stays as local as the butterfly's.  For p a power of two
the butterflies are Swing's, and the allreduce places blocks by Swing position so that every
message is one region; the all-to-all is the hypercube all-to-all over those positions (p a
power of two, as the paper's: its all-to-all has no other construction).  Cost notation as in
:mod:`hpccoll.algorithms.tree` (the butterflies' n as in :mod:`hpccoll.algorithms.ring`).
"""

from __future__ import annotations

import functools

from ..registry import POWER_OF_TWO, Cost, register
from ..schedule import (SCRATCH, Call, Program, ProgramBuilder, Reduce, Region,
                        allgather_blocks, allgather_from_input, allreduce_vectors, alltoall_blocks,
                        even_split, merge_adjacent, one_rank, reduce_scatter_blocks, span, split)
from .hypercube import HYPERCUBE_ALLTOALL_COST
from .swing import reached, rho, swing_peer, swing_positions
from .tree import _accumulator, _from_root, _relative, _rounds

_SOURCE = "Bine Trees: Enhancing Collective Operations by Optimizing Communication Locality (SC'25)"


def negabinary(x: int, digits: int) -> list[int]:
    """The ``digits`` negabinary digits of ``x``, least significant first."""
    out = []
    for _ in range(digits):
        out.append(x % 2)
        x = (x - out[-1]) // -2
    if x:
        raise ValueError(f"{x} needs more than {digits} negabinary digits")
    return out


def flip_low(x: int, count: int, digits: int) -> int:
    """``x`` with its ``count`` lowest negabinary digits (of ``digits``) flipped."""
    return x + sum((1 - 2 * b) * (-2) ** i for i, b in enumerate(negabinary(x, digits)[:count]))


def trailing_run(x: int, digits: int) -> int:
    """How many equal digits ``x``'s negabinary form ends with."""
    b = negabinary(x, digits)
    run = 1
    while run < digits and b[run] == b[0]:
        run += 1
    return run


@functools.lru_cache(maxsize=256)
def bine_tree(p: int) -> tuple[int, dict[int, tuple[int, int]]]:
    """The Bine tree on p nodes: (its first integer a, so that the nodes are a..a+p-1, and
    for every node x but 0 (the root) its (parent, step it receives in))."""
    d = _rounds(p)
    lo = sum((-2) ** i for i in range(1, d, 2))
    links = {x: (flip_low(x, trailing_run(x, d), d), d - trailing_run(x, d))
             for x in range(lo, lo + (1 << d)) if x}
    starts = range(min(0, lo + (1 << d) - p), max(lo, 1 - p) - 1, -1)
    closed = [a for a in starts if all(a <= links[x][0] < a + p for x in range(a, a + p) if x)]
    root_children = [x for x, (parent, _) in links.items() if parent == 0]
    a = next((a for a in closed if all(a <= c < a + p for c in root_children)), closed[0])
    return a, {x: links[x] for x in range(a, a + p) if x}


def _edges(call: Call) -> tuple[tuple[int, int] | None, list[tuple[int, int]]]:
    """This rank's (parent, step) (None at the root) and its (child, step) list, as
    relative ranks."""
    p = call.p
    start, links = bine_tree(p)
    x = (_relative(call) - start) % p + start
    children = [(c % p, step) for c, (parent, step) in links.items() if parent == x]
    up = links.get(x)
    return (None if up is None else (up[0] % p, up[1])), sorted(children, key=lambda e: e[1])


@register("bcast", "bine", family="bine", source=_SOURCE, options=(),
          cost=Cost("ceil(log2(p))", "n * ceil(log2(p))", "⌈log₂p⌉(α + nβ)"))
def plan_bine_bcast(call: Call) -> Program:
    """Bine-tree broadcast: a binomial tree on negabinary numbers; a node passes the data
    on, in each step after it got it, to the node its last d - t digits flipped name.

    Rounds ceil(log2 p); the root sends n ceil(log2 p); time ceil(log2 p)(alpha + n beta),
    as the binomial tree's, with edges about a third shorter (most traffic stays among
    nearby ranks).  Any p and root."""
    whole = Region("recv", 0, call.counts[0])
    plan = ProgramBuilder(_rounds(call.p))
    up, children = _edges(call)
    if up is not None:
        plan[up[1]].recv(up[0], whole)
    for child, step in children:
        plan[step].send(child, whole)
    return _from_root(call, plan.program())


@register("reduce", "bine", family="bine", source=_SOURCE, options=(),
          cost=Cost("ceil(log2(p))", "n * min(1, p - 1)", "⌈log₂p⌉(α + nβ + nγ)"))
def plan_bine_reduce(call: Call) -> Program:
    """Bine-tree reduce, the mirror of the Bine broadcast: the same tree from the leaves
    to the root, each node combining its children's partial results with its own input as
    they arrive and sending the sum to its parent.

    Rounds ceil(log2 p); each rank sends n once; time ceil(log2 p)(alpha + n beta + n gamma).
    Any p and root; scratch 2n on inner nodes (n at the root)."""
    p, n = call.p, call.counts[0]
    partial = Region(call.input, 0, n)
    if p == 1 or not n:
        return one_rank(partial, Region("recv", 0, n))
    last = _rounds(p) - 1
    acc, at = _accumulator(call, n)
    arriving = Region(SCRATCH, at, n)
    plan = ProgramBuilder(last + 1)
    up, children = _edges(call)
    for child, step in reversed(children):
        plan[last - step].recv(child, arriving, on_arrival=(Reduce(acc, (partial, arriving)),))
        partial = acc
    if up is not None:
        plan[last - up[1]].send(up[0], partial)
    return _from_root(call, plan.program(at + n if children else 0))


# ------------------------------------------------------------------------------ butterflies

# Cost formulas (see registry.Cost): the butterfly runs on PE ranks (p, or p - 1 for odd p;
# 1 for p = 1) and FOLD is 1 when one rank is folded (p odd, above 1).
_PE = "max(1, p - p % 2)"
_FOLD = "(p % 2) * (p > 1)"
_ROUNDS = f"ceil(log2({_PE})) + 2 * {_FOLD}"


@functools.lru_cache(maxsize=4096)
def butterfly_sets(p: int, rank: int) -> tuple[tuple[tuple[int, ...], ...],
                                                tuple[tuple[int, ...], ...]]:
    """For p even: per step u of a Bine reduce-scatter, the blocks ``rank`` sends its peer
    swing_peer(rank, u, p) (those whose tree holds it at a node x with L(x) = u + 1) and the
    blocks it receives from that peer (those whose tree holds it at a node with a step-u child:
    x + rho(u) for even x, x - rho(u) for odd, inside the tree).  An allgather's step
    d - 1 - u has them the other way round."""
    if p % 2:
        raise ValueError(f"Bine butterflies need p even, got p={p}")
    start, links = bine_tree(p)
    d = _rounds(p)
    sends, recvs = [[] for _ in range(d)], [[] for _ in range(d)]
    for b in range(p):
        x = ((rank - b if b % 2 == 0 else b - rank) - start) % p + start
        run = d - links[x][1] if x else d
        if x:
            sends[run - 1].append(b)
        for u in range(run - 1 if x else d):
            if start <= (x + rho(u) if x % 2 == 0 else x - rho(u)) < start + p:
                recvs[u].append(b)
    return tuple(map(tuple, sends)), tuple(map(tuple, recvs))


class _OddFold:
    """The butterflies at p ranks seen from ``rank``: for odd p the last rank (``extra``)
    folds into its neighbour (``partner``) and the others run the butterfly on ``size`` =
    p - 1 ranks in steps ``first``.. (1), the partner's block standing for both; for even p
    no one folds (``size`` = p, ``first`` = 0)."""

    def __init__(self, p: int, rank: int) -> None:
        odd = p % 2 == 1 and p > 1
        self.size = p - 1 if odd else p
        self.first = 1 if odd else 0
        self.extra = p - 1 if odd else None
        self.partner = p - 2 if odd else None
        self.rank = rank

    def steps(self, butterflies: int = 1) -> ProgramBuilder:
        """The steps of ``butterflies`` butterflies, with the fold's first and last."""
        return ProgramBuilder(butterflies * _rounds(self.size) + 2 * self.first)

    def merged(self, blocks: list[Region]) -> list[Region]:
        """``blocks`` (one per rank, end to end) with the extra rank's fused into the
        partner's: the butterfly's blocks."""
        if self.extra is None:
            return list(blocks)
        return [*blocks[:self.partner], span(blocks, self.partner, self.extra + 1)]


def _regions(held: list[Region], chosen: tuple[int, ...], order: list[Region]) -> tuple:
    """``held``'s regions of the blocks ``chosen``, in the order of ``order``'s offsets (the
    same on every rank), adjacent ones fused."""
    return merge_adjacent(held[b] for b in sorted(chosen, key=lambda b: order[b].offset))


def _add_reduce(ops: list[Reduce], op: Reduce) -> None:
    """Append ``op`` to ``ops``, fused with the last one when each of its regions continues
    the last one's."""
    if ops and all(a.buffer == b.buffer and a.stop == b.offset
                   for a, b in zip((ops[-1].dst, *ops[-1].srcs), (op.dst, *op.srcs))):
        last = ops[-1]
        ops[-1] = Reduce(Region(last.dst.buffer, last.dst.offset, last.dst.count + op.dst.count),
                         tuple(Region(a.buffer, a.offset, a.count + b.count)
                               for a, b in zip(last.srcs, op.srcs)))
    else:
        ops.append(op)


def _reduce_scatter(p: int, rank: int, held: list[Region], partial: list[Region],
                    result: Region, steps: ProgramBuilder, landing: int, first: int = 0) -> int:
    """The Bine reduce-scatter in steps first..first+d-1: block b starts in ``held[b]``, sums
    accumulate in ``partial[b]`` (the layout, the same on every rank, that orders a message's
    blocks), this rank's own block's in ``result``; arrivals land in scratch from
    ``landing``.  Returns the scratch used."""
    held, end = list(held), landing
    sends, recvs = butterfly_sets(p, rank)
    for u in range(len(sends)):
        peer, step = swing_peer(rank, u, p), steps[first + u]
        step.send(peer, *_regions(held, sends[u], partial))
        at, ops = landing, []
        for b in sorted(recvs[u], key=lambda b: partial[b].offset):
            held[b], was = (result if b == rank else partial[b]), held[b]
            _add_reduce(ops, Reduce(held[b], (was, Region(SCRATCH, at, held[b].count))))
            at += held[b].count
        step.recv(peer, Region(SCRATCH, landing, at - landing), on_arrival=ops)
        end = max(end, at)
    return end


def _allgather(p: int, rank: int, result: list[Region], steps: ProgramBuilder,
               first: int) -> None:
    """The Bine allgather of the blocks ``result`` in steps first..first+d-1."""
    sends, recvs = butterfly_sets(p, rank)
    d = len(sends)
    for k in range(d):
        u = d - 1 - k
        steps[first + k].send(swing_peer(rank, u, p), *_regions(result, recvs[u], result))
        steps[first + k].recv(swing_peer(rank, u, p), *_regions(result, sends[u], result))


@register("reduce_scatter", "bine", family="bine", source=_SOURCE, options=(),
          cost=Cost(_ROUNDS, "n * (p - 1)",
                    "⌈log₂p⌉α + (p-1)n(β + γ); p odd: ⌈log₂(p-1)⌉ + 2 rounds"))
def plan_bine_reduce_scatter(call: Call) -> Program:
    """Bine reduce-scatter: the p Bine trees' reduces at once; in step u (peer r +/- rho(u),
    nearest first) each rank sends its peer the partial sums of the blocks it holds at
    L = u + 1 nodes, and reduces what arrives.

    Rounds ceil(log2 p); bytes sent per rank (p-1) n, each block once; time
    ceil(log2 p) alpha + (p-1) n (beta + gamma).  Uneven recvcounts; any p.  A step's blocks
    are not contiguous: its message is several regions, packed.  Odd p: the last rank first
    sends its neighbour (p - 2) every block but its own, which that neighbour adds to its own
    input; p - 1 ranks run the butterfly, the neighbour's block being its own and the last
    rank's; the neighbour then sends the last rank its block's sum, to which it adds its own
    input (ceil(log2(p-1)) + 2 rounds, still (p-1) n sent per rank).  Scratch: the partial
    sums (the vector) and the largest step's arrivals.
    """
    held, result = reduce_scatter_blocks(call)
    p, rank, counts = call.p, call.rank, call.counts
    if p == 1:
        return one_rank(held[0], result)
    fold, total = _OddFold(p, rank), sum(counts)
    steps = fold.steps()
    if rank == fold.extra:
        arriving = Region(SCRATCH, 0, counts[rank])
        steps[0].send(fold.partner, span(held, 0, rank))
        steps[-1].recv(fold.partner, arriving, on_arrival=(Reduce(result, (held[rank],
                                                                           arriving)),))
        return steps.program(counts[rank])
    pieces, own, end = split(Region(SCRATCH, 0, total), counts), result, total
    if rank == fold.partner:
        extra = fold.extra
        before = span(pieces, 0, extra)
        arriving = Region(SCRATCH, total, before.count)
        steps[0].recv(extra, arriving,
                      on_arrival=(Reduce(before, (span(held, 0, extra), arriving)),))
        steps[0].copy(held[extra], pieces[extra])
        held, own, end = pieces, span(pieces, rank, extra + 1), total + before.count
        steps[-1].send(extra, pieces[extra])
        steps[-1].copy(pieces[rank], result)
    scratch = _reduce_scatter(fold.size, rank, fold.merged(held), fold.merged(pieces), own,
                              steps, total, fold.first)
    return steps.program(max(scratch, end))


@register("allgather", "bine", family="bine", source=_SOURCE, options=(),
          cost=Cost(_ROUNDS, f"n * (p - 1) + {_FOLD} * n * (p - 2 + ceil(log2({_PE})))",
                    "⌈log₂p⌉α + (p-1)nβ; p odd: ⌈log₂(p-1)⌉ + 2 rounds, rank p-2 sends "
                    "(2p - 3 + ⌈log₂(p-1)⌉)n"))
def plan_bine_allgather(call: Call) -> Program:
    """Bine allgather: the p Bine trees' broadcasts at once, the reduce-scatter's mirror: in
    step k (peer r +/- rho(d-1-k), farthest first) each rank sends its peer the blocks the
    peer's nodes get in that step.

    Rounds ceil(log2 p); bytes sent and received per rank (p-1) n; time ceil(log2 p) alpha
    + (p-1) n beta.  Uneven blocks, IN_PLACE; any p.  No scratch; messages of several
    regions, packed.  Odd p: the last rank first sends its block to its neighbour (p - 2),
    p - 1 ranks run the butterfly with the two blocks as the neighbour's, and the neighbour
    then sends the last rank every other block (ceil(log2(p-1)) + 2 rounds; the neighbour
    sends (2p - 3 + ceil(log2(p-1))) n: the two blocks are its own, sent in every step).
    """
    result, source = allgather_blocks(call)
    p, rank = call.p, call.rank
    if p == 1:
        return one_rank(source, result[0])
    fold = _OddFold(p, rank)
    steps = fold.steps()
    if rank == fold.extra:
        steps[0].send(fold.partner, result[rank])
        steps[-1].recv(fold.partner, span(result, 0, rank))
        return allgather_from_input(call, steps.program())
    if rank == fold.partner:
        steps[0].recv(fold.extra, result[fold.extra])
        steps[-1].send(fold.extra, span(result, 0, fold.extra))
    _allgather(fold.size, rank, fold.merged(result), steps, fold.first)
    return allgather_from_input(call, steps.program())


@register("allreduce", "bine", family="bine", source=_SOURCE, options=(),
          cost=Cost(f"2 * ceil(log2({_PE})) + 2 * {_FOLD}",
                    f"2 * n * ({_PE} - 1) / {_PE} + {_FOLD} * n",
                    "2⌈log₂p⌉α + 2(p-1)/p·nβ + (p-1)/p·nγ; p odd: p-1 ranks' butterfly "
                    "+ 2α + nβ + nγ"))
def plan_bine_allreduce(call: Call) -> Program:
    """Bine allreduce, bandwidth-optimal: the Bine reduce-scatter of p even blocks of the
    vector, accumulated in the receive buffer, then the Bine allgather of the reduced blocks.

    Rounds 2 ceil(log2 p); bytes sent per rank 2(p-1)/p n; time 2 ceil(log2 p) alpha
    + 2(p-1)/p n beta + (p-1)/p n gamma.  Any p, IN_PLACE; for p a power of two rank b's
    block is the one at its Swing position (every message one region, Swing's allreduce),
    else block b.  Odd p: the last rank first sends its vector to its neighbour (p - 2), which
    adds it to its own, p - 1 ranks run the butterflies on p - 1 blocks, and the neighbour
    sends the last rank the result (2 ceil(log2(p-1)) + 2 rounds; the neighbour sends n
    more).  Scratch: the largest step's arrivals (n/2 for a power of two; n on the
    neighbour).
    """
    source, result = allreduce_vectors(call)
    p, rank = call.p, call.rank
    if p == 1 or not result.count:
        return one_rank(source, result)
    fold = _OddFold(p, rank)
    steps, size = fold.steps(2), fold.size
    if rank == fold.extra:
        steps[0].send(fold.partner, source)
        steps[-1].recv(fold.partner, result)
        return steps.program()
    if rank == fold.partner:
        arriving = Region(SCRATCH, 0, result.count)
        steps[0].recv(fold.extra, arriving, on_arrival=(Reduce(result, (source, arriving)),))
        steps[-1].send(fold.extra, result)
        source = result
    counts = even_split(result.count, size)
    order = swing_positions(size) if size & (size - 1) == 0 and not fold.first else range(size)
    into, out = split(source, counts), split(result, counts)
    held, blocks = [into[order[b]] for b in range(size)], [out[order[b]] for b in range(size)]
    scratch = _reduce_scatter(size, rank, held, blocks, blocks[rank], steps, 0, fold.first)
    _allgather(size, rank, blocks, steps, fold.first + _rounds(size))
    return steps.program(max(scratch, result.count if rank == fold.partner else 0))


@functools.lru_cache(maxsize=4096)
def gathered(size: int, rank: int, steps: int) -> tuple[int, ...]:
    """The ranks whose data reaches ``rank`` (``size`` a power of two) through Swing steps
    0..``steps``-1 (in that order): 2^steps of them."""
    if not steps:
        return (rank,)
    peer = swing_peer(rank, steps - 1, size)
    return tuple(sorted(gathered(size, rank, steps - 1) + gathered(size, peer, steps - 1)))


@register("alltoall", "bine", family="bine", source=_SOURCE, requires=(POWER_OF_TWO,),
          options=(), cost=HYPERCUBE_ALLTOALL_COST)
def plan_bine_alltoall(call: Call) -> Program:
    """Bine all-to-all: a butterfly over Swing's peers; in step s each rank sends its peer
    r +/- rho(s) (nearest first), in one message, every block it holds bound for the ranks
    the peer reaches by the later steps, and keeps those bound for its own.

    Rounds log2 p; bytes sent per rank n p/2 per round; time log2 p (alpha + n p/2 beta)
    plus packing, as the hypercube all-to-all's, with peers about a third as far.  p a
    power of two.  Before step s a rank holds the blocks from the ranks that reach it by steps
    0..s-1 to those it reaches by steps s..: a block bound for it lands in place, any other in
    a scratch slot freed by an earlier step's send (scratch p n at most).
    """
    p, rank, n = call.p, call.rank, call.counts[0]
    if p & (p - 1):
        raise ValueError(f"Bine all-to-all needs p a power of two, got p={p}")
    mine, result = alltoall_blocks(call)
    if p == 1:
        return one_rank(mine[0], result[0])
    where = {(rank, dst): mine[dst] for dst in range(p)}
    slots, free = 0, []
    steps = ProgramBuilder(p.bit_length() - 1)
    steps.first().copy(where.pop((rank, rank)), result[rank])
    for s, step in enumerate(steps.steps):
        peer = swing_peer(rank, s, p)
        sent = [where.pop((src, dst)) for dst in reached(p, peer, s + 1)
                for src in gathered(p, rank, s)]
        step.send(peer, *merge_adjacent(sent))
        landing = []
        for dst in reached(p, rank, s + 1):
            for src in gathered(p, peer, s):
                if dst == rank:
                    where[src, dst] = result[src]
                elif free:
                    where[src, dst] = free.pop(0)
                else:
                    where[src, dst], slots = Region(SCRATCH, slots * n, n), slots + 1
                landing.append(where[src, dst])
        step.recv(peer, *merge_adjacent(landing))
        free += [r for r in sent if r.buffer == SCRATCH]
    return steps.program(slots * n)
