"""Mixture-of-experts dispatch and combine over expert parallelism.

As in "一种 TP-SP-EP 混合并行策略" (a TP-SP-EP hybrid parallel strategy), section 4: the
experts are split over the ranks, every rank holds a shard of the tokens (T, H) and its
router's top-k choices (T, k), and each MoE layer is two all-to-alls:

- :func:`dispatch` copies every kept (token, k-slot) into one row for the rank that owns its
  expert (a counting sort by owner then expert id, in a Numba kernel), exchanges the per-expert
  row counts (with every rank's status and size class), then the rows (any
  ``hpccoll.alltoallv`` algorithm; ``auto`` decides once per size class, and native goes
  straight to the MPI library's Ialltoallv, as the buffers are made here and need no
  validation), and groups what it received by expert: the rows this rank's experts must
  process, in ascending expert id, with a handle;
- :func:`combine` sends the experts' outputs back along the same counts and forms, per token,
  the sum over its k slots of router weight times expert output (dropped slots give 0).

Capacity (as GShard and Switch Transformer): with ``capacity_factor`` c, expert e accepts from
each sending rank at most ``ceil(c * T * k / num_experts)`` slots (T and k that rank's), taken
in priority order: the first choices (k index 0) of all tokens in token order, then the second
choices, and so on; the slots past the capacity are dropped, counted on the sending rank in
``handle.dropped`` and over all ranks in ``handle.dropped_total``.  Without a capacity factor
nothing is dropped.

The buffers that stay inside a call (the send rows, the rows of a multi-expert rank before
they are grouped, the rows sent and received back by combine) are the communicator's spares
(:meth:`hpccoll.context.Context.spare`), reused by the next call instead of new memory whose
page faults cost more than a small layer's exchanges (perf/moe.md).

Row order: the rows of one expert come by sending rank, and within a rank in priority order
(k index, then token).  Every argument is checked on every rank before any message, and the
count exchange carries each rank's status and a checksum of what ranks must pass alike (H,
dtype, ``num_experts``, ``owner``, ``capacity_factor``, ``algorithm``): a bad argument on any
rank raises on every rank before the rows move.  ``num_experts`` and ``owner`` size that
exchange, so like a collective's other must-match arguments they are checked locally only.
"""

from __future__ import annotations

import math
import numbers
import zlib
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from .. import registry, settings, tuning
from ..collectives import spec
from ..context import Context, check_comm, context
from ..runtime.agreement import ERROR_TYPES
from ..runtime.progress import wait_requests
from .moe_kernels import count_slots, kernels, place_slots, regroup, regroup_copies
from .sharding import split_counts

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# ``auto``'s row exchanges below this many bytes from the busiest rank (the smallest size of
# its size class): the MPI library's own Ialltoallv, as no scheduled algorithm pays for its
# planning when the counts are new on every call (perf/moe.md)
NATIVE_BELOW = 4 << 20


@dataclass(frozen=True)
class MoEHandle:
    """What :func:`combine` needs from a :func:`dispatch`, and its drop accounting.

    ``positions[t, j]``: the row of slot j of token t in what :func:`combine` receives (the
    send order, one status row ahead of each rank's block), -1 when dropped;
    ``send_rows[d]``: rows sent to rank d; ``recv_rows[s, i]``: rows received from rank s
    for this rank's i-th expert (``experts[i]``); ``capacity``: the per-sender expert
    capacity in slots (None: unlimited); ``dropped``: slots this rank dropped;
    ``dropped_total``: slots dropped on all ranks."""

    comm: MPI.Intracomm
    algorithm: str
    hidden: int
    dtype: np.dtype
    positions: np.ndarray
    weights: np.ndarray
    send_rows: np.ndarray
    recv_rows: np.ndarray
    experts: np.ndarray
    capacity: int | None
    dropped: int
    dropped_total: int

    @property
    def expert_rows(self) -> np.ndarray:
        """Rows dispatched to each of this rank's experts (``experts``), in order."""
        return self.recv_rows.sum(axis=0)


def default_owner(num_experts: int, ranks: int) -> np.ndarray:
    """The rank of each expert when they are split contiguously over ``ranks``, as
    ``np.array_split(range(num_experts), ranks)``."""
    return np.repeat(np.arange(ranks, dtype=np.int64), split_counts(num_experts, ranks))


