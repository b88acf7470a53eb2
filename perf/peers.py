"""The peers sweep's helper (``perf/peers.sh`` runs it): which forced algorithms each MPI
library documents, whether a run's JSON was made with the sweep's settings, and the table
``perf/peers.md`` assembled from the runs.

    python perf/peers.py variants mpich|openmpi COLLECTIVE --bin DIR
        one line per forced algorithm: LABEL, a tab, the VAR=VALUE settings that force it
        (read from DIR/mpivars, MPICH's list of its control variables, or from
        DIR/ompi_info --param coll tuned --level 9 --parsable)
    python perf/peers.py fallbacks FILE
        how many times FILE (a run's stderr) has MPICH say it fell back to its own selection
    python perf/peers.py fresh FILE.json --sizes S --min-time T --iterations I --warmup W
        exit status 0 when FILE.json is an ``hpccoll bench --json`` run with those settings
    python perf/peers.py table DIR --command TEXT --collectives C... --ranks P... --sizes S
        --out perf/peers.md
        the markdown report of the runs under DIR (``DIR/LIBRARY/C_Pranks_VARIANT.json``,
        ``.failed`` beside a run that did not complete)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hpccoll.tools.results import human_size, size_range

LIBRARIES = {"mpich": "MPICH", "openmpi": "Open MPI"}
HPCCOLL_RUN = "hpccoll"          # the variant name of the run with native, every algorithm, auto
FORCED_PREFIX = "forced-"
NOT_ALGORITHMS = ("native", "auto", "hpccoll-native")
# documented values that do not force an algorithm of their own on this sweep's buffers
EXCLUDED = {
    "mpich": {"ccl": "hands the call to a GPU library (NCCL/RCCL) MPICH was built with; with "
                     "none, or host buffers, it runs MPICH's own selection"},
    "openmpi": {},
}
# what forces an algorithm, besides the algorithm's own variable: MPICH's device layer would
# otherwise pick its own algorithms first, and a forced algorithm that does not apply must say
# so when MPICH falls back to its own selection (perf/peers.sh counts those messages; "error"
# instead would fail MPI_Init, whose own collectives some forced algorithms do not fit);
# Open MPI's tuned component reads forced algorithms only with dynamic rules on
MPICH_FORCING = ("MPIR_CVAR_DEVICE_COLLECTIVES=none", "MPIR_CVAR_COLLECTIVE_FALLBACK=print")
# what MPICH prints then (rank 0 of the communicator, once a call)
MPICH_FALLBACK = "User set collective algorithm is not usable for the provided arguments"
OPENMPI_FORCING = ("OMPI_MCA_coll_tuned_use_dynamic_rules=1",)
RUN_NAME = re.compile(
    r"^(?P<collective>[a-z_]+)_(?P<ranks>\d+)ranks_(?P<variant>.+)\.(json|failed)$")


# ------------------------------------------------------------------------------------------
# The forced algorithms

def mpich_variants(mpivars: str, collective: str) -> list[tuple[str, list[str]]]:
    """(label, settings) per value of ``MPIR_CVAR_<COLLECTIVE>_INTRA_ALGORITHM`` that
    ``mpivars`` lists ("auto" and EXCLUDED ones left out)."""
    variable = f"MPIR_CVAR_{collective.upper()}_INTRA_ALGORITHM"
    lines = mpivars.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if re.match(rf"\t{variable}\s*=", line)), None)
    if start is None:
        raise ValueError(f"mpivars does not list {variable}")
    values = []
    for line in lines[start + 1:]:
        if line.startswith("\t") or not line.strip():
            break
        name = line.split(" - ", 1)[0].strip()
        if name and name != "auto" and name not in EXCLUDED["mpich"]:
            values.append(name)
    return [(name, [*MPICH_FORCING, f"{variable}={name}"]) for name in values]


def openmpi_variants(ompi_info: str, collective: str) -> list[tuple[str, list[str]]]:
    """(label, settings) per algorithm number of ``coll_tuned_<collective>_algorithm`` that
    ``ompi_info --parsable`` enumerates (0, "ignore", is the default selection)."""
    parameter = f"coll_tuned_{collective}_algorithm"
    found = re.findall(rf"^mca:coll:tuned:param:{parameter}:enumerator:value:(\d+):(\S+)$",
                       ompi_info, flags=re.M)
    if not found:
        raise ValueError(f"ompi_info does not list {parameter}")
    return [(name, [*OPENMPI_FORCING, f"OMPI_MCA_{parameter}={number}"])
            for number, name in found
            if number != "0" and name not in EXCLUDED["openmpi"]]


def library_listing(library: str, bin_dir: str) -> str:
    """What the library's own tool says of its collectives' variables."""
    if library == "mpich":
        command = [f"{bin_dir}/mpivars"]
    else:
        command = [f"{bin_dir}/ompi_info", "--param", "coll", "tuned", "--level", "9",
                   "--parsable"]
    return subprocess.run(command, capture_output=True, text=True, check=True,
                          timeout=120).stdout


# ------------------------------------------------------------------------------------------
# The runs

@dataclass
class Run:
    """One ``hpccoll bench --json`` run of the sweep, or the record of one that failed."""

    library: str
    collective: str
    ranks: int
    variant: str
    meta: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def forced(self) -> str | None:
        return self.variant[len(FORCED_PREFIX):] if self.variant.startswith(FORCED_PREFIX) \
            else None


def fresh(meta: dict, rows: list[dict], sizes: list[int], min_time: float, iterations: int,
          warmup: int) -> bool:
    """Whether a run was made with these settings and measured every size."""
    return (meta.get("min_time") == min_time and meta.get("min_iterations") == iterations
            and meta.get("warmup") == warmup and {r["bytes"] for r in rows} >= set(sizes))


def load_runs(directory: Path) -> list[Run]:
    runs = []
    for library in LIBRARIES:
        for path in sorted((directory / library).glob("*")):
            match = RUN_NAME.match(path.name)
            if not match:
                continue
            run = Run(library, match["collective"], int(match["ranks"]), match["variant"])
            if path.suffix == ".json":
                data = json.loads(path.read_text())
                run.meta, run.rows = data["meta"], data["results"]
            else:
                run.error = failure_reason(path.read_text())
            runs.append(run)
    return runs


def failure_reason(text: str) -> str:
    """Why a run failed, from its record: perf/peers.sh's reason (the first line's last
    parenthesis), then the run's most telling line of stderr (MPI's complaint, if any)."""
    header, _, rest = text.partition("\n")
    why = header[header.rfind("(") + 1:].rstrip(")").strip() if "(" in header else header
    lines = [line.strip() for line in rest.splitlines() if line.strip()]
    for pattern in ("cannot be applied", "not usable", "MPI_ERR", "Error", "error"):
        hits = [line for line in lines if pattern in line]
        if hits:
            return f"{why}: {hits[-1][:160]}"
    return why


# ------------------------------------------------------------------------------------------
# The table

def us(t: float) -> str:
    return f"{t:.0f}" if t >= 100 else f"{t:.1f}" if t >= 10 else f"{t:.2f}"


@dataclass
class Cell:
    """A time (us: the median over iterations), its spread (the 10th and 90th percentiles
    over iterations, where the run recorded them) and what made it."""

    time: float
    label: str = ""
    low: float | None = None
    high: float | None = None

    @staticmethod
    def of(row: dict, label: str = "") -> "Cell":
        return Cell(row["time_us"], label, row.get("p10_us"), row.get("p90_us"))

    def text(self, bold: bool = False) -> str:
        value = f"**{us(self.time)}**" if bold else us(self.time)
        if self.low is not None and self.high is not None:
            value += f" [{us(self.low)}-{us(self.high)}]"
        return f"{value} ({self.label})" if self.label else value


def time_of(run: Run | None, size: int, algorithm: str) -> Cell | None:
    if run is None:
        return None
    row = next((r for r in run.rows if r["bytes"] == size and r["algorithm"] == algorithm), None)
    if row is None:
        return None
    return Cell.of(row, (row["resolved"] if algorithm == "auto" else "") or "")


def fastest(cells: list[Cell | None]) -> Cell | None:
    present = [c for c in cells if c is not None]
    return min(present, key=lambda c: c.time) if present else None


@dataclass
class SizeRow:
    """One size of one collective and rank count: every column of the table."""

    size: int
    mpich_default: Cell | None
    mpich_forced: Cell | None
    openmpi_default: Cell | None
    openmpi_forced: Cell | None
    hpccoll_mpich: Cell | None
    hpccoll_openmpi: Cell | None
    auto_mpich: Cell | None
    auto_openmpi: Cell | None

    @property
    def library_best(self) -> Cell | None:
        return fastest([self.mpich_default, self.mpich_forced, self.openmpi_default,
                        self.openmpi_forced])

    @property
    def hpccoll_best(self) -> Cell | None:
        return fastest([self.hpccoll_mpich, self.hpccoll_openmpi])

    @property
    def ratio(self) -> float | None:
        """Library best time / hpccoll best time: above 1, hpccoll's best is faster."""
        return speedup(self.library_best, self.hpccoll_best)

    @property
    def auto_ratios(self) -> tuple[float | None, float | None]:
        """The library's default time / auto's, under MPICH and Open MPI."""
        return (speedup(self.mpich_default, self.auto_mpich),
                speedup(self.openmpi_default, self.auto_openmpi))

    def markdown(self) -> str:
        library, ours = self.library_best, self.hpccoll_best

        def show(cell: Cell | None, best: Cell | None) -> str:
            return "-" if cell is None else cell.text(bold=cell is best)
        cells = [show(self.mpich_default, library), show(self.mpich_forced, library),
                 show(self.openmpi_default, library), show(self.openmpi_forced, library),
                 show(self.hpccoll_mpich, ours), show(self.hpccoll_openmpi, ours),
                 show(self.auto_mpich, None), show(self.auto_openmpi, None),
                 *("-" if r is None else f"{r:.2f}x" for r in (*self.auto_ratios, self.ratio))]
        return f"| {human_size(self.size)} | " + " | ".join(cells) + " |"


