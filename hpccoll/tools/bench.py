"""``hpccoll bench``: time algorithms against the native MPI collective, OSU/nccl-tests style.

Per message size and algorithm (a cell): a data check apart from the timed loop (seeded
per-rank integer data, so reductions are exact and every rank can compute the expected
result), then warm-up calls, then timed iterations each started after a barrier: at least
``iterations`` of them, lasting at least ``min_time`` seconds (barriers included),
whichever is more, the same rule for every algorithm and native
(:mod:`hpccoll.tools.timing`).  An iteration's time is the slowest rank's; the reported time
is the median over iterations, with the spread beside it (p10, p90, min, max; the JSON also
keeps the mean, which rare stalls move and the median hides: the figure for straggler
runs).  ``native`` is the MPI library's own collective called through mpi4py, the way a
program would call it.

Sizes follow OSU: the block a rank contributes (allgather), sends to each peer (alltoall),
or the whole vector (allreduce, bcast, reduce, and reduce_scatter's input).  Bandwidths
follow nccl-tests: algbw = S / time with S the larger buffer (allgather's output, alltoall's
and reduce_scatter's input, the vector of the others); busbw = algbw x 2(p-1)/p for
allreduce, x 1 for bcast and reduce, x (p-1)/p for the others (the collectives' specs).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, TextIO

import numpy as np
from mpi4py import MPI

from .. import api, registry, settings
from ..prepared import staged_regions
from ..collectives import nonblocking, spec
from ..runtime import buffers, device
from ..schedule import RECV
from .bench_command import API_NATIVE, selected_algorithms, skipped_by_all
from .launcher import note_if_alone
from .results import Result, busbw_summary, human_size, plot, size_range, write_json
from .timing import COLD_FACTOR, Rotation, Timing, last_level_cache, measure_in_turns


class Case:
    """One collective at one size: buffers, the seeded inputs and the expected output, all
    from the collective's spec (OSU size convention; root 0 for rooted collectives); with
    ``cold_bytes``, the timed calls' buffers rotate through sets of at least that many bytes
    (:class:`~hpccoll.tools.timing.Rotation`), the data check's are the first ones.  Each
    call is made in ``form`` (:data:`~hpccoll.tuning.FORMS`; other than blocking: host
    buffers, and a persistent request is made once per runner, its buffers fixed)."""

    def __init__(self, comm: MPI.Comm, collective: str, size: int, dtype: np.dtype,
                 memory: str = "host", cold_bytes: int = 0, form: str = "blocking"):
        self.comm, self.spec, self.dtype, self.form = comm, spec(collective), dtype, form
        p, r = comm.size, comm.rank
        self.count = max(size // dtype.itemsize, 0)
        calls = [self.spec.bench_call(p, q, self.count) for q in range(p)]
        self.call = calls[r]
        self.total = self.spec.data_count(self.call)
        self.source = self.spec.input(self.call)
        inputs = [self.input(q, self.spec.input(c).count) for q, c in enumerate(calls)]
        send_n, recv_n = self.spec.sizes(self.call)
        self.send = inputs[r] if send_n else None
        self.recv = np.zeros(recv_n, dtype)
        self.expected = self.spec.expected(calls, inputs)[r][0].astype(dtype)
        self.counts = self.call.counts if len(set(self.call.counts)) > 1 else None
        self.recv_input = inputs[r] if self.source.buffer == RECV else None
        self.host_recv = self.recv
        if memory == "cuda":                 # the same buffers in GPU memory (OSU's -d cuda)
            self.send = None if self.send is None else device.upload(self.send)
            self.recv = device.upload(self.recv)
        self.cold: Rotation | None = None
        self.made: list[Callable[[], None]] = []    # free() of the persistent requests made
        self._native_arguments: Callable | None = None     # native's, for the cold sets
        self.native_args: tuple = ()
        check_buffers(memory, cold_bytes > 0, form)
        if cold_bytes:                          # the timed calls rotate through cold buffers
            start = np.zeros(self.recv.size, dtype)
            if self.recv_input is not None:
                start[self.source.offset:self.source.stop] = self.recv_input
            self.cold = Rotation(self.send, self.recv.size, dtype, cold_bytes, start)

    def input(self, rank: int, n: int) -> np.ndarray:
        rng = np.random.default_rng([rank, n, 12345])
        return rng.integers(-8, 9, size=n).astype(self.dtype)

    def runner(self, algorithm: str, rotate: bool = True) -> Callable[[], None]:
        """One call of ``algorithm`` on this case's buffers, or with ``rotate`` on the
        current cold set where they rotate (:meth:`advance` moves on, outside the call's
        time)."""
        comm, send, recv = self.comm, self.send, self.recv
        cold = self.cold if rotate else None
        if algorithm == registry.NATIVE:
            name, arguments = self.spec.native_args(
                self.call, buffers.mpi_datatype(self.dtype),
                MPI.SUM if self.spec.reduces else None)
            if self.form == "persistent":
                request = getattr(comm, name + "_init")(*arguments(send, recv))
                self.made.append(request.Free)
                return lambda: (request.Start(), request.Wait())
            method = getattr(comm, name)
            if self.form == "nonblocking":
                method = _waited(getattr(comm, nonblocking(name)), "Wait")
            if cold is not None:        # the set's arguments made with it, in advance()
                self._native_arguments = arguments
                self.native_args = arguments(cold.send, cold.recv)
                return lambda: method(*self.native_args)
            if isinstance(recv, np.ndarray) or buffers.gpu_aware():
                args = arguments(*(b if isinstance(b, np.ndarray) or b is None else
                                   buffers.message(b) for b in (send, recv)))
                return lambda: method(*args)
            return _staged_native(method, arguments, send, recv,
                                  staged_regions(self.spec, self.call))
        if algorithm == API_NATIVE:
            algorithm = registry.NATIVE
        # the public function a program calls (whose C entry serves its repeats)
        name, keywords = self.spec.name, {"algorithm": algorithm}
        if self.spec.reduces:
            keywords["op"] = "sum"
        if self.counts is not None:
            keywords[self.spec.counts_keyword] = self.counts

        def buffers_of(send: Any, recv: Any) -> tuple:
            return (comm, recv) if self.spec.one_buffer else (comm, send, recv)
        if self.form == "persistent":
            request = getattr(api, f"{name}_init")(*buffers_of(send, recv), **keywords)
            self.made.append(request.free)
            return lambda: (request.start(), request.wait())
        call = getattr(api, name) if self.form == "blocking" else \
            _waited(getattr(api, f"i{name}"), "wait")
        if cold is not None:
            return lambda: call(*buffers_of(cold.send, cold.recv), **keywords)
        arguments = buffers_of(send, recv)
        return lambda: call(*arguments, **keywords)

    def free(self) -> None:
        """Free the persistent requests the runners made (none of them runs again)."""
        for free in self.made:
            free()
        self.made.clear()

    def advance(self) -> None:
        """The next cold buffer set (and native's arguments on it); nothing when warm."""
        cold = self.cold
        if cold is not None:
            cold.advance()
            if self._native_arguments is not None:
                self.native_args = self._native_arguments(cold.send, cold.recv)

    def resolve(self, algorithm: str) -> str:
        """The algorithm a name runs as ("auto" resolved for this case)."""
        if algorithm != "auto":
            return algorithm
        prepared, _, _ = api.prepare(self.spec.name, self.comm, self.send, self.recv,
                                     counts=self.counts,
                                     op="sum" if self.spec.reduces else None, form=self.form)
        return prepared.algorithm

    def wrong(self, run: Callable[[], None]) -> int:
        host = self.host_recv
        host[:] = 0
        if self.recv_input is not None:
            host[self.source.offset:self.source.stop] = self.recv_input
        if host is not self.recv:
            device.to_device(host, self.recv)
        run()
        if host is not self.recv:
            device.to_host(self.recv, host)
        # a buffer reduction with a predefined op, at least p elements (like the timings')
        bad = np.zeros(self.comm.size, np.int64)
        bad[0] = np.count_nonzero(host != self.expected)
        total = np.empty_like(bad)
        self.comm.Allreduce(bad, total, op=MPI.SUM)
        return int(total[0])


def check_buffers(memory: str, cold: bool, form: str) -> None:
    """ValueError unless calls made in ``form`` can be timed on buffers in ``memory``,
    rotating through cold sets (``cold``) or not."""
    if cold and memory != "host":
        raise ValueError("cold buffers are host memory: --cold takes --device host")
    if form != "blocking" and memory != "host":
        raise ValueError(f"--form {form} takes host buffers (--device host)")
    if cold and form == "persistent":
        raise ValueError("a persistent request's buffers are fixed: --cold cannot rotate "
                         "them (--form blocking or nonblocking)")


def _waited(start: Callable, wait: str) -> Callable[..., None]:
    """``start(...)`` then its request's ``wait`` method: a non-blocking call made whole."""
    def call(*args: Any, **kwargs: Any) -> None:
        getattr(start(*args, **kwargs), wait)()
    return call


def _staged_native(method: Callable, arguments: Callable, send: Any, recv: Any,
                   regions: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]
                   ) -> Callable[[], None]:
    """The native call on device buffers for an MPI that cannot read them, as a program
    would make it: through pinned host copies (made once), both copies timed, copying what
    hpccoll's staging copies (``regions``, :func:`~hpccoll.prepared.staged_regions`): the
    send buffer down, of the receive buffer only what the collective reads, and back only
    what it writes."""
    host_send = None if send is None else device.pinned(send.size, send.dtype)
    host_recv = device.pinned(recv.size, recv.dtype)
    args = arguments(host_send, host_recv)
    reads, writes = regions

    def run() -> None:
        if send is not None:
            device.to_host(send, host_send)
        device.to_host(recv, host_recv, reads)
        method(*args)
        device.to_device(host_recv, recv, writes)
    return run


