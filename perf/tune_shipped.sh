#!/usr/bin/env bash
# The decision table shipped with the package, hpccoll/tuning.json: `hpccoll tune` under each
# MPI library at each rank count, merged into the table (entries of rank counts not run here
# are kept); each entry names the library it was measured under, and auto reads the entries
# of the library it runs under, and the form of the calls timed (none: blocking), and auto
# resolves a call of that form by it.  Each run's output goes to perf/results/tune/.
#
# Usage (repository root): bash perf/tune_shipped.sh
# Settings, from the environment (defaults):
#   LIBRARIES     (mpich openmpi)
#   RANKS         (1 2 4; 4 ranks on 2 cores are oversubscribed; the table keeps its older
#                 3-rank rules, measured under MPICH, as entries naming no library)
#   SIZES         hpccoll tune -m (8:32M:4: 8 B to 32 MiB, powers of 4; the last rule holds
#                 for any larger size)
#   LAUNCHES      launches of hpccoll tune per library, rank count and form, their sweeps
#                 gathered by --sweeps so that the last one decides from all of them: a
#                 launch's state can change a cell's times for the whole launch (Open MPI's
#                 non-blocking allgather at 2 MiB, 2 ranks: ~0.3-0.4 ms in some launches of
#                 the same code, ~1 ms in others, perf/README.md) (3)
#   REPEAT        hpccoll tune --repeat, sweeps per collective and launch (1)
#   FORMS         hpccoll tune --form, each in turn (blocking nonblocking persistent)
#   MPICH_BIN, OPENMPI_BIN   as perf/peers.sh (.venv/bin, .venv-openmpi/bin)
#   TABLE         the table merged into (hpccoll/tuning.json)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LIBRARIES:=mpich openmpi}" "${RANKS:=1 2 4}" "${SIZES:=8:32M:4}" "${REPEAT:=1}"
: "${LAUNCHES:=3}"
: "${FORMS:=blocking nonblocking persistent}"
: "${MPICH_BIN:=.venv/bin}" "${OPENMPI_BIN:=.venv-openmpi/bin}" "${TABLE:=hpccoll/tuning.json}"
source perf/launch.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p perf/results/tune
sweeps=$(mktemp -d)
trap 'rm -rf "$sweeps"' EXIT
for library in $LIBRARIES; do
  for ranks in $RANKS; do
    for form in $FORMS; do
      bin=$(bin_of "$library")
      suffix=$([ "$form" = blocking ] || echo "_$form")
      out="perf/results/tune/${library}_${ranks}ranks${suffix}.txt"
      : > "$out"
      for launch in $(seq "$LAUNCHES"); do
        echo "# $library, $ranks rank(s), $form, launch $launch of $LAUNCHES: started $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
        # shellcheck disable=SC2046  # library_env's words are env arguments
        env $(library_env "$library" "$ranks") "$bin/mpiexec" -n "$ranks" "$bin/python" -m \
          hpccoll tune -m "$SIZES" --repeat "$REPEAT" --form "$form" \
          --sweeps "$sweeps/${library}_${ranks}_${form}.json" --out "$TABLE" < /dev/null \
          >> "$out"
      done
    done
  done
done
cp "$TABLE" perf/results/tuning.json
