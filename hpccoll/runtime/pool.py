"""Memory pools for the device path: pinned host memory (staging) and device memory (scratch,
the block mover's tables), reused instead of allocated per call.

Allocating either costs far more than a small collective: ``cuMemHostAlloc`` pins pages,
``cuMemFree`` synchronises the whole device.  A :class:`Pool` hands out arrays that view a
block of a size class (:func:`size_class`: four classes per power of two, so a block is at
most 25% larger than asked); when the last view of an array is gone its block goes back to
the pool, which keeps free blocks up to a byte cap and lets the rest be freed.  The arrays
hold their block (through the lease their memory names as its owner), so a block is never
reused while any view of it lives.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any, Callable

import numpy as np

SMALLEST = 512                  # bytes: the smallest size class
CAP = 256 << 20                 # bytes of free blocks each pool keeps


def size_class(nbytes: int) -> int:
    """The block size that serves ``nbytes``: SMALLEST, else ``nbytes`` rounded up to an
    eighth of the next power of two (four classes between each power of two and the next)."""
    if nbytes <= SMALLEST:
        return SMALLEST
    step = (1 << (nbytes - 1).bit_length()) // 8
    return -(-nbytes // step) * step


class _Lease:
    """The owner the views of one handed-out block name: when it dies, its block returns."""

    __slots__ = ("block", "__weakref__")

    def __init__(self, block: Any):
        self.block = block


class Pool:
    """Arrays of one kind of memory from reused blocks: ``allocate(nbytes)`` makes a block,
    ``address(block)`` is its address, ``view(address, count, dtype, owner)`` an array of
    ``count`` elements there that keeps ``owner`` alive; ``empty(count, dtype)`` is an
    array of no elements.  Counts (for tests and reports): ``allocations`` (blocks made),
    ``reuses`` (arrays served from a free block)."""

    def __init__(self, allocate: Callable[[int], Any], address: Callable[[Any], int],
                 view: Callable[[int, int, np.dtype, Any], Any],
                 empty: Callable[[int, np.dtype], Any], cap: int = CAP):
        self._allocate, self._address, self._view, self._empty = allocate, address, view, empty
        self.cap = cap
        self._free: dict[int, list[Any]] = {}
        self._free_bytes = 0
        self._lock = threading.Lock()
        self.allocations = self.reuses = 0

    @property
    def free_bytes(self) -> int:
        return self._free_bytes

    def take(self, count: int, dtype: np.dtype) -> Any:
        """An array of ``count`` elements of ``dtype`` (uninitialised) in a pooled block."""
        dtype = np.dtype(dtype)
        nbytes = count * dtype.itemsize
        if nbytes == 0:                 # nothing to allocate (cuMemHostAlloc(0) fails)
            return self._empty(count, dtype)
        size = size_class(nbytes)
        with self._lock:
            blocks = self._free.get(size)
            block = blocks.pop() if blocks else None
            if block is not None:
                self._free_bytes -= size
                self.reuses += 1
        if block is None:
            block = self._allocate(size)
            self.allocations += 1
        lease = _Lease(block)
        weakref.finalize(lease, self._give_back, block, size)
        return self._view(self._address(block), count, dtype, lease)

    def _give_back(self, block: Any, size: int) -> None:
        with self._lock:
            if self._free_bytes + size <= self.cap:
                self._free.setdefault(size, []).append(block)
                self._free_bytes += size

    def clear(self) -> None:
        """Let every free block be freed."""
        with self._lock:
            self._free.clear()
            self._free_bytes = 0


def host_view(address: int, count: int, dtype: np.dtype, owner: Any) -> np.ndarray:
    """A NumPy array of ``count`` elements at host ``address`` that keeps ``owner`` alive
    (every view of it does: their base is the ctypes memory holding ``owner``)."""
    memory = (ctypes.c_char * (count * dtype.itemsize)).from_address(address)
    memory.owner = owner
    return np.frombuffer(memory, dtype, count)