@dataclass(frozen=True)
class Straggler:
    """Fault injection: ``rank`` starts every call ``delay`` seconds late, and/or pauses for
    ``pause`` seconds with probability ``probability`` before each step of a scheduled
    algorithm (before the call for native, which cannot be entered mid-way)."""

    rank: int
    delay: float = 0.0
    probability: float = 0.0
    pause: float = 0.0

    @classmethod
    def parse(cls, delay: str | None, pause: str | None) -> "Straggler | None":
        """``--delay RANK:MICROSECONDS``, ``--pause RANK:PROB:MICROSECONDS``."""
        if not delay and not pause:
            return None
        ranks, fields = set(), {}
        try:
            if delay:
                rank, us = delay.split(":")
                ranks.add(int(rank))
                fields["delay"] = float(us) * 1e-6
            if pause:
                rank, prob, us = pause.split(":")
                ranks.add(int(rank))
                fields["probability"], fields["pause"] = float(prob), float(us) * 1e-6
        except ValueError:
            raise ValueError("use --delay RANK:MICROSECONDS and --pause RANK:PROB:MICROSECONDS")
        if len(ranks) != 1:
            raise ValueError("--delay and --pause must name the same rank")
        straggler = cls(ranks.pop(), **fields)
        if not 0 <= straggler.probability <= 1 or straggler.delay < 0 or straggler.pause < 0:
            raise ValueError("--pause probability must be in [0, 1], times >= 0")
        return straggler

    def wrap(self, comm: MPI.Comm, name: str, run: Callable[[], None]) -> Callable[[], None]:
        """``run`` as this rank runs it: late, with native's pauses before the call; the
        scheduled algorithms' pauses come from the executor (settings.stall)."""
        if comm.rank != self.rank:
            return run
        dice = np.random.default_rng(comm.rank)
        stall_native = name == registry.NATIVE and self.probability > 0

        def late() -> None:
            if self.delay:
                time.sleep(self.delay)
            if stall_native and dice.random() < self.probability:
                time.sleep(self.pause)
            run()
        return late


