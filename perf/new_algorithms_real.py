"""The algorithms of issue 30 (Swing, Bine trees, PAT, Bruck allgather) run for real against
the MPI library's own collective, read from the runs of perf/tune_shipped.sh (its output
perf/results/tune/LIBRARY_NRANKS.txt: `hpccoll tune`'s benchmark tables, one per sweep):

    python perf/new_algorithms_real.py > perf/new_algorithms_real.md

Each cell is the median over the sweeps of the algorithm's "vs native" (native's time over
the algorithm's, each time the median over iterations of the slowest rank), with the
sweeps' range; > 1 means faster than the library's own call.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "tune"
NEW = {"swing", "swing_latency", "bine", "pat"}
NEW_IN = {"allgather": {"bruck"}}          # bruck is new for allgather alone
HEADER = re.compile(r"^# hpccoll bench (\w+): (\d+) ranks?, \w+, (.*)$")
ROW = re.compile(r"^\s+(\d+)\s+(\S+)\s+\d+\s+[\d.]+\s+\d+%\s+[\d.]+\s+[\d.]+\s+([\d.]+)x\s+(\d+)$")


def read(path: Path) -> tuple[str, dict]:
    """(library line, {(collective, algorithm): {size: [vs native per sweep]}}) of one run,
    the new algorithms alone; ValueError where a cell's data check found wrong values."""
    library, cells, collective = "", defaultdict(lambda: defaultdict(list)), None
    for line in path.read_text().splitlines():
        header = HEADER.match(line)
        if header:
            collective, library = header.group(1), header.group(3)
            continue
        row = ROW.match(line)
        if row is None or collective is None:
            continue
        size, algorithm, ratio, wrong = row.groups()
        if int(wrong):
            raise ValueError(f"{path}: {collective} {algorithm} at {size} B: {wrong} wrong")
        if algorithm in NEW or algorithm in NEW_IN.get(collective, ()):
            cells[collective, algorithm][int(size)].append(float(ratio))
    return library, cells


def human(size: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def table(library: str, ranks: int, cells: dict) -> list[str]:
    sizes = sorted({s for by_size in cells.values() for s in by_size})
    lines = [f"### {library}, {ranks} rank{'s' if ranks > 1 else ''}"
             + (" (oversubscribed: 2 per core)" if ranks > 2 else ""), "",
             "| collective | algorithm | " + " | ".join(human(s) for s in sizes) + " |",
             "|---|---|" + "---:|" * len(sizes)]
    for (collective, algorithm), by_size in sorted(cells.items()):
        row = []
        for size in sizes:
            ratios = by_size.get(size)
            row.append("" if not ratios else
                       f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        lines.append(f"| {collective} | {algorithm} | " + " | ".join(row) + " |")
    wins = sum(statistics.median(r) >= 1 for c in cells.values() for r in c.values())
    total = sum(len(c) for c in cells.values())
    lines += ["", f"Cells at least as fast as native (median): {wins} of {total}.", ""]
    return lines


def main() -> int:
    runs = sorted(RESULTS.glob("*_*ranks.txt"),
                  key=lambda p: (p.name.split("_")[0], int(p.name.split("_")[1][:-9])))
    out = ["# Swing, Bine trees, PAT and Bruck allgather on real MPI", "", __doc__.strip(), ""]
    for path in runs:
        library, cells = read(path)
        ranks = int(path.name.split("_")[1][:-9])
        if cells:
            out += table(library.split(",")[0].replace(" Version:", "").strip(), ranks, cells)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
