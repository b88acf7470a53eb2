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


class Machine:
    """One rank running several algorithms on one fake clock: an algorithm's call takes
    ``speed(now)`` seconds (the machine's speed, the same for every algorithm), each call
    noted with the algorithm's index."""

    def __init__(self, speed):
        self.now, self.speed, self.calls = 0.0, speed, []

    def run(self, i):
        def call():
            self.calls.append(i)
            self.now += self.speed(self.now)
        return call

    def measure(self, algorithms, rounds, iterations, warmup, min_time):
        return timing.measure_in_turns([self.run(i) for i in range(algorithms)], rounds,
                                       iterations, warmup, min_time, lambda: None,
                                       lambda times: times, clock=lambda: self.now)


def test_algorithms_take_turns_each_round_starting_one_further():
    machine = Machine(lambda now: MS)
    results = machine.measure(3, rounds=3, iterations=7, warmup=1, min_time=0)
    assert [r.iterations for r in results] == [7, 7, 7]          # 3 + 2 + 2 each, exactly
    runs = [machine.calls[0]]
    for i in machine.calls[1:]:
        if i != runs[-1]:
            runs.append(i)
    assert runs == [0, 1, 2, 1, 2, 0, 2, 0, 1]
    # the warm-up asked for in the first round, one call in the others
    assert machine.calls.count(0) == 7 + 1 + 1 + 1


def test_a_round_with_no_share_of_the_floor_is_left_out_without_a_budget():
    machine = Machine(lambda now: MS)
    results = machine.measure(2, rounds=5, iterations=3, warmup=0, min_time=0)
    assert [r.iterations for r in results] == [3, 3] and len(machine.calls) == 6
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        machine.measure(2, rounds=0, iterations=3, warmup=0, min_time=0)


def test_taking_turns_times_every_algorithm_at_both_speeds_of_a_machine_that_changes():
    """The machine is twice as slow for its first 0.25 s.  Timed one after the other, the
    first algorithm gets only the slow calls and seems twice as slow as the second, which
    is the same; taking turns in 8 rounds, both get the same share of each speed (the
    budget of each round splits them in the same proportion), and their times agree."""
    def speed(now):
        return 2 * MS if now < 0.25 else MS
    first, second = Machine(speed).measure(2, rounds=1, iterations=4, warmup=1,
                                           min_time=0.25)
    assert first.median_us == pytest.approx(2 * second.median_us)
    first, second = Machine(speed).measure(2, rounds=8, iterations=4, warmup=1,
                                           min_time=0.25)
    assert first.median_us == pytest.approx(second.median_us)
    assert first.timed_s == pytest.approx(0.25, rel=0.05)
    assert second.timed_s == pytest.approx(0.25, rel=0.05)


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


def _cache_dir(root, caches):
    """A fake sysfs cache directory: (type, level, size text) per index."""
    root.mkdir(exist_ok=True)
    for i, (kind, level, size) in enumerate(caches):
        index = root / f"index{i}"
        index.mkdir()
        (index / "type").write_text(kind + "\n")
        (index / "level").write_text(f"{level}\n")
        (index / "size").write_text(size + "\n")
    return root


def test_the_last_level_cache_is_the_highest_data_or_unified_level(tmp_path, monkeypatch):
    sysfs = _cache_dir(tmp_path, [("Data", 1, "32K"), ("Instruction", 1, "32K"),
                                  ("Unified", 2, "1024K"), ("Unified", 3, "32768K")])
    assert timing.last_level_cache(sysfs) == (32 << 20, "sysfs L3")
    other = _cache_dir(tmp_path / "b", [("Data", 1, "48K"), ("Unified", 2, "2M"),
                                        ("Instruction", 3, "64M")])     # not data: ignored
    assert timing.last_level_cache(other) == (2 << 20, "sysfs L2")
    # no sysfs: sysconf's level 3, then the fallback
    monkeypatch.setattr(timing.os, "sysconf_names", {"SC_LEVEL3_CACHE_SIZE": 194})
    monkeypatch.setattr(timing.os, "sysconf", lambda name: 8 << 20)
    assert timing.last_level_cache(tmp_path / "none") == (8 << 20, "sysconf L3")
    monkeypatch.setattr(timing.os, "sysconf", lambda name: 0)       # glibc: unknown
    assert timing.last_level_cache(tmp_path / "none") == (timing.FALLBACK_CACHE, "fallback")


def test_an_unreadable_cache_size_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.setattr(timing.os, "sysconf_names", {})
    sysfs = _cache_dir(tmp_path, [("Unified", 2, "512K"), ("Unified", 3, "lots")])
    assert timing.last_level_cache(sysfs) == (512 << 10, "sysfs L2")
    assert timing._cache_size("512") == 512 and timing._cache_size("1M") == 1 << 20


def test_cold_buffers_rotate_through_more_than_the_total_each_set_on_its_own_lines():
    send = np.arange(3, dtype=np.float64)                  # 24 B: a line per buffer
    rotation = timing.Rotation(send, 5, np.float64, total=1000)
    assert rotation.sets == 8                              # 1000 B / (64 + 64) B, rounded up
    assert rotation.nbytes == 8 * 128 >= 1000
    seen = []
    for call in range(rotation.sets + 1):
        assert rotation.index == call % rotation.sets
        assert rotation.send.size == 3 and rotation.recv.size == 5
        assert np.array_equal(rotation.send, send) and not rotation.recv.any()
        for array in (rotation.send, rotation.recv):
            assert array.ctypes.data % timing.CACHE_LINE == 0 and array.flags.c_contiguous
        seen.append((rotation.send.ctypes.data, rotation.recv.ctypes.data))
        rotation.advance()
    assert len(set(seen[:-1])) == rotation.sets and seen[-1] == seen[0]    # then around
    assert len({address for pair in seen for address in pair}) == 2 * rotation.sets


def test_cold_buffers_are_at_least_two_sets_and_hold_the_receive_input():
    start = np.array([0, 7, 7, 0], np.int32)
    rotation = timing.Rotation(None, 4, np.int32, total=1, recv_input=start)
    assert rotation.sets == 2 and rotation.send is None
    for _ in range(2):
        assert np.array_equal(rotation.recv, start)
        rotation.advance()
    # a reduce's other ranks receive nothing: their sets are the send buffers alone
    rotation = timing.Rotation(np.ones(16, np.int32), 0, np.int32, total=256)
    assert rotation.sets == 4 and rotation.recv.size == 0
    rotation.advance()
    assert rotation.send.size == 16 and rotation.send.all()
    with pytest.raises(ValueError, match="-1 elements"):
        timing.Rotation(None, -1, np.int32, total=1)


def test_the_summary_averages_each_algorithms_bus_bandwidth_over_its_sizes():
    from hpccoll.tools.results import Result, busbw_summary

    def cell(name, size, busbw):
        return Result("allreduce", name, 2, "float32", size, size // 4, 20, 1.0, busbw, busbw,
                      None, 0)
    results = [cell("native", 8, 1.0), cell("ring", 8, 2.0), cell("auto", 8, 1.0),
               cell("native", 64, 3.0), cell("ring", 64, 4.0)]
    lines = busbw_summary(results)
    assert [line.split(":")[0].split()[-1] for line in lines] == ["native", "ring", "auto"]
    assert lines[0].endswith("2.000 GB/s over 2 sizes")
    assert lines[1].endswith("3.000 GB/s over 2 sizes (1.50x native's)")
    # over other sizes than native's: no ratio
    assert lines[2].endswith("1.000 GB/s over 1 size")
    assert all(line.startswith("# Avg bus bandwidth") for line in lines)
