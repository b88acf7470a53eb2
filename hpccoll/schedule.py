"""The schedule IR: one rank's program of a collective.

Planners produce a :class:`Program` per rank; the executor runs it on MPI and the verifier
runs all ranks' programs in one process.  Nothing here imports MPI.

A program is a list of steps.  Executing a step means: post every receive and every send of
the step, run the step's ``local`` operations while the transfers are in flight, then wait for
the receives and run each receive's ``on_arrival`` operations as soon as it lands (arrivals are
processed in any order).  Step ``s`` of one rank talks to step ``s`` of its peers: a message
sent in step ``s`` is received in step ``s`` (the verifier enforces it; the executor tags by it).

Data is addressed by :class:`Region`: a named buffer (``send``, ``recv``, ``scratch``, or
``window``: the segment shared by the ranks of one node, addressed node-wide), an element
offset and an element count.  A send or receive with several regions is one message
whose payload is their concatenation (the executor packs/unpacks it).

Local operations are :class:`Copy` (``dst = src``) and :class:`Reduce`
(``dst = srcs[0] op srcs[1] op ...``, ``dst`` may be one of ``srcs``).  Rules a planner must
keep (the verifier checks them):

* regions lie inside their buffer; the ``send`` buffer is never written;
* a ``sync`` step (no transfers, no operations) is a barrier of the node's ranks: window data
  a rank wrote before it is visible to the node's other ranks after it; every rank of a node
  syncs at the same steps, and no rank reads window data another rank wrote, or writes window
  data another rank reads or writes, without a sync in between;
* nothing is read before it was written (``recv``/``scratch`` start unwritten);
* within a step, receive targets are disjoint, nothing being sent is written, nothing being
  received is touched by ``local`` operations, and the ``on_arrival`` operations of different
  receives neither write what another reads or writes, except that several receives may
  accumulate (``Reduce`` whose ``dst`` is among its ``srcs``) into the same region.

The planners' vocabulary follows the IR: the blocks of a buffer and of each collective's
buffers (:func:`blocks`, :func:`split`, :func:`span`, :func:`allgather_blocks`, ...), builders
that collect a step's transfers and operations (:class:`StepBuilder`, :class:`ProgramBuilder`)
and whole-program transformations: :func:`sequence` and :func:`parallel` composition,
:func:`relabel` (other ranks) and :func:`relocate` (other buffers).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, Union

SEND, RECV, SCRATCH, WINDOW = "send", "recv", "scratch", "window"


@dataclass(frozen=True, slots=True)
class Region:
    """``count`` elements of buffer ``buffer`` starting at element ``offset``."""

    buffer: str
    offset: int
    count: int

    @property
    def stop(self) -> int:
        return self.offset + self.count

    def sub(self, offset: int, count: int) -> "Region":
        """The part of this region ``offset`` elements in, ``count`` long."""
        return Region(self.buffer, self.offset + offset, count)


@dataclass(frozen=True, slots=True)
class Copy:
    """``dst[:] = src`` (same count)."""

    src: Region
    dst: Region


@dataclass(frozen=True, slots=True)
class Reduce:
    """``dst[:] = srcs[0] op srcs[1] op ...`` elementwise (same counts)."""

    dst: Region
    srcs: tuple[Region, ...]

    @property
    def accumulates(self) -> bool:
        return self.dst in self.srcs


LocalOp = Union[Copy, Reduce]


def _total(regions: tuple[Region, ...]) -> int:
    """The elements of ``regions`` (one region, most messages, without a loop: planning and
    flattening at thousands of ranks handle millions of messages)."""
    return regions[0].count if len(regions) == 1 else sum(r.count for r in regions)


@dataclass(frozen=True, slots=True)
class Send:
    peer: int
    regions: tuple[Region, ...]

    @property
    def count(self) -> int:
        return _total(self.regions)


@dataclass(frozen=True, slots=True)
class Recv:
    peer: int
    regions: tuple[Region, ...]
    on_arrival: tuple[LocalOp, ...] = ()

    @property
    def count(self) -> int:
        return _total(self.regions)


@dataclass(frozen=True, slots=True)
class Step:
    sends: tuple[Send, ...] = ()
    recvs: tuple[Recv, ...] = ()
    local: tuple[LocalOp, ...] = ()
    sync: bool = False          # a barrier of the node's ranks over the shared window

    @property
    def empty(self) -> bool:
        return not (self.sends or self.recvs or self.local or self.sync)


SYNC = Step(sync=True)


@dataclass(frozen=True)
class Program:
    """One rank's schedule: its steps, the scratch space (elements) they use, and the node's
    shared window (elements; the same for every rank of a node)."""

    steps: tuple[Step, ...]
    scratch: int = 0
    window: int = 0

    def messages(self) -> Iterator[tuple[int, Send]]:
        for index, step in enumerate(self.steps):
            for send in step.sends:
                yield index, send


@dataclass(frozen=True)
class Call:
    """A collective call as a planner sees it (hashable: it is the plan-cache key).

    ``counts`` by collective (elements):

    * ``allgather``: the block of every rank (``p`` entries; uneven = allgatherv);
    * ``reduce_scatter``: the result block of every rank (``recvcounts``);
    * ``allreduce``: ``(n,)``, the vector length;
    * ``alltoall``/``alltoallv``: what this rank sends to each peer (``sendcounts``), with
      ``recvcounts``, ``sdispls`` and ``rdispls`` for this rank (uniform for ``alltoall``).

    ``in_place`` (allgather, allreduce): the input is already in the receive buffer and there
    is no send buffer.  ``options`` is a sorted tuple of (name, value) planner options.
    """

    collective: str
    p: int
    rank: int
    counts: tuple[int, ...]
    recvcounts: tuple[int, ...] = ()
    sdispls: tuple[int, ...] = ()
    rdispls: tuple[int, ...] = ()
    in_place: bool = False
    itemsize: int = 8
    topology: Any = None
    options: tuple[tuple[str, Any], ...] = field(default=())
    root: int = 0               # bcast, reduce

    def option(self, name: str, default: Any = None) -> Any:
        for key, value in self.options:
            if key == name:
                return value
        return default

    @property
    def input(self) -> str:
        """The buffer that holds this rank's input."""
        return RECV if self.in_place else SEND


