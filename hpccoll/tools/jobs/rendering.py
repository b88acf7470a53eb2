"""``hpccoll jobs render``: the template engine, the checks on a request, and rendering.

Templates are bash scripts with ``{{name}}`` placeholders (filled with shell-quoted values;
on ``#SBATCH`` lines a list gives one line per item and an empty value drops the line),
``{{lines name}}`` (raw lines: the setup commands) and ``{{include FILE}}`` (another file of
the template directory, ``_common.bash``).  A template accepts exactly the options whose
placeholders it uses.  The templates ship in the package's ``templates/`` directory; a path
to a ``.sbatch`` file of one's own renders that file instead.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...collectives import NAMES as COLLECTIVES
from .. import bench_command, verify
from ..arguments import Parser, UsageError, check_whole_elements
from . import JobError

TEMPLATE_DIR = Path(__file__).with_name("templates")

SUFFIX = ".sbatch"
LAUNCHERS = ("srun", "mpiexec")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
INCLUDE = re.compile(r"\{\{\s*include\s+([A-Za-z0-9_.-]+)\s*\}\}")
LINES = re.compile(r"\{\{\s*lines\s+([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
TOKEN = re.compile(r"[A-Za-z0-9_.,+-]+")
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
PATH_CHARS = re.compile(r"[A-Za-z0-9_@%+=:,./~-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TIME_UNLIMITED = ("infinite", "unlimited")

# Defaults of the template options (the placeholder of the same name), then per template.
DEFAULTS: dict[str, Any] = {
    "time": "01:00:00", "partition": "", "account": "", "launcher": "srun",
    "srun_mpi": "pmi2", "output_dir": "runs", "exclusive": True, "sbatch": [],
    "collectives": "allreduce,allgather,reduce_scatter,alltoall", "algorithms": "all",
    "sizes": "8:16M", "iterations": 20, "warmup": 10, "dtype": "float32", "bench_args": "",
    "verify_args": "", "tuning_table": "",
}
TEMPLATE_DEFAULTS: dict[str, dict[str, Any]] = {
    "verify": {"sizes": "4:64K", "exclusive": False, "time": "00:30:00"},
    "tune": {"iterations": 10, "warmup": 5},
}
# JobOptions fields every template takes (checked whatever the template's placeholders).
ALWAYS = {"template", "nodes", "ntasks_per_node", "job_name", "python"}


# --------------------------------------------------------------------------------------------
# Templates

def templates() -> dict[str, Path]:
    """Template name -> file."""
    return {path.name[:-len(SUFFIX)]: path for path in sorted(TEMPLATE_DIR.glob(f"*{SUFFIX}"))}


def template_path(name: str) -> Path:
    """A template by name (or a path to a ``.sbatch`` file)."""
    if name.endswith(SUFFIX) and Path(name).is_file():
        return Path(name)
    known = templates()
    if name not in known:
        listing = ", ".join(known) if known else f"none found in {TEMPLATE_DIR}"
        raise JobError(f"unknown template {name!r}; available: {listing}")
    return known[name]


def _read(path: Path, seen: tuple[Path, ...] = ()) -> list[str]:
    """The template's lines with includes expanded."""
    if path in seen:
        raise JobError(f"template include cycle: {' -> '.join(str(p) for p in seen + (path,))}")
    lines = []
    for line in path.read_text().splitlines():
        match = INCLUDE.fullmatch(line.strip())
        if match:
            included = path.parent / match.group(1)
            if not included.is_file():
                raise JobError(f"{path}: included file {included} does not exist")
            lines.extend(_read(included, seen + (path,)))
        else:
            lines.append(line)
    return lines


def placeholders(path: Path) -> set[str]:
    """Names a template uses (``{{name}}`` and ``{{lines name}}``)."""
    names = set()
    for line in _read(path):
        names.update(PLACEHOLDER.findall(line))
        names.update(LINES.findall(line))
    return names