def expert_capacity(capacity_factor: float | None, tokens: int, k: int,
                    num_experts: int) -> int | None:
    """Slots one expert accepts from one rank: ``ceil(c * tokens * k / num_experts)``."""
    if capacity_factor is None:
        return None
    return math.ceil(capacity_factor * tokens * k / num_experts)


# ------------------------------------------------------------------------------ checks

def _bucket_order(owner: np.ndarray) -> np.ndarray:
    """Each expert's bucket: its place among the experts sorted by owner, then id."""
    bucket = np.empty(owner.size, np.int64)
    bucket[np.lexsort((np.arange(owner.size), owner))] = np.arange(owner.size)
    return bucket


def _owner_map(owner: Any, num_experts: Any, ranks: int) -> np.ndarray:
    """The owner map as int64 (default: contiguous), or ValueError.  ``num_experts`` and
    ``owner`` size the count exchange, so they are checked before it, like every argument
    ranks must pass alike."""
    if isinstance(num_experts, bool) or not isinstance(num_experts, (int, np.integer)) \
            or num_experts < 1:
        raise ValueError(f"num_experts must be a positive integer, got {num_experts!r}")
    if owner is None:
        return default_owner(int(num_experts), ranks)
    owner = np.asarray(owner)
    if owner.shape != (num_experts,) or owner.dtype.kind not in "iu":
        raise ValueError(f"owner must be an integer array of num_experts={num_experts} "
                         f"ranks, got shape {owner.shape} dtype {owner.dtype}")
    if owner.min() < 0 or owner.max() >= ranks:
        raise ValueError(f"owner holds ranks outside [0, {ranks}): "
                         f"[{owner.min()}, {owner.max()}]")
    return np.ascontiguousarray(owner, np.int64)


