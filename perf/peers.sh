#!/usr/bin/env bash
# The peers sweep: hpccoll against MPICH and Open MPI, each library's default collective and
# every algorithm it lets a user force, in one sitting, with one harness (`hpccoll bench`).
# Per rank count, collective and library: one `hpccoll bench C -a all,auto` run (the
# library's default collective, every hpccoll algorithm, auto), then one `hpccoll bench C -a
# native` run per forced algorithm (perf/peers.py variants lists them from the library's own
# mpivars / ompi_info).  Each run's JSON goes to $OUT/LIBRARY/C_Pranks_VARIANT.json; a run
# that fails (a forced algorithm that does not apply, a timeout) leaves
# C_Pranks_VARIANT.failed with its error instead.  A run whose JSON exists with the same
# settings is not made again, nor is a failed one (RETRY_FAILED=1 retries those), so an
# interrupted sweep resumes where it stopped.  Last, perf/peers.py writes the table $TABLE.
#
# Usage (repository root): bash perf/peers.sh
# Settings, from the environment (defaults):
#   COLLECTIVES   (allreduce allgather reduce_scatter alltoall bcast reduce)
#   RANKS         (2 4)
#   SIZES         hpccoll bench -m (16:16M:4: 16 B to 16 MiB, powers of 4)
#   MIN_TIME      hpccoll bench --min-time, seconds per cell (0.1)
#   ITERATIONS    hpccoll bench -i, the fewest iterations per cell (10)
#   WARMUP        hpccoll bench -x (3)
#   LIBRARIES     (mpich openmpi)
#   MPICH_BIN     bin directory with MPICH's mpiexec, mpivars and a python with mpi4py on
#                 MPICH (.venv/bin, the README's venv)
#   OPENMPI_BIN   the same for Open MPI, with ompi_info (.venv-openmpi/bin, the venv
#                 scripts/test-openmpi.sh makes)
#   OUT           the runs' directory (perf/results/peers)
#   TABLE         the report (perf/peers.md)
#   RUN_TIMEOUT   seconds one run may take before it is stopped and recorded failed (900)
#   RETRY_FAILED  1: run the failed ones again (0)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${COLLECTIVES:=allreduce allgather reduce_scatter alltoall bcast reduce}"
: "${RANKS:=2 4}" "${SIZES:=16:16M:4}" "${MIN_TIME:=0.1}" "${ITERATIONS:=10}" "${WARMUP:=3}"
: "${LIBRARIES:=mpich openmpi}" "${MPICH_BIN:=.venv/bin}" "${OPENMPI_BIN:=.venv-openmpi/bin}"
: "${OUT:=perf/results/peers}" "${TABLE:=perf/peers.md}" "${RUN_TIMEOUT:=900}"
: "${RETRY_FAILED:=0}"
# the checkout's hpccoll under both libraries' interpreters
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
command_line="COLLECTIVES='$COLLECTIVES' RANKS='$RANKS' SIZES=$SIZES MIN_TIME=$MIN_TIME"
command_line+=" ITERATIONS=$ITERATIONS WARMUP=$WARMUP LIBRARIES='$LIBRARIES'"
command_line+=" MPICH_BIN=$MPICH_BIN OPENMPI_BIN=$OPENMPI_BIN OUT=$OUT TABLE=$TABLE"
command_line+=" bash perf/peers.sh"
bench_args=(-m "$SIZES" -i "$ITERATIONS" -x "$WARMUP" --min-time "$MIN_TIME" --no-progress)
helper=("$MPICH_BIN/python" perf/peers.py)

# bin_of LIBRARY, library_env LIBRARY RANKS: perf/launch.sh
source perf/launch.sh

# launch LIBRARY COLLECTIVE RANKS [VAR=VALUE...] -- COMMAND...: COMMAND under mpiexec with
# the library's environment and the settings
launch() {
  local library=$1 collective=$2 ranks=$3 bin
  shift 3
  local -a settings=()
  while [[ $1 != -- ]]; do settings+=("$1"); shift; done
  shift
  bin=$(bin_of "$library")
  # shellcheck disable=SC2046  # library_env's words are env arguments
  timeout "$RUN_TIMEOUT" env -u "HPCCOLL_${collective^^}_ALGORITHM" \
    $(library_env "$library" "$ranks") "${settings[@]}" \
    "$bin/mpiexec" -n "$ranks" "$bin/python" "$@" < /dev/null
}

# measure LIBRARY COLLECTIVE RANKS VARIANT ALGORITHMS [VAR=VALUE...]: one hpccoll bench run,
# unless it is already measured with these settings (or failed before).  A forced MPICH
# algorithm that MPICH replaced by its own selection in the run (it says so on stderr) more
# often than in MPI_Init alone is recorded failed.
measure() {
  local library=$1 collective=$2 ranks=$3 variant=$4 algorithms=$5
  shift 5
  local run="$OUT/$library/${collective}_${ranks}ranks_$variant" status=0 why="" fell init
  if [[ -e $run.json ]] && "${helper[@]}" fresh "$run.json" --sizes "$SIZES" \
      --min-time "$MIN_TIME" --iterations "$ITERATIONS" --warmup "$WARMUP"; then
    return 0
  fi
  if [[ -e $run.failed && $RETRY_FAILED != 1 ]]; then
    return 0
  fi
  rm -f "$run.json" "$run.failed"
  echo "# $(date +%H:%M:%S) $library $collective $ranks ranks: $variant $*" >&2
  launch "$library" "$collective" "$ranks" "$@" -- -m hpccoll bench "$collective" \
    -a "$algorithms" "${bench_args[@]}" --json "$run.partial" > "$run.log" 2> "$run.err" \
    || status=$?
  if [[ $status == 124 ]]; then
    why="timed out after $RUN_TIMEOUT s"
  elif [[ $status != 0 ]]; then
    why="exit status $status"
  elif [[ $library == mpich && $variant == forced-* ]]; then
    fell=$("${helper[@]}" fallbacks "$run.err")
    launch "$library" "$collective" "$ranks" "$@" -- -c "from mpi4py import MPI" \
      > /dev/null 2> "$run.init" || true
    init=$("${helper[@]}" fallbacks "$run.init")
    rm -f "$run.init"
    if (( fell > init )); then
      why="MPICH fell back to its own selection $((fell - init)) times beyond MPI_Init's"
    fi
  fi
  if [[ -z $why ]]; then
    mv "$run.partial" "$run.json"
    rm -f "$run.err"
  else
    { echo "# $library $collective $ranks ranks $variant: $* ($why)"
      tail -n 40 "$run.err"; } > "$run.failed"
    rm -f "$run.partial" "$run.err"
    echo "#   failed: $why" >&2
  fi
}

for ranks in $RANKS; do
  for collective in $COLLECTIVES; do
    for library in $LIBRARIES; do
      mkdir -p "$OUT/$library"
      variants=$("${helper[@]}" variants "$library" "$collective" --bin "$(bin_of "$library")")
      measure "$library" "$collective" "$ranks" hpccoll all,auto
      while IFS=$'\t' read -r label settings; do
        # shellcheck disable=SC2086  # settings: VAR=VALUE words
        measure "$library" "$collective" "$ranks" "forced-$label" native $settings
      done <<< "$variants"
    done
  done
done
# shellcheck disable=SC2086  # lists of words
"${helper[@]}" table "$OUT" --command "$command_line" --collectives $COLLECTIVES \
  --ranks $RANKS --sizes "$SIZES" --out "$TABLE" > /dev/null
echo "# wrote $TABLE" >&2
