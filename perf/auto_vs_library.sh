#!/usr/bin/env bash
# auto against the MPI library's own collective (issue 31, item 1: auto >= 0.95x the
# library's default everywhere), under each library, with the table shipped in the package:
# `hpccoll bench C -a auto` (whose baseline row is mpi4py's plain call on the same arrays),
# RUNS times per collective and rank count, each run's JSON to
# $OUT/LIBRARY/C_Pranks_runK.json; then perf/auto_vs_library.py writes $REPORT: per cell the
# median of the runs' ratios (library's time / auto's) and their range.
#
# Usage (repository root): bash perf/auto_vs_library.sh
# Settings, from the environment (defaults):
#   COLLECTIVES   (allreduce allgather reduce_scatter alltoall bcast reduce: what hpccoll
#                 bench times)
#   LIBRARIES     (mpich openmpi)      RANKS (1 2)      RUNS (3)
#   SIZES         hpccoll bench -m (8:32M:4)      MIN_TIME  hpccoll bench --min-time (0.1)
#   FORM          hpccoll bench --form (blocking; nonblocking, persistent: each against the
#                 library's own call of that form)
#   MPICH_BIN, OPENMPI_BIN   as perf/peers.sh (.venv/bin, .venv-openmpi/bin)
#   TABLE         a decision table to run auto by instead of the shipped one (none; the
#                 launches drop any HPCCOLL_TUNING_FILE of the caller's environment)
#   OUT           (perf/results/auto_vs_library, with _FORM after it for another form)
#   REPORT        (perf/auto_vs_library.md; perf/auto_vs_library_FORM.md)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${COLLECTIVES:=allreduce allgather reduce_scatter alltoall bcast reduce}"
: "${LIBRARIES:=mpich openmpi}" "${RANKS:=1 2}" "${RUNS:=3}" "${SIZES:=8:32M:4}"
: "${MIN_TIME:=0.1}" "${MPICH_BIN:=.venv/bin}" "${OPENMPI_BIN:=.venv-openmpi/bin}"
: "${FORM:=blocking}"
suffix=$([ "$FORM" = blocking ] || echo "_$FORM")
: "${OUT:=perf/results/auto_vs_library$suffix}" "${REPORT:=perf/auto_vs_library$suffix.md}"
source perf/launch.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
for library in $LIBRARIES; do
  mkdir -p "$OUT/$library"
  bin=$(bin_of "$library")
  for ranks in $RANKS; do
    for collective in $COLLECTIVES; do
      for run in $(seq "$RUNS"); do
        # shellcheck disable=SC2046  # library_env's words are env arguments
        env -u "HPCCOLL_${collective^^}_ALGORITHM" $(library_env "$library" "$ranks") \
          ${TABLE:+HPCCOLL_TUNING_FILE=$TABLE} \
          "$bin/mpiexec" -n "$ranks" "$bin/python" -m hpccoll bench "$collective" -a auto \
          -m "$SIZES" --min-time "$MIN_TIME" --form "$FORM" --no-progress \
          --json "$OUT/$library/${collective}_${ranks}ranks_run$run.json" < /dev/null > /dev/null
      done
    done
  done
done
"$MPICH_BIN/python" perf/auto_vs_library.py "$OUT" --out "$REPORT" \
  --command "${TABLE:+TABLE=$TABLE }COLLECTIVES='$COLLECTIVES' LIBRARIES='$LIBRARIES' RANKS='$RANKS' RUNS=$RUNS SIZES=$SIZES MIN_TIME=$MIN_TIME FORM=$FORM bash perf/auto_vs_library.sh"
