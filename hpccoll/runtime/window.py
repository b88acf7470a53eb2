"""Memory shared by the ranks of a node: ``MPI.Win.Allocate_shared`` windows.

:class:`Segment` is one contiguous shared segment of a node (allocated by the node's rank 0,
reached by the others through ``Shared_query(0)``) held in one passive-target epoch
(``Lock_all``) for its life, so that ranks load and store to it directly as MPI's unified
memory model allows; :func:`shares_memory` says whether a node communicator's ranks can have
one; :func:`check_fits` refuses (MemoryError) a segment larger than the node's memory, the
check every user makes before allocating.
Regions written by different ranks start on cache lines (:data:`ALIGN`, :func:`round_up`).

:class:`NodeWindow` is the executor's use of it: the ``window`` buffer of schedule programs,
grown on demand and double-buffered.  The shared collectives (:mod:`hpccoll.shared`) lay out
a segment of their own.
"""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from .agreement import gather_rows

ALIGN = 64              # bytes: regions written by different ranks start on cache lines


def round_up(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of :data:`ALIGN`."""
    return -(-nbytes // ALIGN) * ALIGN


def shares_memory(node_comm: MPI.Intracomm) -> bool:
    """Whether all ranks of ``node_comm`` are in one shared-memory group: splitting it with
    ``Split_type(COMM_TYPE_SHARED)`` leaves it whole.  Collective over ``node_comm``."""
    group = node_comm.Split_type(MPI.COMM_TYPE_SHARED, key=node_comm.Get_rank())
    try:
        return group.Get_size() == node_comm.Get_size()
    finally:
        group.Free()


def physical_memory() -> int:
    """Bytes of memory on this node (a segment larger than that cannot be shared)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def check_fits(nbytes: int) -> None:
    """MemoryError if a segment of ``nbytes`` is more than this node's memory (every rank of
    the node decides alike)."""
    if nbytes > physical_memory():
        raise MemoryError(f"a shared segment of {nbytes} bytes is more than this node's "
                          f"memory ({physical_memory()} bytes)")


def allocate(nbytes: int, node_comm: MPI.Intracomm) -> MPI.Win:
    """The node's shared window: ``nbytes`` allocated by the node's rank 0, none by the
    others.  Collective over ``node_comm``."""
    return MPI.Win.Allocate_shared(nbytes if node_comm.Get_rank() == 0 else 0, 1,
                                   comm=node_comm)


class Segment:
    """``nbytes`` shared by the ranks of ``node_comm`` (collective over it): :attr:`memory`
    (uint8) on every rank, in a ``Lock_all`` epoch of :attr:`win` until :meth:`free`.
    MemoryError if MPI cannot allocate it, RuntimeError if the MPI library's shared windows
    are not in the unified memory model (what was made is then left: freeing is
    collective)."""

    def __init__(self, nbytes: int, node_comm: MPI.Intracomm):
        try:
            self.win = allocate(nbytes, node_comm)
        except MPI.Exception as error:
            raise MemoryError(f"could not allocate a {nbytes}-byte shared window on the "
                              f"node: {error}") from None
        if self.win.Get_attr(MPI.WIN_MODEL) != MPI.WIN_UNIFIED:
            raise RuntimeError("the MPI library's shared window is not in the unified "
                               "memory model")
        buffer, _ = self.win.Shared_query(0)
        self.memory = np.frombuffer(buffer, np.uint8, count=nbytes)
        self.win.Lock_all(MPI.MODE_NOCHECK)

    def free(self) -> None:
        """End the epoch and free the window (collective); :attr:`memory` is unmapped."""
        self.memory = np.empty(0, np.uint8)
        self.win.Unlock_all()
        self.win.Free()


class NodeWindow:
    """The segment shared by the ranks of each node (a :class:`Segment` on the node's
    communicator), for programs that use the ``window`` buffer.

    It is grown on demand (collectively over the node, which happens at the same call on every
    rank of it because the size is a function of the call) and split in two halves that
    successive calls use alternately, so one call's reads never race the next call's writes:
    a rank writes a half again only after the following call's first sync, which every rank
    of the node reaches after its reads of that half.  Memory model: a passive-target epoch
    (``Lock_all``) for the window's life, and each sync is ``Win.Sync`` + node barrier +
    ``Win.Sync``, as MPI's unified model requires for load/store access.
    """

    def __init__(self, comm: MPI.Comm, node_of_rank: tuple[int, ...]):
        self.node_comm = comm.Split(node_of_rank[comm.Get_rank()], comm.Get_rank())
        together = shares_memory(self.node_comm)
        flags = gather_rows(comm, np.array([together], np.int8),
                            "checking that each node's ranks share memory")[:, 0]
        if not flags.all():
            self.node_comm.Free()
            apart = np.flatnonzero(flags == 0).tolist()
            raise ValueError(f"shared-window algorithms need the ranks of each node to share "
                             f"memory, and ranks {apart} do not share memory with the rest of "
                             f"their node (is the topology right?)")
        self.segment: Segment | None = None
        self.half = 0              # bytes per half
        self.generation = 0
        self.parity = 0

    def ensure(self, nbytes: int) -> None:
        """Make each half at least ``nbytes`` (collective over the node when it grows)."""
        if nbytes <= self.half:
            return
        half = round_up(nbytes)
        check_fits(2 * half)
        self._release()
        self.segment = Segment(2 * half, self.node_comm)
        self.half = half
        self.generation += 1

    def view(self, parity: int, dtype: np.dtype, count: int) -> np.ndarray:
        """Half ``parity`` as ``count`` elements of ``dtype``."""
        start = parity * self.half
        return self.segment.memory[start:start + count * dtype.itemsize].view(dtype)

    def flip(self) -> int:
        """The half the next call uses."""
        self.parity ^= 1
        return self.parity

    def _release(self) -> None:
        if self.segment is not None:
            self.segment.free()
            self.segment = None
            self.half = 0

    def free(self) -> None:
        self._release()
        self.node_comm.Free()
