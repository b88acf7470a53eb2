"""Transfers left in flight by a failed collective, and the memory they may still touch.

After a failure (a deadline passed, a peer revoked the communicator, an MPI error, an
interrupt) some of a call's requests can still be active: MPI cannot cancel a send (MPI-4
deprecates it, and MPICH crashes cancelling a persistent send past its eager size) nor a
non-blocking collective, and a receive that already began to arrive completes anyway.  Such a
request may still read or write its buffer, so :func:`hold` keeps the requests and every
object whose memory they use (the user's arrays, scratch, staging, the binding) alive here
until they complete; :func:`sweep` (run at each new failure and by
:func:`hpccoll.recover`) frees those that have.  The leak is bounded: one call per failure,
because every later call on a revoked communicator raises before it sends anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpi4py import MPI


@dataclass
class _Held:
    what: str                    # the failed call, for :func:`held`
    requests: list[MPI.Request]
    memory: tuple[Any, ...]      # kept alive while a request may use it


_held: list[_Held] = []
_retired: list[MPI.Comm] = []


def retire(comm: MPI.Comm) -> None:
    """Keep the communicator of a revoked context: never freed, because MPI may give a freed
    communicator's context id to one made later, where messages of the failed call (still
    queued at a peer, or sent by a late one) could then match.  One per failure."""
    _retired.append(comm)


def cancel_receives(requests: list[MPI.Request], receives: list[int]) -> None:
    """Cancel the active receives among ``requests`` (indices ``receives``): MPI cancels a
    receive that has not matched a message; one that has will complete."""
    for i in receives:
        request = requests[i]
        if request != MPI.REQUEST_NULL:
            try:
                request.Cancel()
            except MPI.Exception:
                pass


def hold(what: str, requests: list[MPI.Request], *memory: Any) -> None:
    """Keep ``requests`` and ``memory`` until the requests complete (see the module doc)."""
    sweep()
    if not _complete(requests):
        _held.append(_Held(what, list(requests), memory))


def sweep() -> None:
    """Release what is held for requests that have completed since."""
    _held[:] = [entry for entry in _held if not _complete(entry.requests)]


def held() -> list[str]:
    """The failed calls whose transfers are still in flight (their memory still held)."""
    return [entry.what for entry in _held]


def _complete(requests: list[MPI.Request]) -> bool:
    """Whether every request has completed (an MPI error completes it too); persistent ones
    that have are freed."""
    for request in requests:
        try:
            if not request.Test():
                return False
        except MPI.Exception:
            pass
    for request in requests:
        if isinstance(request, MPI.Prequest) and request != MPI.REQUEST_NULL:
            try:
                request.Free()
            except MPI.Exception:
                pass
    return True
