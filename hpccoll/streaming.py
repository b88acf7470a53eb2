"""An allgather as an iterator (:func:`allgather_stream`), for overlapping computation with
communication: the data is handed over as it lands, step by step."""

from __future__ import annotations

import bisect
from typing import Any, Iterator, Mapping

from mpi4py import MPI

from .prepared import prepare
from .runtime import device
from .schedule import RECV, offsets


def allgather_stream(comm: MPI.Intracomm, sendbuf: Any, recvbuf: Any, *,
                     recvcounts: Any = None, algorithm: str = "ring",
                     options: Mapping[str, Any] | None = None
                     ) -> Iterator[list[tuple[int, slice]]]:
    """:func:`allgather` as an iterator for overlapping computation with communication: it
    yields ``[(source rank, slice of recvbuf), ...]`` for the data in place so far, while the
    transfers that follow are in flight: first the own block (before any transfer completes),
    then after each step what that step delivered.  ``ring`` yields one block per step,
    ``multiring`` one chunk per cycle.  Device arrays staged through host memory get each
    delivered region copied to the device before it is yielded."""
    prepared, send, recv = prepare("allgather", comm, sendbuf, recvbuf, counts=recvcounts,
                                   algorithm=algorithm, options=options)
    if prepared.plan is None:
        raise NotImplementedError("allgather_stream needs a scheduled algorithm, not native")
    operation = prepared.start(send, recv)
    counts = prepared.args.call.counts
    starts = offsets(counts)
    for regions in operation.stream():
        if prepared.staged:     # the operation runs on a pinned host copy of recv
            landed = operation.binding.views[RECV]
            for offset, count in regions:
                device.to_device(landed[offset:offset + count], recv[offset:offset + count])
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