def speedup(theirs: Cell | None, ours: Cell | None) -> float | None:
    """Their time / ours (above 1: ours is faster); None without both."""
    return theirs.time / ours.time if theirs and ours else None


def size_rows(runs: list[Run], sizes: list[int]) -> list[SizeRow]:
    """The rows of one collective and rank count (``runs`` are theirs)."""
    def full(library: str) -> Run | None:
        return next((r for r in runs if r.library == library and r.variant == HPCCOLL_RUN
                     and r.error is None), None)

    def forced_best(library: str, size: int) -> Cell | None:
        cells = []
        for run in runs:
            if run.library == library and run.forced and run.error is None:
                cell = time_of(run, size, "native")
                if cell is not None:
                    cell.label = run.forced
                    cells.append(cell)
        return fastest(cells)

    def algorithms_best(run: Run | None, size: int) -> Cell | None:
        if run is None:
            return None
        return fastest([Cell.of(r, r["algorithm"]) for r in run.rows
                        if r["bytes"] == size and r["algorithm"] not in NOT_ALGORITHMS])

    mpich, openmpi = full("mpich"), full("openmpi")
    return [SizeRow(size, time_of(mpich, size, "native"), forced_best("mpich", size),
                    time_of(openmpi, size, "native"), forced_best("openmpi", size),
                    algorithms_best(mpich, size), algorithms_best(openmpi, size),
                    time_of(mpich, size, "auto"), time_of(openmpi, size, "auto"))
            for size in sizes]


