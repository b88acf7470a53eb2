"""Resilient allreduce trees (RAT, after the RAT paper) and the parameter-server exchange (PS).

RAT builds, over the topology's levels (node, rack, pod as present, then the whole job),
one reduction tree per root: p trees, tree t rooted at rank t and carrying shard t of the
vector (``even_split(n, p)``), so the data is spread evenly over the trees.  Each region of
each level has one *aggregator* per tree:

* the whole job's aggregator is the root t;
* a region that contains its parent region's aggregator takes it as its own (so the root's
  regions all choose the root, and an aggregator at one level is also the aggregator of its
  region one level down);
* any other region takes its member at position ``t mod size`` (ascending ranks), so the
  aggregator role rotates over the trees and every rank aggregates about equally often.

Reduce, level by level from the innermost: the aggregator of each region receives the
shard from the aggregators of its sub-regions (at the node level: from its members),
reduces each arrival as it lands (any order), and in the next step forwards one message to
its parent region's aggregator, up to the root.  Broadcast: the same tree backwards.  A rank
whose own aggregator is itself skips the hop, so a tree has exactly p-1 edges, each
carrying the shard once up and once down.  All p trees run concurrently: step s holds step
s of every tree.

A level whose regions all have a single sub-region (one rank per node, one node per rack,
a single rack, ...) has nothing to aggregate and gets no step.  With the A remaining levels
(the root's level included; A = l + 1 for l oversubscribed levels in the RAT paper's terms)
and a shard in one segment, the program has 2A steps and the longest dependency chain
(:func:`hpccoll.schedule_analysis.dependency_chain`) is 2A = 2(l+1) message hops: leaf -> level
aggregators -> root -> ... -> leaf.  Without a topology (or with one region only) A = 1 and
RAT is the PS exchange below.

Pipelining: a shard cut into K segments goes through the levels as a pipeline, segment k
crossing the a-th aggregating level's hop up in step a + k and down in step 2A - 1 - a + k,
so an aggregator forwards segment k upward while segment k + 1 still arrives from below (and
the same on the way down): host links and uplinks are busy at once, in 2A + K - 1 steps
instead of the 2A store-and-forward steps' host-links-then-uplinks.  The bytes, and so the
cross-region traffic below, are the same for every K.  Option ``segment_bytes``; by default
the K that minimises the pipeline's alpha-beta time, (2A + K - 1)(alpha + S/K beta) for a
shard of S bytes, on the cost model's machine (:func:`default_segment_bytes`).

Cross-region traffic, per tree: every region that does not contain the root sends exactly
one message out (up) and receives exactly one in (down); the root's region exchanges one
message each way with each child of the root outside it.  Over the p trees the bytes crossing
the boundaries of a level with G regions total 2(G-1) n (n the vector bytes), the least any
allreduce moves across G regions (every element must reach all G regions from all G: 2(G-1)
one-way transfers at least); at the outermost level, with equal regions and p | n, each region
sends and receives 2(G-1)/G n, the allreduce bandwidth bound with the regions as the
participants.  Ring moves 2(p-1)/p n through the boundary of each region of consecutive
ranks, PS 2 w (p-w)/p n through that of a region of w ranks (w times RAT's).

Cost notation as in :mod:`hpccoll.algorithms.ring`.
"""

from __future__ import annotations

import functools
import math

from ..registry import Cost, register, segment_option
from ..schedule import (SCRATCH, Call, Program, ProgramBuilder, Reduce, Region, one_rank,
                        segment_count, segments, vector_blocks)


