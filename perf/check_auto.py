"""Is ``algorithm="auto"`` as good as the best forced algorithm?

Runs ``hpccoll bench C -a all,auto`` under mpiexec for each collective and rank count, with a
given tuning file (or none: then the shipped table and the cost model decide), and checks at
every measured size that auto is within ``--tolerance`` of the fastest forced algorithm
(native included: the table may pick it), and that it is never the slowest.  Writes a
markdown report.

The sweep's fastest of ten-odd algorithms is biased low (the winner's curse: the minimum of
many noisy times is below each one's typical time), so a size that misses the tolerance is
measured again head to head: ``auto`` against that winner alone, ``--repeat`` times more, and
judged on those medians (column "again").

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


def bench(collective: str, ranks: int, sizes: str, algorithms: str, iterations: int,
          tuning: str | None, path: str, repeat: int) -> list[dict]:
    """The results of ``repeat`` sweeps, each time the median over the sweeps."""
    sweeps = [sweep(collective, ranks, sizes, algorithms, iterations, tuning, path)
              for _ in range(repeat)]
    merged = sweeps[0]
    for i, row in enumerate(merged):
        row["time_us"] = statistics.median(s[i]["time_us"] for s in sweeps)
    return merged


def sweep(collective: str, ranks: int, sizes: str, algorithms: str, iterations: int,
          tuning: str | None, path: str) -> list[dict]:
    env = dict(os.environ)
    env.pop("HPCCOLL_TUNING_FILE", None)
    env.pop("MPIR_CVAR_ENABLE_HEAVY_YIELD", None)      # MPICH's defaults (perf/launch.sh)
    if tuning:
        env["HPCCOLL_TUNING_FILE"] = tuning if tuning == "none" else os.path.abspath(tuning)
    command = ["mpiexec", "-n", str(ranks), sys.executable, "-m", "hpccoll", "bench",
               collective, "-a", algorithms, "-m", sizes, "-i", str(iterations),
               "--json", path]
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)["results"]


SMALL = 4096     # bytes: the band where per-call overhead decides


def small_summary(small: list[tuple[float, float, float]], tolerance: float) -> str:
    """At small sizes: how much slower auto is than native MPI, against the per-call cost of
    calling native through hpccoll (what any hpccoll call pays)."""
    if not small:
        return ""
    extra = [auto - raw for auto, raw, _ in small]
    overhead = [via - raw for _, raw, via in small]
    beyond = sum(auto > via * (1 + tolerance) for auto, _, via in small)
    return (f"<= {SMALL} B ({len(small)} sizes): auto - native: median "
            f"{statistics.median(extra):.1f} us, max {max(extra):.1f} us; per-call overhead "
            f"(native via hpccoll - native): median {statistics.median(overhead):.1f} us, max "
            f"{max(overhead):.1f} us; sizes where auto is slower than native via hpccoll by "
            f"more than {tolerance:.0%}: {beyond}")


def head_to_head(collective: str, ranks: int, size: int, best: str, args, path: str) -> float:
    """auto's time over ``best``'s, the two measured alone at ``size`` (medians of
    ``args.repeat`` runs of twice the iterations)."""
    forced = "hpccoll-native" if best == "native" else best
    rows = bench(collective, ranks, f"{size}:{size}", f"{forced},auto", 2 * args.iterations,
                 args.tuning, path, args.repeat)
    times = {r["algorithm"]: r["time_us"] for r in rows}
    return times["auto"] / times[forced]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--collectives", nargs="+", default=COLLECTIVES)
    parser.add_argument("-m", "--sizes", default="8:16M")
    parser.add_argument("-i", "--iterations", type=int, default=20,
                        help="hpccoll bench -i: the fewest iterations per cell (bench's "
                             "--min-time adds more where calls are fast)")
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
             "worst | again: auto/best | ok | native (us) | native via hpccoll (us) |",
             "|---|---:|---:|---:|---|---:|---:|---|---:|---|---:|---:|"]
    failures, small = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for collective in args.collectives:
            for ranks in args.ranks:
                path = os.path.join(tmp, "run.json")
                results = bench(collective, ranks, args.sizes, "all,hpccoll-native,auto",
                                args.iterations, args.tuning, path, args.repeat)
                for size in sorted({r["bytes"] for r in results}):
                    here = [r for r in results if r["bytes"] == size]
                    rows = {r["algorithm"]: r["time_us"] for r in here}
                    auto = rows.pop("auto")
                    raw = rows["native"]
                    rows["native"] = rows.pop("hpccoll-native")   # what auto would run
                    if size <= SMALL:
                        small.append((auto, raw, rows["native"]))
                    picked = next(r["resolved"] for r in here if r["algorithm"] == "auto")
                    best = min(rows, key=rows.get)
                    worst = max(rows, key=rows.get)
                    ratio = auto / rows[best]
                    again = head_to_head(collective, ranks, size, best, args, path) \
                        if ratio > 1 + args.tolerance else None
                    ok = (ratio if again is None else again) <= 1 + args.tolerance \
                        and auto < rows[worst]
                    failures += not ok
                    lines.append(f"| {collective} | {ranks} | {size} | {picked} "
                                 f"({auto:.1f}) | {best} | "
                                 f"{rows[best]:.1f} | {ratio:.2f} | {worst} | "
                                 f"{'' if again is None else f'{again:.2f}'} | "
                                 f"{'yes' if ok else 'NO'} | {raw:.1f} | {rows['native']:.1f} |")
    lines += ["", f"sizes outside the tolerance: {failures} of {len(lines) - 8}", "",
              small_summary(small, args.tolerance)]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
