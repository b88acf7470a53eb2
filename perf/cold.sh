#!/usr/bin/env bash
# Warm against cold buffers (`hpccoll bench --cold`): the same cells -- native and auto at
# every size of $SIZES -- once on one pair of buffers per cell (OSU's way) and once rotating
# through buffers of at least twice the last-level cache per rank, the two runs of a
# collective back to back, the whole round repeated $REPEATS times so that the host's load
# falls on both alike.  Each run's JSON goes to $OUT/C_MODE_rREP.json; then perf/cold.py
# prints the medians over the repeats (perf/cold.md keeps them).
#
# Usage (repository root, venv active): bash perf/cold.sh
# Settings, from the environment (defaults):
#   COLLECTIVES  (allreduce allgather alltoall)
#   RANKS        2
#   SIZES        hpccoll bench -m (8:16M)
#   REPEATS      3
#   MIN_TIME     hpccoll bench --min-time (0.2)
#   OUT          perf/results/cold
set -euo pipefail
COLLECTIVES=${COLLECTIVES:-allreduce allgather alltoall}
RANKS=${RANKS:-2}
SIZES=${SIZES:-8:16M}
REPEATS=${REPEATS:-3}
MIN_TIME=${MIN_TIME:-0.2}
OUT=${OUT:-perf/results/cold}
mkdir -p "$OUT"
for rep in $(seq 1 "$REPEATS"); do
    for collective in $COLLECTIVES; do
        for mode in warm cold; do
            flag=$([ "$mode" = cold ] && echo --cold || true)
            mpiexec -n "$RANKS" python -m hpccoll bench "$collective" -a auto -m "$SIZES" \
                --min-time "$MIN_TIME" --no-progress $flag \
                --json "$OUT/${collective}_${mode}_r${rep}.json" > /dev/null
            echo "done: $collective $mode repeat $rep ($(date +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
        done
    done
done
python perf/cold.py "$OUT"
