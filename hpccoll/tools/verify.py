"""``hpccoll verify``: run every rank's program in one process and check it (no MPI needed);
its arguments are also checked by ``hpccoll jobs render --verify-args``."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..collectives import NAMES as COLLECTIVES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``hpccoll verify``'s arguments, on ``parser``."""
    parser.add_argument("--collective", choices=COLLECTIVES)
    parser.add_argument("--algorithm", help="one algorithm name (default: all)")
    parser.add_argument("--max-ranks", type=int, default=33,
                        help="check every p from 1 to this, default 33")
    parser.add_argument("--max-power-of-two", type=int, default=256,
                        help="then powers of two up to this, default 256")
    parser.add_argument("--seed", type=int, default=0)


def add_parser(subparsers: Any) -> None:
    """``hpccoll verify`` on the ``hpccoll`` parser's subparsers."""
    parser = subparsers.add_parser("verify", help="run every rank's program in one process "
                                                  "and check it (no MPI needed)")
    add_arguments(parser)
    parser.set_defaults(handler=run, prog=parser.prog)


def run(args: argparse.Namespace) -> int:
    from .. import registry
    from ..verify import VerificationError, check_sweep
    chosen = [a for a in registry.algorithms(args.collective)
              if args.algorithm in (None, a.name)]
    if not chosen:
        raise ValueError(f"no algorithm {args.algorithm!r}"
                         + (f" for {args.collective}" if args.collective else ""))
    failed = 0
    print(f"{'collective':<15} {'algorithm':<20} {'instances':>9} {'seconds':>8}  result")
    for algorithm in chosen:
        start = time.perf_counter()
        try:
            count = check_sweep(algorithm.collective, algorithm.name, args.max_ranks,
                                args.max_power_of_two, args.seed)
            outcome = "ok"
        except VerificationError as error:
            count, outcome = 0, f"FAILED: {error}"
            failed += 1
        print(f"{algorithm.collective:<15} {algorithm.name:<20} {count:>9} "
              f"{time.perf_counter() - start:>8.2f}  {outcome}", flush=True)
    return 1 if failed else 0
