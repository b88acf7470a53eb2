"""The ``hpccoll`` command: ``bench``, ``tune``, ``explain``, ``verify``, ``topology``,
``report``, ``jobs`` and ``list``."""

from __future__ import annotations

import argparse
import sys
import time

from .collectives import NAMES as COLLECTIVES

BENCH_COLLECTIVES = ("allgather", "alltoall", "reduce_scatter", "allreduce")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hpccoll", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="time algorithms against the native collective "
                                         "(run under mpiexec/srun)")
    bench.add_argument("collective", choices=BENCH_COLLECTIVES)
    bench.add_argument("-a", "--algorithms", default="all",
                       help="comma-separated algorithm names, or 'all' (native is always run "
                            "as the baseline)")
    bench.add_argument("-m", "--sizes", default="8:16M",
                       help="MIN:MAX in bytes, powers of two (K/M/G suffixes), default 8:16M")
    bench.add_argument("-i", "--iterations", type=int, default=100,
                       help="timed iterations per size (a tenth past 1 MiB), default 100")
    bench.add_argument("-x", "--warmup", type=int, default=10, help="warm-up calls, default 10")
    bench.add_argument("--dtype", default="float32", help="element type, default float32")
    bench.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                       help="check the data once per size and algorithm (default on)")
    bench.add_argument("--json", metavar="FILE", help="write the results as JSON")
    bench.add_argument("--plot", metavar="FILE.png", help="plot bandwidth and time against "
                                                          "size (needs matplotlib)")
    bench.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="progress bar on rank 0 (default: when stderr is a terminal)")
    bench.add_argument("--delay", metavar="RANK:US",
                       help="straggler: this rank starts every call US microseconds late")
    bench.add_argument("--pause", metavar="RANK:PROB:US",
                       help="straggler: this rank pauses US microseconds before a step with "
                            "probability PROB")

    verify = sub.add_parser("verify", help="run every rank's program in one process and "
                                           "check it (no MPI needed)")
    verify.add_argument("--collective", choices=COLLECTIVES)
    verify.add_argument("--algorithm", help="one algorithm name (default: all)")
    verify.add_argument("--max-ranks", type=int, default=33,
                        help="check every p from 1 to this, default 33")
    verify.add_argument("--max-power-of-two", type=int, default=256,
                        help="then powers of two up to this, default 256")
    verify.add_argument("--seed", type=int, default=0)

    topo = sub.add_parser("topology", help="print the detected (or HPCCOLL_TOPOLOGY) topology "
                                           "of MPI_COMM_WORLD (run under mpiexec/srun)")
    topo.add_argument("--json", action="store_true", help="one region id per rank and level")

    explain = sub.add_parser("explain", help="what algorithm='auto' picks for a call, and why")
    explain.add_argument("collective", choices=COLLECTIVES)
    explain.add_argument("--bytes", required=True, help="message size, benchmark convention "
                                                        "(K/M/G suffixes)")
    explain.add_argument("--ranks", type=int, help="communicator size (default: this job's)")
    explain.add_argument("--topology", help="a topology spec or file (default: one node)")
    explain.add_argument("--dtype", default="float32")

    tune = sub.add_parser("tune", help="time every applicable algorithm per size on this job's "
                                       "ranks and write a decision table (run under mpiexec)")
    tune.add_argument("collectives", nargs="*", metavar="COLLECTIVE",
                      help=f"default: {' '.join(BENCH_COLLECTIVES)}")
    tune.add_argument("-m", "--sizes", default="8:16M")
    tune.add_argument("-i", "--iterations", type=int, default=50)
    tune.add_argument("-x", "--warmup", type=int, default=5)
    tune.add_argument("--dtype", default="float32")
    tune.add_argument("--repeat", type=int, default=3,
                      help="sweeps per collective; each time is the median over them "
                           "(default 3: shared machines are noisy)")
    tune.add_argument("--out", default="hpccoll-tuning.json",
                      help="decision table to write; merged into if it exists (other rank "
                           "counts kept), default hpccoll-tuning.json")

    catalog = sub.add_parser("catalogue", help="write the algorithm catalogue (table, one page "
                                               "and schedule pictures per family)")
    catalog.add_argument("--out", default="algorithms", help="directory, default algorithms")

    summary = sub.add_parser("report", help="markdown tables from bench --json files")
    summary.add_argument("files", nargs="+", metavar="FILE")

    from . import jobs
    jobs.add_parser(sub)

    listing = sub.add_parser("list", help="the registered algorithms")
    listing.add_argument("--markdown", action="store_true", help="as a markdown table")
    return parser


def _verify(args: argparse.Namespace) -> int:
    from . import registry, verify
    chosen = [a for a in registry.algorithms(args.collective)
              if args.algorithm in (None, a.name)]
    if not chosen:
        print(f"no algorithm {args.algorithm!r}"
              + (f" for {args.collective}" if args.collective else ""), file=sys.stderr)
        return 2
    failed = 0
    print(f"{'collective':<15} {'algorithm':<20} {'instances':>9} {'seconds':>8}  result")
    for algorithm in chosen:
        start = time.perf_counter()
        try:
            count = verify.check_sweep(algorithm.collective, algorithm.name, args.max_ranks,
                                       args.max_power_of_two, args.seed)
            outcome = "ok"
        except verify.VerificationError as error:
            count, outcome = 0, f"FAILED: {error}"
            failed += 1
        print(f"{algorithm.collective:<15} {algorithm.name:<20} {count:>9} "
              f"{time.perf_counter() - start:>8.2f}  {outcome}", flush=True)
    return 1 if failed else 0


