"""The entry of a repeated blocking call, in C: the public functions' first step.

A blocking call that repeats the collective's last validated call on a compiled executor
(:class:`hpccoll.api.LastCall`) needs no Python beyond the public function's frame: the
function calls its collective's :class:`Entry` first, which compares the arguments with the
armed call, checks the arrays (dtype, size, C layout, writability, no overlap, the bound
addresses of a scheduled binding), and calls the executor's compiled function through its
address (:func:`.native.entry_function`, :func:`.scheduled.entry_function`); it returns False,
having done nothing, for any other call, which the Python path (``api.run_collective``) then
serves as before.  A run still in flight after the executor's polls is finished by the
armed ``finish`` callable, in Python, under the failure model (deadline, revocation notices,
the memory held after a failure).  So the entry changes how fast a repeat is served, never
what it does: it makes the checks the Python path makes (``api._again``,
``LastCall.repeat``, the executors' compiled checks), and declines what they would decline.

``_entry.c`` is built at install (setup.py) when a C compiler is there; without one, the
:class:`StandIn` takes its place and serves no call.
"""

from __future__ import annotations

from typing import Any
# What an argument of an armed call must be in a repeat (a pattern item is (kind, value,
# buffer): buffer 0 the send buffer, 1 the receive one, -1 neither): the same object, an equal
# value of the same type, a NumPy array of the call's dtype, a spec -- a list or tuple of such
# an array then items equal to ``value``'s -- or anything (the numbering of ``_entry.c``)
SAME, EQUAL, ARRAY, SPEC, ANY = range(5)


class StandIn:
    """The entry where the C one was not built: it serves no call."""

    armed = False

    def __call__(self, *arguments: Any) -> bool:
        return False

    def arm(self, pattern: tuple, dtype: Any, run: tuple) -> None:
        pass

    def disarm(self) -> None:
        pass


try:
    from ._entry import Entry
    COMPILED = True
except ImportError:         # (installed without a C compiler: the Python path serves all)
    Entry, COMPILED = StandIn, False
