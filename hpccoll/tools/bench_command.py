"""``hpccoll bench``: its arguments (also checked by ``hpccoll jobs render --bench-args``) and
its handler, which runs :mod:`hpccoll.tools.bench`."""

from __future__ import annotations

import argparse
from typing import Any

from .. import registry
from ..tuning import FORMS
from ..collectives import SPECS, spec
from . import arguments, timing

# every collective whose buffers a size alone describes (not alltoallv's per-peer counts)
BENCH_COLLECTIVES = tuple(name for name, c in SPECS.items() if not c.vector)

# the MPI library's collective called through hpccoll (non-blocking, polled with the
# deadline), as ``algorithm="native"`` runs it; "native" is the plain mpi4py call
API_NATIVE = "hpccoll-native"


SIZES_HELP = ("MIN:MAX in bytes (K/M/G suffixes), as OSU's -m: MIN, 2 MIN, 4 MIN, ... up to "
              "MAX (which is run only if it is one of them), or MIN times powers of FACTOR "
              "with MIN:MAX:FACTOR; each size a whole number of --dtype elements (else an "
              "error: sizes are never rounded); default {default}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``hpccoll bench``'s arguments, on ``parser``."""
    parser.add_argument("collective", choices=BENCH_COLLECTIVES)
    parser.add_argument("-a", "--algorithms", default="all",
                        help="comma-separated algorithm names, or 'all' (native is always run "
                             "as the baseline)")
    parser.add_argument("-m", "--sizes", default="8:16M", type=arguments.size_range,
                        help=SIZES_HELP.format(default="8:16M"))
    add_timing_arguments(parser, timing.MIN_ITERATIONS, timing.MIN_TIME, 10)
    parser.add_argument("--dtype", default="float32", type=arguments.dtype,
                        help="element type, default float32")
    parser.add_argument("-d", "--device", choices=("host", "cuda"), default="host",
                        help="where the buffers live: host memory (default) or GPU memory "
                             "(cuda; MPI reads it if GPU-aware, else it is staged)")
    parser.add_argument("--cold", action="store_true",
                        help="rotate each cell's timed calls through buffers of at least "
                             f"{timing.COLD_FACTOR} x the last-level cache per rank (sysfs, "
                             "else sysconf, else 64 MiB), so that no call finds its data in "
                             "the cache; host buffers only")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                        help="check the data once per size and algorithm (default on)")
    parser.add_argument("--json", metavar="FILE", type=arguments.output_file,
                        help="write the results as JSON")
    parser.add_argument("--plot", metavar="FILE.png", type=arguments.plot_file,
                        help="plot bandwidth and time against size (needs matplotlib)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on rank 0 (default: when stderr is a terminal)")
    parser.add_argument("--delay", metavar="RANK:US",
                        help="straggler: this rank starts every call US microseconds late")
    parser.add_argument("--pause", metavar="RANK:PROB:US",
                        help="straggler: this rank pauses US microseconds before a step with "
                             "probability PROB")


def add_timing_arguments(parser: argparse.ArgumentParser, iterations: int, min_time: float,
                         warmup: int) -> None:
    """-i, --min-time and -x (how long a cell is timed), with these defaults, --rounds (how
    the algorithms of a size take turns) and --form (how each call is made): bench's and
    tune's."""
    parser.add_argument("-i", "--iterations", type=arguments.at_least(1), default=iterations,
                        help="the fewest timed iterations per size and algorithm, default "
                             f"{iterations} (more when --min-time asks for them)")
    parser.add_argument("--min-time", metavar="SECONDS", type=arguments.seconds,
                        default=min_time,
                        help="the least time the timed iterations of a size and algorithm take, "
                             f"barriers included, default {min_time:g}; 0: exactly -i "
                             "iterations")
    parser.add_argument("-x", "--warmup", type=arguments.at_least(0), default=warmup,
                        help=f"warm-up calls before the timed ones, default {warmup} (at least "
                             "one with --min-time: it sizes the count)")
    parser.add_argument("--rounds", type=arguments.at_least(1), default=timing.ROUNDS,
                        help="the algorithms of a size take turns in this many rounds, each "
                             "timed for its share of -i and --min-time in every round (after "
                             "one warm-up call in the later ones), so that a machine whose "
                             "speed changes while a size is timed slows them alike; 1: one "
                             f"algorithm after another (default {timing.ROUNDS})")
    parser.add_argument("--form", choices=FORMS, default="blocking",
                        help="how each call is made, for every algorithm and native alike: "
                             "blocking (default), nonblocking (start, then wait: mpi4py's "
                             "I<Collective> + Wait), persistent (one request made per size and "
                             "algorithm, then start + wait: mpi4py's <Collective>_init); "
                             "nonblocking and persistent take host buffers")


def add_parser(subparsers: Any) -> None:
    """``hpccoll bench`` on the ``hpccoll`` parser's subparsers."""
    parser = subparsers.add_parser("bench", help="time algorithms against the native "
                                                 "collective (run under mpiexec/srun)")
    add_arguments(parser)
    parser.set_defaults(handler=run, prog=parser.prog, reads_environment=True)


def run(args: argparse.Namespace) -> int:
    from . import bench
    return bench.main(args, args.command_line)


def selected_algorithms(collective: str, given: str, p: int) -> list[str]:
    """A comma list of names, 'all' (every applicable algorithm) among them, -> names with
    native first; named ones must apply at p ('auto' is allowed: what algorithm="auto" picks,
    size by size; and 'hpccoll-native': algorithm="native" through hpccoll's API)."""
    why_not = inapplicable(collective, p)
    names: list[str] = []
    for name in _listed(given):
        if name == "all":
            names += [a.name for a in registry.algorithms(collective) if a.name not in why_not]
        elif name != registry.NATIVE:
            if name not in ("auto", API_NATIVE):
                registry.get(collective, name)          # an unknown name raises here
            if name in why_not:
                raise ValueError(f"algorithm {name!r} cannot serve {collective} on {p} ranks: "
                                 f"it requires {why_not[name]}")
            names.append(name)
    return [registry.NATIVE] + list(dict.fromkeys(names))


def _listed(given: str) -> list[str]:
    """The names of a comma-separated list, blanks dropped."""
    return [name for name in (n.strip() for n in given.split(",")) if name]


def inapplicable(collective: str, p: int) -> dict[str, str]:
    """The registered algorithms of ``collective`` that cannot run on p ranks (of the
    benchmark's uniform call), each with the condition it needs."""
    call = spec(collective).uniform_call(p, 0, 1)
    verdicts = {a.name: a.violated(call) for a in registry.algorithms(collective)}
    return {name: reason for name, reason in verdicts.items() if reason is not None}


def skipped_by_all(collective: str, given: str, p: int) -> str | None:
    """What 'all' in ``given`` leaves out on p ranks, and why, as one line (None: nothing)."""
    if "all" not in _listed(given):
        return None
    why_not = inapplicable(collective, p)
    if not why_not:
        return None
    return f"not run on {p} ranks (they do not apply): " + "; ".join(
        f"{name} (needs {reason})" for name, reason in why_not.items())