def time_runs(comm: MPI.Comm, runs: list[Callable[[], None]], iterations: int, warmup: int,
              before: Callable[[], None] = lambda: None, min_time: float = 0.0,
              rounds: int = 1) -> list[Timing]:
    """The slowest rank's per-iteration times of each of ``runs`` over at least
    ``iterations`` iterations and ``min_time`` seconds, after ``warmup`` calls (each timed
    from a barrier; ``before``, outside the call's time but inside ``min_time``, precedes
    every call), the runs taking turns in ``rounds`` rounds
    (:func:`~hpccoll.tools.timing.measure_in_turns`); the counts are agreed by all ranks."""
    def slowest(times: np.ndarray) -> np.ndarray:
        # padded to p elements: MPICH algorithms forced for allreduce that need a count >= p
        # then apply to this reduction as to the timed calls (perf/peers.sh forces them and
        # takes a fallback as a failure)
        padded = np.zeros(max(times.size, comm.size))
        padded[:times.size] = times
        out = np.empty_like(padded)
        comm.Allreduce(padded, out, op=MPI.MAX)
        return out[:times.size]
    return measure_in_turns(runs, rounds, iterations, warmup, min_time, comm.Barrier, slowest,
                            before)


def run(comm: MPI.Comm, collective: str, algorithms: list[str], sizes: list[int],
        dtype: str = "float32", iterations: int = 100, warmup: int = 10, check: bool = True,
        out: TextIO | None = None, progress: bool = False,
        straggler: Straggler | None = None, min_time: float = 0.0,
        memory: str = "host", skipped: str | None = None, cold: bool = False,
        form: str = "blocking", rounds: int = 1) -> list[Result]:
    """Benchmark ``algorithms`` (native first) on ``collective`` at each size, each cell for
    at least ``iterations`` iterations and ``min_time`` seconds; rank 0 prints the table to
    ``out`` as it goes (and a progress bar on stderr with ``progress``), its header saying
    what was ``skipped``, and last the average bus bandwidth of each algorithm; buffers in
    ``memory`` ("host", or "cuda": GPU memory); the algorithms of a size take turns in
    ``rounds`` rounds (:func:`time_runs`); with ``cold`` the timed calls rotate
    through buffer sets of at least COLD_FACTOR last-level caches per rank; each call (of
    every algorithm, native's too) made in ``form`` (:class:`Case`).  Returns the results
    (on every rank)."""
    p = comm.size
    bar = _progress_bar(len(sizes) * len(algorithms), collective) \
        if progress and comm.rank == 0 else None
    dt = np.dtype(dtype)
    if spec(collective).reduces:
        buffers.check_op("sum", dt)     # the benchmark sums: not on booleans, say so first
    results: list[Result] = []
    say = (lambda line: print(line, file=out, flush=True)) if comm.rank == 0 and out else \
        (lambda line: None)
    where = "" if memory == "host" else \
        f", buffers in GPU memory ({'GPU-aware MPI' if buffers.gpu_aware() else 'staged'})"
    made = {"blocking": "", "nonblocking": ", non-blocking calls (start, wait)",
            "persistent": ", persistent calls (one request a cell; start, wait)"}[form]
    say(f"# hpccoll bench {collective}: {p} rank{'s' if p > 1 else ''}, {dt}{where}{made}, "
        f"{library_version()}")
    say(f"# time = median over iterations of the slowest rank; spread = (p90 - p10) / median "
        f"of those times; busbw factor {spec(collective).busbw_factor(p):.3f}; "
        f"vs native = native time / time")
    turns = f"the algorithms of a size taking turns in {rounds} rounds (each its share of " \
        f"both, one warm-up call a later round)" if rounds > 1 else "one algorithm after another"
    say(f"# iterations per cell: at least {iterations}, and at least {min_time:g} s of them "
        f"(barriers included); {warmup} warm-up call(s) first; {turns}")
    cold_bytes = 0
    if cold:
        cache, where = last_level_cache()
        cold_bytes = COLD_FACTOR * cache
        say(f"# cold: each cell's timed calls rotate through buffer sets of at least "
            f"{human_size(cold_bytes)}B per rank ({COLD_FACTOR} x the last-level cache, "
            f"{human_size(cache)}B from {where}), each set on its own cache lines")
    if skipped:
        say(f"# {skipped}")
    if straggler is not None:
        say(f"# straggler: rank {straggler.rank} starts {straggler.delay * 1e6:g} us late, "
            f"pauses {straggler.pause * 1e6:g} us before a step with probability "
            f"{straggler.probability:g}")
    say(f"# {'size(B)':>10} {'algorithm':>20} {'iters':>7} {'time(us)':>11} {'spread':>7} "
        f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'vs native':>10} {'#wrong':>7}")
    for size in sizes:
        case = Case(comm, collective, size, dt, memory, cold_bytes, form)
        if case.count == 0:
            continue
        wrongs = [case.wrong(case.runner(name, rotate=False)) if check else 0
                  for name in algorithms]
        runners = [case.runner(name) for name in algorithms]
        if straggler is not None:
            runners = [straggler.wrap(comm, name, run) for name, run in zip(algorithms, runners)]
        stalls = straggler if comm.rank == getattr(straggler, "rank", -1) else None
        timings = _timed_with(stalls, lambda: time_runs(comm, runners, iterations, warmup,
                                                        case.advance, min_time, rounds))
        case.free()
        native_time = None
        for name, timing, wrong in zip(algorithms, timings, wrongs):
            t = timing.median_us
            if name == registry.NATIVE:
                native_time = t
            algbw = case.total * dt.itemsize / t / 1e3
            result = Result(collective, name, p, str(dt), case.count * dt.itemsize, case.count,
                            timing.iterations, t, algbw,
                            algbw * spec(collective).busbw_factor(p),
                            native_time / t if native_time else None, wrong,
                            case.resolve(name) if name == "auto" else None, timing.mean_us,
                            timing.p10_us, timing.p90_us, timing.min_us, timing.max_us,
                            timing.timed_s)
            results.append(result)
            ratio = f"{result.vs_native:9.2f}x" if result.vs_native else f"{'-':>10}"
            label = f"auto:{result.resolved}" if result.resolved else name
            say(f"  {result.bytes:>10} {label:>20} {timing.iterations:>7} {t:>11.2f} "
                f"{timing.spread:>6.0%} {algbw:>12.3f} {result.busbw_gbs:>12.3f} {ratio} "
                f"{wrong:>7}")
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    for line in busbw_summary(results):
        say(line)
    return results