def _check_tokens(x: Any, expert_ids: Any, weights: Any, num_experts: int,
                  capacity_factor: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This rank's arguments as arrays (x, expert ids int64, weights in x's dtype), or
    TypeError/ValueError saying what is wrong."""
    if not isinstance(x, np.ndarray) or x.ndim != 2:
        raise TypeError(f"x must be a 2-D NumPy array (tokens, hidden), got "
                        f"{getattr(x, 'shape', type(x).__name__)}")
    if x.dtype not in DTYPES:
        raise TypeError(f"x has dtype {x.dtype}; supported: float32, float64")
    if capacity_factor is not None and (isinstance(capacity_factor, bool) or not (
            isinstance(capacity_factor, numbers.Real) and 0 < capacity_factor < math.inf)):
        raise ValueError(f"capacity_factor must be a positive finite number or None, got "
                         f"{capacity_factor!r}")
    ids = np.asarray(expert_ids)
    if ids.ndim != 2 or ids.shape[0] != x.shape[0] or ids.dtype.kind not in "iu":
        raise ValueError(f"expert_ids must be an integer array (tokens={x.shape[0]}, k), got "
                         f"shape {ids.shape} dtype {ids.dtype}")
    w = np.asarray(weights)
    if w.shape != ids.shape or w.dtype.kind not in "iuf":
        raise ValueError(f"weights must be a real array of expert_ids' shape {ids.shape}, got "
                         f"shape {w.shape} dtype {w.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= num_experts):
        raise ValueError(f"expert ids must lie in [0, {num_experts}), got "
                         f"[{ids.min()}, {ids.max()}]")
    return (np.ascontiguousarray(x), np.ascontiguousarray(ids, np.int64),
            np.ascontiguousarray(w, x.dtype))


def _alike(num_experts: int, owner: np.ndarray, x: np.ndarray, capacity_factor: Any,
           algorithm: str) -> int:
    """A checksum of what ranks must pass alike."""
    factor = None if capacity_factor is None else float(capacity_factor)
    text = repr((int(num_experts), x.shape[1], x.dtype.str, factor, algorithm))
    return zlib.crc32(owner.tobytes(), zlib.crc32(text.encode()))


def native_alltoallv(ctx: Context, send: np.ndarray, sendcounts: np.ndarray,
                     recv: np.ndarray, recvcounts: np.ndarray, what: str,
                     meanwhile: Callable[[], None] | None = None) -> None:
    """The MPI library's Ialltoallv of flat ``send`` into flat ``recv`` (counts in elements,
    blocks laid end to end) on hpccoll's private duplicate of the communicator, waited for
    under the deadline as hpccoll's native calls are: CommunicatorRevoked before any message
    if the context is revoked, CollectiveTimeout (``what`` saying which exchange), not a
    hang, when a rank never comes, and another rank's revocation noticed at the end.
    ``meanwhile()`` runs while the exchange is in flight (which is waited for all the same
    if it raises)."""
    ctx.check()
    request = ctx.comm.Ialltoallv([send, sendcounts], [recv, recvcounts])
    try:
        if meanwhile is not None:
            meanwhile()
    finally:
        wait_requests([request], what, memory=(send, recv, sendcounts, recvcounts),
                      guard=ctx)
    ctx.check_notices()


def _exchange_counts(ctx: Context, rank: int, per_rank: np.ndarray, kept: np.ndarray,
                     status: tuple[int, ...], error: BaseException | None,
                     meanwhile: Callable[[], None] | None) -> tuple[np.ndarray, np.ndarray]:
    """Send every rank its experts' row counts behind ``status`` = (error type index, the
    :func:`_alike` checksum, slots dropped here, the size class of the rows sent here) and
    receive the same from every rank, by :func:`native_alltoallv` (so that ranks passing
    different algorithms still meet), running ``meanwhile()`` while it is in flight.
    Raise on every rank if any rank's arguments were wrong (the first failed rank's error
    type) or ranks passed differently what they must pass alike; else return the rows per
    (source rank, own expert) and every rank's status (a row per rank)."""
    ranks, held, fields = per_rank.size, int(per_rank[rank]), len(status)
    send = np.empty(per_rank.sum() + ranks * fields, np.int64)
    head = np.zeros(send.size, bool)                    # each block's status fields
    head[((np.cumsum(per_rank + fields) - per_rank - fields)[:, None] +
          np.arange(fields)).reshape(-1)] = True
    send[head] = np.tile(status, ranks)
    send[~head] = kept
    recv = np.empty((ranks, fields + held), np.int64)
    native_alltoallv(ctx, send, per_rank + fields, recv.reshape(-1),
                     np.full(ranks, fields + held), "moe.dispatch: the row counts", meanwhile)
    if error is not None:
        raise type(error)(f"moe.dispatch failed on rank {rank}: {error}") from error
    failed = np.flatnonzero(recv[:, 0])
    if failed.size:
        first = int(failed[0])
        raise ERROR_TYPES[recv[first, 0]](f"moe.dispatch failed on rank {first}: bad "
                                          "arguments (that rank's error says which)")
    differ = np.flatnonzero(recv[:, 1] != recv[0, 1]).tolist()
    if differ:
        raise ValueError(f"moe.dispatch: ranks {differ} differ from rank 0 in num_experts, "
                         "owner, hidden size, dtype, capacity_factor or algorithm")
    return recv[:, fields:], recv[:, :fields]


