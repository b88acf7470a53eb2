"""``hpccoll simulate``: replay algorithms' schedules on a modelled machine in SimGrid
(:mod:`hpccoll.sim`) and print simulated times in ``hpccoll bench``'s table and JSON format.

No MPI: the ranks are the platform's.  Sizes follow bench's OSU convention; algbw and busbw
are bench's (nccl-tests'); ``vs first`` is the first algorithm's time over each one's (the
ratio ``hpccoll report`` shows in its native column's place); ``model`` is the cost model's
prediction for the same machine (hpccoll/costmodel.py), beside the simulated time.
"""

from __future__ import annotations

import argparse
import platform as host_platform
import time
from typing import Any

from .. import registry
from ..collectives import spec
from . import arguments
from .bench_command import BENCH_COLLECTIVES


def platform_spec(text: str) -> str:
    """A platform spec, checked (kind, keys, values) and kept as written."""
    from ..sim.platform import parse
    try:
        parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def pause_spec(text: str) -> Any:
    from ..sim.replay import Pause
    try:
        return Pause.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def slow_rank(text: str) -> tuple[int, float]:
    """'RANK:FACTOR' -> (rank, factor >= 1)."""
    rank, sep, factor = text.partition(":")
    try:
        value = float(factor)
    except ValueError:
        value = 0.0
    if not sep or not rank.isdigit() or value < 1:
        raise argparse.ArgumentTypeError(f"bad --slow-rank {text!r}: RANK:FACTOR, FACTOR >= 1")
    return int(rank), value


def slow_links(text: str) -> tuple[int, float, int]:
    """'COUNT:FACTOR[:SEED]' -> (count >= 1, factor >= 1, seed)."""
    count, _, rest = text.partition(":")
    factor, _, seed = rest.partition(":")
    try:
        value = float(factor)
    except ValueError:
        value = 0.0
    if not count.isdigit() or int(count) < 1 or value < 1 or not (seed or "0").isdigit():
        raise argparse.ArgumentTypeError(f"bad --slow-links {text!r}: COUNT:FACTOR[:SEED], "
                                         "COUNT >= 1, FACTOR >= 1")
    return int(count), value, int(seed or 0)