def _explain(args: argparse.Namespace) -> int:
    import numpy as np
    from . import bench, costmodel, registry, tuning
    from .topology import from_spec
    p = args.ranks
    if p is None:
        from mpi4py import MPI
        p = MPI.COMM_WORLD.Get_size()
    nbytes = bench.parse_size(args.bytes)
    topology = from_spec(args.topology, p) if args.topology else None
    call = costmodel.stand_in(args.collective, p, nbytes, np.dtype(args.dtype).itemsize,
                              topology)
    decision = tuning.decide(call, nbytes)
    print(f"{args.collective}, {nbytes} B, {p} rank(s): auto picks {decision.algorithm} "
          f"({decision.source}: {decision.reason})")
    machine = costmodel.machine_for(call)
    print(f"cost model ({machine.name}):")
    for algorithm in registry.algorithms(args.collective):
        reason = algorithm.violated(call)
        text = f"does not apply: needs {reason}" if reason else \
            f"{costmodel.predict(call, algorithm.name, machine) * 1e6:10.1f} us"
        print(f"  {algorithm.name:<20} {text}")
    return 0


def _tune(args: argparse.Namespace) -> int:
    import json
    import os
    import statistics
    from mpi4py import MPI
    from . import bench, tuning
    comm = MPI.COMM_WORLD
    collectives = args.collectives or list(BENCH_COLLECTIVES)
    table = None
    if os.path.exists(args.out):
        table = tuning.load_table(args.out, os.stat(args.out).st_mtime)
    for collective in collectives:
        names = bench.selected_algorithms(collective, f"all,{bench.API_NATIVE}", comm.size)
        sweeps: dict[tuple[int, str], list[float]] = {}
        for sweep in range(max(1, args.repeat)):
            results = bench.run(comm, collective, names, bench.size_range(args.sizes),
                                args.dtype, args.iterations, args.warmup, check=sweep == 0,
                                out=sys.stdout if comm.rank == 0 else None)
            if any(r.wrong for r in results):
                if comm.rank == 0:
                    print(f"hpccoll tune: wrong results for {collective}; no table written",
                          file=sys.stderr)
                return 1
            for r in results:    # native as hpccoll runs it, not the plain mpi4py baseline
                if r.algorithm != "native":
                    name = "native" if r.algorithm == bench.API_NATIVE else r.algorithm
                    sweeps.setdefault((r.bytes, name), []).append(r.time_us)
        timings: dict[int, dict[str, float]] = {}
        for (size, name), times in sweeps.items():
            timings.setdefault(size, {})[name] = statistics.median(times)
        table = tuning.merge(table, collective, comm.size, tuning.rules_from_timings(timings))
    if comm.rank == 0:
        with open(args.out, "w") as f:
            json.dump(table, f, indent=1)
        print(f"# decision table for {comm.size} rank(s) written to {args.out}")
    return 0


def _topology(args: argparse.Namespace) -> int:
    import json
    from mpi4py import MPI
    from . import api
    comm = MPI.COMM_WORLD
    found = api.topology(comm)
    names = comm.gather(MPI.Get_processor_name())
    if comm.rank == 0:
        if args.json:
            print(json.dumps(dict(zip(found.levels, map(list, found.regions)))))
        else:
            print(found.describe())
            for rank, host in enumerate(names):
                where = ", ".join(f"{name} {found.regions[l][rank]}"
                                  for l, name in enumerate(found.levels))
                print(f"rank {rank:>4}  {host:<20} {where}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from . import catalogue, registry
    if args.markdown:
        print(catalogue.table())
        return 0
    rows = [(a.collective, a.name, a.family,
             "; ".join(c.description for c in a.requires) or "-", a.summary)
            for a in registry.algorithms()]
    for row in rows:
        print(f"{row[0]:<15} {row[1]:<20} {row[2]:<10} {row[3]:<25} {row[4]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    if args.command == "bench":
        from . import bench
        try:
            return bench.main(args, ["hpccoll"] + argv)
        except (ValueError, RuntimeError) as error:
            print(f"hpccoll bench: {error}", file=sys.stderr)
            return 2
    if args.command == "verify":
        return _verify(args)
    if args.command == "topology":
        return _topology(args)
    if args.command == "explain":
        return _explain(args)
    if args.command == "tune":
        return _tune(args)
    if args.command == "jobs":
        from . import jobs
        return jobs.main(args)
    if args.command == "catalogue":
        from . import catalogue
        from pathlib import Path
        for path in catalogue.write(Path(args.out)):
            print(path)
        return 0
    if args.command == "report":
        from . import bench
        print(bench.report(args.files))
        return 0
    return _list(args)


if __name__ == "__main__":
    sys.exit(main())