HEADER = ("| size | MPICH default | MPICH best forced | Open MPI default | Open MPI best forced "
          "| hpccoll best, MPICH | hpccoll best, Open MPI | hpccoll auto, MPICH "
          "| hpccoll auto, Open MPI | auto vs default, MPICH | auto vs default, Open MPI "
          "| hpccoll best vs library best |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def summary(rows: list[SizeRow]) -> str:
    ratios = [r.ratio for r in rows if r.ratio is not None]
    if not ratios:
        return "no size has both a library and an hpccoll time"
    at_least = sum(ratio >= 1 for ratio in ratios)
    text = (f"hpccoll best vs library best: {min(ratios):.2f}-{max(ratios):.2f}x; hpccoll's "
            f"best at least as fast at {at_least} of {len(ratios)} sizes")
    for library, column in zip(LIBRARIES.values(), zip(*(r.auto_ratios for r in rows))):
        autos = [ratio for ratio in column if ratio is not None]
        if autos:
            text += (f"; auto vs {library}'s default {min(autos):.2f}-{max(autos):.2f}x, "
                     f">= 0.95x at {sum(ratio >= 0.95 for ratio in autos)} of {len(autos)}")
    return text


def report(runs: list[Run], collectives: list[str], ranks: list[int], sizes: list[int],
           command: str) -> str:
    used = [r for r in runs if r.collective in collectives and r.ranks in ranks]
    libraries = sorted({f"{LIBRARIES[r.library]}: {' '.join(r.meta['mpi'].split())}"
                        for r in used if r.meta})
    dates = sorted(r.meta["date"] for r in used if r.meta)
    settings = next((r.meta for r in used if r.meta), {})
    out = ["# hpccoll against the MPI libraries' own collectives, default and forced", "",
           f"Made by `{command}` (repository root)"
           + (f", runs from {dates[0]} to {dates[-1]}" if dates else "") + ".", ""]
    out += [f"* {line}" for line in libraries]
    out += ["", "Every time is `hpccoll bench`'s: the median over iterations of the slowest "
            "rank, each iteration started after a barrier, in microseconds; each cell timed "
            f"for at least {settings.get('min_iterations', '?')} iterations and "
            f"{settings.get('min_time', '?')} s after {settings.get('warmup', '?')} warm-up "
            "calls; in brackets the 10th-90th percentile of the iterations (the JSON under "
            "the results directory has more of every cell).  "
            "Columns:", "",
            "* **MPICH default**, **Open MPI default**: the library's collective as a program "
            "calls it (mpi4py), nothing set.",
            "* **MPICH best forced (which)**: the fastest of the runs with one "
            "`MPIR_CVAR_<COLL>_INTRA_ALGORITHM` value each (with "
            "`MPIR_CVAR_DEVICE_COLLECTIVES=none`, so that MPICH's own algorithm is the one "
            "named, and `MPIR_CVAR_COLLECTIVE_FALLBACK=print`: a run in which MPICH said it "
            "fell back to its own selection more often than in `MPI_Init` alone counts as not "
            "run); reduce_scatter is `MPI_Reduce_scatter` with equal counts, forced by "
            "`MPIR_CVAR_REDUCE_SCATTER_INTRA_ALGORITHM`.",
            "* **Open MPI best forced (which)**: likewise with "
            "`OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_<coll>_algorithm=N` "
            "for every N its `ompi_info` lists (tuned is the component Open MPI selects on "
            "one node).",
            "* **hpccoll best, MPICH / Open MPI (which)**: the fastest hpccoll algorithm in "
            "one `hpccoll bench C -a all,auto` run under that library (its native is the "
            "default column).",
            "* **hpccoll auto (picked)**: `algorithm=\"auto\"` in the same run, with what it "
            "resolved to.",
            "* **auto vs default**: the library's default time / auto's under that library "
            "(issue 31 asks >= 0.95x everywhere).",
            "* **hpccoll best vs library best**: the fastest of the four library columns' "
            "time / the faster of the two hpccoll best times (above 1: hpccoll's best is "
            "faster).  Bold: the fastest library cell and the faster hpccoll cell.", ""]
    for collective in collectives:
        for p in ranks:
            here = [r for r in used if r.collective == collective and r.ranks == p]
            crowded = next((r.meta["oversubscribed"] for r in here
                            if r.meta.get("oversubscribed")), None)
            out += [f"## {collective}, {p} ranks"
                    + (f" (oversubscribed: {crowded})" if crowded else ""), ""]
            if not here:
                out += ["not measured", ""]
                continue
            rows = size_rows(here, sizes)
            out += [HEADER, *(row.markdown() for row in rows), "", summary(rows), ""]
            forced = {lib: sorted(r.forced for r in here if r.library == lib and r.forced
                                  and r.error is None) for lib in LIBRARIES}
            for lib, names in forced.items():
                out.append(f"{LIBRARIES[lib]} forced algorithms measured: "
                           f"{', '.join(names) or 'none'}.  ")
            failed = [r for r in here if r.error is not None]
            for run in failed:
                out.append(f"{LIBRARIES[run.library]} {run.forced or run.variant}: did not run "
                           f"(`{run.error}`).  ")
            out.append("")
    excluded = [f"{LIBRARIES[lib]} `{name}`: {why}" for lib, names in EXCLUDED.items()
                for name, why in names.items()]
    if excluded:
        out += ["Documented values not swept: " + "; ".join(excluded) + ".", ""]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    variants = sub.add_parser("variants")
    variants.add_argument("library", choices=LIBRARIES)
    variants.add_argument("collective")
    variants.add_argument("--bin", required=True, help="the library's bin directory")
    fallbacks = sub.add_parser("fallbacks")
    fallbacks.add_argument("file")
    check = sub.add_parser("fresh")
    check.add_argument("file")
    table = sub.add_parser("table")
    table.add_argument("directory")
    table.add_argument("--command", required=True, help="the command, for the record")
    table.add_argument("--collectives", nargs="+", required=True)
    table.add_argument("--ranks", nargs="+", type=int, required=True)
    table.add_argument("--out", required=True)
    for p in (check, table):
        p.add_argument("--sizes", required=True)
    check.add_argument("--min-time", type=float, required=True)
    check.add_argument("--iterations", type=int, required=True)
    check.add_argument("--warmup", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "variants":
        listing = library_listing(args.library, args.bin)
        found = (mpich_variants if args.library == "mpich" else openmpi_variants)(
            listing, args.collective)
        for label, settings in found:
            print(f"{label}\t{' '.join(settings)}")
        return 0
    if args.command == "fallbacks":
        print(Path(args.file).read_text(errors="replace").count(MPICH_FALLBACK))
        return 0
    if args.command == "fresh":
        try:
            data = json.loads(Path(args.file).read_text())
        except (OSError, ValueError):
            return 1
        return 0 if fresh(data.get("meta", {}), data.get("results", []),
                          size_range(args.sizes), args.min_time, args.iterations,
                          args.warmup) else 1
    text = report(load_runs(Path(args.directory)), args.collectives, args.ranks,
                  size_range(args.sizes), args.command)
    Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
