"""hpccoll's state per user communicator: a private duplicate for its traffic, the topology,
the plan cache, the cache of validated calls and the tag slots of non-blocking and persistent
operations.  Attached to the user's communicator as an MPI attribute, freed with it.

The failure model (as MPI's fault-tolerance proposal, ULFM, defines it for communicators):
when a call fails after it may have sent a message -- a deadline passed
(:class:`~hpccoll.CollectiveTimeout`), an MPI error, an interrupt -- the context is
**revoked**: the error is raised once, and every later hpccoll call on the communicator
raises :class:`~hpccoll.CommunicatorRevoked` naming it, before sending anything.  The
revoking rank also sends every other rank a notice (a small message on a private
communicator of its own, where every rank keeps a receive for it posted -- a persistent one,
started once -- so that looking for a notice never searches the collectives' messages, and the
compiled executors test that receive in the same ``MPI_Testsome`` as a run's last messages,
at no cost to a clean run): a rank waiting in a collective, or finishing one, on the same
communicator finds it and raises CommunicatorRevoked naming the first rank's failure, instead
of timing out later or returning data that the failed call may have mixed up.
:func:`recover` (every rank) drops the revoked state and makes a fresh one on a new private
communicator, where no message of the failed call can match.  The MPI library's own
``MPI_Comm_revoke`` is not needed for this (MPICH's wheel does not implement it).
"""

from __future__ import annotations

import atexit
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from mpi4py import MPI

from . import settings
from .runtime import abandoned
from .runtime.agreement import gather_rows
from .runtime.executor import Plan
from .runtime.pool import size_class
from .runtime.progress import (CollectiveTimeout, CommunicatorRevoked, mpi_failure,
                               note_ranks_per_host, wait_requests)
from .runtime.window import NodeWindow
from .topology import Topology, detect as detect_topology, from_spec as topology_from_spec

if TYPE_CHECKING:
    from .prepared import Prepared

PLANS_PER_COMM = 128
CALLS_PER_COMM = 256
NOTICE_BYTES = 512      # the text of a revocation notice
SPARE_BYTES = 64 << 20  # the largest buffer kept for reuse by Context.spare
BLAME_GRACE = 0.2       # s, at most timeout/4: a timed-out rank listens for its silent peer's reason


def check_comm(comm: Any) -> None:
    """TypeError unless ``comm`` is a usable mpi4py intracommunicator."""
    if isinstance(comm, MPI.Comm) and comm == MPI.COMM_NULL:
        raise TypeError("comm is MPI.COMM_NULL (a freed or never created communicator)")
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(f"comm must be an mpi4py intracommunicator, got {type(comm).__name__}")


