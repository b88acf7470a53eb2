"""A sequence axis of length S sharded over the N ranks of a communicator.

A layout says which global rows each rank holds, in which local order (:func:`positions`):

- ``contiguous``: rank r holds ``np.array_split(np.arange(S), N)[r]`` (the first S % N ranks
  one row more);
- ``zigzag``: the sequence cut into 2N chunks by ``np.array_split``; rank r holds chunks r and
  2N-1-r, in that order, so that under a causal mask every rank has the same work;
- ``tasp``: the zig-zag placement of "TASP: Topology-aware Sequence Parallelism" (its Section
  3.2.3): the rows of ``zigzag`` (chunks r and 2N-1-r, a head and a tail), each cut by
  ``np.array_split`` into k parts, k the number of Hamiltonian cycles of
  ``hpccoll.hamiltonian.decompose(N)`` (N-1; 6 for N = 4, 10 for N = 6), and held interleaved:
  head part 0, tail part 0, head part 1, tail part 1, ...  The multiring allgather cuts a
  rank's block into k even chunks and sends chunk c round cycle c, so chunk c is (when the
  lengths divide) head part c with tail part c: whatever rank it visits, under a causal mask
  either the whole of that rank's queries see its head part and none see its tail part, or
  only that rank's tail chunk sees both; the same work either way, so every rank has the same
  work at every step, not only in total.  (On several nodes the multiring uses the
  topology-aware cycles instead, as many as ranks per node: chunks and parts then differ,
  and the per-step balance is only approximate; the total stays as ``zigzag``'s.)

:func:`shard` takes this rank's rows of a full array, :func:`unshard` gathers the full array
on every rank (an allgather of the shards, any hpccoll algorithm, then the rows put in global
order).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..context import check_comm, context
from ..hamiltonian import decompose
from ..runtime.agreement import gather_objects
from ..schedule import even_part, even_split

LAYOUTS = ("contiguous", "zigzag", "tasp")


def split_counts(length: int, parts: int) -> list[int]:
    """The sizes of ``np.array_split(range(length), parts)``: the first ``length % parts``
    parts one longer (:func:`hpccoll.schedule.even_split`)."""
    return list(even_split(length, parts))


def _parts(array: np.ndarray, parts: int) -> list[np.ndarray]:
    """``np.array_split(array, parts)``: views of the :func:`~hpccoll.schedule.even_part`
    parts."""
    return [array[at:at + count]
            for at, count in (even_part(len(array), parts, i) for i in range(parts))]


def _chunks(length: int, parts: int) -> list[np.ndarray]:
    return _parts(np.arange(length), parts)


def positions(length: int, ranks: int, layout: str) -> list[np.ndarray]:
    """For each rank, the global rows (of ``length``) it holds under ``layout``, in its local
    order."""
    if layout == "contiguous":
        return _chunks(length, ranks)
    if layout == "zigzag":
        chunks = _chunks(length, 2 * ranks)
        return [np.concatenate((chunks[r], chunks[2 * ranks - 1 - r])) for r in range(ranks)]
    if layout == "tasp":
        chunks, cycles = _chunks(length, 2 * ranks), len(decompose(ranks))
        return [_interleaved(_parts(chunks[r], cycles), _parts(chunks[2 * ranks - 1 - r], cycles))
                for r in range(ranks)]
    raise ValueError(f"unknown layout {layout!r}: choose one of {', '.join(LAYOUTS)}")


def _interleaved(heads: list[np.ndarray], tails: list[np.ndarray]) -> np.ndarray:
    """head 0, tail 0, head 1, tail 1, ... concatenated."""
    return np.concatenate([part for pair in zip(heads, tails) for part in pair])


def agree_objects(comm: MPI.Comm, mine: object, what: str) -> list:
    """Every rank's small picklable ``mine``, in rank order, on every rank: exchanged on
    hpccoll's private duplicate of ``comm`` under the deadline, so a rank that never comes
    makes the others raise CollectiveTimeout (and revokes hpccoll's state of ``comm``, as any
    failed hpccoll call does: ``hpccoll.recover(comm)`` on every rank makes it usable again)
    instead of hanging."""
    check_comm(comm)
    ctx = context(comm)
    return gather_objects(ctx.comm, mine, what, ctx)


def _axis(array: np.ndarray, axis: int) -> int:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected a NumPy array, got {type(array).__name__}")
    if not -array.ndim <= axis < array.ndim:
        raise ValueError(f"axis {axis} is out of range for an array of {array.ndim} "
                         "dimension(s)")
    return axis % array.ndim


def shard(x_full: np.ndarray, comm: MPI.Comm, layout: str = "contiguous",
          axis: int = 0) -> np.ndarray:
    """This rank's rows of ``x_full`` along ``axis`` under ``layout`` (a new array)."""
    axis = _axis(x_full, axis)
    rows = positions(x_full.shape[axis], comm.Get_size(), layout)[comm.Get_rank()]
    return np.take(x_full, rows, axis=axis)


def unshard(x_local: np.ndarray, comm: MPI.Comm, layout: str = "contiguous", axis: int = 0,
            *, algorithm: str = "auto") -> np.ndarray:
    """The full array on every rank from the shards along ``axis`` under ``layout``, gathered
    with ``hpccoll.allgather`` (``algorithm``).  The arguments and the shards' shapes are
    compared on every rank first: the same TypeError or ValueError everywhere if one rank's
    are wrong or they do not fit the layout or each other."""
    from .. import allgather
    try:
        axis = _axis(x_local, axis)
        positions(0, 1, layout)                          # an unknown layout
        rest = x_local.shape[:axis] + x_local.shape[axis + 1:]
        mine: object = (x_local.shape[axis], rest, x_local.dtype.str)
    except (TypeError, ValueError) as error:
        mine = error
    shapes = agree_objects(comm, mine, "unshard: the shards' shapes")
    for rank, entry in enumerate(shapes):
        if isinstance(entry, Exception):
            raise type(entry)(f"unshard arguments on rank {rank}: {entry}")
    counts = [rows for rows, _, _ in shapes]
    if len({(shape, dtype) for _, shape, dtype in shapes}) > 1:
        raise ValueError(f"the shards differ in shape or dtype beside axis {axis}: "
                         f"{[(shape, dtype) for _, shape, dtype in shapes]}")
    length = sum(counts)
    held = positions(length, len(counts), layout)
    if counts != [len(rows) for rows in held]:
        raise ValueError(f"the shards' lengths {counts} along axis {axis} are not the "
                         f"{layout} layout of {length} rows over {len(counts)} ranks "
                         f"({[len(rows) for rows in held]})")
    row = int(np.prod(rest, dtype=np.int64))
    send = np.ascontiguousarray(np.moveaxis(x_local, axis, 0))
    gathered = np.empty((length, *rest), x_local.dtype)
    allgather(comm, send.reshape(-1), gathered.reshape(-1),
              recvcounts=[rows * row for rows in counts], algorithm=algorithm)
    if layout != "contiguous":
        ordered = np.empty_like(gathered)
        ordered[np.concatenate(held)] = gathered
        gathered = ordered
    return np.moveaxis(gathered, 0, axis)
