"""Waiting with a deadline: the one polling loop of the runtime.

Every wait of hpccoll -- a schedule step's requests, a node barrier through a shared segment,
an agreement between ranks -- polls with :func:`poll`: it yields the core after a number of
idle polls (:func:`note_ranks_per_host` sets how many) and gives up past the deadline
(``HPCCOLL_TIMEOUT`` seconds after the wait began unless given), whereupon the waiter raises
:class:`CollectiveTimeout` (:func:`timeout`) saying what did not complete and why, so no rank
hangs forever.  :func:`wait_requests` is that wait for a list of MPI requests.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Callable

from mpi4py import MPI

from .. import settings

POLLS_BEFORE_YIELD = {False: 256, True: 16}   # idle polls before yielding: cores to spare, or not
_idle_polls = POLLS_BEFORE_YIELD[False]


class CollectiveTimeout(RuntimeError):
    """A collective step did not complete before the deadline."""


def note_ranks_per_host(ranks: int) -> None:
    """Poll longer before yielding when this host has a core per rank, yield early when ranks
    outnumber cores (a spinning rank then holds the core its peer needs: measured at 4 ranks
    on 2 cores, yielding after 16 polls instead of 256 makes small collectives 3x faster)."""
    global _idle_polls
    _idle_polls = POLLS_BEFORE_YIELD[ranks > (os.cpu_count() or 1)]


def deadline_from(start: float) -> float | None:
    """The monotonic time at which work begun at ``start`` times out (None: never)."""
    limit = settings.current.timeout
    return None if limit is None else start + limit


def poll(done: Callable[[], bool], deadline: float | None) -> bool:
    """Call ``done()`` until it returns True, yielding the core after a number of idle polls
    (:func:`note_ranks_per_host`); True when done, False once past ``deadline`` (None:
    never)."""
    spins = 0
    while not done():
        spins += 1
        if spins > _idle_polls:
            os.sched_yield()
        if deadline is not None and spins % 64 == 0 and time.monotonic() > deadline:
            return False
    return True


def timeout(what: str, detail: str) -> CollectiveTimeout:
    """The error for ``what`` past its deadline, ``detail`` saying what was missing."""
    return CollectiveTimeout(f"{what} did not complete within {settings.current.timeout:g} s "
                             f"(HPCCOLL_TIMEOUT): {detail}")


def wait_requests(requests: list[MPI.Request], what: str, deadline: float | None = None) -> None:
    """Complete ``requests``, polling until ``deadline`` (default: ``HPCCOLL_TIMEOUT`` from
    now); past it, cancel what is left and raise :class:`CollectiveTimeout` naming ``what``."""
    test_all = MPI.Request.Testall
    if test_all(requests):
        return
    if deadline is None:
        deadline = deadline_from(time.monotonic())
    if not poll(partial(test_all, requests), deadline):
        raise timeout(what, f"{len(cancel_open(requests))} request(s) open")


def cancel_open(requests: list[MPI.Request]) -> list[int]:
    """Cancel the requests not complete (where MPI lets it); their indices."""
    open_ = [i for i, r in enumerate(requests) if not r.Test()]
    for i in open_:
        try:
            requests[i].Cancel()
        except MPI.Exception:
            pass
    return open_