def offsets(counts: Iterable[int]) -> tuple[int, ...]:
    """Exclusive prefix sums: where each block starts when blocks are laid end to end."""
    out, total = [], 0
    for c in counts:
        out.append(total)
        total += c
    return tuple(out)


@functools.lru_cache(maxsize=16)
def edges(counts: tuple[int, ...]) -> tuple[int, ...]:
    """Where each of the blocks ``counts`` starts when they are laid end to end, and (one
    entry more) where the last ends: once for the p calls of a collective, whose ranks pass
    equal counts, so that a rank's planner finds a block without listing all p."""
    return (*offsets(counts), sum(counts))


def even_part(n: int, parts: int, i: int) -> tuple[int, int]:
    """(offset, count) of part ``i`` of ``n`` elements split into ``parts`` counts differing
    by at most one, the larger ones first (``np.array_split``'s split): the one even split
    of the package (:func:`even_split`, multiring's chunks, the workloads' shards)."""
    base, extra = divmod(n, parts)
    return i * base + min(i, extra), base + (i < extra)


def even_split(n: int, parts: int) -> tuple[int, ...]:
    """``n`` split into ``parts`` counts differing by at most one (larger ones first):
    the counts of :func:`even_part`."""
    return tuple(even_part(n, parts, i)[1] for i in range(parts))


def one_rank(source: Region, result: Region) -> Program:
    """The program of a collective on one rank: copy the input to the result (nothing when it
    is already there or empty)."""
    if source == result or not result.count:
        return Program(())
    return Program((Step(local=(Copy(source, result),)),))


def segments(region: Region, max_count: int) -> list[Region]:
    """``region`` cut into consecutive pieces of at most ``max_count`` elements (none if empty)."""
    if max_count <= 0:
        raise ValueError("segment size must be positive")
    return [region.sub(start, min(max_count, region.count - start))
            for start in range(0, region.count, max_count)]


