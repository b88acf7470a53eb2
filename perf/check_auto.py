"""Is ``algorithm="auto"`` as good as the best forced algorithm?

Runs ``hpccoll bench C -a all,auto`` under mpiexec for each collective and rank count, with a
given tuning file (or none: then the shipped table and the cost model decide), and checks at
every measured size that auto is within ``--tolerance`` of the fastest forced algorithm
(native excluded from "forced" unless the table may pick it -- it may), and that it is never
the slowest.  Writes a markdown report.

Usage (repository root, in the venv):
    python perf/check_auto.py --ranks 2 4 --tuning perf/results/tuning.json \
        --out perf/results/auto_check_tuned.md
    python perf/check_auto.py --ranks 2 4 --out perf/results/auto_check_default.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

COLLECTIVES = ["allgather", "reduce_scatter", "allreduce", "alltoall"]


def bench(collective: str, ranks: int, sizes: str, iterations: int, tuning: str | None,
          path: str, repeat: int) -> list[dict]:
    """The results of ``repeat`` sweeps, each time the median over the sweeps."""
    sweeps = [sweep(collective, ranks, sizes, iterations, tuning, path) for _ in range(repeat)]
    merged = sweeps[0]
    for i, row in enumerate(merged):
        row["time_us"] = statistics.median(s[i]["time_us"] for s in sweeps)
    return merged


def sweep(collective: str, ranks: int, sizes: str, iterations: int, tuning: str | None,
          path: str) -> list[dict]:
    env = dict(os.environ)
    env.pop("HPCCOLL_TUNING_FILE", None)
    env.pop("MPIR_CVAR_ENABLE_HEAVY_YIELD", None)
    if ranks > os.cpu_count():      # oversubscribed: MPICH must yield (perf/launch.sh)
        env["MPIR_CVAR_ENABLE_HEAVY_YIELD"] = "1"
    if tuning:
        env["HPCCOLL_TUNING_FILE"] = tuning if tuning == "none" else os.path.abspath(tuning)
    command = ["mpiexec", "-n", str(ranks), sys.executable, "-m", "hpccoll", "bench",
               collective, "-a", "all,hpccoll-native,auto", "-m", sizes, "-i", str(iterations),
               "--json", path]
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)["results"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--collectives", nargs="+", default=COLLECTIVES)
    parser.add_argument("-m", "--sizes", default="8:16M")
    parser.add_argument("-i", "--iterations", type=int, default=100)
    parser.add_argument("--tuning", help="decision table (HPCCOLL_TUNING_FILE; 'none': no "
                                         "table, the cost model decides)")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--repeat", type=int, default=3, help="sweeps; times are medians")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    lines = ["# auto against the best forced algorithm", "",
             f"`python {' '.join(sys.argv)}`", "",
             f"tuning file: {args.tuning or 'not set (the shipped table, then the cost model)'}; "
             f"auto must be within {args.tolerance:.0%} of the fastest algorithm (native "
             "included, since auto may pick it) and never the slowest; every time is the "
             f"median of {args.repeat} sweeps.", "",
             "| collective | ranks | size | auto picks (us) | best | best (us) | auto/best | "
             "worst | ok |", "|---|---:|---:|---:|---|---:|---:|---|---|"]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for collective in args.collectives:
            for ranks in args.ranks:
                results = bench(collective, ranks, args.sizes, args.iterations, args.tuning,
                                os.path.join(tmp, "run.json"), args.repeat)
                for size in sorted({r["bytes"] for r in results}):
                    here = [r for r in results if r["bytes"] == size]
                    rows = {r["algorithm"]: r["time_us"] for r in here}
                    auto = rows.pop("auto")
                    rows["native"] = rows.pop("hpccoll-native")   # what auto would run
                    picked = next(r["resolved"] for r in here if r["algorithm"] == "auto")
                    best = min(rows, key=rows.get)
                    worst = max(rows, key=rows.get)
                    ratio = auto / rows[best]
                    ok = ratio <= 1 + args.tolerance and auto < rows[worst]
                    failures += not ok
                    lines.append(f"| {collective} | {ranks} | {size} | {picked} "
                                 f"({auto:.1f}) | {best} | "
                                 f"{rows[best]:.1f} | {ratio:.2f} | {worst} | "
                                 f"{'yes' if ok else 'NO'} |")
    lines += ["", f"sizes outside the tolerance: {failures}"]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