def row_algorithm(algorithm: str, ctx: Context, itemsize: int, largest_class: int) -> str:
    """The algorithm of a dispatch's and its combine's row exchanges: ``algorithm`` as
    named, or for ``auto`` a decision made once per size class and kept (class c: 2^(c-1)
    to 2^c - 1 bytes sent by one rank; ``largest_class``: any rank's largest, which every
    rank knows from the count exchange): the MPI library's own Ialltoallv
    (:func:`native_alltoallv`) below :data:`NATIVE_BELOW` bytes unless the environment or a
    tuning file names an alltoallv algorithm, above it what hpccoll's tuning chooses for a
    uniform alltoallv of the class's smallest size."""
    if algorithm != "auto":
        return algorithm
    key = (ctx.topology, ctx.comm.Get_size(), itemsize, largest_class, NATIVE_BELOW,
           settings.read("HPCCOLL_ALLTOALLV_ALGORITHM"), settings.read("HPCCOLL_TUNING_FILE"))
    chosen = _decisions.get(key)
    if chosen is None:
        p, nbytes = ctx.comm.Get_size(), (1 << largest_class) >> 1
        call = replace(spec("alltoallv").uniform_call(p, ctx.comm.Get_rank(),
                                                      max(nbytes // itemsize // p, 1)),
                       itemsize=itemsize, topology=ctx.topology)
        decision = tuning.decide(call, nbytes)
        chosen = _decisions[key] = registry.NATIVE if decision.source == "cost model" and \
            nbytes < NATIVE_BELOW else decision.algorithm
    return chosen


_decisions: dict[tuple, str] = {}       # row_algorithm's decisions, by size class and setting


def _exchange_rows(ctx: Context, comm: MPI.Intracomm, algorithm: str, send: np.ndarray,
                   send_rows: np.ndarray, recv: np.ndarray, recv_rows: np.ndarray,
                   what: str) -> None:
    """Rows of ``send`` (``send_rows[d]`` to rank d, in rank order) into ``recv`` by
    ``algorithm``: native by :func:`native_alltoallv` (the buffers are made here, right by
    construction: nothing to validate), any other by ``hpccoll.alltoallv``."""
    hidden = send.shape[1]
    if algorithm == registry.NATIVE:
        native_alltoallv(ctx, send.reshape(-1), send_rows * hidden, recv.reshape(-1),
                         recv_rows * hidden, what)
        return
    from .. import alltoallv
    alltoallv(comm, [send.reshape(-1), send_rows * hidden],
              [recv.reshape(-1), recv_rows * hidden], algorithm=algorithm)


# ------------------------------------------------------------------------------ the pattern

def dispatch(x: np.ndarray, expert_ids: Any, weights: Any, comm: MPI.Intracomm,
             num_experts: int, *, owner: Any = None, capacity_factor: float | None = None,
             algorithm: str = "auto") -> tuple[np.ndarray, np.ndarray, MoEHandle]:
    """Send every (token, k-slot) of this rank to the rank owning its expert.

    ``x`` (T, H) float32/float64: this rank's tokens; ``expert_ids`` and ``weights`` (T, k):
    each token's k experts and router weights; ``owner[e]``: the rank of expert e (default:
    the experts split contiguously, :func:`default_owner`); ``capacity_factor``: drop slots
    past each expert's capacity (module docstring); ``algorithm``: the ``hpccoll.alltoallv``
    algorithm of the row exchanges, ``auto`` decided once per size class
    (:func:`row_algorithm`; the counts go by the MPI library's Ialltoallv).  Collective over
    ``comm``.

    Returns ``(tokens, token_experts, handle)``: tokens (R, H) every row this rank's experts
    must process, grouped by expert in ascending expert id; token_experts (R,) the expert id
    of each row; the handle for :func:`combine`.

    A bad ``num_experts`` or ``owner`` raises ValueError at once (every rank must pass them
    alike: they size the count exchange); any other bad argument, on any rank, raises on
    every rank after the count exchange, which carries each rank's status."""
    ranks, rank = comm.Get_size(), comm.Get_rank()
    owner = _owner_map(owner, num_experts, ranks)
    per_rank = np.bincount(owner, minlength=ranks)       # experts held by each rank
    placed: list[np.ndarray] = []           # the send rows and slot positions, once placed
    try:
        x, ids, w = _check_tokens(x, expert_ids, weights, num_experts, capacity_factor)
        capacity = expert_capacity(capacity_factor, *ids.shape, num_experts)
        bucket = _bucket_order(owner)
        kept = count_slots(ids, bucket, capacity)
        rows = int(kept.sum())
        dropped = ids.size - rows
        status = (0, _alike(num_experts, owner, x, capacity_factor, algorithm), dropped,
                  (rows * x.shape[1] * x.itemsize).bit_length())     # the size class
        error = None
    except (TypeError, ValueError) as exc:
        kept, error = np.zeros(num_experts, np.int64), exc
        status = (ERROR_TYPES.index(TypeError if isinstance(exc, TypeError) else ValueError),
                  0, 0, 0)
    check_comm(comm)
    ctx = context(comm)
    # the rows are copied into place while the counts travel; the buffers that do not leave
    # dispatch are the context's spares
    recv_rows, statuses = _exchange_counts(
        ctx, rank, per_rank, kept, status, error, None if error else lambda: placed.extend(
            place_slots(x, ids, bucket, kept, ctx.spare("moe.send", rows * x.shape[1],
                                                        x.dtype))))
    send, positions = placed
    algorithm = row_algorithm(algorithm, ctx, x.dtype.itemsize, int(statuses[:, 3].max()))

    mine = np.flatnonzero(owner == rank)
    kept_before = np.concatenate(([0], np.cumsum(kept)))
    send_rows = np.diff(kept_before[np.concatenate(([0], np.cumsum(per_rank)))])
    hidden = x.shape[1]
    shape = (int(recv_rows.sum()), hidden)
    received = ctx.spare("moe.received", shape[0] * hidden, x.dtype).reshape(shape) \
        if regroup_copies(recv_rows) else np.empty(shape, x.dtype)
    _exchange_rows(ctx, comm, algorithm, send, send_rows, received, recv_rows.sum(axis=1),
                   "moe.dispatch: the rows")
    tokens = regroup(received, recv_rows, to_experts=True)
    ctx.keep_spare("moe.send", send)
    if tokens is not received:
        ctx.keep_spare("moe.received", received)
    token_experts = np.repeat(mine, recv_rows.sum(axis=0))
    back_rows = positions + np.where(positions >= 0, owner[ids] + 1, 0)   # status rows
    handle = MoEHandle(comm, algorithm, hidden, x.dtype, back_rows, w, send_rows, recv_rows,
                       mine, capacity, dropped, int(statuses[:, 2].sum()))
    return tokens, token_experts, handle


def combine(expert_out: np.ndarray, handle: MoEHandle) -> np.ndarray:
    """The experts' outputs back to their tokens' ranks, summed per token with the router's
    weights: ``(T, H)`` with row t = sum over the kept slots j of token t of
    ``weights[t, j] * output of slot j`` (dropped slots give 0).  ``expert_out`` (R, H) is
    in the row order :func:`dispatch` returned, of its dtype.  Collective over the
    dispatch's communicator.

    Each block sent back starts with a status row, so a wrong ``expert_out`` on any rank
    raises ValueError on every rank without a message of its own."""
    comm, hidden = handle.comm, handle.hidden
    rows = int(handle.recv_rows.sum())
    error = None
    if not isinstance(expert_out, np.ndarray) or expert_out.shape != (rows, hidden) \
            or expert_out.dtype != handle.dtype:
        error = ValueError(f"expert_out must be a NumPy array of shape {(rows, hidden)} and "
                           f"dtype {handle.dtype} (the dispatched tokens'), got "
                           f"{getattr(expert_out, 'shape', type(expert_out).__name__)} "
                           f"{getattr(expert_out, 'dtype', '')}")
        expert_out = np.empty((rows, hidden), handle.dtype)
    ctx = context(comm)
    to_rank = handle.recv_rows.sum(axis=1) + 1              # rows back to each rank
    outgoing = regroup(np.ascontiguousarray(expert_out), handle.recv_rows, False, gap=1,
                       out=ctx.spare("moe.outgoing", int(to_rank.sum()) * hidden,
                                     handle.dtype))
    status_rows = np.cumsum(to_rank) - to_rank
    outgoing[status_rows] = 0
    outgoing[status_rows, 0] = error is not None
    from_rank = handle.send_rows + 1
    shape = (int(from_rank.sum()), hidden)
    back = ctx.spare("moe.back", shape[0] * hidden, handle.dtype).reshape(shape)
    _exchange_rows(ctx, comm, handle.algorithm, outgoing, to_rank, back, from_rank,
                   "moe.combine: the rows")
    ctx.keep_spare("moe.outgoing", outgoing)
    if error is not None:
        raise ValueError(f"moe.combine failed on rank {comm.Get_rank()}: {error}")
    failed = np.flatnonzero(back[np.cumsum(from_rank) - from_rank, 0])
    if failed.size:
        raise ValueError(f"moe.combine failed on rank {int(failed[0])}: its expert_out does "
                         "not fit its dispatch (that rank's error says how)")
    out = np.empty((handle.positions.shape[0], hidden), handle.dtype)
    kernels()["weighted_sum"](out, back, handle.positions, handle.weights)
    ctx.keep_spare("moe.back", back)
    return out
