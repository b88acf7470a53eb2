"""Ranks agreeing, under the deadline, on something each of them found out alone.

:func:`gather_rows` gives every rank every rank's small array (one ``Iallgather`` completed
with :func:`~hpccoll.runtime.progress.wait_requests`), so all ranks can take the same decision
from the same data (check mode's comparison of call signatures, the node window's
shared-memory check); :func:`gather_objects` does the same for small picklable objects (the
workloads' shape agreements), as mpi4py's ``allgather`` would but under the deadline.
:func:`fail_together` is the decision "did every rank succeed": a rank passes the error it
met, or None, and either every rank returns or every rank raises the first failed rank's
error.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from mpi4py import MPI

from .progress import Guard, wait_requests

MESSAGE_BYTES = 400     # error text exchanged by fail_together()
# error types kept across ranks by fail_together() (index 0: no error); any other becomes
# RuntimeError
ERROR_TYPES = (None, ValueError, TypeError, MemoryError, RuntimeError)


def gather_rows(comm: MPI.Intracomm, mine: np.ndarray, what: str,
                guard: Guard | None = None) -> np.ndarray:
    """Every rank's ``mine`` (1-D, of one size and dtype on every rank) as the rows of a
    (ranks, size) array, on every rank; CollectiveTimeout naming ``what`` past the deadline
    (``guard``: the communicator's context, revoked then).  Collective over ``comm``."""
    everyone = np.zeros((comm.Get_size(), mine.size), mine.dtype)
    wait_requests([comm.Iallgather(mine, everyone)], what, memory=(mine, everyone),
                  guard=guard)
    return everyone


def gather_objects(comm: MPI.Intracomm, mine: Any, what: str,
                   guard: Guard | None = None) -> list[Any]:
    """Every rank's picklable ``mine``, in rank order, on every rank: the pickles' lengths by
    :func:`gather_rows`, then the pickles by one ``Iallgatherv``, both under the deadline
    (CollectiveTimeout naming ``what``).  Collective over ``comm``."""
    data = np.frombuffer(pickle.dumps(mine, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    lengths = gather_rows(comm, np.array([data.size], np.int64), what, guard)[:, 0]
    joined = np.empty(int(lengths.sum()), np.uint8)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    wait_requests([comm.Iallgatherv(data, [joined, lengths, starts, MPI.BYTE])], what,
                  memory=(data, joined), guard=guard)
    return [pickle.loads(joined[s:s + n].tobytes()) for s, n in zip(starts, lengths)]


def fail_together(comm: MPI.Intracomm, error: BaseException | None, what: str) -> None:
    """Raise on every rank if ``error`` happened on any: ValueError, TypeError and MemoryError
    stay what they are, anything else becomes RuntimeError, and every rank's message names
    the first failed rank and its error.  Collective over ``comm``."""
    mine = np.zeros(MESSAGE_BYTES, np.uint8)
    if error is not None:
        kind = next((i for i, t in enumerate(ERROR_TYPES) if t and isinstance(error, t)),
                    ERROR_TYPES.index(RuntimeError))
        text = f"{type(error).__name__}: {error}".encode()[:MESSAGE_BYTES - 1]
        mine[0] = kind
        mine[1:1 + len(text)] = np.frombuffer(text, np.uint8)
    everyone = gather_rows(comm, mine, f"{what} (agreement)")
    failed = np.flatnonzero(everyone[:, 0])
    if failed.size:
        first = int(failed[0])
        text = everyone[first, 1:].tobytes().rstrip(b"\0").decode(errors="replace")
        raise ERROR_TYPES[everyone[first, 0]](f"{what} failed on rank {first}: {text}") \
            from error
