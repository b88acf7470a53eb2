"""``hpccoll explain``: what ``algorithm="auto"`` picks for a call, and why."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..collectives import NAMES as COLLECTIVES, spec
from ..tuning import FORMS
from . import arguments
from .launcher import note_if_alone


def add_parser(subparsers: Any) -> None:
    """``hpccoll explain`` on the ``hpccoll`` parser's subparsers."""
    parser = subparsers.add_parser("explain", help="what algorithm='auto' picks for a call, "
                                                   "and why")
    parser.add_argument("collective", choices=COLLECTIVES)
    parser.add_argument("--bytes", required=True, type=arguments.size,
                        help="message size, benchmark convention (K/M/G suffixes)")
    parser.add_argument("--ranks", type=arguments.at_least(1),
                        help="communicator size (default: this job's, 1 outside mpiexec/srun, "
                             "said so; under mpiexec rank 0 answers)")
    parser.add_argument("--topology", help="a topology spec or file (default: one node)")
    parser.add_argument("--dtype", default="float32", type=arguments.dtype)
    parser.add_argument("--form", choices=FORMS, default="blocking",
                        help="how the call is made: blocking (default), nonblocking "
                             "(i<collective>), persistent (<collective>_init); a decision table "
                             "may have rules for each")
    parser.set_defaults(handler=run, prog=parser.prog, reads_environment=True)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from .. import costmodel, registry, tuning
    from ..topology import from_spec
    p = args.ranks
    if p is None:
        from mpi4py import MPI
        p = MPI.COMM_WORLD.Get_size()
        if MPI.COMM_WORLD.Get_rank() != 0:       # in a job: rank 0 answers for it
            return 0
        note_if_alone(args.prog, p, "explaining a call", "--ranks N")
    nbytes = args.bytes
    topology = from_spec(args.topology, p) if args.topology else None
    call = costmodel.stand_in(args.collective, p, nbytes, np.dtype(args.dtype).itemsize,
                              topology)
    decision = tuning.decide(call, nbytes, args.form)
    made = "" if args.form == "blocking" else f", {args.form}"
    print(f"{args.collective}{made}, {nbytes} B, {p} rank(s): auto picks {decision.algorithm} "
          f"({decision.source}: {decision.reason})")
    if p == 1 and decision.algorithm != registry.NATIVE:
        print("executor: on one rank, a blocking call repeated on the arrays of the first is "
              "NumPy's copy of the send buffer into the receive buffer (nothing in place); "
              "the first call and other arrays as follows")
    if decision.algorithm == registry.NATIVE:     # loads mpi4py.MPI (the library decides)
        from ..runtime import native
        print(f"executor: {native.executor(args.collective, np.dtype(args.dtype))}")
    else:
        family = registry.get(args.collective, decision.algorithm).family
        reduces = spec(args.collective).reduces
        if "mpi4py.MPI" in sys.modules:         # in a job: this library's answer
            from ..runtime import scheduled
            print(f"executor: {scheduled.executor(family, np.dtype(args.dtype), reduces)}")
        else:                                   # --ranks given: no MPI library loaded
            from ..runtime.kernels import work_refusal
            reason = work_refusal(np.dtype(args.dtype), reduces, window=family == "csc")
            print("executor: hpccoll's schedule executor in Python " +
                  (f"({reason})" if reason is not None else
                   "for a call's first run, compiled from its second run on the same host "
                   "buffers where the MPI library is one it knows (MPICH, Open MPI): run "
                   "`hpccoll explain` in the job, without --ranks, for this library's "
                   "answer"))
    from ..runtime import entry
    print("blocking repeat on a compiled executor: " + (
        "served from C (the arguments matched with the last call's, the arrays checked, the "
        "executor's compiled function called: hpccoll.runtime.entry)" if entry.COMPILED else
        "served by Python (the C entry was not built at install: no C compiler)"))
    machine = costmodel.machine_for(call)
    print(f"cost model ({machine.name}):")
    for algorithm in registry.algorithms(args.collective):
        reason = algorithm.violated(call)
        text = f"does not apply: needs {reason}" if reason else \
            f"{costmodel.predict(call, algorithm.name, machine) * 1e6:10.1f} us"
        print(f"  {algorithm.name:<20} {text}")
    return 0
