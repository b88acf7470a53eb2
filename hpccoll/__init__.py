"""hpccoll: collective-communication algorithms for MPI programs.

Drop-in replacements for mpi4py's buffer collectives with a choice of algorithm::

    import hpccoll
    hpccoll.allreduce(comm, sendbuf, recvbuf, algorithm="ring")   # or "auto", "native", ...
    comm = hpccoll.Comm(MPI.COMM_WORLD)    # mpi4py's comm.Allreduce(...) etc. run by hpccoll

Public names load on first use (PEP 562), so ``import hpccoll`` and the tools that need no
MPI (verify, list, explain, catalogue, report, jobs render) never initialise MPI.
"""

import importlib as _importlib

from .collectives import SPECS as _SPECS, Collective as _Collective, on_add as _on_add

__version__ = "0.1.0"

# public name -> the module defining it; and every collective's functions, made from its spec
# in hpccoll.api (:func:`_public`)
_EXPORTS = {
    "allgather_stream": "streaming",
    "Request": "requests", "PersistentRequest": "requests",
    "CollectiveError": "runtime.progress", "CollectiveTimeout": "runtime.progress",
    "CommunicatorRevoked": "runtime.progress", "VerificationError": "verify",
    "configure": "settings", "set_topology": "context", "get_topology": "context",
    "recover": "context",
    "Topology": "topology", "SharedAllgather": "shared", "SharedAllreduce": "shared",
    "Comm": "comm",
}

_SUBPACKAGES = ("patterns",)       # hpccoll.patterns: the workloads built on the collectives


def _public() -> dict[str, str]:
    """Every public name -> the module defining it: the table above, then the blocking,
    non-blocking and persistent functions of every collective in SPECS."""
    return {**_EXPORTS, **{name: "api" for spec in _SPECS.values() for name in spec.functions}}


def _refuse_taken(spec: _Collective) -> None:
    """A collective whose functions would have one of the package's own names is not added."""
    taken = [name for name in spec.functions if name in _EXPORTS or name in _SUBPACKAGES]
    if taken:
        raise ValueError(f"collective {spec.name!r}: hpccoll already has {taken}")


_on_add(None, check=_refuse_taken)


def __getattr__(name: str) -> object:
    if name == "__all__":
        return [*_public(), *_SUBPACKAGES]
    if name in _SUBPACKAGES:
        return _importlib.import_module(f".{name}", __name__)
    module = _public().get(name)
    if module is None:
        raise AttributeError(f"module 'hpccoll' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names (the exports, the loaded submodules) and ``__version__``."""
    loaded = {name for name in globals() if not name.startswith("_")}
    return sorted(loaded | set(__getattr__("__all__")) | {"__version__"})
