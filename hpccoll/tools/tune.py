"""``hpccoll tune``: time every applicable algorithm per size on this job's ranks and write a
decision table (run under mpiexec); with ``--simulate --platform SPEC``, the times are
simulated on a modelled machine instead (no MPI: a table for a machine that is not here)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from . import arguments
from .bench_command import (API_NATIVE, BENCH_COLLECTIVES, SIZES_HELP, add_timing_arguments,
                            selected_algorithms, skipped_by_all)
from .launcher import note_if_alone
from .simulate import algorithms_for, platform_spec, simulated_results


def bench_collective(name: str) -> str:
    """A collective ``hpccoll bench`` can time."""
    if name not in BENCH_COLLECTIVES:
        raise argparse.ArgumentTypeError(f"unknown collective {name!r}; choose from "
                                         f"{', '.join(BENCH_COLLECTIVES)}")
    return name


def add_parser(subparsers: Any) -> None:
    """``hpccoll tune`` on the ``hpccoll`` parser's subparsers."""
    parser = subparsers.add_parser("tune", help="time every applicable algorithm per size on "
                                                "this job's ranks and write a decision table "
                                                "(run under mpiexec)")
    parser.add_argument("collectives", nargs="*", metavar="COLLECTIVE", type=bench_collective,
                        help=f"default: {' '.join(BENCH_COLLECTIVES)}")
    parser.add_argument("-m", "--sizes", default="8:16M", type=arguments.size_range,
                        help=SIZES_HELP.format(default="8:16M"))
    add_timing_arguments(parser, 10, 0.05, 5)
    parser.add_argument("--dtype", default="float32", type=arguments.dtype)
    parser.add_argument("--repeat", type=int, default=3,
                        help="sweeps per collective; each time is the median over them, and "
                             "an algorithm replaces native at a size only if it is no slower "
                             "than native in any sweep (default 3: shared machines are "
                             "noisy)")
    parser.add_argument("--sweeps", metavar="FILE", default=None, type=arguments.output_file,
                        help="a JSON file of sweeps: the sweeps an earlier run recorded there "
                             "(the same collective, rank count, library, form, dtype and "
                             "sizes) count as this run's too, and this run's are added to it; "
                             "so the sweeps of several launches decide the table where a launch's "
                             "state changes the times (e.g. where the library's shared memory "
                             "lands): the last launch writes the table from all of them")
    parser.add_argument("--out", default="hpccoll-tuning.json", type=arguments.output_file,
                        help="decision table to write; merged into if it exists (other rank "
                             "counts kept), default hpccoll-tuning.json")
    parser.add_argument("--simulate", action="store_true",
                        help="simulate the algorithms on --platform (SimGrid; no MPI, no "
                             "native) instead of timing them here")
    parser.add_argument("--platform", type=platform_spec, default=None,
                        help="with --simulate: the machine, as hpccoll simulate takes it")
    parser.set_defaults(handler=run, prog=parser.prog, reads_environment=True)


def _existing(path: str) -> Any:
    from .. import tuning
    return tuning.load(path) if os.path.exists(path) else None


def run_simulated(args: argparse.Namespace) -> int:
    """The decision table from simulated times of every applicable algorithm."""
    from .. import tuning
    from ..sim import engine
    from ..sim.platform import build
    from .results import size_range
    if args.platform is None:
        raise ValueError("--simulate needs --platform SPEC (hpccoll simulate --platforms)")
    if args.form != "blocking" or args.sweeps:
        raise ValueError("--simulate replays schedules, not an MPI library's calls: "
                         "--form and --sweeps are for timed runs")
    engine.load()                       # SimulatorMissing: one line, exit status 2
    target = build(args.platform)
    table = _existing(args.out)
    for collective in args.collectives or list(BENCH_COLLECTIVES):
        names = algorithms_for(collective, "all", target)
        results = simulated_results(collective, names, target, size_range(args.sizes),
                                    args.dtype)
        timings: dict[int, dict[str, list[float]]] = {}
        for r in results:
            timings.setdefault(r.bytes, {})[r.algorithm] = [r.time_us]
        rules = tuning.rules_from_timings(timings)
        table = tuning.merge(table, collective, target.ranks, rules)
        print(f"# {collective} on {args.platform} ({target.ranks} ranks): " + ", ".join(
            f"{rule['algorithm']} up to {rule['max_bytes'] or 'any size'}" for rule in rules))
    with open(args.out, "w") as f:
        json.dump(table, f, indent=1)
    print(f"# simulated decision table for {target.ranks} rank(s) written to {args.out}")
    return 0


def _recorded(path: str | None) -> dict[str, list]:
    """The sweeps recorded in ``path`` ({"collective, P ranks, library, form, dtype, sizes":
    [[bytes, algorithm, [time of each sweep]], ...]}); none without a file or in a new
    one."""
    if path is None or not os.path.exists(path) or os.path.getsize(path) == 0:
        return {}
    with open(path) as f:
        return json.load(f)


def run(args: argparse.Namespace) -> int:
    if args.simulate:
        return run_simulated(args)
    if args.platform is not None:
        raise ValueError("--platform describes a simulated machine: add --simulate")
    from mpi4py import MPI

    from .. import tuning
    from . import bench
    comm = MPI.COMM_WORLD
    note_if_alone(args.prog, comm.size, "timing the algorithms")
    collectives = args.collectives or list(BENCH_COLLECTIVES)
    table = _existing(args.out)
    recorded = comm.bcast(_recorded(args.sweeps) if comm.rank == 0 else None)
    for collective in collectives:
        names = selected_algorithms(collective, f"all,{API_NATIVE}", comm.size)
        key = (f"{collective}, {comm.size} ranks, {tuning.library()}, {args.form}, "
               f"{args.dtype}, {args.sizes}")
        sweeps = {(size, name): list(times) for size, name, times in recorded.get(key, [])}
        for sweep in range(max(1, args.repeat)):
            results = bench.run(comm, collective, names, bench.size_range(args.sizes),
                                args.dtype, args.iterations, args.warmup, check=sweep == 0,
                                out=sys.stdout if comm.rank == 0 else None,
                                min_time=args.min_time,
                                skipped=skipped_by_all(collective, "all", comm.size),
                                form=args.form, rounds=args.rounds)
            if any(r.wrong for r in results):
                if comm.rank == 0:
                    print(f"hpccoll tune: wrong results for {collective}; no table written",
                          file=sys.stderr)
                return 1
            for r in results:    # native as hpccoll runs it, not the plain mpi4py baseline
                if r.algorithm != "native":
                    name = "native" if r.algorithm == API_NATIVE else r.algorithm
                    sweeps.setdefault((r.bytes, name), []).append(r.time_us)
        recorded[key] = [[size, name, times] for (size, name), times in sweeps.items()]
        timings: dict[int, dict[str, list[float]]] = {}
        for (size, name), times in sweeps.items():
            timings.setdefault(size, {})[name] = times
        if any(len({len(times) for times in cell.values()}) > 1 for cell in timings.values()):
            raise ValueError(f"{args.sweeps} holds sweeps of {key} that timed other "
                             "algorithms or sizes than this run: start a new file")
        table = tuning.merge(table, collective, comm.size, tuning.rules_from_timings(timings),
                             tuning.library(), args.form)
    if comm.rank == 0:
        if args.sweeps:
            with open(args.sweeps, "w") as f:
                json.dump(recorded, f)
        with open(args.out, "w") as f:
            json.dump(table, f, indent=1)
        made = "" if args.form == "blocking" else f", {args.form} calls"
        print(f"# decision table for {comm.size} rank(s){made} written to {args.out}")
    return 0
