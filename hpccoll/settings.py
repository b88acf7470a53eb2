"""Run-time settings, read from the environment once at import and changeable at run time
with :func:`configure` (reading the environment on every call would cost microseconds that
a small collective cannot afford).

* ``HPCCOLL_TIMEOUT``: seconds a collective step may wait before it raises
  :class:`hpccoll.CollectiveTimeout` (default 600; ``0`` or ``none``: wait forever).
* ``HPCCOLL_CHECK``: ``1`` turns on check mode: one small extra collective per call confirms
  that every rank passed matching arguments.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Callable

DEFAULT_TIMEOUT = 600.0
_UNSET = object()


@dataclass(frozen=True)
class Settings:
    timeout: float | None = DEFAULT_TIMEOUT
    check: bool = False
    # fault injection for resilience benchmarks (``hpccoll bench --pause``): before posting
    # each step, stall for ``seconds`` with probability ``probability``
    stall: tuple[float, float] | None = None


def _timeout(text: str | None) -> float | None:
    text = (text or "").strip().lower()
    if not text:
        return DEFAULT_TIMEOUT
    if text in ("0", "none", "inf"):
        return None
    value = float(text)
    if value < 0:
        raise ValueError(f"HPCCOLL_TIMEOUT must not be negative, got {text!r}")
    return value


def from_environment() -> Settings:
    return Settings(timeout=_timeout(os.environ.get("HPCCOLL_TIMEOUT")),
                    check=os.environ.get("HPCCOLL_CHECK", "").strip() not in ("", "0"))


current = from_environment()
_listeners: list[Callable[[Settings], None]] = []


def on_change(listener: Callable[[Settings], None]) -> None:
    """Call ``listener(settings)`` now and after every :func:`configure` (the executor installs
    its fault injection this way, only while ``stall`` is set)."""
    _listeners.append(listener)
    listener(current)


def configure(*, timeout: float | None | object = _UNSET, check: bool | object = _UNSET,
              stall: tuple[float, float] | None | object = _UNSET) -> Settings:
    """Change settings at run time (``timeout`` in seconds, None for no deadline; ``check``
    mode on or off; ``stall=(probability, seconds)`` makes this rank pause before a step at
    random, for resilience benchmarks); returns the previous settings so they can be restored
    with ``configure(**vars(previous))``."""
    global current
    previous = current
    changes = {}
    if timeout is not _UNSET:
        changes["timeout"] = None if timeout is None else _timeout(str(timeout))
    if check is not _UNSET:
        changes["check"] = bool(check)
    if stall is not _UNSET:
        if stall is not None:
            probability, seconds = stall
            if not 0 <= probability <= 1 or seconds < 0:
                raise ValueError("stall is (probability in [0, 1], seconds >= 0)")
            stall = (float(probability), float(seconds))
        changes["stall"] = stall
    current = replace(current, **changes)
    for listener in _listeners:
        listener(current)
    return previous