def fill(path: Path, context: dict[str, Any]) -> str:
    """The template with every placeholder replaced (see the module docstring)."""
    out = []
    for line in _read(path):
        raw = LINES.fullmatch(line.strip())
        if raw:
            out.extend(_value(context, raw.group(1), path) or [])
            continue
        names = PLACEHOLDER.findall(line)
        if line.startswith("#SBATCH") and names:
            if len(names) != 1:
                raise JobError(f"{path}: one placeholder per #SBATCH line: {line!r}")
            value = _value(context, names[0], path)
            items = value if isinstance(value, list) else [value]
            for item in items:
                if item not in ("", None, False):
                    out.append(PLACEHOLDER.sub(str(item), line))
            continue
        out.append(PLACEHOLDER.sub(lambda m: _quoted(_value(context, m.group(1), path)), line))
    return "\n".join(out) + "\n"


def _value(context: dict[str, Any], name: str, path: Path) -> Any:
    if name not in context:
        raise JobError(f"{path} uses {{{{{name}}}}}, which 'hpccoll jobs render' does not fill")
    return context[name]


def _quoted(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(shlex.quote(str(v)) for v in value)
    return shlex.quote(str(value))


# --------------------------------------------------------------------------------------------
# Validation

def parse_time(text: str) -> int | None:
    """A SLURM time limit -> seconds (None: unlimited).  Forms: M, M:S, H:M:S, D-H, D-H:M,
    D-H:M:S, and UNLIMITED/INFINITE."""
    text = text.strip()
    if text.lower() in TIME_UNLIMITED:
        return None
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    bad = JobError(f"bad time {text!r}: use MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                   "D-HH:MM:SS (SLURM's --time forms)")
    if not match:
        raise bad
    days, first, second, third = match.groups()
    if days is not None:
        hours, minutes, seconds = int(first), int(second or 0), int(third or 0)
        if hours >= 24 or minutes >= 60 or seconds >= 60:
            raise bad
        total = ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    elif third is not None:
        hours, minutes, seconds = int(first), int(second), int(third)
        if minutes >= 60 or seconds >= 60:
            raise bad
        total = (hours * 60 + minutes) * 60 + seconds
    elif second is not None:
        minutes, seconds = int(first), int(second)
        if seconds >= 60:
            raise bad
        total = minutes * 60 + seconds
    else:
        total = int(first) * 60
    if total <= 0:
        raise JobError(f"time limit {text!r} is zero: a job needs time to run")
    return total


def _counts(text: str | int, what: str, allow_list: bool) -> list[int]:
    items = [t.strip() for t in str(text).split(",")]
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise JobError(f"--{what} must be a whole number, got {item!r}") from None
        if value < 1:
            raise JobError(f"--{what} must be at least 1, got {value}")
        values.append(value)
    if len(values) > 1 and not allow_list:
        raise JobError(f"--{what} takes one number here ({text!r}); several sizes are the "
                       "scaling template's job")
    if len(set(values)) != len(values):
        raise JobError(f"--{what} lists a value twice: {text!r}")
    return values


def _token(value: str, what: str, pattern: re.Pattern = TOKEN, allowed: str = "_.,+-") -> str:
    if not pattern.fullmatch(value):
        others = " ".join(allowed)
        raise JobError(f"bad {what} {value!r}: use letters, digits" +
                       (f" and {others}" if others else "") + " only")
    return value


def _path(value: str, what: str) -> str:
    path = os.path.abspath(os.path.expanduser(value))
    if not PATH_CHARS.fullmatch(path):
        raise JobError(f"{what} {path!r} has characters #SBATCH lines and the job script do "
                       "not quote (spaces, quotes, ...): choose another path")
    return path


def _python(given: str | None) -> tuple[str, str]:
    """(interpreter, virtual environment or '') for --python: an interpreter or a venv."""
    path = Path(os.path.abspath(os.path.expanduser(given))) if given else Path(sys.executable)
    if path.is_dir():
        interpreter = path / "bin" / "python"
        if not interpreter.exists():
            raise JobError(f"--python {given}: a directory without bin/python")
        path = interpreter
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise JobError(f"--python {path}: no executable interpreter there")
    venv = path.parent.parent
    venv_text = str(venv) if (venv / "pyvenv.cfg").exists() and \
        (venv / "bin" / "activate").exists() else ""
    if str(path) != sys.executable:
        probe = subprocess.run([str(path), "-c", ("import importlib.util, sys; sys.exit("
                                                  "importlib.util.find_spec('hpccoll') is None)")],
                               capture_output=True, timeout=60, check=False)
        if probe.returncode != 0:
            raise JobError(f"--python {path} cannot import hpccoll (install it there: "
                           "pip install hpccoll)")
    _path(str(path), "--python")
    return str(path), venv_text


def _collectives(text: str) -> list[str]:
    chosen = [c.strip() for c in text.split(",") if c.strip()]
    if not chosen:
        raise JobError("--collectives names no collective")
    for name in chosen:
        if name not in bench_command.BENCH_COLLECTIVES:
            extra = " (a collective hpccoll has, but no benchmark for it)" \
                if name in COLLECTIVES else ""
            raise JobError(f"unknown collective {name!r}{extra}; hpccoll bench has: "
                           f"{', '.join(bench_command.BENCH_COLLECTIVES)}")
    if len(set(chosen)) != len(chosen):
        raise JobError(f"--collectives lists a collective twice: {text!r}")
    return chosen


def _sub_arguments(add_arguments: Callable[[Parser], None], given: list[str], text: str,
                   option: str, reserved: tuple[str, ...]) -> list[str]:
    """``text`` split as a shell would, checked (after the ``given`` arguments) by a parser
    with the arguments the subcommand's ``add_arguments`` defines."""
    try:
        args = shlex.split(text)
    except ValueError as error:
        raise JobError(f"{option} {text!r}: {error}") from None
    for arg in args:
        flag = arg.split("=")[0] if arg.startswith("--") else arg[:2]
        if flag in reserved:
            raise JobError(f"{option}: {flag} is set by the template; use the render option "
                           "of that name")
    parser = Parser()
    add_arguments(parser)
    try:
        parser.parse_args(given + args)
    except UsageError as error:
        raise JobError(f"{option} {text!r}: {error.message}") from None
    return args


BENCH_RESERVED = ("-a", "--algorithms", "-m", "--sizes", "-i", "--iterations", "-x", "--warmup",
                  "--dtype", "--json", "--plot")


@dataclass
class JobOptions:
    """What ``hpccoll jobs render`` was asked for (None: the template's default)."""

    template: str
    nodes: str | int = 1
    ntasks_per_node: str | int = 1
    job_name: str | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    launcher: str | None = None
    srun_mpi: str | None = None
    output_dir: str | None = None
    python: str | None = None
    exclusive: bool | None = None
    sbatch: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    collectives: str | None = None
    algorithms: str | None = None
    sizes: str | None = None
    iterations: int | None = None
    warmup: int | None = None
    dtype: str | None = None
    bench_args: str | None = None
    verify_args: str | None = None
    tuning_table: str | None = None


def render(request: JobOptions, make_output_dir: bool = True) -> str:
    """The filled template; JobError for anything that cannot work."""
    path = template_path(request.template)
    name = path.name[:-len(SUFFIX)]
    used = placeholders(path)
    defaults = {**DEFAULTS, **TEMPLATE_DEFAULTS.get(name, {})}

    def option(key: str) -> Any:
        given = getattr(request, key)
        if given not in (None, []) and key not in used:
            raise JobError(f"--{key.replace('_', '-')} does not apply to the {name} template")
        return defaults[key] if given in (None, []) else given

    for key in JobOptions.__dataclass_fields__:
        target = "setup" if key == "env" else key
        if getattr(request, key) not in (None, []) and target not in used | ALWAYS:
            raise JobError(f"--{key.replace('_', '-')} does not apply to the {name} template")
    scaling = "points" in used
    nodes = _counts(request.nodes, "nodes", scaling)
    tasks = _counts(request.ntasks_per_node, "ntasks-per-node", scaling)
    points = [(n, m) for n in nodes for m in tasks]
    context: dict[str, Any] = {
        "template": name, "nodes": nodes[0], "ntasks_per_node": tasks[0],
        "points": [f"{n}x{m}" for n, m in points],
    }
    context["job_name"] = _token(request.job_name or f"hpccoll-{name}", "job name", JOB_NAME,
                                 "_.+-")
    time_limit = option("time")
    parse_time(time_limit)
    context["time"] = time_limit.strip()
    for key in ("partition", "account"):
        context[key] = _token(option(key), key) if option(key) else ""
    launcher = option("launcher")
    if launcher not in LAUNCHERS:
        raise JobError(f"unknown launcher {launcher!r}; use one of {', '.join(LAUNCHERS)}")
    context["launcher"] = launcher
    context["srun_mpi"] = _token(option("srun_mpi"), "srun MPI plugin",
                                 re.compile(r"[A-Za-z0-9_]+"), "_")
    context["exclusive"] = "--exclusive" if option("exclusive") else ""
    extra = []
    for item in option("sbatch"):
        item = item.strip()
        if not item or any(c.isspace() for c in item):
            raise JobError(f"--sbatch {item!r}: one option without spaces, e.g. "
                           "--sbatch=--qos=debug")
        extra.append(item if item.startswith("-") else f"--{item}")
    context["sbatch"] = extra
    output_dir = _path(option("output_dir"), "output directory")
    context["output_dir"] = output_dir
    context["python"], context["venv"] = _python(request.python)
    setup = []
    for assignment in request.env:
        variable, eq, value = assignment.partition("=")
        if not eq or not ENV_NAME.fullmatch(variable):
            raise JobError(f"--env {assignment!r}: use VARIABLE=VALUE")
        setup.append(f"export {variable}={shlex.quote(value)}")
    setup.extend(request.setup)
    context["setup"] = setup

    if {"collectives", "algorithms", "sizes", "dtype"} & used:
        _check_sweep(request, name, used, option, context, points)
    if "verify_args" in used:
        context["verify_args"] = _sub_arguments(verify.add_arguments, [],
                                                option("verify_args"), "--verify-args", ())
    if "tuning_table" in used:
        table = option("tuning_table")
        context["tuning_table"] = _path(table, "tuning table") if table else ""
        if table and not Path(context["tuning_table"]).parent.is_dir():
            raise JobError(f"--tuning-table {table}: its directory does not exist")
    unknown = used - set(context)
    if unknown:
        raise JobError(f"{path} uses {', '.join(sorted(unknown))}, which 'hpccoll jobs "
                       "render' does not fill")
    text = fill(path, context)
    if make_output_dir:
        try:
            Path(output_dir).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise JobError(f"cannot create the output directory {output_dir}: {error}") from None
    return text


def _check_sweep(request: JobOptions, name: str, used: set[str], option: Any,
                 context: dict[str, Any], points: list[tuple[int, int]]) -> None:
    import numpy as np

    from ...collectives import SUPPORTED_DTYPES
    from ..results import size_range
    collectives = _collectives(option("collectives"))
    context["collectives"] = collectives
    sizes = option("sizes")
    try:
        size_range(sizes)
    except ValueError as error:
        raise JobError(f"--sizes: {error}") from None
    context["sizes"] = _token(sizes, "sizes", re.compile(r"[0-9A-Za-z:]+"), ":")
    for key, least in (("iterations", 1), ("warmup", 0)):
        if key in used:
            value = int(option(key))
            if value < least:
                raise JobError(f"--{key} must be at least {least}, got {value}")
            context[key] = value
    dtype = option("dtype")
    try:
        ok = np.dtype(dtype) in SUPPORTED_DTYPES
    except TypeError:
        ok = False
    if not ok:
        raise JobError(f"unsupported dtype {dtype!r}; hpccoll supports "
                       f"{', '.join(str(d) for d in SUPPORTED_DTYPES)}")
    try:
        check_whole_elements(sizes, dtype)
    except ValueError as error:
        raise JobError(f"--sizes: {error}") from None
    context["dtype"] = dtype
    if "algorithms" in used:
        spec = option("algorithms").strip()
        for collective in collectives:
            for n, m in points:
                try:
                    bench_command.selected_algorithms(collective, spec, n * m)
                except ValueError as error:
                    raise JobError(f"--algorithms {spec}: {error} (for {collective} on "
                                   f"{n} node(s) x {m} task(s))") from None
        context["algorithms"] = _token(spec, "algorithm list",
                                       re.compile(r"[A-Za-z0-9_,]+"), "_,")
    if "bench_args" in used:
        context["bench_args"] = _sub_arguments(bench_command.add_arguments,
                                               [collectives[0]], option("bench_args"),
                                               "--bench-args", BENCH_RESERVED)
