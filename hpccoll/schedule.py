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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Union

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


@dataclass(frozen=True, slots=True)
class Send:
    peer: int
    regions: tuple[Region, ...]

    @property
    def count(self) -> int:
        return sum(r.count for r in self.regions)


@dataclass(frozen=True, slots=True)
class Recv:
    peer: int
    regions: tuple[Region, ...]
    on_arrival: tuple[LocalOp, ...] = ()

    @property
    def count(self) -> int:
        return sum(r.count for r in self.regions)


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


def even_split(n: int, parts: int) -> tuple[int, ...]:
    """``n`` split into ``parts`` counts differing by at most one (larger ones first)."""
    base, extra = divmod(n, parts)
    return tuple(base + (i < extra) for i in range(parts))


def vector_blocks(call: Call) -> tuple[tuple[int, ...], list[Region], list[Region]]:
    """An allreduce's vector cut into p even blocks: their counts, the input's blocks and the
    result's blocks."""
    counts = even_split(call.counts[0], call.p)
    displs = offsets(counts)
    return (counts, [Region(call.input, o, c) for o, c in zip(displs, counts)],
            [Region(RECV, o, c) for o, c in zip(displs, counts)])


def one_rank(source: Region, result: Region) -> Program:
    """The program of a reduction on one rank: copy the input to the result (nothing when it
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
    """Elements per segment from the ``segment_bytes`` option (default 1 MiB)."""
    return max(1, int(call.option("segment_bytes", default_bytes)) // call.itemsize)


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