def _timed_with(straggler: Straggler | None, timed: Callable[[], list[Timing]]
                ) -> list[Timing]:
    """``timed()`` with this rank's step pauses switched on (when it is the straggler)."""
    if straggler is None or not straggler.probability:
        return timed()
    previous = settings.configure(stall=(straggler.probability, straggler.pause))
    try:
        return timed()
    finally:
        settings.configure(**vars(previous))


def _progress_bar(total: int, collective: str) -> Any:
    from tqdm import tqdm
    return tqdm(total=total, desc=f"bench {collective}", unit="case", file=sys.stderr,
                leave=False)


def library_version() -> str:
    """The MPI library's version line, white space folded (Open MPI's ends in a NUL)."""
    return " ".join(MPI.Get_library_version().replace("\0", " ").splitlines()[0].split())


def metadata(comm: MPI.Comm, argv: list[str]) -> dict[str, Any]:
    """Where and how a run was made (the command, for the record)."""
    return {"command": " ".join(argv), "ranks": comm.size,
            "mpi": library_version(),
            "host": platform.node(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def oversubscribed(comm: MPI.Comm) -> str | None:
    """Where ranks outnumber the cores of their host ("4 ranks on 2 cores of host h", hosts
    joined by "; "), the same on every rank; None where no host is.  Collective."""
    host = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        mine = (platform.node(), host.Get_size(), os.cpu_count() or 1)
    finally:
        host.Free()
    crowded = {entry for entry in comm.allgather(mine) if entry[1] > entry[2]}
    return "; ".join(f"{ranks} ranks on {cores} core{'s' if cores > 1 else ''} of host {name}"
                     for name, ranks, cores in sorted(crowded)) or None


def main(args: Any, argv: list[str]) -> int:
    comm = MPI.COMM_WORLD
    algorithms = selected_algorithms(args.collective, args.algorithms, comm.size)
    progress = args.progress if args.progress is not None else sys.stderr.isatty()
    straggler = Straggler.parse(args.delay, args.pause)
    if straggler is not None and not 0 <= straggler.rank < comm.size:
        raise ValueError(f"straggler rank {straggler.rank} is not in 0..{comm.size - 1}")
    if args.device == "cuda" and not device.available():
        raise ValueError("--device cuda: no CUDA GPU here (numba.cuda finds none; "
                         "NUMBA_ENABLE_CUDASIM=1 simulates one)")
    check_buffers(args.device, args.cold, args.form)
    note_if_alone(args.prog, comm.size, "benchmarking")      # the arguments hold: it runs
    crowded = oversubscribed(comm)
    if crowded and comm.rank == 0:
        print(f"{args.prog}: warning: {crowded}: ranks wait for a core, so the times measure "
              "the scheduler as much as the algorithms", file=sys.stderr, flush=True)
    results = run(comm, args.collective, algorithms, size_range(args.sizes), args.dtype,
                  args.iterations, args.warmup, args.check, sys.stdout, progress, straggler,
                  args.min_time, args.device,
                  skipped_by_all(args.collective, args.algorithms, comm.size), args.cold,
                  args.form, args.rounds)
    if args.json and comm.rank == 0:
        meta = {**metadata(comm, argv), "min_iterations": args.iterations,
                "min_time": args.min_time, "warmup": args.warmup, "rounds": args.rounds,
                "cold": args.cold, "form": args.form,
                "oversubscribed": crowded}
        write_json(args.json, meta, results)
    if args.plot and comm.rank == 0:
        plot(results, args.plot)
    wrong = sum(r.wrong for r in results)
    if wrong and comm.rank == 0:
        print(f"# {wrong} wrong element(s)", file=sys.stderr)
    return 1 if wrong else 0


