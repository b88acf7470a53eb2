"""The local work of MoE dispatch/combine (:mod:`hpccoll.patterns.moe`), no MPI: the counting
sort of a rank's (token, k-slot) pairs into send rows by bucket (an expert, in owner-then-id
order) with GShard/Switch-style capacity (:func:`pack`: :func:`count_slots` then
:func:`place_slots`), the regrouping of received rows between source-major and expert-major
blocks (:func:`regroup`) and the router-weighted sum of a token's returned slots (the
``weighted_sum`` kernel), as Numba kernels compiled on first use, cached on disk, without the
GIL."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np


@lru_cache(maxsize=None)
def kernels() -> dict[str, Callable]:
    """The Numba kernels (compiled on first use, cached on disk, without the GIL)."""
    from numba import njit
    jit = njit(cache=True, nogil=True)

    @jit
    def count_slots(expert_ids, bucket, capacity, kept):
        # kept[b]: slots kept for bucket b (an expert, in owner-then-id order) visiting the
        # slots in priority order; capacity < 0: unlimited
        tokens, k = expert_ids.shape
        for j in range(k):
            for t in range(tokens):
                b = bucket[expert_ids[t, j]]
                if capacity < 0 or kept[b] < capacity:
                    kept[b] += 1

    @jit
    def place_slots(send, positions, x, expert_ids, bucket, kept):
        # the counting sort's second pass: the same priority order, the first kept[b] slots of
        # bucket b copied to its rows, the rest dropped (position -1)
        tokens, k = expert_ids.shape
        nxt = np.empty(kept.size, np.int64)
        end = np.empty(kept.size, np.int64)
        at = 0
        for b in range(kept.size):
            nxt[b] = at
            at += kept[b]
            end[b] = at
        for j in range(k):
            for t in range(tokens):
                b = bucket[expert_ids[t, j]]
                row = nxt[b]
                if row < end[b]:
                    nxt[b] = row + 1
                    positions[t, j] = row
                    send[row, :] = x[t, :]
                else:
                    positions[t, j] = -1

    @jit
    def regroup(dst, src, rows, width, gap, to_experts):
        # rows[s, e]: a block of rows of `width` elements per (source rank s, expert e); the
        # flat src (to_experts) or dst holds them source-major, `gap` rows before each
        # source's blocks, the other expert-major
        sources, experts = rows.shape
        by_expert = np.empty((sources, experts), np.int64)
        at = 0
        for e in range(experts):
            for s in range(sources):
                by_expert[s, e] = at
                at += rows[s, e] * width
        at = 0
        for s in range(sources):
            at += gap * width
            for e in range(experts):
                n, there = rows[s, e] * width, by_expert[s, e]
                if to_experts:
                    dst[there:there + n] = src[at:at + n]
                else:
                    dst[at:at + n] = src[there:there + n]
                at += n

    @jit
    def weighted_sum(out, back, positions, weights):
        # out[t] = sum over kept slots j of weights[t, j] * back[positions[t, j]], j ascending
        tokens, k = positions.shape
        hidden = out.shape[1]
        for t in range(tokens):
            row = out[t]
            for h in range(hidden):
                row[h] = 0
            for j in range(k):
                at = positions[t, j]
                if at >= 0:
                    w = weights[t, j]
                    src = back[at]
                    for h in range(hidden):
                        row[h] += w * src[h]

    return {"count_slots": count_slots, "place_slots": place_slots, "regroup": regroup,
            "weighted_sum": weighted_sum}


def pack(x: np.ndarray, expert_ids: np.ndarray, bucket: np.ndarray,
         capacity: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bucket this rank's slots (counting sort, priority order, capacity): returns the send
    rows (kept slots, by ``bucket`` of their expert), rows kept per bucket, and each slot's
    row (-1: dropped).  Its two passes: :func:`count_slots`, :func:`place_slots`."""
    kept = count_slots(expert_ids, bucket, capacity)
    send, positions = place_slots(x, expert_ids, bucket, kept)
    return send, kept, positions


def count_slots(expert_ids: np.ndarray, bucket: np.ndarray, capacity: int | None
                ) -> np.ndarray:
    """The counting sort's first pass: the slots kept per bucket."""
    kept = np.zeros(bucket.size, np.int64)
    kernels()["count_slots"](expert_ids, bucket, -1 if capacity is None else capacity, kept)
    return kept


def place_slots(x: np.ndarray, expert_ids: np.ndarray, bucket: np.ndarray, kept: np.ndarray,
                send: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The counting sort's second pass: the send rows (into ``send``, flat, when given) and
    each slot's row (-1: dropped)."""
    shape = (int(kept.sum()), x.shape[1])
    send = np.empty(shape, x.dtype) if send is None else send.reshape(shape)
    positions = np.empty(expert_ids.shape, np.int64)
    kernels()["place_slots"](send, positions, x, expert_ids, bucket, kept)
    return send, positions


def regroup_copies(block_rows: np.ndarray, gap: int = 0) -> bool:
    """Whether :func:`regroup` of these blocks makes a copy (the orders differ or a gap)."""
    return gap > 0 or min(block_rows.shape) > 1


def regroup(rows: np.ndarray, block_rows: np.ndarray, to_experts: bool, gap: int = 0,
            out: np.ndarray | None = None) -> np.ndarray:
    """``rows`` reordered between source-major and expert-major blocks ``block_rows[s, e]``
    (``to_experts``: source-major in, expert-major out), into ``out`` (flat) when given;
    ``gap`` rows left before each source's blocks on the source-major side (uninitialised
    in the output); ``rows`` itself when the orders agree and there is no gap."""
    if not regroup_copies(block_rows, gap):
        return rows
    shape = (rows.shape[0] + (0 if to_experts else gap * len(block_rows)), rows.shape[1])
    out = np.empty(shape, rows.dtype) if out is None else out.reshape(shape)
    kernels()["regroup"](out.reshape(-1), rows.reshape(-1), block_rows, rows.shape[1], gap,
                          to_experts)
    return out
