#!/usr/bin/env bash
# The recorded runs of perf/README.md: every benchmarked collective at 2 and 4 ranks,
# 8 B to 16 MiB, all algorithms against native MPI in the same run, each cell timed for at
# least 20 iterations and 0.2 s (the recorded tables predate that rule: they were made with
# -i 200 -x 20, i.e. 200 iterations up to 1 MiB and 20 beyond).
# Usage: bash perf/run_core.sh [ranks...]   (from the repository root, in the venv)
#   SIZES=1M:16M OUT=DIR bash perf/run_core.sh 2 4   another size range, results into DIR
#   (the tables of perf/results/core_tables.md are made only for the default run); the
#   hpccoll benchmarked is the one the active `python` imports.
set -euo pipefail
source perf/launch.sh
sizes=${SIZES:-8:16M}
out=${OUT:-perf/results}
mkdir -p "$out"
rank_counts=("$@")
[ ${#rank_counts[@]} -gt 0 ] || rank_counts=(2 4)
for ranks in "${rank_counts[@]}"; do
  for collective in allgather reduce_scatter allreduce alltoall bcast reduce; do
    launch "$ranks" python -m hpccoll bench "$collective" -a all -m "$sizes" -i 20 \
      --min-time 0.2 -x 10 --no-progress --json "$out/${collective}_${ranks}ranks.json"
  done
done
if [ -z "${SIZES:-}${OUT:-}" ]; then
  hpccoll report perf/results/{allgather,reduce_scatter,allreduce,alltoall,bcast,reduce}_{2,4}ranks.json \
    > perf/results/core_tables.md
fi
