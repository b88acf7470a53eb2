"""The local work of a bound schedule step, as records that run themselves.

The executor compiles each :class:`~hpccoll.schedule.Copy` and
:class:`~hpccoll.schedule.Reduce` of a step, and the packing of each multi-region message,
into one of these records over views of the bound buffers; running a step is calling
``op.run(reduction)`` on each (``reduction``: the call's :class:`~.kernels.Reduction`, None
where the call reduces nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..schedule import Copy, LocalOp, Region
from . import device, kernels


@dataclass(frozen=True, slots=True)
class CopyOp:
    """``dst[...] = src``."""

    dst: Any
    src: Any

    def run(self, reduction: kernels.Reduction | None) -> None:
        self.dst[...] = self.src


@dataclass(frozen=True, slots=True)
class DeviceCopyOp:
    """``dst[:] = src`` between device arrays."""

    dst: Any
    src: Any

    def run(self, reduction: kernels.Reduction | None) -> None:
        device.copy(self.dst, self.src)


@dataclass(frozen=True, slots=True)
class ReduceOp:
    """``dst = srcs[0] op srcs[1] op ...`` pairwise, in that order; ``srcs[0]`` or
    ``srcs[1]`` may be ``dst``."""

    dst: Any
    srcs: tuple[Any, ...]

    def run(self, reduction: kernels.Reduction) -> None:
        _reduce_pairwise(reduction, self.dst, self.srcs)


@dataclass(frozen=True, slots=True)
class RowsOp:
    """A :class:`ReduceOp` whose sources lie ``stride`` elements apart in one host buffer
    (``flat``: from the first source to the end of the last): one pass of the reduction's row
    kernel where it has one, pairwise otherwise."""

    dst: Any
    srcs: tuple[Any, ...]
    flat: Any
    stride: int

    def run(self, reduction: kernels.Reduction) -> None:
        if reduction.rows is not None:
            reduction.rows(self.dst, self.flat, self.stride, len(self.srcs))
        else:
            _reduce_pairwise(reduction, self.dst, self.srcs)


@dataclass(frozen=True, slots=True)
class MoveOp:
    """Packing or unpacking of a multi-region message: ``(function, arguments)`` movers
    (:func:`kernels.block_mover`), one per run of regions in one buffer."""

    movers: tuple[tuple[Callable, tuple], ...]

    def run(self, reduction: kernels.Reduction | None) -> None:
        for move, arguments in self.movers:
            move(*arguments)


Op = CopyOp | DeviceCopyOp | ReduceOp | RowsOp | MoveOp


def terms(op: LocalOp) -> tuple[tuple[Region, ...], int | None]:
    """The sources of a local operation in the order they are combined (one: a copy), and
    the stride of a one-pass row reduction where one applies (:func:`_stride`, the
    destination not among the sources), else None."""
    if isinstance(op, Copy):
        return (op.src,), None
    srcs = op.srcs             # in the planner's order: every rank gets the same bits
    if op.dst in srcs[2:]:     # (NaN payloads, signed zeros); the accumulator first
        srcs = tuple(sorted(srcs, key=lambda r: r != op.dst))
    return srcs, None if op.dst in op.srcs else _stride(op.srcs)


def _stride(regions: tuple[Region, ...]) -> int | None:
    """The common distance between equally sized regions of one buffer laid out at a fixed
    stride (a one-pass row reduction applies), or None."""
    first = regions[0]
    if len(regions) < 3 or any(r.buffer != first.buffer or r.count != first.count
                               for r in regions):
        return None
    stride = regions[1].offset - first.offset
    if stride < first.count or any(b.offset - a.offset != stride
                                   for a, b in zip(regions, regions[1:])):
        return None
    return stride


def _reduce_pairwise(reduction: kernels.Reduction, dst: Any, srcs: tuple[Any, ...]) -> None:
    reduction.pair(dst, srcs[0], srcs[1])
    for src in srcs[2:]:
        reduction.pair(dst, dst, src)


def run_ops(ops: list[Op], reduction: kernels.Reduction | None) -> None:
    """Run ``ops`` in order."""
    for op in ops:
        op.run(reduction)