class _Levels:
    """The tree levels of a topology: the topology's levels, innermost first, then the whole
    job; regions, their members and sub-regions, and which levels have anything to
    aggregate."""

    def __init__(self, p: int, topology) -> None:
        if topology is not None and topology.size != p:
            raise ValueError(f"topology describes {topology.size} ranks, the call has p={p}")
        regions = list(topology.regions) if topology is not None else []
        regions.append((0,) * p)
        self.region = regions
        self.top = len(regions) - 1
        self.members: list[list[tuple[int, ...]]] = []
        for ids in regions:
            groups: list[list[int]] = [[] for _ in range(max(ids, default=-1) + 1)]
            for rank, g in enumerate(ids):
                groups[g].append(rank)
            self.members.append([tuple(m) for m in groups])
        # subregions[i][g]: the level-(i-1) regions inside region g of level i (i >= 1)
        self.subregions: list[list[tuple[int, ...]]] = [[]]
        for i in range(1, len(regions)):
            subs: list[list[int]] = [[] for _ in self.members[i]]
            seen = set()
            for rank in range(p):
                inner = regions[i - 1][rank]
                if inner not in seen:
                    seen.add(inner)
                    subs[regions[i][rank]].append(inner)
            self.subregions.append([tuple(s) for s in subs])
        fan = [[len(m) for m in self.members[0]]]
        fan += [[len(s) for s in self.subregions[i]] for i in range(1, len(regions))]
        self.active = tuple(i for i in range(len(regions)) if max(fan[i], default=0) > 1)

    def path(self, rank: int, t: int) -> list[int]:
        """``path[i]``: tree t's aggregator of ``rank``'s region at level i (top = root t)."""
        path = [t] * (self.top + 1)
        for i in range(self.top - 1, -1, -1):
            g = self.region[i][rank]
            above = path[i + 1]
            if self.region[i][above] != g:
                members = self.members[i][g]
                above = members[t % len(members)]
            path[i] = above
        return path

    def children(self, rank: int, level: int, t: int) -> list[int]:
        """Who sends to ``rank`` at ``level`` in tree t, given that ``rank`` is its region's
        aggregator there: the aggregators of the other sub-regions (members at level 0)."""
        g = self.region[level][rank]
        if level == 0:
            return [m for m in self.members[0][g] if m != rank]
        own = self.region[level - 1][rank]
        out = []
        for sub in self.subregions[level][g]:
            if sub != own:
                members = self.members[level - 1][sub]
                out.append(members[t % len(members)])
        return out


@functools.lru_cache(maxsize=16)
def _levels(p: int, topology) -> _Levels:
    return _Levels(p, topology)


def default_segment_bytes(call: Call, levels: int, shard: int) -> int:
    """The segment size (bytes, whole elements) that minimises the pipeline's alpha-beta time
    on the cost model's machine: with K segments of a shard of ``shard`` elements, S bytes,
    over A = ``levels`` levels, (2A + K - 1) steps of alpha + S/K beta (alpha with the step
    overhead, beta of the links between nodes when there are several), least at an integer
    next to sqrt((2A - 1) S beta / alpha)."""
    from ..costmodel import machine_for
    machine = machine_for(call)
    several = call.topology is not None and call.topology.count(0) > 1
    link = machine.inter if several else machine.intra
    alpha, beta = link.alpha + machine.step_overhead, shard * call.itemsize / link.bandwidth
    best = math.sqrt((2 * levels - 1) * beta / alpha)
    k = min({max(1, math.floor(best)), max(1, math.ceil(best))},
            key=lambda k: (2 * levels + k - 1) * (alpha + beta / k))
    return max(1, math.ceil(shard / k)) * call.itemsize


