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
taken), and integer x is the relative rank x mod p.  For p a power of two it is the whole tree, mod p.  Cost notation as
in :mod:`hpccoll.algorithms.tree`.
"""

from __future__ import annotations

import functools

from ..registry import Cost, register
from ..schedule import SCRATCH, Call, Program, ProgramBuilder, Reduce, Region, one_rank
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


@register("bcast", "bine", family="bine", source=_SOURCE, auto=False,
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


@register("reduce", "bine", family="bine", source=_SOURCE, auto=False,
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
