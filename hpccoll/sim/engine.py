"""Finding and starting SimGrid (the optional ``sim`` extra, built by scripts/install-sim.sh).

The replay runs in a compiled controller (:func:`controller`, hpccoll/sim/controller.cpp)
linked against the same library.  SimGrid's Python module needs ``libsimgrid.so``, which pip
installs beside it in site-packages, a folder the dynamic loader does not search: :func:`load` loads the library
itself first (so no ``LD_LIBRARY_PATH`` is needed).  SimGrid keeps one engine per process, so
each simulation runs in a forked child (:func:`in_child`) that makes its engine, runs, and
sends back its result.
"""

from __future__ import annotations

import ctypes
import gc
import glob
import multiprocessing
import os
import sys
import traceback
from types import ModuleType
from typing import Any, Callable

INSTALL = ("hpccoll simulate needs the SimGrid simulator and hpccoll's compiled controller "
           "for it: in hpccoll's venv run `bash scripts/install-sim.sh` from hpccoll's source "
           "tree (about 10 minutes: it builds SimGrid 4.1, then the controller; with SimGrid "
           "there, the controller alone in under a minute)")
# the flow model that equals alpha-beta on free links and shares a link max-min fairly;
# a message's rate is not limited by a TCP window (a GPU fabric has none).  The sharing is
# solved in full at every event (network/optim:Full): SimGrid's default lazy update left a
# 5 GB/s uplink carrying 5.56 GB/s when 96 flows of mixed path latencies started at once on a
# spine-leaf (perf/sim_link_check.py), and gave RAT 0.4-0.6% different times depending on how
# the same routes were built.  Each solve is selective (network/maxmin-selective-update):
# it re-solves only the flows linked, through shared links, to one that started or ended;
# on a fat tree, where a round's flows start one by one, a full solve over every flow in
# flight at each start made the run grow as about p^2.7 (perf/simulation.md).  Times agree
# with the full solve's to 1e-4 (tests/unit/test_sim_selective_update.py)
CONFIG = ("--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
          "--cfg=network/TCP-gamma:1e18", "--cfg=network/optim:Full",
          "--cfg=network/maxmin-selective-update:yes", "--log=root.thres:critical")


class SimulatorMissing(ImportError):
    """SimGrid is not installed (the message says how to install it)."""


_module: ModuleType | None = None


def load() -> ModuleType:
    """The ``simgrid`` module, its shared library loaded first from wherever pip put it."""
    global _module
    if _module is not None:
        return _module
    for folder in sys.path:
        for library in sorted(glob.glob(os.path.join(folder or ".", "libsimgrid.so.*"))):
            ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
            break
    saved = os.dup(2)                  # the import prints a configuration line on stderr
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        import simgrid
    except ImportError as error:
        raise SimulatorMissing(f"{INSTALL} ({error})") from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    _module = simgrid
    return simgrid


def controller() -> ModuleType:
    """The replay's compiled controller (``hpccoll_sim_controller``, built from
    hpccoll/sim/controller.cpp by scripts/install-sim.sh beside ``libsimgrid.so``)."""
    load()
    try:
        import hpccoll_sim_controller
    except ImportError as error:
        raise SimulatorMissing(f"{INSTALL} ({error})") from None
    return hpccoll_sim_controller


def available() -> bool:
    try:
        controller()
    except SimulatorMissing:
        return False
    return True


def version() -> str:
    found = load().simgrid_version
    return found if isinstance(found, str) else ".".join(map(str, found))


def engine() -> Any:
    """A new SimGrid engine with :data:`CONFIG` (one per process)."""
    return load().Engine(["hpccoll-simulate", *CONFIG])


def _child(work: Callable[..., Any], args: tuple, pipe: Any) -> None:
    gc.freeze()         # the parent's objects (the planned programs): no collector passes
    try:
        pipe.send(("ok", work(*args)))
    except BaseException as error:           # noqa: BLE001 -- sent to the parent, raised there
        pipe.send(("error", (type(error).__name__, str(error), traceback.format_exc())))
    finally:
        pipe.close()


def in_child(work: Callable[..., Any], *args: Any) -> Any:
    """``work(*args)`` in a forked child process (its own SimGrid engine); its result, or its
    error raised here (ValueError and friends as themselves, anything else as RuntimeError
    with the child's traceback)."""
    load()
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(work, args, send), daemon=True)
    child.start()
    send.close()
    try:
        status, value = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the simulation died (exit status {child.exitcode})") from None
    child.join()
    if status == "ok":
        return value
    name, message, trace = value
    known = {"ValueError": ValueError, "TypeError": TypeError, "MemoryError": MemoryError}
    if name in known:
        raise known[name](message)
    raise RuntimeError(f"the simulation failed: {name}: {message}\n{trace}")
