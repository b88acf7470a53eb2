"""Ranks agreeing, under the deadline, on something each of them found out alone.

:func:`gather_rows` gives every rank every rank's small array (one ``Iallgather`` completed
with :func:`~hpccoll.runtime.progress.wait_requests`), so all ranks can take the same decision
from the same data (check mode's comparison of call signatures, the node window's
shared-memory check).  :func:`agree` is the decision "did every rank succeed": a rank passes
the error it met, or None, and either every rank returns or every rank raises the first
failed rank's error.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .progress import Guard, wait_requests

MESSAGE_BYTES = 400     # error text exchanged by agree()
# error types kept across ranks by agree() (index 0: no error); any other becomes RuntimeError
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


def agree(comm: MPI.Intracomm, error: BaseException | None, what: str) -> None:
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
