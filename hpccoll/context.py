"""hpccoll's state per user communicator: a private duplicate for its traffic, the topology,
the plan cache, the cache of validated calls and the tag slots of non-blocking and persistent
operations.  Attached to the user's communicator as an MPI attribute, freed with it."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from mpi4py import MPI

from .runtime.executor import Plan
from .runtime.progress import note_ranks_per_host, wait_requests
from .runtime.window import NodeWindow
from .topology import Topology, detect as detect_topology, from_spec as topology_from_spec

if TYPE_CHECKING:
    from .api import Prepared

PLANS_PER_COMM = 128
CALLS_PER_COMM = 256


def check_comm(comm: Any) -> None:
    """TypeError unless ``comm`` is a usable mpi4py intracommunicator."""
    if isinstance(comm, MPI.Comm) and comm == MPI.COMM_NULL:
        raise TypeError("comm is MPI.COMM_NULL (a freed or never created communicator)")
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(f"comm must be an mpi4py intracommunicator, got {type(comm).__name__}")


class Context:
    """hpccoll's state for one user communicator: a private duplicate, the plan cache and the
    tag-slot counter of non-blocking and persistent operations."""

    def __init__(self, comm: MPI.Comm, topology: Topology):
        self.comm = comm
        self.topology = topology
        self.window: NodeWindow | None = None
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()
        self.calls: OrderedDict[tuple, Prepared] = OrderedDict()
        tag_ub = comm.Get_attr(MPI.TAG_UB) or 32767
        self.tag_span = 1 << 16 if tag_ub >= 1 << 20 else 1 << 8
        self.slots = (tag_ub + 1) // self.tag_span
        self.slot = 0

    def next_tags(self) -> tuple[int, int]:
        """(base, span) tags for a non-blocking or persistent operation: slot 0 is for the
        blocking calls, the others rotate; every rank starts operations in the same order,
        so every rank draws the same slot."""
        self.slot = self.slot % (self.slots - 1) + 1
        return self.slot * self.tag_span, self.tag_span

    def remember(self, key: tuple, prepared: "Prepared") -> None:
        self.calls[key] = prepared
        while len(self.calls) > CALLS_PER_COMM:
            self.calls.popitem(last=False)

    def plan(self, key: tuple, make: Callable[[], Plan]) -> Plan:
        found = self.plans.get(key)
        if found is None:
            found = self.plans[key] = make()
            while len(self.plans) > PLANS_PER_COMM:
                self.plans.popitem(last=False)[1].free()
        else:
            self.plans.move_to_end(key)
        return found

    def node_window(self) -> NodeWindow:
        """The shared window of this rank's node (made on first use: collective)."""
        if self.window is None:
            self.window = NodeWindow(self.comm, self.topology.regions[0])
        return self.window

    def free(self) -> None:
        for plan in self.plans.values():
            plan.free()
        self.plans.clear()
        self.calls.clear()
        if self.window is not None:
            self.window.free()
        self.comm.Free()


def _delete_context(comm: MPI.Comm, keyval: int, context: Context) -> None:
    context.free()


_KEYVAL: int | None = None


def existing_context(comm: MPI.Comm) -> Context | None:
    """The :class:`Context` of ``comm`` if it has one already (no communication; None for a
    communicator that cannot hold one, such as ``MPI.COMM_NULL``: validation says why)."""
    try:
        return None if _KEYVAL is None else comm.Get_attr(_KEYVAL)
    except MPI.Exception:
        return None


def context(comm: MPI.Comm) -> Context:
    """The :class:`Context` of ``comm``, creating its private duplicate on first use (a
    collective call, guarded by the deadline like every other)."""
    global _KEYVAL
    if _KEYVAL is None:
        _KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete_context)
    found = comm.Get_attr(_KEYVAL)
    if found is None:
        dup, request = comm.Idup()
        wait_requests([request], "creating hpccoll's private communicator (Comm.Idup)")
        host = dup.Split_type(MPI.COMM_TYPE_SHARED)
        note_ranks_per_host(host.Get_size())
        host.Free()
        found = Context(dup, detect_topology(dup))
        comm.Set_attr(_KEYVAL, found)
    return found


def set_topology(comm: MPI.Comm, topology: Topology | str) -> Topology:
    """Use ``topology`` (a :class:`~hpccoll.topology.Topology`, a spec such as
    ``"nodes=2,ppn=4"``, or a JSON file) for ``comm`` instead of the detected one.  Every rank
    must pass the same; the first use of ``comm`` by hpccoll is collective."""
    check_comm(comm)
    if isinstance(topology, str):
        topology = topology_from_spec(topology, comm.Get_size())
    elif not isinstance(topology, Topology):
        raise TypeError("topology must be a Topology or a spec string")
    if topology.size != comm.Get_size():
        raise ValueError(f"topology describes {topology.size} ranks, the communicator has "
                         f"{comm.Get_size()}")
    ctx = context(comm)
    if topology != ctx.topology:
        ctx.topology = topology
        ctx.calls.clear()
        for plan in ctx.plans.values():
            plan.free()
        ctx.plans.clear()
        if ctx.window is not None:
            ctx.window.free()
            ctx.window = None
    return topology


def topology(comm: MPI.Comm) -> Topology:
    """The topology hpccoll uses for ``comm`` (detected on first use, or set)."""
    check_comm(comm)
    return context(comm).topology
