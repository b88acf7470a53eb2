"""Every ``HPCCOLL_*`` environment variable, declared once (name, type, default, meaning, as
MPICH's cvars), read and validated here: a bad value is one clear ValueError naming the
variable.  :func:`table` is the README's table of them.

The variables the hot path needs (``HPCCOLL_TIMEOUT``, ``HPCCOLL_CHECK``) are read once, when
``settings.current`` is first used (not at import: a bad value then fails the call or command
that needs it, never ``import hpccoll``), and changeable at run time with :func:`configure`
(reading the environment on every call would cost microseconds that a small collective cannot
afford); the others are read where their decision is made (once per planned call, or per
run).  :func:`check_environment` reads them all, for a command to refuse a bad one up front.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Callable

from .collectives import SPECS, on_add

DEFAULT_TIMEOUT = 600.0
_UNSET = object()
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse_timeout(text: str) -> float | None:
    """Seconds (> 0), or 0, ``none`` or ``inf`` for no deadline."""
    text = text.strip().lower()
    if text in ("0", "none", "inf"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected seconds, or 0/none/inf for no deadline") from None
    if math.isnan(value) or value < 0:
        raise ValueError("expected a non-negative number of seconds")
    return value


def parse_bool(text: str) -> bool:
    text = text.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected one of {'/'.join(_TRUE)} or {'/'.join(_FALSE)}")


def _text(text: str) -> str:
    return text.strip()


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str                        # what the value is, for the table
    default: str                     # as the table shows it
    meaning: str
    parse: Callable[[str], Any] = _text


def algorithm_name(collective: str) -> Callable[[str], str | None]:
    """A parser of ``HPCCOLL_<COLLECTIVE>_ALGORITHM``: a name ``algorithm=`` takes for
    ``collective`` (None for ``auto``: no algorithm forced)."""
    def parse(text: str) -> str | None:
        from . import registry
        name = text.strip()
        if name == "auto":
            return None
        known = registry.names(collective)
        if name not in known:
            raise ValueError(f"unknown algorithm {name!r} for {collective}; known: auto, "
                             f"{', '.join(known)}")
        return name
    return parse


def tuning_file(text: str) -> str:
    """A decision table's path (checked: it exists and is one), or ``none``."""
    path = text.strip()
    if path.lower() == "none":
        return "none"
    from .tuning import load
    load(path)
    return path


def _algorithm_variable(name: str) -> Variable:
    """``HPCCOLL_<NAME>_ALGORITHM``, collective ``name``'s forced algorithm."""
    return Variable(f"HPCCOLL_{name.upper()}_ALGORITHM", "algorithm name", "auto",
                    f"the algorithm `algorithm=\"auto\"` runs for {name} (if it applies "
                    "to the call; otherwise the next source decides)", algorithm_name(name))


def _algorithm_variables() -> tuple[Variable, ...]:
    return tuple(_algorithm_variable(name) for name in SPECS)


VARIABLES: dict[str, Variable] = {v.name: v for v in (
    Variable("HPCCOLL_TIMEOUT", "seconds", f"{DEFAULT_TIMEOUT:g}",
             "how long a collective step may wait before it raises CollectiveTimeout "
             "(0, none or inf: wait forever)", parse_timeout),
    Variable("HPCCOLL_CHECK", "boolean", "0",
             "check mode: one small extra collective per call confirms every rank passed "
             "matching arguments", parse_bool),
    *_algorithm_variables(),
    Variable("HPCCOLL_TUNING_FILE", "path or none", "(the shipped table)",
             "the decision table `auto` reads (made by `hpccoll tune`); `none` switches every "
             "table off, leaving the cost model", tuning_file),
    Variable("HPCCOLL_MACHINE", "preset name", "(by topology)",
             "the cost model's machine: a preset of `hpccoll.costmodel.MACHINES` "
             "(shared-memory, cluster, h100, h100-slow-ib)"),
    Variable("HPCCOLL_TOPOLOGY", "spec or JSON file", "(detected)",
             "the topology of every communicator, e.g. `nodes=2,ppn=4` or a file"),
    Variable("HPCCOLL_GPU_AWARE", "boolean", "(asked of the MPI library)",
             "whether MPI reads and writes device memory itself; otherwise device buffers "
             "are staged through the host", parse_bool),
)}


