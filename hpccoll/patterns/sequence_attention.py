"""Sequence-parallel attention ("TASP: Topology-aware Sequence Parallelism"): the sequence of
Q, K and V sharded over the ranks, every rank's queries attending to the whole sequence.

Each rank holds the rows of one :mod:`.sharding` placement; the K and V rows travel together
(one buffer, each row ``[k | v]``) through one :func:`hpccoll.allgather_stream`, and every
piece that arrives is attended to at once, while the next step's transfers are in flight:
blockwise attention with the online softmax (running maximum and sum per query, merged in
the log-sum-exp way), so the result is exact, not an approximation.  Layouts:

- ``ring`` (Ring Attention): the ``contiguous`` placement, hpccoll's ``ring`` allgather;
- ``zigzag`` (Zigzag-Ring Attention): the ``zigzag`` placement (2N chunks, rank r holds
  chunks r and 2N-1-r), ``ring`` allgather: under a causal mask every rank has the same work;
- ``tasp`` (TASP): the ``tasp`` placement, hpccoll's ``multiring`` allgather: each rank's
  block cut into one chunk per Hamiltonian cycle, the chunks travelling the cycles at once
  (all links busy on an all-to-all topology), causal work balanced at every step.

Under ``causal=True`` query i sees keys j <= i, in global positions.  Queries and keys of a
piece that the mask hides entirely are left out of the products (pieces with nothing visible
are skipped), so a causal call does about half the work of a non-causal one.

:func:`attention_backward` gives the exact gradients: the K/V rows circulate again, each
rank's dq builds up locally, and the dk/dv contributions for every row of the sequence are
summed over the ranks with one ``reduce_scatter`` (the same algorithm) of the gathered
gradient buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np
from mpi4py import MPI

from .sharding import agree_objects, positions

# rows of keys attended to at a time under a causal mask (see _split)
CAUSAL_BLOCK = 256

# layout -> (the placement of the rows, the allgather algorithm that circulates K and V)
ATTENTION_LAYOUTS = {"ring": ("contiguous", "ring"), "zigzag": ("zigzag", "ring"),
                     "tasp": ("tasp", "multiring")}


@dataclass(frozen=True)
class _Setup:
    """What every rank agreed on for one call."""
    algorithm: str
    held: list[np.ndarray]    # for each rank, the global rows it holds, in its local order
    gathered: np.ndarray      # the global row of each row of the gathered [k | v] buffer
    rank: int
    scale: float

    @property
    def mine(self) -> np.ndarray:
        return self.held[self.rank]


def _problem(arrays: dict[str, Any], rows_like: str) -> tuple[str, str] | None:
    """What is wrong with this rank's arrays, as (exception name, message), or None.  All
    must be NumPy arrays of one real floating dtype and of the shape of ``rows_like``
    (``(S_r, d)`` or ``(S_r, heads, d)``), except that ``lse`` lacks the last axis."""
    for name, array in arrays.items():
        if not isinstance(array, np.ndarray):
            return "TypeError", f"{name} must be a NumPy array, got {type(array).__name__}"
    like = arrays[rows_like]
    if like.ndim not in (2, 3) or like.shape[-1] == 0:
        return "ValueError", (f"{rows_like} must have shape (S_r, d) or (S_r, heads, d) with "
                              f"d >= 1, got {like.shape}")
    if not np.issubdtype(like.dtype, np.floating):
        return "TypeError", f"{rows_like} must be real floating point, got {like.dtype}"
    for name, array in arrays.items():
        shape = like.shape[:-1] if name == "lse" else like.shape
        if array.shape != shape or array.dtype != like.dtype:
            return "ValueError", (f"{name} has shape {array.shape} and dtype {array.dtype}; "
                                  f"expected {shape} and {like.dtype} (as {rows_like})")
    return None


def _agree(comm: Any, arrays: dict[str, Any], layout: str, causal: Any, scale: Any) -> _Setup:
    """Check the arguments on every rank before any message, then agree on the shards'
    lengths, shapes and dtype and on the options with one small allgather: the same
    TypeError or ValueError on every rank if anything is wrong anywhere."""
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(f"comm must be an mpi4py intracommunicator, got {type(comm).__name__}")
    if layout not in ATTENTION_LAYOUTS:
        raise ValueError(f"unknown attention layout {layout!r}: choose one of "
                         f"{', '.join(ATTENTION_LAYOUTS)}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if scale is not None and (isinstance(scale, (bool, np.bool_))
                              or not isinstance(scale, (int, float, np.integer, np.floating))
                              or not math.isfinite(scale)):
        raise TypeError(f"scale must be None or a finite real number, got {scale!r}")
    first = next(iter(arrays))
    problem = _problem(arrays, first)
    like = arrays[first]
    shape = (None, None, None) if problem else (like.shape[0], like.shape[1:], like.dtype.str)
    everyone = agree_objects(comm, (problem, shape, (layout, bool(causal), scale)),
                             "attention: the shards' shapes and options")
    for rank, (problem, _, _) in enumerate(everyone):
        if problem is not None:
            kind, message = problem
            raise {"TypeError": TypeError, "ValueError": ValueError}[kind](
                f"attention arguments on rank {rank}: {message}")
    options = {options for _, _, options in everyone}
    if len(options) > 1:
        raise ValueError(f"the ranks passed different (layout, causal, scale): {options}")
    rests = {(rest, dtype) for _, (_, rest, dtype), _ in everyone}
    if len(rests) > 1:
        raise ValueError(f"the ranks' shards differ in shape beside the sequence axis or in "
                         f"dtype: {sorted(rests)}")
    lengths = [rows for _, (rows, _, _), _ in everyone]
    placement, algorithm = ATTENTION_LAYOUTS[layout]
    held = positions(sum(lengths), len(lengths), placement)
    if lengths != [len(rows) for rows in held]:
        raise ValueError(f"the shards' sequence lengths {lengths} are not the {placement} "
                         f"placement of {sum(lengths)} rows over {len(lengths)} ranks "
                         f"({[len(rows) for rows in held]})")
    return _Setup(algorithm, held, np.concatenate(held), comm.Get_rank(),
                  1 / math.sqrt(like.shape[-1]) if scale is None else float(scale))


def _by_head(x: np.ndarray) -> np.ndarray:
    """(S_r, d) or (S_r, heads, d) as (heads, S_r, d), contiguous."""
    heads = x.shape[1] if x.ndim == 3 else 1
    return np.ascontiguousarray(x.reshape(x.shape[0], heads, x.shape[-1]).transpose(1, 0, 2))


def _from_heads(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`_by_head` for an array of ``shape``."""
    return np.ascontiguousarray(x.transpose(1, 0, 2)).reshape(shape)


