"""How many times ``hpccoll bench`` runs a cell, and what the times say, without MPI.

A cell (one collective, algorithm and size) is timed in iterations, each started after a
barrier; an iteration's time is the slowest rank's.  How many: at least ``iterations`` (the
floor) and enough for the timed iterations to take at least ``min_time`` seconds of wall
clock, barriers included (so a cell lasts about ``min_time``, and a sweep of N cells about N
times that, whatever the barrier costs), whichever is more.  The warm-up calls, timed like
the iterations, size the first batch; if the batch falls short of ``min_time``, further
batches fill the rest.  Every decision is made from times already reduced to the slowest
rank's (``slowest``: an element-wise MAX across ranks), identical on every rank, so all ranks
run the same number of iterations.  With ``min_time`` 0 the count is exactly ``iterations``.

The algorithms of a size take turns (:func:`measure_in_turns`): in each of ``rounds`` rounds
every one is timed for its share of the floor and of ``min_time``, the round's first
algorithm moving on by one each round.  A machine whose speed changes while a size is timed
(a shared or virtual machine's small calls can switch between two speeds from one second to
the next) then changes every algorithm's times alike, so the ratios to native measure the
algorithms, not the moment each was timed.

The spread of a cell is that of its per-iteration times: the 10th and 90th percentiles, the
minimum and maximum beside the median (and the mean, which rare stalls move and the median
hides).

Cold buffers (``hpccoll bench --cold``): a loop on one pair of buffers finds them in the
cache after the first call (OSU's loops do), which flatters shared-memory transfers; a cold
cell rotates through :class:`Rotation`'s buffer sets instead, as many as make a total of at
least twice the last-level cache (:func:`last_level_cache`), each set starting on its own
cache line, so every call reads and writes memory the previous ones have evicted.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

# ``hpccoll bench``'s defaults: at least 20 timed iterations and 0.2 s of them per cell
MIN_ITERATIONS = 20
MIN_TIME = 0.2
ROUNDS = 5                      # and the algorithms of a size take turns in 5 rounds
# a per-iteration time below the clock's useful resolution is taken as this (seconds), and
# no cell runs more than MAX_ITERATIONS iterations, whatever the estimate
RESOLUTION = 1e-6
MAX_ITERATIONS = 1_000_000
# the last-level cache assumed where neither sysfs nor sysconf gives its size (bytes): more
# than most hosts' (so cold buffers stay cold), little enough memory to rotate through
FALLBACK_CACHE = 64 << 20
CACHE_LINE = 64                 # bytes; each cold buffer set starts on a line of its own
COLD_FACTOR = 2                 # cold buffer sets total at least this many last-level caches
SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class Timing:
    """One cell's per-iteration times (slowest rank, microseconds), summarised, and how long
    its timed iterations took, barriers included (``timed_s``, seconds)."""

    iterations: int
    median_us: float
    mean_us: float
    p10_us: float
    p90_us: float
    min_us: float
    max_us: float
    timed_s: float = 0.0
    seconds: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False,
                                compare=False)      # the per-iteration times summarised

    @classmethod
    def of(cls, seconds: np.ndarray, timed_s: float = 0.0) -> "Timing":
        """The summary of per-iteration times given in seconds (at least one)."""
        seconds = np.asarray(seconds, dtype=float)
        us = seconds * 1e6
        p10, median, p90 = np.percentile(us, [10, 50, 90])
        return cls(int(us.size), float(median), float(us.mean()), float(p10), float(p90),
                   float(us.min()), float(us.max()), timed_s, seconds)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the width of the middle 80% of the iterations, relative."""
        return (self.p90_us - self.p10_us) / self.median_us if self.median_us > 0 else 0.0


def iteration_count(per_iteration: float, floor: int, min_time: float) -> int:
    """Iterations for ``min_time`` seconds at ``per_iteration`` seconds each, at least
    ``floor`` (exactly ``floor`` when ``min_time`` is 0), at most MAX_ITERATIONS."""
    if min_time <= 0:
        return floor
    # rounded first, so that a quotient such as 200000.00000000003 is 200000 calls
    wanted = math.ceil(round(min_time / max(per_iteration, RESOLUTION), 9))
    return max(floor, min(wanted, MAX_ITERATIONS))


def measure(run: Callable[[], None], iterations: int, warmup: int, min_time: float,
            barrier: Callable[[], None], slowest: Callable[[np.ndarray], np.ndarray],
            before: Callable[[], None] = lambda: None,
            clock: Callable[[], float] = time.perf_counter) -> Timing:
    """Time ``run``: ``warmup`` calls (at least one when ``min_time`` > 0: they size the
    cell), then iterations as the module says.  Each call is preceded by ``before()`` and
    ``barrier()``, which count towards ``min_time`` but not the call's time; ``slowest``
    turns this rank's times into the slowest rank's, the same array on every rank."""
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")

    def timed(n: int) -> tuple[np.ndarray, np.ndarray]:
        """n iterations' call times and wall times (from before() to the call's end)."""
        times = np.zeros(2 * n)
        for i in range(n):
            begin = clock()
            before()
            barrier()
            start = clock()
            run()
            end = clock()
            times[i], times[n + i] = end - start, end - begin
        times = slowest(times)
        return times[:n], times[n:]

    warm_calls = max(warmup, 1) if min_time > 0 else warmup
    _, warm = timed(warm_calls) if warm_calls else (None, np.zeros(0))
    estimate = float(np.median(warm)) if warm.size else 0.0
    calls: list[np.ndarray] = []
    walls: list[np.ndarray] = []
    count, total, spent = iteration_count(estimate, iterations, min_time), 0, 0.0
    while count > 0:
        batch, wall = timed(count)
        calls.append(batch)
        walls.append(wall)
        total += count
        spent += float(wall.sum())
        if spent >= min_time or total >= MAX_ITERATIONS:
            break
        per_iteration = float(np.median(np.concatenate(walls)))
        count = min(iteration_count(per_iteration, 1, min_time - spent),
                    MAX_ITERATIONS - total)
    return Timing.of(np.concatenate(calls), spent)


