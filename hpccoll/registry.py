"""(collective, algorithm name) -> planner, with the constraints under which it applies.

Planners register themselves with :func:`register` when their family module is imported;
:mod:`hpccoll.algorithms` imports every family.  ``native`` (the MPI library's own collective)
is not a planner: the API handles it, but it is listed among the names a user may ask for.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from .collectives import SPECS, spec
from .schedule import Call, Program

NATIVE = "native"
Planner = Callable[[Call], Program]


@dataclass(frozen=True)
class Constraint:
    """A condition a call must meet for an algorithm to serve it."""

    description: str
    holds: Callable[[Call], bool]


POWER_OF_TWO = Constraint("p is a power of two", lambda c: c.p & (c.p - 1) == 0)


@dataclass(frozen=True)
class Option:
    """A planner option an algorithm declares: its name, the values it takes (``accepts``
    decides, ``values`` says which in words), its default and what it means."""

    name: str
    values: str
    default: str
    meaning: str
    accepts: Callable[[Any], bool]

    def __str__(self) -> str:
        return f"{self.name} ({self.values}; default {self.default}): {self.meaning}"


def segment_option(default: str) -> Option:
    """The option ``segment_bytes`` (what :func:`hpccoll.schedule.segment_count` reads), with
    ``default`` in words."""
    return Option("segment_bytes", "a positive integer", default,
                  "the bytes of a segment: messages are cut into segments of at most this",
                  lambda value: isinstance(value, int) and not isinstance(value, bool)
                  and value > 0)


def option_problem(declared: tuple[Option, ...], call: Call) -> str | None:
    """What is wrong with ``call``'s options for an algorithm that declares ``declared``: an
    option it does not take, or a value its option does not take (None when nothing is)."""
    known = {o.name: o for o in declared}
    for name, value in call.options:
        if name not in known:
            return (f"only its options ({', '.join(known) or 'it takes none'}); "
                    f"{name!r} is not one of them")
        if not known[name].accepts(value):
            return f"option {name} is {known[name].values}"
    return None


@dataclass(frozen=True)
class Cost:
    """An algorithm's cost, as formulas (Python expressions in p and n, with ``log2``,
    ``ceil``, ``floor``, ``popsum(p)`` = the number of 1 bits in 0..p-1, ``grid(p)`` = the
    mesh's (r, c), ``swing_pairs(p)`` = folded pairs in a Swing allgather's sets): rounds (steps with messages), elements sent by the busiest rank for n
    elements per block (the collective's own n: per rank for allgather and reduce-scatter,
    per peer for alltoall, the vector for allreduce), and the alpha-beta(-gamma) time.
    The catalogue's test evaluates ``rounds`` and ``sent`` against the verifier's counts."""

    rounds: str
    sent: str
    time: str


@dataclass(frozen=True)
class Algorithm:
    collective: str
    name: str
    family: str
    planner: Planner
    requires: tuple[Constraint, ...] = ()
    cost: Cost | None = None
    source: str = ""
    auto: bool = True           # auto (the cost model) may pick it
    options: tuple[Option, ...] | None = None   # None: not declared (any option passes)
    # the planner's steps by size alone, where naming every block would not scale (the
    # simulator's replay at thousands of ranks): the same peers, message sizes and local
    # work, every region at offset 0, so not a program to run
    sizes: Planner | None = None

    @property
    def summary(self) -> str:
        """First line of the planner's docstring."""
        return (inspect.getdoc(self.planner) or "").split("\n", 1)[0]

    def violated(self, call: Call) -> str | None:
        """Why ``call`` cannot be served (None when it can): a declared option's problem or a
        constraint that does not hold."""
        if self.options is not None:
            problem = option_problem(self.options, call)
            if problem is not None:
                return problem
        for constraint in self.requires:
            if not constraint.holds(call):
                return constraint.description
        return None


_REGISTRY: dict[tuple[str, str], Algorithm] = {}


def register(collective: str | tuple[str, ...], name: str, *, family: str,
             requires: tuple[Constraint, ...] = (), cost: Cost | None = None,
             source: str = "", auto: bool = True,
             options: tuple[Option, ...] | None = None,
             sizes: Planner | None = None) -> Callable[[Planner], Planner]:
    """Decorator: register ``planner`` as algorithm ``name`` of one or more collectives, with
    its constraints, its :class:`Cost`, the paper it comes from, whether ``auto`` may pick
    it (``auto=False``: only when asked for by name), the options it takes (declared:
    any other option, or a value outside an option's, is refused) and its steps by size
    alone (:attr:`Algorithm.sizes`)."""
    names = (collective,) if isinstance(collective, str) else collective

    def decorate(planner: Planner) -> Planner:
        for coll in names:
            if coll not in SPECS:
                raise ValueError(f"unknown collective {coll!r}")
            if (coll, name) in _REGISTRY or name == NATIVE:
                raise ValueError(f"algorithm {name!r} registered twice for {coll}")
            _REGISTRY[coll, name] = Algorithm(coll, name, family, planner, requires, cost,
                                              source, auto, options, sizes)
        return planner

    return decorate


def _load() -> None:
    from . import algorithms  # noqa: F401  (registers every family)


def get(collective: str, name: str) -> Algorithm:
    """The registered algorithm, or ValueError naming the known ones."""
    _load()
    spec(collective)
    try:
        return _REGISTRY[collective, name]
    except KeyError:
        known = ", ".join(names(collective))
        raise ValueError(f"unknown algorithm {name!r} for {collective}; known: {known}") from None


def algorithms(collective: str | None = None) -> list[Algorithm]:
    """Registered algorithms (of one collective, or all), in registration order."""
    _load()
    return [a for (c, _), a in _REGISTRY.items() if collective in (None, c)]


def names(collective: str) -> list[str]:
    """Every name a user may pass as ``algorithm=`` for ``collective`` (native included)."""
    return [a.name for a in algorithms(collective)] + [NATIVE]