def _declare_algorithm_variable(collective: Any) -> None:
    """Declare the algorithm variable of a collective added after import (the others keep
    their place in :data:`VARIABLES`)."""
    variable = _algorithm_variable(collective.name)
    VARIABLES.setdefault(variable.name, variable)


on_add(_declare_algorithm_variable)


def read(name: str, unset: Any = None) -> Any:
    """The parsed value of variable ``name`` from the environment, ``unset`` when it is unset
    or empty; ValueError naming the variable when the value is bad."""
    variable = VARIABLES[name]
    text = os.environ.get(name, "")
    if not text.strip():
        return unset
    try:
        return variable.parse(text)
    except ValueError as error:
        raise ValueError(f"{name}={text!r}: {error}") from None


def table() -> str:
    """The variables as a Markdown table."""
    rows = ["| variable | value | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{v.name}` | {v.kind} | {v.default} | {v.meaning} |"
             for v in VARIABLES.values()]
    return "\n".join(rows)


@dataclass(frozen=True)
class Settings:
    timeout: float | None = DEFAULT_TIMEOUT
    check: bool = False
    # fault injection for resilience benchmarks (``hpccoll bench --pause``): before posting
    # each step, stall for ``seconds`` with probability ``probability``
    stall: tuple[float, float] | None = None


def from_environment() -> Settings:
    return Settings(timeout=read("HPCCOLL_TIMEOUT", DEFAULT_TIMEOUT),
                    check=read("HPCCOLL_CHECK", False))


def check_environment() -> None:
    """Read every declared variable: ValueError naming the first one whose value is bad (a
    command that runs or explains collectives calls this before it starts)."""
    for name in VARIABLES:
        read(name)


_listeners: list[Callable[[Settings], None]] = []


def __getattr__(name: str) -> Any:
    """``settings.current``: the settings in force, and ``settings.fast``: whether calls may
    run on the compiled executors and repeat without validation (no check mode, no fault
    injection), the one flag every such path reads (PEP 562: consulted only until the first
    read has stored them as module globals, so later reads cost a plain lookup)."""
    if name in ("current", "fast"):
        _current()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _current() -> Settings:
    """The settings in force, read from the environment the first time they are needed (a bad
    variable is then a ValueError naming it, raised by what needed it), with every
    :func:`on_change` listener told."""
    found = globals().get("current")
    if found is None:
        found = from_environment()
        _install(found)
        for listener in _listeners:
            listener(found)
    return found


def on_change(listener: Callable[[Settings], None]) -> None:
    """Call ``listener(settings)`` now and after every :func:`configure` (every context
    forgets its validated calls this way); while a variable is bad, the
    first call is deferred to when the settings are read (by a call, which raises)."""
    try:
        found: Settings | None = _current()
    except ValueError:
        found = None
    _listeners.append(listener)
    if found is not None:
        listener(found)


def configure(*, timeout: float | None | object = _UNSET, check: bool | object = _UNSET,
              stall: tuple[float, float] | None | object = _UNSET) -> Settings:
    """Change settings at run time (``timeout`` in seconds, None for no deadline; ``check``
    mode on or off; ``stall=(probability, seconds)`` makes this rank pause before a step at
    random, for resilience benchmarks); returns the previous settings so they can be restored
    with ``configure(**vars(previous))``."""
    previous = _current()
    changes = {}
    if timeout is not _UNSET:
        changes["timeout"] = None if timeout is None else parse_timeout(str(timeout))
    if check is not _UNSET:
        changes["check"] = bool(check)
    if stall is not _UNSET:
        if stall is not None:
            probability, seconds = stall
            if not 0 <= probability <= 1 or seconds < 0:
                raise ValueError("stall is (probability in [0, 1], seconds >= 0)")
            stall = (float(probability), float(seconds))
        changes["stall"] = stall
    found = replace(previous, **changes)
    _install(found)
    for listener in _listeners:
        listener(found)
    return previous


def _install(found: Settings) -> None:
    """Make ``found`` the settings in force (``current``, and ``fast`` from it)."""
    globals()["current"] = found
    globals()["fast"] = not found.check and found.stall is None