def _plan_trees(call: Call, topology) -> Program:
    """The p concurrent trees over ``topology``'s levels (None: one level, PS), pipelined:
    segment k of a shard goes up the level-a hop (a-th level that aggregates) in step a + k
    and down it in step 2A - 1 - a + k."""
    p, rank = call.p, call.rank
    shards, source, result = vector_blocks(call)
    if p == 1:
        return one_rank(source[0], result[0])
    levels = _levels(p, topology)
    up = {level: s for s, level in enumerate(levels.active)}     # level -> its hop, a
    down = 2 * len(levels.active) - 1             # segment k goes down hop a in step down - a + k
    seg = segment_count(call, default_segment_bytes(call, len(levels.active), max(shards)))
    steps = ProgramBuilder(down + max(1, -(-max(shards) // seg)))
    landing = [0] * len(steps.steps)      # scratch used by each step's incoming partial sums

    for t in range(p):
        if not shards[t]:
            continue
        path = levels.path(rank, t)
        pieces = segments(result[t], seg)
        # the first level whose aggregator is someone else (None for the root)
        parent_level = next((i for i, a in enumerate(path) if a != rank), None)
        holds = source[t]                 # where this rank's value of shard t is
        for level in levels.active:
            if parent_level is not None and level >= parent_level:
                break
            kids = levels.children(rank, level, t)
            if not kids:
                continue
            a = up[level]
            steps[a].copy(holds, result[t])
            holds = result[t]
            for k, piece in enumerate(pieces):
                for kid in kids:
                    slot = Region(SCRATCH, landing[a + k], piece.count)
                    landing[a + k] += piece.count
                    steps[a + k].recv(kid, slot, on_arrival=(Reduce(piece, (piece, slot)),))
                    steps[down - a + k].send(kid, piece)
        if parent_level is not None:
            a, parent = up[parent_level], path[parent_level]
            for k, (piece, mine) in enumerate(zip(pieces, segments(holds, seg))):
                steps[a + k].send(parent, mine)
                steps[down - a + k].recv(parent, piece)
    return steps.program(scratch=max(landing))


# elements the busiest rank sends without a topology (rank 0, the largest shard): every
# shard but its own once up, its own to the p-1 others
_SENT = "n + (p - 2) * ceil(n / p)"


# shards in segments: the pipeline's best by default
_SEGMENTS = (segment_option("the pipeline's best on the cost model's machine"),)


@register("allreduce", "rat", family="rat", source="RAT (Wan et al.)", options=_SEGMENTS,
          cost=Cost("2 * min(1, p - 1)", _SENT,
                    "(2(l+1)+K-1)α + 2(p-1)/p·nβ + (p-1)/p·nγ, l+1 levels that aggregate, "
                    "K segments"))
def plan_rat_allreduce(call: Call) -> Program:
    """Resilient allreduce trees (the RAT paper): one tree per root over the topology's levels,
    one aggregator per region and tree, shard t of the vector reduced up tree t and
    broadcast back down, all trees concurrently.

    Rounds 2A + K - 1 for the A levels with something to aggregate (A = l + 1: the l
    oversubscribed levels of the RAT paper plus the root's; 1 without a topology) and shards
    in K segments, pipelined through the levels (see above); 2A for one segment.
    Every rank but the root sends each shard once up and receives it once down: 2(p-1)n/p
    bytes sent per rank on average (aggregation rotates, so about that on every rank);
    time about (2A + K - 1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma, with up to p messages
    per rank per step.  Across the boundaries of a level with G regions: 2(G-1)n bytes in all (the
    minimum), 2(G-1)/G n per region and direction at the outermost level with equal regions.
    Segments: option ``segment_bytes`` (default: the pipeline's best on the cost model's
    machine), each reduced as it lands.  Any p, any (uneven) regions, IN_PLACE.  Scratch: the
    incoming partial sums of a step, at most about n.
    """
    return _plan_trees(call, call.topology)


@register("allreduce", "ps", family="ps", source="RAT's PS baseline", options=_SEGMENTS,
          cost=Cost("2 * min(1, p - 1)", _SENT,
                    "(K+1)α + 2(p-1)/p·nβ + (p-1)/p·nγ, K segments"))
def plan_ps_allreduce(call: Call) -> Program:
    """Parameter-server exchange (the RAT paper's PS baseline): every rank serves one shard of
    the vector; all ranks send each shard straight to its server, which reduces the
    arrivals, then the servers send the results straight back (topology-unaware).

    Rounds 2 (up to p-1 concurrent messages each; K + 1 with shards in K segments, the
    results of a segment going back while the next arrive); bytes sent per rank
    2(p-1)n/p; time about 2 alpha + 2(p-1)/p n beta + (p-1)/p n gamma on a full mesh.
    Across a region of w ranks out of p: 2 w (p-w)/p n each way, w times what RAT moves at
    the outermost level.  Segmented and pipelined as RAT.  Any p, IN_PLACE.  Scratch about n.
    """
    return _plan_trees(call, None)
