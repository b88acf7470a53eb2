"""An allgather as an iterator (:func:`allgather_stream`), for overlapping computation with
communication: the data is handed over as it lands, step by step."""

from __future__ import annotations

import bisect
from typing import Any, Iterator, Mapping

from mpi4py import MPI

from .prepared import CopyBack, prepare
from .requests import COMPLETED
from .schedule import offsets


def allgather_stream(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *,
                     recvcounts: Any = None, algorithm: str = "ring",
                     options: Mapping[str, Any] | None = None
                     ) -> Iterator[list[tuple[int, slice]]]:
    """:func:`allgather` as an iterator for overlapping computation with communication: it
    yields ``[(source rank, slice of recvbuf), ...]`` for the data in place so far, while the
    transfers that follow are in flight: first the own block (before any transfer completes),
    then after each step what that step delivered.  ``ring`` yields one block per step,
    ``multiring`` one chunk per cycle.  Device arrays staged through host memory get each
    delivered region copied to the device before it is yielded, and nothing copied twice
    (:meth:`~hpccoll.prepared.CopyBack.deliver`)."""
    prepared, send, recv = prepare("allgather", comm, sendbuf, recvbuf, counts=recvcounts,
                                   algorithm=algorithm, options=options)
    if prepared.plan is None:
        raise NotImplementedError("allgather_stream needs a scheduled algorithm, not native")
    operation = prepared.start(send, recv)
    if operation is COMPLETED:          # (every block of no elements: nothing to hand over)
        return
    # staged: the operation runs on a pinned host copy of recv, whose copy-back hands each
    # region down as it is yielded and, at the end, only what has not gone down yet
    back = operation.on_done if isinstance(operation.on_done, CopyBack) else None
    counts = prepared.args.call.counts
    starts = offsets(counts)
    for regions in operation.stream():
        if back is not None:
            back.deliver(regions)
        pieces = []
        for offset, count in regions:      # cut at block boundaries: one source per piece
            stop = offset + count
            source = bisect.bisect_right(starts, offset) - 1
            while offset < stop:
                end = min(stop, starts[source] + counts[source])
                if end > offset:
                    pieces.append((source, slice(offset, end)))
                offset, source = max(offset, end), source + 1
        yield pieces
