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

The spread of a cell is that of its per-iteration times: the 10th and 90th percentiles, the
minimum and maximum beside the median (and the mean, which rare stalls move and the median
hides).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

# ``hpccoll bench``'s defaults: at least 20 timed iterations and 0.2 s of them per cell
MIN_ITERATIONS = 20
MIN_TIME = 0.2
# a per-iteration time below the clock's useful resolution is taken as this (seconds), and
# no cell runs more than MAX_ITERATIONS iterations, whatever the estimate
RESOLUTION = 1e-6
MAX_ITERATIONS = 1_000_000


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

    @classmethod
    def of(cls, seconds: np.ndarray, timed_s: float = 0.0) -> "Timing":
        """The summary of per-iteration times given in seconds (at least one)."""
        us = np.asarray(seconds, dtype=float) * 1e6
        p10, median, p90 = np.percentile(us, [10, 50, 90])
        return cls(int(us.size), float(median), float(us.mean()), float(p10), float(p90),
                   float(us.min()), float(us.max()), timed_s)

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