def _add_partial(partial: dict[int, int], row: int, count: int, width: int) -> bool:
    """Count ``count`` more elements of ``row`` as arrived; True once all ``width`` have."""
    partial[row] = partial.get(row, 0) + count
    if partial[row] < width:
        return False
    del partial[row]
    return True


def _whole_rows(piece: slice, width: int, partial: dict[int, int]) -> slice:
    """The rows (of ``width`` elements) that an arrived element ``piece`` completes: those
    inside it and those whose other part arrived before (the multiring allgather cuts blocks
    into chunks without regard to rows); the pieces still incomplete are counted in
    ``partial``."""
    start, stop = piece.start, piece.stop
    low, high = -(-start // width), stop // width
    if low > high:                                      # inside one row
        return slice(high, high + _add_partial(partial, high, stop - start, width))
    if start % width and _add_partial(partial, low - 1, low * width - start, width):
        low -= 1
    if stop % width and _add_partial(partial, high, stop - high * width, width):
        high += 1
    return slice(low, high)


def _arrivals(comm: MPI.Intracomm, setup: _Setup, send: np.ndarray, gathered: np.ndarray,
              stream: bool) -> Iterator[slice]:
    """Gather every rank's [k | v] rows into ``gathered`` (rows, width), yielding each run
    of rows as soon as it is whole: from :func:`hpccoll.allgather_stream` (the next step in
    flight meanwhile), or (``stream`` False) every rank's rows after a blocking allgather."""
    from .. import allgather, allgather_stream
    width = gathered.shape[1]
    counts = [len(rows) * width for rows in setup.held]
    recv = gathered.reshape(-1)
    if stream:
        steps: Iterable = allgather_stream(comm, send.reshape(-1), recv, recvcounts=counts,
                                           algorithm=setup.algorithm)
    else:
        allgather(comm, send.reshape(-1), recv, recvcounts=counts, algorithm=setup.algorithm)
        ends = np.cumsum(counts).tolist()
        steps = [[(source, slice(end - count, end))
                  for source, (count, end) in enumerate(zip(counts, ends))]]
    partial: dict[int, int] = {}
    for pieces in steps:
        for _, piece in pieces:
            rows = _whole_rows(piece, width, partial)
            if rows.stop > rows.start:
                yield rows


def _split(runs: Iterable[slice], causal: bool) -> Iterator[slice]:
    """``runs`` cut into runs of at most ``CAUSAL_BLOCK`` rows under a causal mask, so that the
    parts of a piece that the mask hides (most of the upper triangle of a diagonal piece)
    are skipped, not computed and masked."""
    for rows in runs:
        step = CAUSAL_BLOCK if causal else rows.stop - rows.start
        for start in range(rows.start, rows.stop, step):
            yield slice(start, min(start + step, rows.stop))


def _visible(qpos: np.ndarray, kpos: np.ndarray, causal: bool):
    """The queries and keys of a piece that take part, as (query selection, key selection,
    mask of hidden pairs or None), or None if there is nothing to compute (no queries here,
    or the causal mask hides the whole piece)."""
    if qpos.size == 0:
        return None
    if not causal or kpos.max() <= qpos.min():
        return slice(None), slice(None), None
    queries = slice(None) if kpos.min() <= qpos.min() else np.flatnonzero(qpos >= kpos.min())
    keys = slice(None) if kpos.max() <= qpos.max() else np.flatnonzero(kpos <= qpos.max())
    if isinstance(queries, np.ndarray) and queries.size == 0:
        return None
    hidden = kpos[keys][None, :] > qpos[queries][:, None]
    return queries, keys, hidden


class _Softmax:
    """Attention of the local (scaled) queries over key/value pieces given one at a time:
    the online softmax, with the running maximum ``top`` and sum ``total`` of exp(score - top)
    per head and query and the running unnormalised output ``acc``."""

    def __init__(self, queries: np.ndarray, qpos: np.ndarray, causal: bool):
        self.queries, self.qpos, self.causal = queries, qpos, causal
        self.acc = np.zeros_like(queries)
        self.top = np.full(queries.shape[:2], -np.inf, queries.dtype)
        self.total = np.zeros(queries.shape[:2], queries.dtype)

    def add(self, keys: np.ndarray, values: np.ndarray, kpos: np.ndarray) -> None:
        """Take in ``keys`` and ``values`` (heads, rows, d) at global positions ``kpos``."""
        visible = _visible(self.qpos, kpos, self.causal)
        if visible is None:
            return
        queries, chosen, hidden = visible
        scores = _scores(self.queries[:, queries], keys[:, chosen], hidden)
        top = self.top[:, queries]
        new_top = np.maximum(top, scores.max(axis=2))
        np.subtract(scores, new_top[:, :, None], out=scores)
        np.exp(scores, out=scores)
        shrink = np.exp(top - new_top)
        self.top[:, queries] = new_top
        self.total[:, queries] = self.total[:, queries] * shrink + scores.sum(axis=2)
        self.acc[:, queries] = (self.acc[:, queries] * shrink[:, :, None]
                                + np.matmul(scores, values[:, chosen]))

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """The output (heads, S_r, d) and the log-sum-exp of the scores (heads, S_r); every
        query has seen at least one key (itself, under a causal mask)."""
        return self.acc / self.total[:, :, None], self.top + np.log(self.total)


def _scores(queries: np.ndarray, keys: np.ndarray, hidden: np.ndarray | None) -> np.ndarray:
    """queries (heads, a, d) times keys (heads, b, d) transposed, -inf where ``hidden``."""
    scores = np.matmul(queries, keys.transpose(0, 2, 1))
    if hidden is not None:
        np.copyto(scores, -np.inf, where=hidden)
    return scores


def _kv_rows(k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The rows [k | v] (S_r, 2 * heads * d) that circulate."""
    rows, width = k.shape[0], math.prod(k.shape[1:])
    return np.concatenate((k.reshape(rows, width), v.reshape(rows, width)), axis=1)


def _kv_split(gathered: np.ndarray, rows: slice, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys and values (heads, rows, d) of a run of gathered [k | v] rows (views)."""
    block = gathered[rows].reshape(rows.stop - rows.start, 2, heads, -1)
    return block[:, 0].transpose(1, 0, 2), block[:, 1].transpose(1, 0, 2)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, comm: MPI.Intracomm, *,
              layout: str = "ring", causal: bool = False, scale: float | None = None,
              return_lse: bool = False, stream: bool = True) -> Any:
    """This rank's rows of ``softmax(q k^T * scale [+ causal mask]) v`` over the whole sequence.

    ``q``, ``k``, ``v``: this rank's rows under ``layout`` (``ring``, ``zigzag`` or ``tasp``:
    see the module docstring; :func:`.sharding.shard` with the placement
    ``ATTENTION_LAYOUTS[layout][0]`` makes them), of shape (S_r, d) or (S_r, heads, d), one
    real floating dtype.  ``scale`` defaults to 1/sqrt(d); ``causal`` masks key positions
    after the query's, in the global sequence.  Returns the output, shaped as ``q`` (with
    ``return_lse``, also the log-sum-exp of each query's scaled scores, shaped as ``q``
    without its last axis, for :func:`attention_backward`).  ``stream`` False gathers K and V
    with a blocking allgather first and computes afterwards (no overlap: for comparison).
    Bad arguments raise TypeError or ValueError on every rank."""
    setup = _agree(comm, {"q": q, "k": k, "v": v}, layout, causal, scale)
    queries = _by_head(q) * setup.scale
    heads = queries.shape[0]
    send = _kv_rows(k, v)
    gathered = np.empty((len(setup.gathered), send.shape[1]), send.dtype)
    softmax = _Softmax(queries, setup.mine, bool(causal))
    for rows in _split(_arrivals(comm, setup, send, gathered, stream), bool(causal)):
        softmax.add(*_kv_split(gathered, rows, heads), setup.gathered[rows])
    out, lse = softmax.result()
    out = _from_heads(out, q.shape)
    if not return_lse:
        return out
    return out, np.ascontiguousarray(lse.T).reshape(q.shape[:-1])


def attention_backward(dout: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                       out: np.ndarray, lse: np.ndarray, comm: MPI.Intracomm, *,
                       layout: str = "ring", causal: bool = False, scale: float | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gradients (dq, dk, dv) of a loss with gradient ``dout`` with respect to this
    rank's ``out`` of :func:`attention` (``out, lse = attention(..., return_lse=True)``), for
    this rank's rows of q, k, v; the same layout, causal and scale as the forward call.

    K and V circulate again through ``allgather_stream``; for every piece the probabilities
    are recomputed from ``lse``, dq builds up locally, and the piece's dk and dv go into a
    gathered gradient buffer that one ``reduce_scatter`` (same algorithm) sums over the
    ranks, leaving every rank the sum for its own rows."""
    from .. import reduce_scatter
    setup = _agree(comm, {"dout": dout, "q": q, "k": k, "v": v, "out": out, "lse": lse},
                   layout, causal, scale)
    queries = _by_head(q) * setup.scale
    heads = queries.shape[0]
    grad_out = _by_head(dout)
    log_total = _by_head(lse[..., None])[:, :, 0]
    delta = np.einsum("hrd,hrd->hr", grad_out, _by_head(out))
    send = _kv_rows(k, v)
    gathered = np.empty((len(setup.gathered), send.shape[1]), send.dtype)
    grads = np.zeros_like(gathered)
    dq = np.zeros_like(queries)
    for rows in _split(_arrivals(comm, setup, send, gathered, True), bool(causal)):
        kpos = setup.gathered[rows]
        visible = _visible(setup.mine, kpos, bool(causal))
        if visible is None:
            continue
        mine, chosen, hidden = visible
        keys, values = (x[:, chosen] for x in _kv_split(gathered, rows, heads))
        probs = _scores(queries[:, mine], keys, hidden)
        np.subtract(probs, log_total[:, mine, None], out=probs)
        np.exp(probs, out=probs)
        grad = grad_out[:, mine]
        dv = np.matmul(probs.transpose(0, 2, 1), grad)
        dscores = probs * (np.matmul(grad, values.transpose(0, 2, 1)) - delta[:, mine, None])
        dq[:, mine] += np.matmul(dscores, keys)
        dk = np.matmul(dscores.transpose(0, 2, 1), queries[:, mine])
        block = grads[rows].reshape(rows.stop - rows.start, 2, heads, -1)
        block[chosen, 0] += dk.transpose(1, 0, 2)
        block[chosen, 1] += dv.transpose(1, 0, 2)
    width = gathered.shape[1]
    summed = np.empty((len(setup.mine), width), grads.dtype)
    reduce_scatter(comm, grads.reshape(-1), summed.reshape(-1),
                   recvcounts=[len(rows) * width for rows in setup.held],
                   algorithm=setup.algorithm)
    half = width // 2
    return (_from_heads(dq * setup.scale, q.shape), summed[:, :half].reshape(k.shape),
            summed[:, half:].reshape(v.shape))
