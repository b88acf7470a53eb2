"""The ``hpccoll jobs`` subcommands (``render``, ``collect``, ``status``) on the ``hpccoll``
parser, and their handlers."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from .rendering import JobOptions, placeholders, render, template_path
from .scaling import collect
from .slurm import status


def add_parser(subparsers: Any) -> None:
    """``hpccoll jobs`` and its subcommands, on the ``hpccoll`` parser's subparsers."""
    jobs = subparsers.add_parser("jobs", help="SLURM batch jobs: render templates, collect results")
    actions = jobs.add_subparsers(dest="jobs_command", required=True)
    render_p = actions.add_parser(
        "render", help="fill a template from jobs/ (bench, scaling, verify, tune)",
        description="Fill a SLURM batch template.  Options a template does not use are "
                    "refused; values are checked before anything is written.  Options whose "
                    "value starts with '-' need '=': --bench-args=--no-check.")
    render_p.add_argument("template", help="template name (or a .sbatch file)")
    render_p.add_argument("--nodes", default="1",
                          help="node count (scaling: a comma list, e.g. 1,2,4,8), default 1")
    render_p.add_argument("--ntasks-per-node", default="1",
                          help="MPI ranks per node (scaling: may be a comma list), default 1")
    render_p.add_argument("--job-name", help="default hpccoll-TEMPLATE; run directories are "
                                             "OUTPUT_DIR/JOBNAME-JOBID")
    render_p.add_argument("--time", help="time limit, SLURM's forms (MINUTES, HH:MM:SS, "
                                         "D-HH:MM, ...); default 01:00:00 (verify 00:30:00)")
    render_p.add_argument("--partition")
    render_p.add_argument("--account")
    render_p.add_argument("--launcher", help="srun (default) or mpiexec")
    render_p.add_argument("--srun-mpi", help="srun --mpi plugin, default pmi2")
    render_p.add_argument("--output-dir", help="run directories and logs, default ./runs "
                                               "(made absolute, created)")
    render_p.add_argument("--python", help="interpreter or virtual environment that runs "
                                           "hpccoll, default this one")
    render_p.add_argument("--exclusive", action=argparse.BooleanOptionalAction, default=None,
                          help="whole nodes (default on, except verify)")
    render_p.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                          help="one more #SBATCH option, e.g. --sbatch=--qos=debug (repeatable)")
    render_p.add_argument("--env", action="append", default=[], metavar="VAR=VALUE",
                          help="export in the job before anything runs (repeatable)")
    render_p.add_argument("--setup", action="append", default=[], metavar="COMMAND",
                          help="shell command run first, e.g. 'module load gcc' (repeatable; "
                               "a failing one fails the job)")
    render_p.add_argument("--collectives", help="comma list, default: every collective hpccoll bench has")
    render_p.add_argument("-a", "--algorithms", help="'all' (default) or a comma list")
    render_p.add_argument("-m", "--sizes", help="MIN:MAX bytes (default 8:16M; verify 4:64K)")
    render_p.add_argument("-i", "--iterations", type=int)
    render_p.add_argument("-x", "--warmup", type=int)
    render_p.add_argument("--dtype")
    render_p.add_argument("--bench-args", help="more hpccoll bench arguments, one string")
    render_p.add_argument("--verify-args", help="hpccoll verify arguments, one string")
    render_p.add_argument("--tuning-table", help="tune: decision table to merge into and update")
    render_p.add_argument("--out", metavar="FILE", help="write here (executable) instead of "
                                                        "stdout")
    render_p.set_defaults(handler=run_render, prog=render_p.prog)
    collect_p = actions.add_parser(
        "collect", help="merge run directories into a scaling table (JSON, markdown, plot); "
                        "exit 1 if any run failed")
    collect_p.add_argument("rundirs", nargs="+", metavar="RUNDIR",
                           help="run directories, or directories holding them")
    collect_p.add_argument("--out", default="scaling", metavar="PREFIX",
                           help="writes PREFIX.json, PREFIX.md (PREFIX.png), default scaling")
    collect_p.add_argument("--plot", action="store_true", help="PREFIX.png (needs matplotlib)")
    collect_p.set_defaults(handler=run_collect, prog=collect_p.prog)
    status_p = actions.add_parser("status", help="each run's state (its status.json and "
                                                 "SLURM's); exit 1 unless all completed")
    status_p.add_argument("rundirs", nargs="+", metavar="RUNDIR")
    status_p.set_defaults(handler=run_status, prog=status_p.prog)



def run_render(args: argparse.Namespace) -> int:
    text = render(JobOptions(**{k: getattr(args, k) for k in JobOptions.__dataclass_fields__}))
    if args.out:
        Path(args.out).write_text(text)
        os.chmod(args.out, 0o755)
        how = "bash" if "points" in placeholders(template_path(args.template)) else "sbatch"
        print(f"wrote {args.out}; submit with: {how} {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def run_collect(args: argparse.Namespace) -> int:
    return collect(args.rundirs, args.out, args.plot)


def run_status(args: argparse.Namespace) -> int:
    return status(args.rundirs)