def segment_count(call: Call, default_bytes: int = 1 << 20) -> int:
    """Elements per segment from the ``segment_bytes`` option (default 1 MiB); ValueError
    unless it is a positive integer."""
    value = call.option("segment_bytes", default_bytes)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"option segment_bytes must be a positive integer (bytes), "
                         f"got {value!r}")
    return max(1, value // call.itemsize)


def merge_adjacent(regions: Iterable[Region]) -> tuple[Region, ...]:
    """Regions with empty ones dropped and consecutive touching ones fused."""
    out: list[Region] = []
    for r in regions:
        if r.count == 0:
            continue
        if out and out[-1].buffer == r.buffer and out[-1].stop == r.offset:
            out[-1] = Region(r.buffer, out[-1].offset, out[-1].count + r.count)
        else:
            out.append(r)
    return tuple(out)


# ------------------------------------------------------------------- the planners' vocabulary

def blocks(buffer: str, counts: Sequence[int], displs: Sequence[int] | None = None
           ) -> list[Region]:
    """Blocks of ``counts`` elements of ``buffer`` at ``displs`` (default: end to end from 0)."""
    if displs is None:
        displs = offsets(counts)
    return [Region(buffer, d, c) for d, c in zip(displs, counts)]


def split(region: Region, counts: Sequence[int]) -> list[Region]:
    """``region`` cut into consecutive blocks of ``counts`` elements."""
    return [region.sub(o, c) for o, c in zip(offsets(counts), counts)]


def span(consecutive: Sequence[Region], start: int, stop: int) -> Region:
    """Blocks ``start`` to ``stop - 1`` of ``consecutive`` (blocks laid end to end) as one
    region; an index past the last block stands for the end of the last."""
    def edge(i: int) -> int:
        return consecutive[i].offset if i < len(consecutive) else consecutive[-1].stop
    return Region(consecutive[0].buffer, edge(start), edge(stop) - edge(start))


def allgather_blocks(call: Call) -> tuple[list[Region], Region]:
    """An allgather's result blocks in the receive buffer and this rank's input block (its
    own result block when in place)."""
    result = blocks(RECV, call.counts)
    own = result[call.rank]
    return result, own if call.in_place else Region(SEND, 0, own.count)


def reduce_scatter_blocks(call: Call) -> tuple[list[Region], Region]:
    """A reduce-scatter's input blocks in the send buffer and this rank's result."""
    return blocks(SEND, call.counts), Region(RECV, 0, call.counts[call.rank])


def allreduce_vectors(call: Call) -> tuple[Region, Region]:
    """An allreduce's input and result vectors."""
    n = call.counts[0]
    return Region(call.input, 0, n), Region(RECV, 0, n)


def vector_blocks(call: Call) -> tuple[tuple[int, ...], list[Region], list[Region]]:
    """An allreduce's vector cut into p even blocks: their counts, the input's blocks and the
    result's blocks."""
    counts = even_split(call.counts[0], call.p)
    source, result = allreduce_vectors(call)
    return counts, split(source, counts), split(result, counts)


def alltoall_blocks(call: Call) -> tuple[list[Region], list[Region]]:
    """An all-to-all(v)'s blocks for every peer in the send buffer and from every peer in the
    receive buffer."""
    return (blocks(SEND, call.counts, call.sdispls),
            blocks(RECV, call.recvcounts, call.rdispls))


def pairs_by_distance(p: int, rank: int) -> list[tuple[int, int]]:
    """(send-to, receive-from) pairs (rank + i, rank - i) mod p for i = 1..p-1, the order in
    which direct exchanges are posted so that not every rank sends to the same peer first."""
    return [((rank + i) % p, (rank - i) % p) for i in range(1, p)]


def _nonempty(ops: Iterable[LocalOp]) -> tuple[LocalOp, ...]:
    return tuple(op for op in ops if op.dst.count)




class StepBuilder:
    """A step under construction: transfers and local operations added in posting order,
    empty messages and operations on nothing left out; :meth:`build` gives the :class:`Step`."""

    def __init__(self) -> None:
        self.sends: list[Send] = []
        self.recvs: list[Recv] = []
        self.local: list[LocalOp] = []

    def send(self, peer: int, *regions: Region) -> None:
        """One message of ``regions`` (concatenated) to ``peer``."""
        if _total(regions):
            self.sends.append(Send(peer, regions))

    def recv(self, peer: int, *regions: Region, on_arrival: Iterable[LocalOp] = ()) -> None:
        """One message from ``peer`` into ``regions``; ``on_arrival`` runs when it has landed."""
        if _total(regions):
            self.recvs.append(Recv(peer, regions, _nonempty(on_arrival) if on_arrival else ()))

    def exchange(self, peer: int, out: Region, into: Region, *on_arrival: LocalOp) -> None:
        """Send ``out`` to ``peer`` and receive ``into`` from it."""
        self.send(peer, out)
        self.recv(peer, into, on_arrival=on_arrival)

    def copy(self, src: Region, dst: Region) -> None:
        """``dst = src`` while the transfers are in flight (nothing if it is already there)."""
        if src != dst and dst.count:
            self.local.append(Copy(src, dst))

    def build(self) -> Step:
        return Step(tuple(self.sends), tuple(self.recvs), tuple(self.local))


class ProgramBuilder:
    """A program under construction: ``builder[s]`` is step s's :class:`StepBuilder`."""

    def __init__(self, steps: int = 0) -> None:
        self.steps = [StepBuilder() for _ in range(steps)]

    def __getitem__(self, s: int) -> StepBuilder:
        return self.steps[s]

    def step(self) -> StepBuilder:
        """A new last step."""
        self.steps.append(StepBuilder())
        return self.steps[-1]

    def first(self) -> StepBuilder:
        """Step 0 (a new one if there is none)."""
        return self.steps[0] if self.steps else self.step()

    def program(self, scratch: int = 0, window: int = 0) -> Program:
        """The finished program, with ``scratch`` and ``window`` elements."""
        return Program(tuple(s.build() for s in self.steps), scratch, window)


def local_step(*ops: LocalOp) -> Step:
    """A step of local operations only (those on nothing left out)."""
    return Step(local=_nonempty(ops))


def sequence(*programs: Program) -> Program:
    """The programs one after the other.  Scratch and window: the largest part's (the parts
    run at different times, so they may reuse them)."""
    return Program(tuple(step for program in programs for step in program.steps),
                   max((p.scratch for p in programs), default=0),
                   max((p.window for p in programs), default=0))


def parallel(*programs: Program) -> Program:
    """The programs run together: step s holds step s of each, their transfers and operations
    in argument order.  Scratch and window: the largest part's (parts that run together
    place their data apart themselves)."""
    steps = []
    for s in range(max((len(p.steps) for p in programs), default=0)):
        parts = [p.steps[s] for p in programs if s < len(p.steps)]
        steps.append(Step(tuple(x for part in parts for x in part.sends),
                          tuple(x for part in parts for x in part.recvs),
                          tuple(x for part in parts for x in part.local),
                          any(part.sync for part in parts)))
    return Program(tuple(steps), max((p.scratch for p in programs), default=0),
                   max((p.window for p in programs), default=0))


def _map(program: Program, region: Callable[[Region], Region],
         peer: Callable[[int], int]) -> Program:
    """``program`` with every region and every peer mapped."""
    def op(o: LocalOp) -> LocalOp:
        if isinstance(o, Copy):
            return Copy(region(o.src), region(o.dst))
        return Reduce(region(o.dst), tuple(map(region, o.srcs)))

    def step(s: Step) -> Step:
        return Step(tuple(Send(peer(x.peer), tuple(map(region, x.regions))) for x in s.sends),
                    tuple(Recv(peer(x.peer), tuple(map(region, x.regions)),
                               tuple(map(op, x.on_arrival))) for x in s.recvs),
                    tuple(map(op, s.local)), s.sync)
    return Program(tuple(map(step, program.steps)), program.scratch, program.window)


def relabel(program: Program, ranks: Sequence[int]) -> Program:
    """``program`` planned for ranks 0, 1, ... run by ranks ``ranks[0], ranks[1], ...``."""
    return _map(program, lambda r: r, ranks.__getitem__)


def relocate(program: Program, moves: Mapping[str, tuple[str, int]]) -> Program:
    """``program`` with buffer ``b`` moved to ``moves[b] = (buffer, offset)``: element i of
    ``b`` becomes element ``offset + i`` of ``buffer`` (buffers not in ``moves`` stay)."""
    def move(r: Region) -> Region:
        if r.buffer not in moves:
            return r
        buffer, at = moves[r.buffer]
        return Region(buffer, at + r.offset, r.count)
    return _map(program, move, lambda peer: peer)


def allgather_from_input(call: Call, program: Program) -> Program:
    """An allgather ``program`` planned in place, for ``call``: unless the call is in place,
    step 0 sends the own block's parts straight from the send buffer while the block is
    copied into place (in a step of its own when there is none)."""
    if call.in_place:
        return program
    own = Region(RECV, edges(call.counts)[call.rank], call.counts[call.rank])
    source = Region(SEND, 0, own.count)

    def from_source(r: Region) -> Region:
        inside = r.buffer == own.buffer and own.offset <= r.offset and r.stop <= own.stop
        return source.sub(r.offset - own.offset, r.count) if inside else r
    first = program.steps[0] if program.steps else Step()
    first = Step(tuple(Send(s.peer, tuple(map(from_source, s.regions))) for s in first.sends),
                 first.recvs, first.local + _nonempty((Copy(source, own),)))
    return Program((first, *program.steps[1:]), program.scratch, program.window)
