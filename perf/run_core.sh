#!/usr/bin/env bash
# The recorded runs of perf/README.md: every benchmarked collective at 2 and 4 ranks,
# 8 B to 16 MiB, all algorithms against native MPI in the same run, each cell timed for at
# least 20 iterations and 0.2 s (the recorded tables predate that rule: they were made with
# -i 200 -x 20, i.e. 200 iterations up to 1 MiB and 20 beyond).
# Usage: bash perf/run_core.sh [ranks...]   (from the repository root, in the venv)
set -euo pipefail
source perf/launch.sh
mkdir -p perf/results
rank_counts=("$@")
[ ${#rank_counts[@]} -gt 0 ] || rank_counts=(2 4)
for ranks in "${rank_counts[@]}"; do
  for collective in allgather reduce_scatter allreduce alltoall bcast reduce; do
    launch "$ranks" hpccoll bench "$collective" -a all -m 8:16M -i 20 --min-time 0.2 -x 10 \
      --json "perf/results/${collective}_${ranks}ranks.json"
  done
done
hpccoll report perf/results/{allgather,reduce_scatter,allreduce,alltoall,bcast,reduce}_{2,4}ranks.json \
  > perf/results/core_tables.md