def measure_in_turns(runs: list[Callable[[], None]], rounds: int, iterations: int,
                     warmup: int, min_time: float, barrier: Callable[[], None],
                     slowest: Callable[[np.ndarray], np.ndarray],
                     before: Callable[[], None] = lambda: None,
                     clock: Callable[[], float] = time.perf_counter) -> list[Timing]:
    """Time each of ``runs`` as :func:`measure` does, taking turns: ``rounds`` rounds, each
    giving every run its share of the floor ``iterations`` (exactly ``iterations`` in all
    when ``min_time`` is 0: a round with no share is left out) and ``min_time / rounds``
    seconds, after ``warmup`` calls in its first round and one in the others (which rewarm
    what the other runs evicted); round r starts with run r mod len(runs).  The timings
    in the order of ``runs``."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    times: list[list[np.ndarray]] = [[] for _ in runs]
    spent = [0.0] * len(runs)
    for r in range(rounds):
        share = iterations // rounds + (r < iterations % rounds)
        if share == 0 and min_time <= 0:
            continue
        for i in (np.arange(len(runs)) + r) % len(runs):
            cell = measure(runs[i], max(share, 1), warmup if r == 0 else min(warmup, 1),
                           min_time / rounds, barrier, slowest, before, clock)
            times[i].append(cell.seconds)
            spent[i] += cell.timed_s
    return [Timing.of(np.concatenate(t), s) for t, s in zip(times, spent)]


def last_level_cache(sysfs: Path = SYSFS_CACHES) -> tuple[int, str]:
    """The size in bytes of this host's last-level cache, and where it was read: the
    highest-level data or unified cache in sysfs, else glibc's sysconf (level 3, then 2),
    else :data:`FALLBACK_CACHE`."""
    best: tuple[int, int] | None = None             # (level, bytes)
    for index in sorted(sysfs.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _cache_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size > 0 and (best is None or level > best[0]):
            best = (level, size)
    if best is not None:
        return best[1], f"sysfs L{best[0]}"
    for level in (3, 2):
        name = f"SC_LEVEL{level}_CACHE_SIZE"
        try:
            size = os.sysconf(name) if name in os.sysconf_names else 0
        except (OSError, ValueError):
            size = 0
        if size > 0:
            return size, f"sysconf L{level}"
    return FALLBACK_CACHE, "fallback"


def _cache_size(text: str) -> int:
    """sysfs's cache size ('32K', '32768K', '1M', '512') in bytes; ValueError if none."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


class Rotation:
    """Cold buffers for one cell: ``sets`` send and receive buffers of ``send_n`` and
    ``recv_n`` elements (send_n 0: no send buffer; recv_n 0: a reduce's other ranks), each
    set starting on its own cache line, together at least ``total`` bytes (and at least two
    sets, so no call reuses the previous call's buffers).  :meth:`advance` moves to the next
    set (``send``, ``recv``; ``index``); every send buffer holds ``send_input`` and every
    receive buffer ``recv_input`` (None: zeros), so each call sees the data a call on one
    pair of buffers would."""

    def __init__(self, send_input: np.ndarray | None, recv_n: int, dtype: np.dtype,
                 total: int, recv_input: np.ndarray | None = None):
        dtype = np.dtype(dtype)
        if recv_n < 0:
            raise ValueError(f"a receive buffer of {recv_n} elements")
        send_n = 0 if send_input is None else send_input.size
        line = max(CACHE_LINE // dtype.itemsize, 1)
        self.send_stride, self.recv_stride = (-(-n // line) * line for n in (send_n, recv_n))
        set_bytes = max((self.send_stride + self.recv_stride) * dtype.itemsize, 1)
        self.sets = max(2, -(-total // set_bytes))
        self._send = None if send_input is None else \
            _aligned(self.sets * self.send_stride, dtype)
        self._recv = _aligned(self.sets * self.recv_stride, dtype)
        if self._send is not None:
            self._send.reshape(self.sets, -1)[:, :send_n] = send_input
        if recv_input is not None:
            self._recv.reshape(self.sets, -1)[:, :recv_n] = recv_input
        self.send_n, self.recv_n, self.index = send_n, recv_n, -1
        self.send: np.ndarray | None = None
        self.recv: np.ndarray = self._recv[:0]
        self.advance()

    @property
    def nbytes(self) -> int:
        """The memory rotated through, bytes."""
        return self._recv.nbytes + (0 if self._send is None else self._send.nbytes)

    def advance(self) -> None:
        """The next set of buffers in ``send`` and ``recv`` (after the last, the first)."""
        i = self.index = (self.index + 1) % self.sets
        if self._send is not None:
            at = i * self.send_stride
            self.send = self._send[at:at + self.send_n]
        at = i * self.recv_stride
        self.recv = self._recv[at:at + self.recv_n]


def _aligned(n: int, dtype: np.dtype) -> np.ndarray:
    """``n`` zeroed elements starting on a cache line (written, so that no call meets a
    page's first touch)."""
    raw = np.empty(n * dtype.itemsize + CACHE_LINE, np.uint8)
    raw.fill(0)
    start = -raw.ctypes.data % CACHE_LINE
    return raw[start:start + n * dtype.itemsize].view(dtype)
