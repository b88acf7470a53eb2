"""``hpccoll jobs``: SLURM batch jobs from the templates in ``jobs/``, and their results.

* ``render TEMPLATE --nodes N --ntasks-per-node M [...]`` fills ``jobs/TEMPLATE.sbatch``
  (``bench``, ``scaling``, ``verify``, ``tune``) after checking every value: impossible
  requests (no nodes, a malformed time, an unknown template, launcher, collective, dtype or
  algorithm, an algorithm that cannot serve the job's rank count) are refused with a message
  saying why, before anything reaches the queue.
* ``collect RUNDIR... [--out PREFIX] [--plot]`` merges the ``bench-*.json`` of several run
  directories into one scaling table (PREFIX.json, PREFIX.md, PREFIX.png with ``--plot``):
  per collective, algorithm and size, the time and bus bandwidth against the rank (and node)
  count.  Every run's state is reported; any run that did not complete, or whose data check
  found wrong elements, makes it exit 1.
* ``status RUNDIR...`` prints each run's state: the job's own record (``status.json``,
  written by the job script however it ends) and, where the SLURM commands answer, SLURM's
  (``sacct``, ``sacct -c`` for the job-completion log, ``scontrol show job``); exit 1 unless
  every run completed.

Templates are bash scripts with ``{{name}}`` placeholders (filled with shell-quoted values;
on ``#SBATCH`` lines a list gives one line per item and an empty value drops the line),
``{{lines name}}`` (raw lines: the setup commands) and ``{{include FILE}}`` (another file of
the template directory, ``_common.bash``).  A template accepts exactly the options whose
placeholders it uses.  The template directory is ``$HPCCOLL_JOBS_DIR``, else ``jobs/`` next
to the package (a source checkout or editable install), else ``<prefix>/share/hpccoll/jobs``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    "sizes": "8:16M", "iterations": 100, "warmup": 10, "dtype": "float32", "bench_args": "",
    "verify_args": "", "tuning_table": "",
}
TEMPLATE_DEFAULTS: dict[str, dict[str, Any]] = {
    "verify": {"sizes": "4:64K", "exclusive": False, "time": "00:30:00"},
    "tune": {"iterations": 50, "warmup": 5},
}
# Placeholders filled from other options (not options of their own).
# Request fields every template takes (checked whatever the template's placeholders).
ALWAYS = {"template", "nodes", "ntasks_per_node", "job_name", "python"}


class JobError(ValueError):
    """A request that cannot be rendered, or run directories that cannot be read."""


# --------------------------------------------------------------------------------------------
# Templates

def template_dirs() -> list[Path]:
    """Where templates are looked for, first match wins."""
    dirs = []
    if os.environ.get("HPCCOLL_JOBS_DIR"):
        dirs.append(Path(os.environ["HPCCOLL_JOBS_DIR"]))
    dirs.append(Path(__file__).resolve().parent.parent / "jobs")
    dirs.append(Path(sys.prefix) / "share" / "hpccoll" / "jobs")
    return dirs


def templates() -> dict[str, Path]:
    """Template name -> file, from the first template directory that has any."""
    for directory in template_dirs():
        found = sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []
        if found:
            return {path.name[:-len(SUFFIX)]: path for path in found}
    return {}


def template_path(name: str) -> Path:
    """A template by name (or a path to a ``.sbatch`` file)."""
    if name.endswith(SUFFIX) and Path(name).is_file():
        return Path(name)
    known = templates()
    if name not in known:
        where = ", ".join(str(d) for d in template_dirs())
        listing = ", ".join(known) if known else f"none found (looked in {where})"
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
    from .cli import BENCH_COLLECTIVES
    from .schedule import COLLECTIVES
    chosen = [c.strip() for c in text.split(",") if c.strip()]
    if not chosen:
        raise JobError("--collectives names no collective")
    for name in chosen:
        if name not in BENCH_COLLECTIVES:
            extra = " (a collective hpccoll has, but no benchmark for it)" \
                if name in COLLECTIVES else ""
            raise JobError(f"unknown collective {name!r}{extra}; hpccoll bench has: "
                           f"{', '.join(BENCH_COLLECTIVES)}")
    if len(set(chosen)) != len(chosen):
        raise JobError(f"--collectives lists a collective twice: {text!r}")
    return chosen


def _sub_arguments(command: list[str], text: str, option: str,
                   reserved: tuple[str, ...]) -> list[str]:
    """``text`` split as a shell would, checked by the ``hpccoll`` parser itself."""
    from .cli import _parser
    try:
        args = shlex.split(text)
    except ValueError as error:
        raise JobError(f"{option} {text!r}: {error}") from None
    for arg in args:
        flag = arg.split("=")[0] if arg.startswith("--") else arg[:2]
        if flag in reserved:
            raise JobError(f"{option}: {flag} is set by the template; use the render option "
                           "of that name")
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            _parser().parse_args(command + args)
    except SystemExit:
        message = stderr.getvalue().strip().splitlines()
        raise JobError(f"{option} {text!r}: {message[-1] if message else 'invalid'}") from None
    return args


BENCH_RESERVED = ("-a", "--algorithms", "-m", "--sizes", "-i", "--iterations", "-x", "--warmup",
                  "--dtype", "--json", "--plot")


@dataclass
class Request:
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


def render(request: Request, make_output_dir: bool = True) -> str:
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

    for key in Request.__dataclass_fields__:
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
        context["verify_args"] = _sub_arguments(["verify"], option("verify_args"),
                                                "--verify-args", ())
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


def _check_sweep(request: Request, name: str, used: set[str], option: Any,
                 context: dict[str, Any], points: list[tuple[int, int]]) -> None:
    import numpy as np

    from . import bench
    from .runtime.buffers import SUPPORTED_DTYPES
    collectives = _collectives(option("collectives"))
    context["collectives"] = collectives
    sizes = option("sizes")
    try:
        bench.size_range(sizes)
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
    context["dtype"] = dtype
    if "algorithms" in used:
        spec = option("algorithms").strip()
        for collective in collectives:
            for n, m in points:
                try:
                    bench.selected_algorithms(collective, spec, n * m)
                except ValueError as error:
                    raise JobError(f"--algorithms {spec}: {error} (for {collective} on "
                                   f"{n} node(s) x {m} task(s))") from None
        context["algorithms"] = _token(spec, "algorithm list",
                                       re.compile(r"[A-Za-z0-9_,]+"), "_,")
    if "bench_args" in used:
        context["bench_args"] = _sub_arguments(["bench", collectives[0]], option("bench_args"),
                                               "--bench-args", BENCH_RESERVED)


# --------------------------------------------------------------------------------------------
# Run directories: state, results

FINAL_OK = "COMPLETED"


@dataclass
class Run:
    path: Path
    job: dict[str, Any]
    status: dict[str, Any] | None
    state: str
    slurm_state: str | None = None
    problems: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)   # bench-*.json rows
    files: list[str] = field(default_factory=list)
    wrong: int = 0

    @property
    def ok(self) -> bool:
        return self.state == FINAL_OK and not self.problems

    @property
    def label(self) -> str:
        return self.path.name


def run_directories(paths: list[str]) -> list[Path]:
    """The run directories (holding job.json) named, or found one level inside those named."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if (path / "job.json").is_file():
            found.append(path)
        elif path.suffix == ".out" and path.is_file() and \
                (path.with_suffix("") / "job.json").is_file():
            continue                               # a run's SLURM log, caught by a glob
        elif path.is_dir():
            inner = sorted(p for p in path.iterdir() if (p / "job.json").is_file())
            if not inner:
                raise JobError(f"{given}: no hpccoll run directory (one with job.json) here")
            found.extend(inner)
        else:
            raise JobError(f"{given}: no such run directory")
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def slurm_state(job_id: str, timeout: float = 30) -> tuple[str, str] | None:
    """(state, where it came from) as SLURM tells it, or None where it cannot: sacct (the
    accounting database), ``sacct -c`` (the job-completion log), ``scontrol show job`` (jobs
    the controller still remembers)."""
    if not job_id or job_id.startswith("local-"):
        return None
    attempts = [("sacct", ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,State"]),
                ("sacct -c", ["sacct", "-c", "-n", "-P", "-j", job_id, "-o", "JobID,State"])]
    for source, command in attempts:
        done = _quietly(command, timeout)
        if done is None:
            continue
        for line in done.splitlines():
            fields = line.split("|")
            if len(fields) >= 2 and fields[0] == job_id and fields[1].strip():
                return fields[1].split()[0], source
    done = _quietly(["scontrol", "show", "job", "-o", job_id], timeout)
    match = re.search(r"\bJobState=(\S+)", done or "")
    return (match.group(1), "scontrol") if match else None


def _quietly(command: list[str], timeout: float) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


def load_run(path: Path, ask_slurm: bool = False) -> Run:
    """A run directory: its job record, state and results.  SLURM is asked when the job left
    no status.json (still running, or killed outright), or always with ``ask_slurm``."""
    try:
        job = _json(path / "job.json")
    except (OSError, ValueError) as error:
        return Run(path, {}, None, "UNKNOWN", problems=[f"unreadable job.json: {error}"])
    status = None
    if (path / "status.json").is_file():
        try:
            status = _json(path / "status.json")
        except ValueError as error:
            run = Run(path, job, None, "UNKNOWN", problems=[f"unreadable status.json: {error}"])
            return run
    run = Run(path, job, status, status["state"] if status else "UNFINISHED")
    if status is None or ask_slurm:
        told = slurm_state(str(job.get("job_id", "")))
        if told:
            run.slurm_state = told[0]
    if status is None:
        if run.slurm_state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
                               "REQUEUED", "RESIZING"):
            run.state = run.slurm_state
            run.problems.append(f"still {run.slurm_state.lower()} (SLURM)")
        elif run.slurm_state:
            run.state = run.slurm_state if run.slurm_state != FINAL_OK else "UNFINISHED"
            run.problems.append(f"the job script left no status.json; SLURM says "
                                f"{run.slurm_state} (killed: time limit, node failure, "
                                "scancel, out of memory?)")
        else:
            run.problems.append("no status.json: the job has not finished, or was killed "
                                f"before it could write one; see {job.get('log', 'its log')}")
    elif run.slurm_state and run.slurm_state not in (FINAL_OK, "COMPLETING") and \
            run.state == FINAL_OK:
        run.state = run.slurm_state
        run.problems.append(f"the script completed but SLURM says {run.slurm_state}")
    if status is not None and status.get("state") != FINAL_OK:
        failed = status.get("failed_steps") or []
        for step in failed:
            code = next((s["exit_code"] for s in status.get("steps", []) if s["name"] == step),
                        "?")
            run.problems.append(f"step {step} exited {code}" + _tail(path / f"{step}.log"))
        if not failed or status.get("signal"):
            why = f" (signal {status['signal']})" if status.get("signal") else ""
            step = status.get("running_step")
            where = f", during step {step}" if step else ""
            tail = _tail(path / f"{step}.log") if step else _tail_log(path, job)
            run.problems.append(f"job script exited {status.get('exit_code')} in its "
                                f"{status.get('phase', '?')} phase{where}{why}" + tail)
    for result in sorted(path.glob("*.json")):
        if result.name in ("job.json", "status.json"):
            continue
        run.files.append(result.name)
        try:
            data = _json(result)
        except ValueError as error:
            run.problems.append(f"unreadable {result.name}: {error}")
            continue
        if not (isinstance(data, dict) and "results" in data and "meta" in data):
            continue                               # tuning.json and the like
        wrong = sum(int(r.get("wrong", 0)) for r in data["results"])
        if wrong:
            run.wrong += wrong
            run.problems.append(f"{result.name}: {wrong} wrong element(s)")
        if result.name.startswith("bench-"):
            for row in data["results"]:
                run.results.append({**row, "ranks": data["meta"].get("ranks", row["ranks"])})
    return run


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = [l for l in path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return "".join(f"\n      | {l}" for l in text[-lines:])


def _tail_log(path: Path, job: dict[str, Any]) -> str:
    log = job.get("log")
    return _tail(Path(log)) if log else ""


def _describe(run: Run) -> str:
    job = run.job
    slurm = f" (SLURM: {run.slurm_state})" if run.slurm_state else ""
    return (f"{run.state:<10} {run.path!s:<40} job {job.get('job_id', '?')} "
            f"{job.get('template', '?')}, {job.get('nodes', '?')} node(s), "
            f"{job.get('ntasks', '?')} task(s){slurm}")


def status(paths: list[str], out: Any = None) -> int:
    """Print each run's state; 0 when every run completed cleanly."""
    out = out or sys.stdout
    runs = [load_run(p, ask_slurm=True) for p in run_directories(paths)]
    for run in runs:
        print(_describe(run), file=out)
        for problem in run.problems:
            print(f"    {problem}", file=out)
    bad = [r for r in runs if not r.ok]
    if bad:
        print(f"{len(bad)} of {len(runs)} run(s) did not complete cleanly", file=out)
    return 1 if bad else 0


# --------------------------------------------------------------------------------------------
# The scaling table

def scaling_table(runs: list[Run]) -> dict[str, Any]:
    """Every bench result of the runs, one row per (collective, algorithm, dtype, size, nodes,
    ranks); a point measured by several runs keeps the later run's (argument order)."""
    rows: dict[tuple, dict[str, Any]] = {}
    replaced: dict[str, None] = {}
    for run in runs:
        nodes = int(run.job.get("nodes") or 1)
        for r in run.results:
            row = {"collective": r["collective"], "algorithm": r["algorithm"],
                   "dtype": r["dtype"], "bytes": r["bytes"], "nodes": nodes,
                   "ranks": r["ranks"], "time_us": r["time_us"], "algbw_gbs": r["algbw_gbs"],
                   "busbw_gbs": r["busbw_gbs"], "vs_native": r["vs_native"],
                   "wrong": r["wrong"], "iterations": r["iterations"], "run": str(run.path),
                   "job_id": run.job.get("job_id")}
            key = tuple(row[k] for k in ("collective", "algorithm", "dtype", "bytes", "nodes",
                                         "ranks"))
            if key in rows and rows[key]["run"] != row["run"]:
                replaced[f"{rows[key]['run']} -> {row['run']}"] = None
            rows[key] = row
    points = sorted({(r["ranks"], r["nodes"]) for r in rows.values()})
    return {
        "format": "hpccoll-scaling/1",
        "runs": [{"run": str(r.path), "job_id": r.job.get("job_id"),
                  "job_name": r.job.get("job_name"), "template": r.job.get("template"),
                  "study": r.job.get("study") or None, "nodes": r.job.get("nodes"),
                  "ntasks": r.job.get("ntasks"), "state": r.state,
                  "slurm_state": r.slurm_state, "ok": r.ok, "problems": r.problems,
                  "files": r.files} for r in runs],
        "points": [{"ranks": p, "nodes": n} for p, n in points],
        "results": sorted(rows.values(), key=lambda r: (r["collective"], r["dtype"],
                                                        r["algorithm"] != "native",
                                                        r["algorithm"], r["bytes"],
                                                        r["ranks"], r["nodes"])),
        "replaced": list(replaced),
    }


def _point_label(ranks: int, nodes: int) -> str:
    return f"{ranks} ranks ({nodes} node{'s' if nodes != 1 else ''})"


def markdown(table: dict[str, Any]) -> str:
    from .bench import human_size
    out = [f"# hpccoll scaling table: {len(table['runs'])} run(s)", "",
           "| run | job | template | nodes | tasks | state | problems |",
           "|---|---|---|---:|---:|---|---|"]
    for run in table["runs"]:
        problems = "; ".join(p.split("\n")[0] for p in run["problems"]) or "-"
        out.append(f"| {run['run']} | {run['job_id']} | {run['template']} | {run['nodes']} | "
                   f"{run['ntasks']} | {run['state']} | {problems} |")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in table["results"]:
        groups.setdefault((row["collective"], row["dtype"]), []).append(row)
    for (collective, dtype), rows in groups.items():
        points = sorted({(r["ranks"], r["nodes"]) for r in rows})
        header = "| algorithm | size | " + " | ".join(_point_label(*p) for p in points) + " |"
        rule = "|---|---:|" + "---:|" * len(points)
        cells = {(r["algorithm"], r["bytes"], r["ranks"], r["nodes"]): r for r in rows}
        keys = list(dict.fromkeys((r["algorithm"], r["bytes"]) for r in rows))
        for title, field_name, fmt in (("time (us, median of the slowest rank)", "time_us",
                                        "{:.1f}"),
                                       ("bus bandwidth (GB/s)", "busbw_gbs", "{:.4g}")):
            out += ["", f"## {collective}, {dtype}: {title}", "", header, rule]
            for algorithm, size in keys:
                values = []
                for ranks, nodes in points:
                    row = cells.get((algorithm, size, ranks, nodes))
                    values.append("-" if row is None else fmt.format(row[field_name]))
                out.append(f"| {algorithm} | {human_size(size)} | " + " | ".join(values) + " |")
    failed = [r for r in table["runs"] if not r["ok"]]
    if failed:
        out += ["", "## Runs that did not complete cleanly", ""]
        for run in failed:
            out.append(f"* {run['run']} (job {run['job_id']}): {run['state']}")
            out.extend(f"  * {p.splitlines()[0]}" for p in run["problems"])
    if table["replaced"]:
        out += ["", "Points measured twice (the later run kept): " +
                ", ".join(table["replaced"])]
    return "\n".join(out) + "\n"


def plot(table: dict[str, Any], path: str) -> None:
    """Per collective: time at the smallest size and bus bandwidth at the largest against the
    rank count, one line per algorithm (native dashed)."""
    try:
        import matplotlib
    except ImportError:
        raise JobError("--plot needs matplotlib: pip install 'hpccoll[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .bench import human_size
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in table["results"]:
        groups.setdefault((row["collective"], row["dtype"]), []).append(row)
    if not groups:
        raise JobError("nothing to plot: no bench results in these runs")
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.8 * len(groups)), squeeze=False)
    for (collective, dtype), (lat, bw) in zip(groups, axes):
        rows = groups[collective, dtype]
        points = sorted({(r["ranks"], r["nodes"]) for r in rows})
        # The smallest and largest sizes measured at every point (else at any).
        common = set.intersection(*({r["bytes"] for r in rows if (r["ranks"], r["nodes"]) == p}
                                    for p in points)) or {r["bytes"] for r in rows}
        small, large = min(common), max(common)
        for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
            style = {"linestyle": "--", "color": "black"} if algorithm == "native" else {}
            for axis, size, key in ((lat, small, "time_us"), (bw, large, "busbw_gbs")):
                line = sorted((r["ranks"], r[key]) for r in rows
                              if r["algorithm"] == algorithm and r["bytes"] == size)
                if line:
                    axis.plot(*zip(*line), marker="o", ms=4, label=algorithm, **style)
        for axis, size, label in ((lat, small, "time (us)"), (bw, large, "bus bandwidth (GB/s)")):
            axis.set_xscale("log", base=2)
            axis.set_xticks([p for p, _ in points])
            axis.set_xticklabels([f"{p}\n({n}n)" for p, n in points])
            axis.set_xlabel("ranks (nodes)")
            axis.set_ylabel(label)
            axis.set_title(f"{collective} {dtype}, {human_size(size)} B")
            axis.grid(True, which="both", alpha=0.3)
        lat.set_yscale("log")
        bw.legend(fontsize=7)
    fig.suptitle("hpccoll scaling")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def collect(paths: list[str], prefix: str, with_plot: bool = False, out: Any = None) -> int:
    """Write PREFIX.json, PREFIX.md (and PREFIX.png); print each run's state; 0 when every run
    completed cleanly, 1 otherwise (the table still holds what the others measured)."""
    out = out or sys.stdout
    runs = [load_run(p) for p in run_directories(paths)]
    table = scaling_table(runs)
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    with open(f"{prefix}.json", "w") as f:
        json.dump(table, f, indent=1)
    with open(f"{prefix}.md", "w") as f:
        f.write(markdown(table))
    written = [f"{prefix}.json", f"{prefix}.md"]
    if with_plot and table["results"]:
        plot(table, f"{prefix}.png")
        written.append(f"{prefix}.png")
    for run in runs:
        print(_describe(run), file=out)
        for problem in run.problems:
            print(f"    {problem}", file=out)
    points = ", ".join(_point_label(p["ranks"], p["nodes"]) for p in table["points"]) or "none"
    print(f"{len(table['results'])} result(s) at {points}; wrote {', '.join(written)}", file=out)
    bad = [r for r in runs if not r.ok]
    if bad:
        print(f"hpccoll jobs collect: {len(bad)} of {len(runs)} run(s) FAILED or did not "
              f"finish: {', '.join(r.label for r in bad)}", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------------------------
# Command line

def add_parser(sub: Any) -> None:
    """``hpccoll jobs`` and its subcommands, on the ``hpccoll`` parser's subparsers."""
    jobs = sub.add_parser("jobs", help="SLURM batch jobs: render templates, collect results")
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
    render_p.add_argument("--collectives", help="comma list, default all four")
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
    collect_p = actions.add_parser(
        "collect", help="merge run directories into a scaling table (JSON, markdown, plot); "
                        "exit 1 if any run failed")
    collect_p.add_argument("rundirs", nargs="+", metavar="RUNDIR",
                           help="run directories, or directories holding them")
    collect_p.add_argument("--out", default="scaling", metavar="PREFIX",
                           help="writes PREFIX.json, PREFIX.md (PREFIX.png), default scaling")
    collect_p.add_argument("--plot", action="store_true", help="PREFIX.png (needs matplotlib)")
    status_p = actions.add_parser("status", help="each run's state (its status.json and "
                                                 "SLURM's); exit 1 unless all completed")
    status_p.add_argument("rundirs", nargs="+", metavar="RUNDIR")


def main(args: argparse.Namespace) -> int:
    try:
        if args.jobs_command == "render":
            request = Request(**{k: getattr(args, k) for k in Request.__dataclass_fields__})
            text = render(request)
            if args.out:
                Path(args.out).write_text(text)
                os.chmod(args.out, 0o755)
                how = "bash" if "points" in placeholders(template_path(args.template)) \
                    else "sbatch"
                print(f"wrote {args.out}; submit with: {how} {args.out}", file=sys.stderr)
            else:
                sys.stdout.write(text)
            return 0
        if args.jobs_command == "collect":
            return collect(args.rundirs, args.out, args.plot)
        return status(args.rundirs)
    except JobError as error:
        print(f"hpccoll jobs {args.jobs_command}: {error}", file=sys.stderr)
        return 2