class Context:
    """hpccoll's state for one user communicator: a private duplicate (``comm``) and
    another for revocation notices (``notices``), the plan cache, the tag slots of operations
    and the revocation state (it is the :class:`~hpccoll.runtime.progress.Guard` of every
    wait on the duplicate), and the host buffers that the patterns reuse between calls
    (:meth:`spare`)."""

    def __init__(self, comm: MPI.Comm, notices: MPI.Comm, topology: Topology):
        self.comm, self.notices = comm, notices
        self.topology = topology
        self.window: NodeWindow | None = None
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()
        self.calls: OrderedDict[tuple, Prepared] = OrderedDict()
        self.spares: dict[str, np.ndarray] = {}
        self.revoked: CommunicatorRevoked | None = None
        tag_ub = comm.Get_attr(MPI.TAG_UB) or 32767
        self.tag_span = 1 << 16 if tag_ub >= 1 << 20 else 1 << 8
        self.slots = (tag_ub + 1) // self.tag_span - 1      # the last slot: notices
        self.notice_tag = tag_ub
        self.slot = 0
        # the receive of a revocation notice, posted for the context's life; noticed[0] is 1
        # once it has completed (set by whichever test found it: Python's or compiled code's,
        # which reads and writes it at its address), notice_from its sender where known
        self.notice_text = bytearray(NOTICE_BYTES)
        self.listening = notices.Recv_init([self.notice_text, MPI.BYTE], MPI.ANY_SOURCE,
                                           self.notice_tag)
        self.listening.Start()
        self.noticed = np.zeros(1, np.int64)
        self.notice_from = MPI.ANY_SOURCE

    def next_slot(self) -> int:
        """The first tag of the slot of ``tag_span`` tags for a non-blocking or persistent
        operation: slot 0 is for the blocking calls, the others rotate; every rank starts
        operations in the same order, so every rank draws the same slot."""
        self.slot = self.slot % (self.slots - 1) + 1
        return self.slot * self.tag_span

    def upcoming_slot(self) -> int:
        """What :meth:`next_slot` will give, not drawn yet (for a start that may still find
        it cannot run and send nothing)."""
        return (self.slot % (self.slots - 1) + 1) * self.tag_span

    # ------------------------------------------------------------------- the failure model

    def check(self) -> None:
        """CommunicatorRevoked if this context is revoked."""
        if self.revoked is not None:
            raise self.revoked

    def interrupted(self) -> bool:
        """Whether another rank's revocation notice has arrived."""
        if not self.noticed[0]:
            status = MPI.Status()
            if not self.listening.Test(status):
                return False
            self.noticed[0], self.notice_from = 1, status.Get_source()
        return True

    def check_notices(self) -> None:
        """CommunicatorRevoked (and this context revoked) if another rank's notice arrived:
        checked as each call completes, so that a call matched with messages of one that
        failed elsewhere does not return as if it had succeeded."""
        if self.interrupted():
            raise self.notice()

    def notice(self, source: int = MPI.ANY_SOURCE) -> CommunicatorRevoked:
        """Revoke with the text of a revocation notice (waiting for one if none came yet):
        the first that came, or from ``source``, received apart if the first was another's."""
        if source == MPI.ANY_SOURCE or source == self.notice_from:
            if not self.noticed[0]:
                self.listening.Wait()
                self.noticed[0] = 1
            text = self.notice_text
        else:
            text = bytearray(NOTICE_BYTES)
            self.notices.Recv([text, MPI.BYTE], source, self.notice_tag)
        return self._revoke(CommunicatorRevoked(text.rstrip(b"\0").decode(errors="replace")))

    def _revoke(self, error: CommunicatorRevoked) -> CommunicatorRevoked:
        """Revoked with ``error``: its validated calls forgotten (a repeat is validated anew,
        which raises ``error``)."""
        self.revoked = error
        self.calls.clear()
        return error

    def fail(self, error: BaseException) -> BaseException:
        """Revoke after ``error`` on this rank; the error the failing call raises.

        A timeout is this rank's own finding: it is sent to every other rank, and then, if
        a peer this rank waited for sends its own notice within a moment (it timed out
        waiting for another rank in turn), that notice names the cause and is raised
        instead.  Any other error (an MPI error, an interrupt) yields to a notice already
        here: the failure elsewhere is its likely cause.  An error of the MPI library is
        raised (and named in the notice) as a CollectiveError (:func:`mpi_failure`); a notice
        that cannot be sent (to a peer that failed) is skipped."""
        error = mpi_failure(error)
        if self.revoked is not None:
            return error
        if not isinstance(error, CollectiveTimeout) and self.interrupted():
            return self.notice()
        me = self.comm.Get_rank()
        cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        text = (f"hpccoll's state of this communicator was revoked by rank {me} after: "
                f"{cause}; every rank must call hpccoll.recover(comm) (or use another "
                "communicator)")
        self._revoke(CommunicatorRevoked(text))
        notice = bytearray(text.encode()[:NOTICE_BYTES - 1].ljust(NOTICE_BYTES, b"\0"))
        sends = []
        for peer in range(self.comm.Get_size()):
            if peer != me:
                try:
                    sends.append(self.notices.Isend([notice, MPI.BYTE], peer,
                                                    self.notice_tag))
                except MPI.Exception:
                    pass
        abandoned.hold("revocation notices", sends, notice)
        peers = getattr(error, "peers", ())
        until = time.monotonic() + min(BLAME_GRACE, (settings.current.timeout or 0) / 4)
        while peers:
            if self.interrupted() and self.notice_from in peers:
                return self.notice()
            for peer in peers:
                if self.notices.Iprobe(peer, self.notice_tag):
                    return self.notice(peer)
            if time.monotonic() > until:
                break
            time.sleep(BLAME_GRACE / 100)
        return error

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

    def spare(self, role: str, count: int, dtype: np.dtype) -> np.ndarray:
        """A flat host array of ``count`` elements of ``dtype`` (uninitialised) for a
        pattern's own use in one call: the buffer ``role`` held since an earlier call, when
        large enough, else a new one.  The buffer is out of the pool until the call hands it
        back (:meth:`keep_spare`) once its transfers are done, so a call that fails -- whose
        buffers an abandoned transfer may still write -- never hands them to a later one.
        Reuse spares later calls the page faults of new memory (perf/moe.md)."""
        dtype = np.dtype(dtype)
        nbytes = count * dtype.itemsize
        held = self.spares.pop(role, None)
        if held is None or held.nbytes < nbytes:
            held = np.empty(size_class(nbytes), np.uint8)
        return held[:nbytes].view(dtype)

    def keep_spare(self, role: str, array: np.ndarray) -> None:
        """Hand back a buffer of :meth:`spare` (any view of it) for later calls, unless it
        is larger than :data:`SPARE_BYTES`."""
        held = array
        while held.base is not None:
            held = held.base
        if held.nbytes <= SPARE_BYTES:
            self.spares[role] = held

    def node_window(self, nbytes: int, identity: int) -> NodeWindow:
        """The shared window of this rank's node, with halves of at least ``nbytes``.  Made
        or grown (MPI's blocking window calls, collective) only after every rank agreed under
        the deadline on the call (``identity``) and the size, so that ranks which disagree
        raise -- ValueError on every rank, or a timeout -- instead of hanging."""
        window = self.window
        if window is None or nbytes > window.half:
            rows = gather_rows(self.comm, np.array([identity, nbytes], np.int64),
                               "agreeing on the node window of a shared-window call", self)
            if (rows != rows[0]).any():
                raise ValueError("the ranks called different collectives, algorithms or sizes "
                                 "(check with HPCCOLL_CHECK=1): a shared-window call needs "
                                 "the same call on every rank")
            if window is None:
                window = self.window = NodeWindow(self.comm, self.topology.regions[0])
            window.ensure(nbytes)
        return window

    def free(self) -> None:
        _attached.pop(id(self), None)
        for plan in self.plans.values():
            plan.free()
        self.plans.clear()
        self.calls.clear()
        self.spares.clear()
        if self.window is not None:
            self.window.free()
        if not self.noticed[0]:
            self.listening.Cancel()
        abandoned.hold("the receive of revocation notices", [self.listening], self.notice_text)
        for comm in (self.comm, self.notices):
            if self.revoked is None:
                comm.Free()
            else:
                abandoned.retire(comm)
        # (what was made on this context -- a persistent request -- raises from now on)
        self.revoked = CommunicatorRevoked(
            "hpccoll's state of this communicator was released (by hpccoll.recover(comm), "
            "or the communicator freed): a request made before then must be made again")


