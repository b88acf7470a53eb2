"""Zero-copy collectives whose result stays in a node-shared memory segment (SW-IntraCC:
CSC-AG/CSC-RS and bidirectional operator fusion).

An ordinary allgather copies every block into a private receive buffer on every rank, so a
node holds p copies of the result.  Here the ranks of a node share one segment
(:class:`~hpccoll.runtime.window.Segment`) that holds the whole result once:

* the producer computes straight into :attr:`~SharedAllgather.local`, its slot of the
  segment (fusion with the operator before the collective: no private output, no send copy);
* :meth:`~SharedAllgather.run` is one synchronisation of the node (plus, on several nodes,
  an exchange of the nodes' parts between node leaders);
* the consumer reads straight from :attr:`~SharedAllgather.result`, a read-only view of the
  segment (fusion with the operator after it: no receive copy).

:class:`SharedAllreduce` does the same for a reduction: every rank reduces a disjoint chunk
of the vector over all the node's input slots in one pass (:func:`kernels.reduce_rows`), so
the node's reduce-scatter is p parallel reads-with-reduction and the "all" part costs nothing
(the chunks lie side by side in the shared result).

Synchronisation (MPI unified memory model): the window lives in one passive-target epoch
(``Lock_all`` at creation, ``Unlock_all`` at :meth:`free`).  A *node sync* is a barrier
through the segment itself: each rank calls ``Win.Sync()`` (its earlier writes become
visible), raises its own arrival counter (one int64 per rank on its own cache line; the n-th
barrier writes n), polls until every counter of the node has reached n, and calls
``Win.Sync()`` again -- the standard's polling pattern for shared windows.  It needs no
progress calls from the other ranks (the last to arrive releases the others at once, which
matters when ranks outnumber cores); waiting is the runtime's polling loop
(:func:`~hpccoll.runtime.progress.poll`: it yields the core after a few idle polls and raises
:class:`~hpccoll.CollectiveTimeout` after ``HPCCOLL_TIMEOUT`` naming the ranks that did not
arrive), so no rank hangs forever.  Construction errors met on some ranks only (ranks that do
not share memory, a failed allocation) raise on every rank
(:func:`~hpccoll.runtime.agreement.fail_together`); a segment larger than the node's memory,
or one MPI cannot allocate, is a MemoryError.

Validity rule (both classes): the :attr:`result` of a run stays valid on a rank until that
rank calls the next :meth:`run` (or :meth:`start`); :attr:`local` may be written from the
return of a run until the next :meth:`run`/:meth:`start` call, never between
:meth:`start` and :meth:`wait`.  SharedAllgather keeps two result buffers (``.local`` is a
slot of the next run's, ``.result`` the last completed one), so a rank's new input never
lands on a result another rank may still be reading; SharedAllreduce needs one buffer,
because its result area and input slots are only written between two node syncs of a run,
which no rank passes before every rank of the node has called that run.  A reference to an
old result kept past the next run is reused memory; views used after :meth:`free` are
unmapped memory.  After a :class:`~hpccoll.CollectiveTimeout` the object is out of step
with its peers: free it.

Cost per run on a node of q ranks, n elements per block (allgather) or per vector
(allreduce): SharedAllgather is one node sync and moves no data inside the node (each block
is written once by its producer and read in place by the consumers); SharedAllreduce is two
node syncs, each rank reading its n/q-element chunk of all q slots and writing it once.  On
several nodes the leaders add their inter-node collective on the segment and one node sync.
Construction zeroes the segment, each rank touching first what it will write (so pages are
placed near their writer and no run pays for page faults).
"""

from __future__ import annotations

import functools
import math
import operator
import time
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from . import api, context, registry
from .runtime import buffers, kernels, window
from .runtime.agreement import fail_together
from .runtime.progress import CollectiveTimeout, deadline_from, poll, timeout, wait_requests
from .runtime.window import ALIGN, round_up
from .schedule import Call


