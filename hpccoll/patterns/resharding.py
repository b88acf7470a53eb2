"""Resharding between tensor parallelism (TP) and sequence parallelism (SP) by one all-to-all.

After a column-parallel linear layer, rank r of N holds the hidden shard Y_r of the
activations, S x (H/N); the TP -> SP switch of "一种 TP-SP-EP 混合并行策略" (a TP-SP-EP hybrid
parallel strategy; its scheme 2: all2all + replicated out_linear) turns it into the sequence
shard (S/N) x H: rank r cuts Y_r along S into N blocks, sends block j to rank j, and rank j
lays the N blocks it receives side by side along H.  That last step is the local transpose the
article warns about; here it is one Numba copy kernel between the exchange's buffer and the
result, so no full copy is made beyond the exchange's own buffers.

Shapes.  ``axis`` is the sequence axis; the axes after it are the hidden: the first of them is
the one split over the ranks (``np.array_split``, so the first H % N ranks hold one more),
the others (if any) go along whole.  So ``(B, S, H)`` with ``axis=-2`` (the default) splits H,
and ``(B, S, heads, d)`` with ``axis=-3`` splits the heads, each rank holding whole heads of
size d.  The axes before ``axis`` (batch) go along whole.  The sequence is split contiguously:
rank r holds ``np.array_split(np.arange(S), N)[r]`` (the first S % N ranks one row more).

Agreement.  The ranks do not know each other's shard sizes, so each call first allgathers a
small int64 description of every rank's array (:func:`_describe`), under the deadline like
every hpccoll message; every rank checks all of them alike and raises the same ValueError
(TypeError for a non-array) before the payload moves.  The payload then goes by
``hpccoll.alltoall`` when all blocks are equal (S and H both divisible by N), by
``hpccoll.alltoallv`` otherwise, with ``algorithm`` (``auto`` by default).

Copies.  Rank r's block for rank j (TP -> SP) is ``Y_r[..., rows_j, :]``: with no batch axes
(or one rank) the blocks are already laid end to end in ``Y_r``, which is sent as it is;
otherwise they are packed.  The received blocks are always spread into the result by the
kernel (the transpose), except with one rank or a single row.  SP -> TP mirrors this.  A
non-contiguous input is made contiguous first (one copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np
from mpi4py import MPI

from ..context import check_comm, context
from ..runtime.agreement import gather_rows
from ..schedule import offsets
from .sharding import split_counts

MAX_DIMS = 64                     # NumPy's largest ndim
_HEAD = 5                         # status, axis, dtype, ndim, hidden (then the shape)
_OK, _NOT_ARRAY, _BAD_AXIS, _NO_HIDDEN, _OBJECTS = range(5)
_PROBLEMS = {_NOT_ARRAY: "is not a NumPy array", _BAD_AXIS: "has no axis {axis}",
             _NO_HIDDEN: "has no hidden axis after sequence axis {axis}",
             _OBJECTS: "holds Python objects, which cannot be sent as a buffer"}


@lru_cache(maxsize=None)
def _copy_kernel() -> Callable:
    """The Numba kernel ``f(dst, src, dst_starts, src_starts, dst_strides, src_strides,
    lengths, rows)``: for each block k, ``rows`` runs of ``lengths[k]`` words, run i from
    ``src[src_starts[k] + i*src_strides[k]:]`` to ``dst[dst_starts[k] + i*dst_strides[k]:]``.
    1-D arrays of unsigned words (any dtype viewed as such); cached on disk, no GIL."""
    from numba import njit

    @njit(cache=True, nogil=True)
    def copy_runs(dst, src, dst_starts, src_starts, dst_strides, src_strides, lengths, rows):
        for k in range(lengths.size):
            n = lengths[k]
            for i in range(rows):
                d = dst_starts[k] + i * dst_strides[k]
                s = src_starts[k] + i * src_strides[k]
                # views indexed by a range's counter: no negative-index wrap per element, so
                # the loop vectorises (indexing dst[d + j] is several times slower)
                to, of = dst[d:d + n], src[s:s + n]
                for j in range(n):
                    to[j] = of[j]
    return copy_runs


@dataclass(frozen=True, eq=False)
class Runs:
    """``rows`` strided runs per block, in words of type ``word`` (the widest unsigned
    integer, up to 8 bytes, whose size divides the elements' itemsize): block k's run i goes
    from ``src[src_starts[k] + i*src_strides[k]:][:lengths[k]]`` to the same in ``dst``."""

    rows: int
    word: np.dtype
    dst_starts: np.ndarray
    src_starts: np.ndarray
    dst_strides: np.ndarray
    src_strides: np.ndarray
    lengths: np.ndarray

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Move the runs from the 1-D contiguous ``src`` into ``dst`` (both of the dtype
        planned for)."""
        _copy_kernel()(dst.view(self.word), src.view(self.word), self.dst_starts,
                       self.src_starts, self.dst_strides, self.src_strides, self.lengths,
                       self.rows)

    def reverse(self) -> Runs:
        """The same runs moved the other way."""
        return Runs(self.rows, self.word, self.src_starts, self.dst_starts, self.src_strides,
                    self.dst_strides, self.lengths)


@dataclass(frozen=True)
class ExchangePlan:
    """One rank's exchange: the collective, its counts and displacements (elements), the
    packing of the send buffer and the unpacking of the receive buffer (None where the input
    is the send buffer, or the receive buffer the result), and the result's shape."""

    collective: str
    sendcounts: tuple[int, ...]
    sdispls: tuple[int, ...]
    recvcounts: tuple[int, ...]
    rdispls: tuple[int, ...]
    pack: Runs | None
    unpack: Runs | None
    shape: tuple[int, ...]


def _runs(itemsize: int, rows: int, lengths: list[int], src_starts: list[int],
          src_strides: list[int], dst_starts: list[int], dst_strides: list[int]
          ) -> Runs | None:
    """The :class:`Runs` (given in elements of ``itemsize`` bytes), or None where the blocks
    already lie end to end in the strided buffer, which is then the exchange's buffer as it
    is: at most one row, or one block."""
    if rows <= 1 or len(lengths) == 1:
        return None
    word = int(np.gcd(8, itemsize))
    scaled = [np.asarray(v, np.int64) * (itemsize // word)
              for v in (dst_starts, src_starts, dst_strides, src_strides, lengths)]
    return Runs(rows, np.dtype(f"u{word}"), *scaled)


def _exchange(itemsize: int, lead: int, inner: int, seq: list[int], hid: list[int],
              rank: int, to_sp: bool) -> tuple[list[int], list[int], Runs | None, Runs | None]:
    """Counts and copies of one rank for elements of ``itemsize`` bytes, ``lead`` batch rows,
    ``inner`` elements per hidden index, the sequence split ``seq`` and hidden split ``hid``:
    (sendcounts, recvcounts, pack, unpack).  The TP layout is (lead, S, h_r, inner), the SP
    layout (lead, S_r, H, inner); a block between ranks i (TP side) and j (SP side) is
    (lead, S_j, h_i, inner)."""
    p = len(seq)
    S, H = sum(seq), sum(hid)
    s_at, h_at = offsets(seq), offsets(hid)
    tp_block = [lead * seq[j] * hid[rank] * inner for j in range(p)]     # rank as TP side
    sp_block = [lead * seq[rank] * hid[i] * inner for i in range(p)]     # rank as SP side
    # TP buffer (lead, S, h_r, inner) <-> blocks laid end to end: lead runs per block
    tp_runs = _runs(itemsize, lead, [seq[j] * hid[rank] * inner for j in range(p)],
                    [s_at[j] * hid[rank] * inner for j in range(p)], [S * hid[rank] * inner] * p,
                    offsets(tp_block), [seq[j] * hid[rank] * inner for j in range(p)])
    # SP buffer (lead, S_r, H, inner) <-> blocks laid end to end: lead*S_r runs per block
    sp_runs = _runs(itemsize, lead * seq[rank], [hid[i] * inner for i in range(p)],
                    [h_at[i] * inner for i in range(p)], [H * inner] * p,
                    offsets(sp_block), [hid[i] * inner for i in range(p)])
    if to_sp:
        return tp_block, sp_block, tp_runs, None if sp_runs is None else sp_runs.reverse()
    return sp_block, tp_block, sp_runs, None if tp_runs is None else tp_runs.reverse()


def _dtype_code(dtype: np.dtype) -> int:
    return int.from_bytes(dtype.str.encode()[:8].ljust(8, b"\0"), "little")


def _dtype_name(code: int) -> str:
    return int(code).to_bytes(8, "little").rstrip(b"\0").decode()


def _describe(array: object, axis: int, hidden: int) -> np.ndarray:
    """This rank's description for the agreement: status, sequence axis (normalised), dtype,
    ndim, the ``hidden`` argument (-1 for none), shape."""
    out = np.zeros(_HEAD + MAX_DIMS, np.int64)
    out[4] = hidden
    if not isinstance(array, np.ndarray):
        out[0] = _NOT_ARRAY
        return out
    out[2], out[3] = _dtype_code(array.dtype), array.ndim
    out[_HEAD:_HEAD + array.ndim] = array.shape
    if not -array.ndim <= axis < array.ndim:
        out[0] = _BAD_AXIS
    elif axis % array.ndim == array.ndim - 1:
        out[0] = _NO_HIDDEN
    elif array.dtype.hasobject:
        out[0] = _OBJECTS
    else:
        out[1] = axis % array.ndim
    return out


@lru_cache(maxsize=256)
def _plan(table: bytes, rank: int, axis: int, to_sp: bool, algorithm: str) -> ExchangePlan:
    """The plan of ``rank`` from the ``table`` of every rank's :func:`_describe` (its bytes,
    one row per rank): pure, the same checks on every rank, so every rank raises the same
    error."""
    from .. import registry
    descriptions = np.frombuffer(table, np.int64).reshape(-1, _HEAD + MAX_DIMS).tolist()
    name = "tp_to_sp" if to_sp else "sp_to_tp"
    for r, d in enumerate(descriptions):
        if d[0] == _NOT_ARRAY:
            raise TypeError(f"{name}: the input of rank {r} {_PROBLEMS[_NOT_ARRAY]}")
        if d[0] != _OK:
            raise ValueError(f"{name}: the input of rank {r} (shape "
                             f"{tuple(d[_HEAD:_HEAD + d[3]])}) "
                             + _PROBLEMS[d[0]].format(axis=axis))
    shapes = [tuple(d[_HEAD:_HEAD + d[3]]) for d in descriptions]
    ax = descriptions[0][1]
    kept = {(d[1], d[2], d[3], s[:ax], s[ax + 2:]) for d, s in zip(descriptions, shapes)}
    if len(kept) > 1:
        raise ValueError(f"{name}: the ranks' inputs must agree in dtype, number of axes and "
                         f"every axis but the sequence and hidden ones; got "
                         f"{[(s, _dtype_name(d[2])) for d, s in zip(descriptions, shapes)]}")
    p = len(descriptions)
    seq, hid = [s[ax] for s in shapes], [s[ax + 1] for s in shapes]
    if to_sp:
        if len(set(seq)) > 1:
            raise ValueError(f"{name}: every rank must hold the whole sequence; the ranks' "
                             f"sequence lengths (axis {axis}) are {seq}")
        if hid != split_counts(sum(hid), p):
            raise ValueError(f"{name}: the hidden shards' sizes {hid} are not np.array_split "
                             f"of {sum(hid)} over {p} ranks ({split_counts(sum(hid), p)})")
        seq = split_counts(seq[0], p)
    else:
        hidden = [d[4] for d in descriptions]
        if len(set(hidden)) > 1 or hidden[0] < 0:
            raise ValueError(f"{name}: hidden must be one size >= 0 on every rank, got "
                             f"{hidden}")
        if set(hid) != {hidden[0]}:
            raise ValueError(f"{name}: every rank must hold the whole hidden axis of "
                             f"{hidden[0]}; the ranks' hidden lengths are {hid}")
        if seq != split_counts(sum(seq), p):
            raise ValueError(f"{name}: the sequence shards' lengths {seq} are not "
                             f"np.array_split of {sum(seq)} over {p} ranks "
                             f"({split_counts(sum(seq), p)})")
        hid = split_counts(hidden[0], p)
    equal = len(set(seq)) == 1 and len(set(hid)) == 1
    collective = "alltoall" if equal else "alltoallv"
    if algorithm != "auto" and algorithm not in registry.names(collective):
        raise ValueError(f"{name}: algorithm {algorithm!r} is not one of {collective}'s "
                         f"({', '.join(registry.names(collective))}); this exchange needs "
                         f"{collective} (sequence split {seq}, hidden split {hid})")
    shape = shapes[rank]
    lead = int(np.prod(shape[:ax], dtype=np.int64))
    inner = int(np.prod(shape[ax + 2:], dtype=np.int64))
    itemsize = np.dtype(_dtype_name(descriptions[0][2])).itemsize
    sendcounts, recvcounts, pack, unpack = _exchange(itemsize, lead, inner, seq, hid, rank,
                                                     to_sp)
    out = (shape[:ax] + (seq[rank], sum(hid)) + shape[ax + 2:] if to_sp else
           shape[:ax] + (sum(seq), hid[rank]) + shape[ax + 2:])
    return ExchangePlan(collective, tuple(sendcounts), tuple(offsets(sendcounts)),
                        tuple(recvcounts), tuple(offsets(recvcounts)), pack, unpack, out)


def _reshard(array: np.ndarray, comm: MPI.Comm, axis: int, hidden: int, to_sp: bool,
             algorithm: str) -> np.ndarray:
    """The agreement, then pack, exchange and unpack by this rank's :class:`ExchangePlan`."""
    from .. import alltoall, alltoallv
    if not isinstance(algorithm, str):
        raise TypeError(f"algorithm must be a string, got {type(algorithm).__name__}")
    check_comm(comm)
    ctx = context(comm)
    everyone = gather_rows(ctx.comm, _describe(array, axis, hidden),
                           "tp_to_sp/sp_to_tp: the shards' shapes", ctx)
    plan = _plan(everyone.tobytes(), comm.Get_rank(), axis, to_sp, algorithm)
    flat = np.ascontiguousarray(array).reshape(-1)
    send = flat
    if plan.pack is not None:
        send = np.empty(sum(plan.sendcounts), array.dtype)
        plan.pack.copy(send, flat)
    out = np.empty(plan.shape, array.dtype)
    recv = out.reshape(-1) if plan.unpack is None else np.empty(sum(plan.recvcounts),
                                                                array.dtype)
    if plan.collective == "alltoall":
        alltoall(comm, send, recv, algorithm=algorithm)
    else:
        alltoallv(comm, [send, list(plan.sendcounts), list(plan.sdispls)],
                  [recv, list(plan.recvcounts), list(plan.rdispls)], algorithm=algorithm)
    if plan.unpack is not None:
        plan.unpack.copy(out.reshape(-1), recv)
    return out


def tp_to_sp(y: np.ndarray, comm: MPI.Comm, *, axis: int = -2,
             algorithm: str = "auto") -> np.ndarray:
    """This rank's hidden shard ``(..., S, H_r, ...)`` (axis ``axis`` the sequence, the next
    one the hidden, H split by ``np.array_split`` over the ranks) to its sequence shard
    ``(..., S_r, H, ...)``, S split contiguously (rank r holds
    ``np.array_split(np.arange(S), N)[r]``), by one ``hpccoll.alltoall`` (``alltoallv`` when
    S or H is not divisible by N) with ``algorithm``.  A new array; ValueError on every rank
    before the exchange when the ranks' shapes or dtypes do not fit together."""
    return _reshard(y, comm, axis, -1, True, algorithm)


def sp_to_tp(z: np.ndarray, comm: MPI.Comm, *, hidden: int, axis: int = -2,
             algorithm: str = "auto") -> np.ndarray:
    """The inverse of :func:`tp_to_sp`: this rank's sequence shard ``(..., S_r, H, ...)``
    (``hidden`` = H, the length of the axis after ``axis``, checked on every rank) to its
    hidden shard ``(..., S, H_r, ...)``."""
    if isinstance(hidden, bool) or not isinstance(hidden, (int, np.integer)):
        raise TypeError(f"hidden must be an integer, got {type(hidden).__name__}")
    return _reshard(z, comm, axis, int(hidden), False, algorithm)