def add_parser(subparsers: Any) -> None:
    """``hpccoll simulate`` on the ``hpccoll`` parser's subparsers."""
    parser = subparsers.add_parser(
        "simulate", help="replay algorithms on a modelled machine in SimGrid (no MPI)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("collective", nargs="?", choices=BENCH_COLLECTIVES)
    parser.add_argument("-a", "--algorithms", default="all",
                        help="comma-separated algorithm names, or 'all'; the first is the "
                             "baseline of the ratios")
    parser.add_argument("--platform", type=platform_spec, default="fullmesh",
                        help="KIND:key=value,... (default fullmesh: 8 GPUs); --platforms "
                             "lists kinds and keys")
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--bytes", type=arguments.size, help="one message size")
    sizes.add_argument("-m", "--sizes", type=arguments.size_range, default="1K:64M:4",
                       help="MIN:MAX[:FACTOR] (default 1K:64M:4)")
    parser.add_argument("--dtype", default="float32", type=arguments.dtype)
    parser.add_argument("--pause", type=pause_spec, metavar="k=K,period=SECONDS[,seed=S]",
                        help="k nodes stop sending (their transfers held back), re-drawn every "
                             "period")
    parser.add_argument("--slow-rank", type=slow_rank, metavar="RANK:FACTOR",
                        help="this rank's own links FACTOR times slower")
    parser.add_argument("--slow-links", type=slow_links, metavar="COUNT:FACTOR[:SEED]",
                        help="COUNT links drawn at random FACTOR times slower all along")
    parser.add_argument("--flat", action="store_true",
                        help="plan the schedules as if every rank were on one node (the "
                             "topology-blind ones) on the platform's real links")
    parser.add_argument("-o", "--option", dest="options", metavar="NAME=VALUE",
                        type=arguments.planner_option, action="append", default=[],
                        help="a planner option for every algorithm named (segment_bytes=1M, "
                             "radix=4, rows=8, ...); repeat for more")
    parser.add_argument("--json", metavar="FILE", type=arguments.output_file)
    parser.add_argument("--plot", metavar="FILE.png", type=arguments.plot_file)
    parser.add_argument("--platforms", action="store_true",
                        help="list the platform kinds, their keys and defaults, and exit")
    parser.set_defaults(handler=run, prog=parser.prog)


def algorithms_for(collective: str, given: str, target: Any) -> list[str]:
    """The named algorithms ('all': every one that applies to the platform's ranks and
    topology; ``native:mpich``, ``native:openmpi``: the library's selection), checked by
    :func:`hpccoll.sim.replay.programs` when planned."""
    from ..sim.native import is_native, select
    call = spec(collective).uniform_call(target.ranks, 0, 1, topology=target.topology)
    names: list[str] = []
    for name in (n.strip() for n in given.split(",")):
        if name == "all":
            names += [a.name for a in registry.algorithms(collective) if a.violated(call) is None]
        elif name:
            if is_native(name):                # the library's selection, checked here
                select(name, collective, target.ranks, 1 << 10, 4)
            elif name != registry.NATIVE:      # native: replay says what to name instead
                registry.get(collective, name)  # an unknown name raises here
            names.append(name)
    if not names:
        raise ValueError("no algorithm named")
    return list(dict.fromkeys(names))


def model(target: Any, job: Any) -> float:
    """The cost model's time of the schedules the simulator replays (a
    :class:`~hpccoll.sim.replay.Planned` job's sampled ranks), on the same machine."""
    from ..costmodel import program_time
    return program_time(job.sample, job.itemsize, target.machine, target.topology.regions[0])


def simulated_results(collective: str, names: list[str], target: Any, sizes: list[int], dtype: str,
                      pause: Any = None, flat: bool = False, options: tuple = ()
                      ) -> list[Any]:
    """Results (bench's :class:`~hpccoll.tools.results.Result` rows, ``model_us`` the cost
    model's prediction for the same schedules) of every algorithm at every size on
    ``target``, each planned once (``flat``, planner ``options``:
    :func:`hpccoll.sim.replay.programs`)."""
    return measured(collective, names, target, sizes, dtype, pause, flat, options)[0]


def measured(collective: str, names: list[str], target: Any, sizes: list[int], dtype: str,
             pause: Any = None, flat: bool = False, options: tuple = ()
             ) -> tuple[list[Any], dict[str, float], list[Any]]:
    """:func:`simulated_results`'s results, the simulator's speed (planning seconds: the
    planners, each rank's program flattened and its bytes counted as it is made; simulation
    seconds: building the platform and running every job; transfers simulated and their
    rate per second of simulation) and each result's traffic by level
    (:func:`hpccoll.sim.traffic.traffic`)."""
    import numpy as np

    from ..sim.native import is_native, select
    from ..sim.replay import plan, replay
    from ..sim.traffic import traffic
    from .results import Result
    itemsize = np.dtype(dtype).itemsize
    sizes = [s for s in sizes if s // itemsize > 0]
    jobs = [(size, name) for size in sizes for name in names]
    began = time.perf_counter()
    plans = plan(target, [(collective, name, size, itemsize) for size, name in jobs], flat,
                 options, keep=pause is not None)
    planning = time.perf_counter() - began
    predicted = [model(target, job) for job in plans]
    loads = [traffic(target, job.sent) for job in plans]
    replayed = replay(target, plans, pause)
    c, p, results = spec(collective), target.ranks, []
    firsts: dict[int, float] = {}
    for (size, name), t, m in zip(jobs, replayed.times, predicted):
        count = size // itemsize
        total = c.data_count(c.bench_call(p, 0, count, itemsize=itemsize)) * itemsize
        us = t * 1e6
        first = firsts.setdefault(size, us)
        algbw = total / us / 1e3
        resolved = select(name, collective, p, size, itemsize).algorithm if is_native(name) \
            else None
        results.append(Result(collective, name, p, dtype, size, count, 1, us, algbw,
                              algbw * c.busbw_factor(p), first / us, 0, resolved=resolved,
                              model_us=m * 1e6))
    speed = {"planning_s": round(planning, 6), "simulation_s": round(replayed.wall, 6),
             "transfers": replayed.transfers, "transfers_per_s": round(replayed.rate)}
    return results, speed, loads


def print_selections(collective: str, p: int, results: list[Any]) -> None:
    """What native:mpich / native:openmpi replayed at each size (a comment line each)."""
    from ..sim.native import is_native, select
    for r in results:
        if is_native(r.algorithm):
            choice = select(r.algorithm, collective, p, r.bytes, r.bytes // r.count)
            print(f"# {r.algorithm} at {r.bytes} B: {choice.chosen} -> {choice.algorithm}"
                  + (f" (stand-in: {choice.stand_in})" if choice.stand_in else ""))


def print_traffic(results: list[Any], loads: list[Any]) -> None:
    """The traffic table, as comment lines after the times (whose rows stay the only others):
    per result, the bytes that stayed below each level (reach) and the bytes on its links
    (bytes x links crossed), the busiest link's bytes."""
    if not loads:
        return
    names = list(loads[0].reach)
    print("# traffic by level (MB): reach = bytes of messages whose route climbs no higher "
          "(adds up to sent); links = bytes x links crossed at that level; levels low to high")
    print(f"# {'size(B)':>10} {'algorithm':>20} {'sent':>10} "
          + " ".join(f"{'reach ' + n:>12} {'links ' + n:>12}" for n in names)
          + f" {'busiest link':>12}")
    for r, load in zip(results, loads):
        print(f"# {r.bytes:>10} {r.algorithm:>20} {load.total / 1e6:>10.3f} "
              + " ".join(f"{load.reach[n] / 1e6:>12.3f} {load.link_bytes[n] / 1e6:>12.3f}"
                         for n in names)
              + f" {load.busiest / 1e6:>12.3f}")


def run(args: argparse.Namespace) -> int:
    from ..sim import engine
    from ..sim.platform import build, describe
    from .results import plot, size_range, write_json
    if args.platforms:
        print(describe())
        return 0
    if args.collective is None:
        raise ValueError("name a collective (or --platforms)")
    engine.load()                       # SimulatorMissing: one line, exit status 2
    target = build(args.platform)
    if args.slow_rank is not None:
        rank, factor = args.slow_rank
        if rank >= target.ranks:
            raise ValueError(f"--slow-rank {rank}: the platform has {target.ranks} ranks")
        target = target.slowed(rank, factor)
    if args.slow_links is not None:
        target = target.with_slow_links(*args.slow_links)
    names = algorithms_for(args.collective, args.algorithms, target)
    sizes = [args.bytes] if args.bytes is not None else size_range(args.sizes)
    results, speed, loads = measured(args.collective, names, target, sizes, args.dtype,
                                     args.pause, args.flat, tuple(args.options))
    c = spec(args.collective)
    notes = "".join(f", {k} {v}" for k, v in target.notes.items())
    print(f"# hpccoll simulate {args.collective}: {target.ranks} ranks on {args.platform}"
          f"{notes}, {args.dtype}, SimGrid {engine.version()} (CM02, max-min sharing)"
          + (", schedules planned topology-blind (--flat)" if args.flat else "")
          + "".join(f", {name}={value}" for name, value in args.options))
    print(f"# {speed['transfers']:,} transfers simulated in {speed['simulation_s']:.2f} s "
          f"({speed['transfers_per_s']:,} per second; planning {speed['planning_s']:.2f} s)")
    if args.pause is not None:
        print(f"# {args.pause.k} node(s) paused, re-drawn every {args.pause.period * 1e6:g} us "
              f"(seed {args.pause.seed})")
    print(f"# time = simulated time of the slowest rank; model = the cost model's prediction; "
          f"busbw factor {c.busbw_factor(target.ranks):.3f}; vs {names[0]} = its time / time")
    print(f"# {'size(B)':>10} {'algorithm':>20} {'time(us)':>12} {'model(us)':>12} "
          f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'vs ' + names[0][:12]:>16}")
    for r in results:
        print(f"  {r.bytes:>10} {r.algorithm:>20} {r.time_us:>12.2f} {r.model_us:>12.2f} "
              f"{r.algbw_gbs:>12.3f} {r.busbw_gbs:>12.3f} {r.vs_native:>15.2f}x")
    print_selections(args.collective, target.ranks, results)
    print_traffic(results, loads)
    if args.json:
        meta = {"command": " ".join(args.command_line), "ranks": target.ranks,
                "mpi": f"SimGrid {engine.version()} on {args.platform}",
                "baseline": names[0], "platform": args.platform,
                "pause": None if args.pause is None else vars(args.pause),
                "options": dict(args.options), "simulator": speed,
                "traffic": [{"bytes_per_rank": r.bytes, "algorithm": r.algorithm,
                             **load.as_dict()} for r, load in zip(results, loads)],
                "host": host_platform.node(), "python": host_platform.python_version(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S")}
        write_json(args.json, meta, results)
    if args.plot:
        plot(results, args.plot, f"hpccoll simulate {args.collective}: {target.ranks} ranks "
                                 f"on {args.platform}, {args.dtype}")
    return 0