def _check_shape(shape: Any, name: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"{name} must be an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"{name} has negative dimensions: {dims}")
    return dims


def _check_dtype(dtype: Any) -> np.dtype:
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype {dtype!r} is not a NumPy dtype") from None
    if dtype not in buffers.SUPPORTED_DTYPES:
        supported = ", ".join(str(d) for d in buffers.SUPPORTED_DTYPES)
        raise TypeError(f"dtype {dtype} is not supported ({supported})")
    return dtype


def _check_algorithm_name(collective: str, name: Any) -> None:
    """TypeError/ValueError (before any message) for a name that is no algorithm of
    ``collective``."""
    if not isinstance(name, str):
        raise TypeError(f"inter_algorithm must be an algorithm name, got {type(name).__name__}")
    if name not in ("auto", registry.NATIVE):
        registry.get(collective, name)


class _SharedCollective:
    """The node-shared segment and its synchronisation; subclasses lay out and fill it."""

    collective = ""         # the leaders' collective: "allgather" or "allreduce"

    def __init__(self, comm: MPI.Intracomm, nbytes: int, inter_algorithm: str,
                 inter_call: Call | None) -> None:
        name = type(self).__name__
        ctx = context.context(comm)     # collective on first use (hpccoll's private dup)
        topology = ctx.topology
        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()
        nodes = topology.nodes
        if any(m != tuple(range(m[0], m[0] + len(m))) for m in nodes):
            raise ValueError(f"{name} needs ranks numbered node by node (the blocks of a node "
                             f"contiguous in rank order); the topology has nodes {nodes}")
        node = topology.regions[0][self.rank]
        self.node_ranks = nodes[node]                     # global ranks of this node
        if inter_algorithm not in ("auto", registry.NATIVE) and len(nodes) > 1:
            reason = registry.get(self.collective, inter_algorithm).violated(inter_call)
            if reason is not None:
                raise ValueError(f"inter_algorithm {inter_algorithm!r} cannot serve the "
                                 f"{len(nodes)} node leaders: it requires {reason}")
        self._inter_algorithm = inter_algorithm
        private = ctx.comm
        wait_requests([private.Ibarrier()], f"{name}: the other ranks constructing it",
                      guard=ctx)            # before MPI's blocking Split: no rank hangs there
        self._node = private.Split(node, self.rank)
        self.node_rank = self._node.Get_rank()
        error = None
        flag_bytes = len(self.node_ranks) * ALIGN      # one arrival counter per cache line
        try:
            if not window.shares_memory(self._node):
                error = ValueError(f"the ranks {list(self.node_ranks)} of topology "
                                   f"node {node} do not all share memory (Split_type("
                                   "COMM_TYPE_SHARED) splits them); give a topology whose "
                                   "nodes are shared-memory nodes")
            else:
                window.check_fits(flag_bytes + nbytes)
        except Exception as exc:     # noqa: BLE001  (an MPI failure becomes everyone's error)
            error = exc
        try:
            fail_together(private, error, name)
        except Exception:
            self._node.Free()
            raise
        leader = self.node_rank == 0
        self._multi_node = len(nodes) > 1
        self._leaders = None            # the node leaders' communicator, on the leaders
        if self._multi_node:
            leaders = private.Split(0 if leader else MPI.UNDEFINED, self.rank)
            self._leaders = leaders if leader else None
        self._segment: window.Segment | None = None
        try:
            self._segment = window.Segment(flag_bytes + nbytes, self._node)
            memory = self._segment.memory
            self._arrivals = memory[:flag_bytes].view(np.int64)[::ALIGN // 8]
            self.data = memory[flag_bytes:]
            if leader:
                self._arrivals[:] = 0
            self._segment.win.Sync()
            error = None
        except Exception as exc:     # noqa: BLE001
            error = exc
        fail_together(private, error,
                      f"{name}: allocating the shared segment of {nbytes} bytes")
        self._segment.win.Sync()    # the zeroed counters, seen after the agreement
        self._epoch = 0             # node barriers this rank has entered
        self._started = False
        self._runs = 0

    # -------------------------------------------------------------------- synchronisation

    def _arrive(self) -> None:
        """Enter a node barrier: Win.Sync (this rank's writes before its arrival), then
        raise this rank's arrival counter."""
        self._epoch += 1
        self._segment.win.Sync()
        self._arrivals[self.node_rank] = self._epoch

    def _await(self, what: str) -> None:
        """Leave the node barrier: poll until every counter of the node reached this rank's
        epoch, then Win.Sync (the others' writes after their arrival).  Yields the core after
        a few idle polls; CollectiveTimeout after HPCCOLL_TIMEOUT naming the missing ranks."""
        if not poll(self._all_arrived, deadline_from(time.monotonic())):
            late = [self.node_ranks[i] for i in np.flatnonzero(self._arrivals < self._epoch)]
            raise timeout(f"{type(self).__name__}: {what}", f"rank(s) {late} did not arrive")
        self._segment.win.Sync()

    def _all_arrived(self) -> bool:
        return self._arrivals.min() >= self._epoch

    def _node_sync(self, what: str) -> None:
        """A node barrier through the segment: every rank's writes before it are visible to
        every rank of the node after it (unified model: Win.Sync on both sides)."""
        self._arrive()
        self._await(what)

    def _check_alive(self) -> None:
        if self._segment is None:
            raise RuntimeError(f"{type(self).__name__} used after free()")

    def start(self) -> None:
        """Begin a run: publish this rank's input and arrive at the node barrier without
        waiting; compute on other data, then :meth:`wait`."""
        self._check_alive()
        if self._started:
            raise RuntimeError(f"{type(self).__name__}.start() called again before wait()")
        self._arrive()
        self._started = True

    def wait(self) -> None:
        """Complete the run begun by :meth:`start`."""
        if not self._started:
            raise RuntimeError(f"{type(self).__name__}.wait() without start()")
        self._started = False
        self._await("the node barrier after the inputs")
        self._complete()
        self._runs += 1

    def run(self) -> None:
        """One whole run (blocking): :meth:`start` then :meth:`wait`."""
        self.start()
        self.wait()

    def _complete(self) -> None:
        raise NotImplementedError

    def _check_ran(self) -> None:
        self._check_alive()
        if self._runs == 0:
            raise RuntimeError(f"{type(self).__name__}.result read before the first run()")

    # ------------------------------------------------------------------------- lifetime

    def free(self) -> None:
        """Release the window and communicators (collective over ``comm``; an MPI node
        barrier with the deadline first, so a rank that never frees makes the others raise,
        not hang).  Views taken from the object must not be used afterwards."""
        if self._segment is None:
            return
        if self._started:
            self.wait()
        wait_requests([self._node.Ibarrier()], f"{type(self).__name__}.free() node barrier")
        self._segment.free()
        self._segment = None
        self._node.Free()
        if self._leaders is not None:
            self._leaders.Free()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.free()
        else:
            try:
                self.free()
            except CollectiveTimeout:
                pass                 # the peers are elsewhere: leak rather than mask `exc`


class SharedAllgather(_SharedCollective):
    """Allgather of one block per rank whose result stays in a node-shared segment.

    ``SharedAllgather(comm, block_shape, dtype, inter_algorithm="auto")``; collective over
    ``comm``, whose ranks must be numbered node by node (hpccoll's topology of ``comm``,
    detected or :func:`hpccoll.set_topology`).  Each node allocates one segment of
    2 x p blocks (two result buffers, all p ranks' blocks even on several nodes), so a node
    holds the result twice in all, not once per rank.

    * ``local``: writable view (``block_shape``) of this rank's block of the next run;
      compute into it directly.
    * ``run()``: node sync; on several nodes the node leaders then exchange their nodes'
      blocks with :func:`hpccoll.allgather` (IN_PLACE on the segment, ``inter_algorithm``)
      and the node syncs again.  ``start()``/``wait()`` split it.
    * ``result``: read-only view ``(p, *block_shape)`` of the last completed run, in rank
      order; valid until this rank next calls ``run()``/``start()`` (module docstring).
    """

    collective = "allgather"

    def __init__(self, comm: MPI.Intracomm, block_shape: Any, dtype: Any, *,
                 inter_algorithm: str = "auto") -> None:
        context.check_comm(comm)
        self.block_shape = _check_shape(block_shape, "block_shape")
        self.dtype = _check_dtype(dtype)
        _check_algorithm_name(self.collective, inter_algorithm)
        p = comm.Get_size()
        block = math.prod(self.block_shape)
        buffer_bytes = round_up(p * block * self.dtype.itemsize)
        topology = context.get_topology(comm)
        counts = tuple(len(m) * block for m in topology.nodes)
        inter_call = Call("allgather", len(counts), 0, counts, in_place=True,
                          itemsize=self.dtype.itemsize)
        super().__init__(comm, 2 * buffer_bytes, inter_algorithm, inter_call)
        self._inter_counts = counts
        whole = (p, *self.block_shape)
        self._buffers = [self.data[b * buffer_bytes:b * buffer_bytes + p * block *
                                      self.dtype.itemsize].view(self.dtype).reshape(whole)
                         for b in (0, 1)]
        self._flat = [b.reshape(-1) for b in self._buffers]
        self._locals = [b[self.rank] for b in self._buffers]
        self._results = []
        for b in self._buffers:
            view = b.view()
            view.flags.writeable = False
            self._results.append(view)
        self._next = 0              # the buffer the next run fills
        node = slice(self.node_ranks[0], self.node_ranks[-1] + 1)
        for whole_buffer, mine in zip(self._buffers, self._locals):
            mine[...] = 0           # first touch by the writer; the leader, other nodes'
            if self.node_rank == 0:
                whole_buffer[:node.start] = 0
                whole_buffer[node.stop:] = 0
        self._node_sync("the node barrier after zeroing the segment")

    @property
    def local(self) -> np.ndarray:
        """This rank's block of the next run (writable)."""
        self._check_alive()
        return self._locals[self._next]

    @property
    def result(self) -> np.ndarray:
        """The last completed run's blocks, ``(p, *block_shape)``, read-only."""
        self._check_ran()
        return self._results[1 - self._next]

    def _complete(self) -> None:
        if self._multi_node:
            if self._leaders is not None:
                api.allgather(self._leaders, MPI.IN_PLACE, self._flat[self._next],
                              recvcounts=self._inter_counts, algorithm=self._inter_algorithm)
            self._node_sync("SharedAllgather node barrier after the leaders' exchange")
        self._next = 1 - self._next


def _chunk_reducer(op: str, dst: np.ndarray, rows: np.ndarray) -> Callable[[], None]:
    """``kernels.reduce_rows(op, dst, rows)`` as a function of no arguments with its set-up
    (the flat view of the strided rows: some 10 us of Python) done once."""
    p, n = rows.shape
    if n == 0 or not kernels.computes(rows.dtype):
        return lambda: kernels.reduce_rows(op, dst, rows)
    stride = rows.strides[0] // rows.itemsize
    flat = np.lib.stride_tricks.as_strided(rows, shape=((p - 1) * stride + n,),
                                           strides=(rows.itemsize,))
    return functools.partial(kernels.row_kernels()[op], dst, flat, stride, p)


class SharedAllreduce(_SharedCollective):
    """Allreduce whose result stays in a node-shared segment.

    ``SharedAllreduce(comm, shape, dtype, op=MPI.SUM, inter_algorithm="auto")``; collective
    over ``comm`` (ranks numbered node by node).  Each node allocates q input slots (q ranks
    on the node, slots padded to cache lines) and one result area.

    * ``local``: writable view (``shape``) of this rank's input slot; compute into it.
    * ``run()``: node sync; every rank reduces its own chunk of the vector (cache-line
      aligned, about n/q elements) over the q slots in one pass
      (:func:`kernels.reduce_rows`) into the result area; node sync.  On several nodes the
      leaders then combine the result areas with :func:`hpccoll.allreduce` (IN_PLACE,
      ``inter_algorithm``) and the node syncs again.
    * ``result``: read-only view (``shape``) of the reduction; valid until this rank next
      calls ``run()``/``start()``.  Reading only this rank's part of it is the shared
      reduce-scatter.
    """

    collective = "allreduce"

    def __init__(self, comm: MPI.Intracomm, shape: Any, dtype: Any, op: Any = MPI.SUM, *,
                 inter_algorithm: str = "auto") -> None:
        context.check_comm(comm)
        self.shape = _check_shape(shape, "shape")
        self.dtype = _check_dtype(dtype)
        self.op = buffers.check_op(op, self.dtype)
        _check_algorithm_name(self.collective, inter_algorithm)
        n = math.prod(self.shape)
        item = self.dtype.itemsize
        topology = context.get_topology(comm)
        q = len(topology.nodes[topology.regions[0][comm.Get_rank()]])
        slot_bytes = round_up(n * item)
        inter_call = Call("allreduce", topology.count(0), 0, (n,), in_place=True, itemsize=item)
        super().__init__(comm, q * slot_bytes + round_up(n * item), inter_algorithm,
                         inter_call)
        elements = self.data[:q * slot_bytes + n * item].view(self.dtype)
        slots = elements[:q * slot_bytes // item].reshape(q, slot_bytes // item)[:, :n]
        self._result = elements[q * slot_bytes // item:]
        self._local = slots[self.node_rank].reshape(self.shape)
        self._result_view = self._result.reshape(self.shape).view()
        self._result_view.flags.writeable = False
        per = -(-n // q)
        per = -(-per * item // ALIGN) * ALIGN // item if per else 0
        lo = min(n, self.node_rank * per)
        hi = min(n, lo + per)
        self._reduce_chunk = _chunk_reducer(self.op, self._result[lo:hi], slots[:, lo:hi])
        self._local[...] = 0        # first touch by the writer (pages placed near it)
        self._result[lo:hi] = 0
        self._node_sync("the node barrier after zeroing the segment")

    @property
    def local(self) -> np.ndarray:
        """This rank's input slot (writable)."""
        self._check_alive()
        return self._local

    @property
    def result(self) -> np.ndarray:
        """The reduction of the last completed run, read-only."""
        self._check_ran()
        return self._result_view

    def _complete(self) -> None:
        self._reduce_chunk()
        self._node_sync("SharedAllreduce node barrier after the reduction")
        if self._multi_node:
            if self._leaders is not None:
                api.allreduce(self._leaders, MPI.IN_PLACE, self._result, op=self.op,
                              algorithm=self._inter_algorithm)
            self._node_sync("SharedAllreduce node barrier after the leaders' allreduce")
