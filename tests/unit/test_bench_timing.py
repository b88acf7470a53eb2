"""How many iterations ``hpccoll bench`` times a cell for, on a fake clock and fake ranks (no
MPI): the floor, the time budget, the count every rank agrees on, and the spread summary.
Durations and budgets are powers of two (MS is about a millisecond), so the fake clock's sums
are exact and the counts can be stated."""

from __future__ import annotations

import numpy as np
import pytest

from hpccoll.tools import timing

MS = 2.0 ** -10


class FakeRank:
    """One rank whose calls take ``durations(call index)`` seconds on a fake clock, and its
    barriers ``barrier_cost``; the slowest-rank reduction takes the element-wise maximum with
    the other ranks' times of the same calls (call times, then wall times: call and
    barrier), as an Allreduce(MAX) would."""

    def __init__(self, durations, others=(), barrier_cost=0.0):
        self.now, self.calls, self.barriers = 0.0, 0, 0
        self.durations, self.others, self.barrier_cost = durations, others, barrier_cost
        self.batches: list[int] = []

    def clock(self) -> float:
        return self.now

    def run(self) -> None:
        self.now += self.durations(self.calls)
        self.calls += 1

    def barrier(self) -> None:
        self.now += self.barrier_cost
        self.barriers += 1

    def slowest(self, times: np.ndarray) -> np.ndarray:
        n = times.size // 2
        first = self.calls - n
        self.batches.append(n)
        out = times.copy()
        for other in self.others:
            theirs = np.array([other(first + i) for i in range(n)])
            out = np.maximum(out, np.concatenate([theirs, theirs + self.barrier_cost]))
        return out

    def measure(self, iterations, warmup, min_time) -> timing.Timing:
        return timing.measure(self.run, iterations, warmup, min_time, self.barrier,
                              self.slowest, clock=self.clock)


def test_a_fast_cell_runs_until_the_time_budget_is_spent():
    rank = FakeRank(lambda call: MS)
    result = rank.measure(iterations=20, warmup=5, min_time=0.25)
    assert result.iterations == 256                            # 0.25 s / MS, above the floor
    assert result.iterations * result.median_us * 1e-6 == pytest.approx(0.25)
    assert result.timed_s == 0.25
    assert rank.calls == 5 + 256 and rank.barriers == rank.calls
    assert rank.batches == [5, 256]                            # warm-up, then one batch


def test_the_budget_is_wall_clock_barriers_included():
    """Calls of 1 MS after barriers of 1 MS: 0.25 s is 128 iterations, not 256, and the
    call's time is the call alone."""
    rank = FakeRank(lambda call: MS, barrier_cost=MS)
    result = rank.measure(iterations=20, warmup=5, min_time=0.25)
    assert result.iterations == 128 and result.timed_s == 0.25
    assert result.median_us == pytest.approx(MS * 1e6)


def test_a_slow_cell_gets_the_floor():
    rank = FakeRank(lambda call: 64 * MS)                      # 0.25 s is 4 calls
    result = rank.measure(iterations=20, warmup=2, min_time=0.25)
    assert result.iterations == 20 and result.median_us == pytest.approx(64 * MS * 1e6)


def test_a_warm_up_slower_than_the_timed_calls_is_made_up_for_in_a_second_batch():
    """The warm-up (16 MS a call) sizes the first batch at 16 calls; they take 1 MS each, so
    a second batch brings the timed total to the budget."""
    rank = FakeRank(lambda call: 16 * MS if call < 3 else MS)
    result = rank.measure(iterations=10, warmup=3, min_time=0.25)
    assert rank.batches == [3, 16, 240]
    assert result.iterations == 256 and result.timed_s == 0.25


def test_every_rank_decides_the_same_count_from_the_slowest_times():
    """One rank takes 1 MS a call, the other 2 and 4 MS in turn: both size the cell from the
    slow one's times (a median of 3 MS), so both run 0.375 s / 3 MS = 128 iterations."""
    def fast(call):
        return MS

    def slow(call):
        return 4 * MS if call % 2 else 2 * MS
    ranks = [FakeRank(fast, others=[slow]), FakeRank(slow, others=[fast])]
    results = [r.measure(iterations=5, warmup=4, min_time=0.375) for r in ranks]
    assert results[0] == results[1]
    assert ranks[0].batches == ranks[1].batches == [4, 128]
    assert results[0].iterations == 128 and results[0].timed_s == 0.375
    assert results[0].median_us == pytest.approx(3 * MS * 1e6)
    assert (results[0].min_us, results[0].max_us) == pytest.approx((2 * MS * 1e6, 4 * MS * 1e6))


def test_no_budget_means_exactly_the_floor_and_the_warm_up_asked_for():
    rank = FakeRank(lambda call: MS)
    assert rank.measure(iterations=7, warmup=0, min_time=0).iterations == 7
    assert rank.calls == 7 and rank.batches == [7]
    rank = FakeRank(lambda call: MS)
    rank.measure(iterations=7, warmup=0, min_time=MS)          # one call sizes the cell
    assert rank.batches[0] == 1
    with pytest.raises(ValueError, match="at least 1"):
        rank.measure(iterations=0, warmup=0, min_time=0)


def test_calls_that_take_no_time_stop_at_the_cap(monkeypatch):
    monkeypatch.setattr(timing, "MAX_ITERATIONS", 5000)
    rank = FakeRank(lambda call: 0.0)
    assert rank.measure(iterations=3, warmup=1, min_time=1.0).iterations == 5000


def test_iteration_count():
    assert timing.iteration_count(1e-3, 20, 0.2) == 200
    assert timing.iteration_count(0.5, 20, 0.2) == 20
    assert timing.iteration_count(3e-3, 1, 0.01) == 4               # rounded up
    assert timing.iteration_count(1e-3, 20, 0) == 20
    assert timing.iteration_count(0.0, 1, 0.2) == 200_000            # 1 us resolution
    assert timing.iteration_count(1e-9, 1, 1e6) == timing.MAX_ITERATIONS


def test_the_spread_summary():
    summary = timing.Timing.of(np.arange(1, 101) * 1e-6)      # 1..100 us
    assert summary.iterations == 100
    assert (summary.min_us, summary.max_us) == pytest.approx((1, 100))
    assert summary.median_us == pytest.approx(50.5) and summary.mean_us == pytest.approx(50.5)
    assert (summary.p10_us, summary.p90_us) == pytest.approx((10.9, 90.1))
    assert summary.min_us <= summary.p10_us <= summary.median_us <= summary.p90_us <= \
        summary.max_us
    assert summary.spread == pytest.approx((90.1 - 10.9) / 50.5)
    one = timing.Timing.of(np.array([2e-6]))
    assert one.p10_us == one.median_us == one.p90_us == pytest.approx(2) and one.spread == 0