def _delete_context(comm: MPI.Comm, keyval: int, context: Context) -> None:
    context.free()


_KEYVAL: int | None = None
_attached: dict[int, MPI.Comm] = {}     # id(context) -> the user's communicator it is on


def _free_at_exit() -> None:
    """Free every context still attached (its plans, its private
    communicator) while MPI is still initialised: run at interpreter exit, before mpi4py
    finalises MPI, so that the library finds nothing of hpccoll's left to complain about."""
    if MPI.Is_initialized() and not MPI.Is_finalized():
        for comm in list(_attached.values()):
            comm.Delete_attr(_KEYVAL)


def _forget_validated_calls(_: settings.Settings) -> None:
    """Settings changed (check mode, a stall): every context forgets its validated calls, so
    that no repeat runs without what the new settings ask of a call (each repeat path holds
    its call while its context keeps it)."""
    if MPI.Is_initialized() and not MPI.Is_finalized():
        for comm in _attached.values():
            found = existing_context(comm)
            if found is not None:
                found.calls.clear()


settings.on_change(_forget_validated_calls)


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
        atexit.register(_free_at_exit)      # after mpi4py's: runs before MPI_Finalize
    found = comm.Get_attr(_KEYVAL)
    if found is None:
        (dup, first), (notices, second) = comm.Idup(), comm.Idup()
        wait_requests([first, second],
                      "creating hpccoll's private communicators (Comm.Idup)")
        try:
            host = dup.Split_type(MPI.COMM_TYPE_SHARED)
            note_ranks_per_host(host.Get_size())
            host.Free()
            found = Context(dup, notices, detect_topology(dup))
        except BaseException:
            dup.Free()
            notices.Free()
            raise
        comm.Set_attr(_KEYVAL, found)
        _attached[id(found)] = comm
    found.check()
    return found


def recover(comm: MPI.Comm) -> None:
    """Make ``comm`` usable by hpccoll again after a failure (the failure model: see the
    module doc): drop this rank's hpccoll state of ``comm`` -- revoked or not -- and make a
    fresh one on a new private communicator.  Collective: every rank of ``comm`` calls it
    (an MPI barrier first, under twice the deadline since a rank whose call timed out comes
    later than one whose call did not: a missing rank makes the others raise).
    Plans and cached calls are made anew; transfers the failed call left in flight keep their
    memory until they complete (:mod:`hpccoll.runtime.abandoned`)."""
    check_comm(comm)
    limit = settings.current.timeout
    deadline = None if limit is None else time.monotonic() + 2 * limit + BLAME_GRACE
    wait_requests([comm.Ibarrier()], "hpccoll.recover(comm): the other ranks", deadline)
    abandoned.sweep()
    if existing_context(comm) is not None:
        comm.Delete_attr(_KEYVAL)           # frees the old state (collectives: all are here)
    context(comm)


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


def get_topology(comm: MPI.Comm) -> Topology:
    """The topology hpccoll uses for ``comm`` (detected on first use, or set)."""
    check_comm(comm)
    return context(comm).topology
