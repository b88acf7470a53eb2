"""The ``hpccoll`` command: ``bench``, ``verify``, ``topology``, ``report`` and ``list``."""

from __future__ import annotations

import argparse
import sys
import time

from .schedule import COLLECTIVES

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

    summary = sub.add_parser("report", help="markdown tables from bench --json files")
    summary.add_argument("files", nargs="+", metavar="FILE")

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
    from . import registry
    rows = [(a.collective, a.name, a.family,
             "; ".join(c.description for c in a.requires) or "-", a.summary)
            for a in registry.algorithms()]
    if args.markdown:
        print("| collective | algorithm | family | constraints | summary |")
        print("|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
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
        except ValueError as error:
            print(f"hpccoll bench: {error}", file=sys.stderr)
            return 2
    if args.command == "verify":
        return _verify(args)
    if args.command == "topology":
        return _topology(args)
    if args.command == "report":
        from . import bench
        print(bench.report(args.files))
        return 0
    return _list(args)


if __name__ == "__main__":
    sys.exit(main())
