"""The report of perf/auto_vs_library.sh: ``auto`` against the MPI library's own collective.

    python perf/auto_vs_library.py DIR --out REPORT.md --command TEXT

DIR/LIBRARY/C_Pranks_runK.json are ``hpccoll bench C -a auto --json`` runs; per library, rank
count, collective and size, the cell is the median over the runs of the library's time over
auto's (> 1: auto is faster), with the runs' lowest and highest ratio, and what auto ran.
Cells below 0.95 are counted per table and listed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from hpccoll.tools.results import human_size

LIBRARIES = {"mpich": "MPICH", "openmpi": "Open MPI"}
RUN = re.compile(r"(?P<collective>\w+?)_(?P<ranks>\d+)ranks_run\d+\.json")
TARGET = 0.95


def ratios(directory: Path) -> tuple[dict, set[str]]:
    """{(library, ranks, collective): {bytes: ([ratio per run], {what auto ran})}}, and the
    forms of the calls the runs timed."""
    cells: dict = defaultdict(lambda: defaultdict(lambda: ([], set())))
    forms = set()
    for path in sorted(directory.glob("*/*.json")):
        named = RUN.fullmatch(path.name)
        if named is None:
            continue
        key = (path.parent.name, int(named["ranks"]), named["collective"])
        run = json.loads(path.read_text())
        rows = run["results"]
        forms.add(run["meta"].get("form", "blocking"))
        native = {r["bytes"]: r["time_us"] for r in rows if r["algorithm"] == "native"}
        for r in rows:
            if r["algorithm"] == "auto":
                found, ran = cells[key][r["bytes"]]
                found.append(native[r["bytes"]] / r["time_us"])
                ran.add(r.get("resolved") or "?")
    return cells, forms


def report(cells: dict, forms: set[str], command: str) -> str:
    made = "" if forms == {"blocking"} else f", {' and '.join(sorted(forms))} calls"
    lines = [f"# auto against the MPI library's own collective{made}", "",
             "Made from every run in the results folder, of whichever invocation (rank "
             "counts may come from different ones); the last invocation (repository root):",
             "", f"    {command}", "",
             "Each cell: the library's time over auto's (> 1: auto faster), the median over "
             "the runs, then the runs' range; auto's pick after it.  2 ranks fill the 2 "
             "cores; more are oversubscribed.", ""]
    for library, name in LIBRARIES.items():
        for ranks in sorted({k[1] for k in cells if k[0] == library}):
            collectives = [k[2] for k in sorted(cells) if k[:2] == (library, ranks)]
            sizes = sorted({b for c in collectives for b in cells[library, ranks, c]})
            below = []
            lines += [f"## {name}, {ranks} rank(s)", "",
                      "| size | " + " | ".join(collectives) + " |",
                      "|---:|" + "---|" * len(collectives)]
            for size in sizes:
                row = []
                for collective in collectives:
                    found, ran = cells[library, ranks, collective].get(size, ([], set()))
                    if not found:
                        row.append("")
                        continue
                    median = statistics.median(found)
                    if median < TARGET:
                        below.append(f"{collective} {human_size(size)} {median:.2f}x")
                    text = f"{median:.2f} ({min(found):.2f}-{max(found):.2f}) " + \
                        "/".join(sorted(ran))
                    row.append(f"**{text}**" if median < TARGET else text)
                lines.append(f"| {human_size(size)} | " + " | ".join(row) + " |")
            count = sum(len(cells[library, ranks, c]) for c in collectives)
            lines += ["", f"Below {TARGET}x: {len(below)} of {count} cells" +
                      (": " + ", ".join(below) if below else "") + ".", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--command", required=True)
    args = parser.parse_args()
    args.out.write_text(report(*ratios(args.directory), args.command))


if __name__ == "__main__":
    main()
