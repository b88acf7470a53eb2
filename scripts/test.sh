#!/usr/bin/env bash
# The whole test suite as CI runs it (the end of the README's test command), in the venv of
# the README's command (hpccoll installed editable with the mpich, test and sim extras).
# Usage, from anywhere: bash scripts/test.sh
#
# Two streams share the cores.  One runs the MPICH venv's MPI launches and the SLURM tests,
# then the in-process verification of every algorithm (tests/unit/test_verify.py); the other
# the rest of the unit tests (one process: one core), then the Open MPI pass
# (scripts/test-openmpi.sh).  On 2 cores the MPI launches leave a core idle much of the time
# (launches at 1 rank, ranks starting up and waiting), so the two side by side take about
# 30% less time than one after the other, and with the verification in the first stream the
# two take about as long (perf/README.md, "CI's time").  Each stream keeps
# Numba's disk cache apart: Numba does not lock it, and two processes adding different
# compilations of one function at the same moment can both claim the same data file.  The
# second stream's cache is build/numba-cache (the unit tests and the Open MPI pass, one after
# the other, share it); the first's is beside the sources, as a plain `pytest` run's.
# The second stream's output is printed when both are done; the exit status is 1 if either
# failed.  `python -m pytest tests` runs the same MPICH tests one after the other.
set -uo pipefail
cd "$(dirname "$0")/.."
# The Open MPI venv first: its editable install rebuilds the C entry in the source tree,
# which must not happen while the MPICH stream's processes have it loaded.
bash scripts/test-openmpi.sh --install-only >/dev/null || exit 1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
trap 'kill 0' INT TERM          # an interrupt stops both streams
(
    export NUMBA_CACHE_DIR="$PWD/build/numba-cache"
    python -m pytest tests/unit --ignore tests/unit/test_verify.py; unit=$?
    # (the Open MPI pass runs whatever the result)
    bash scripts/test-openmpi.sh --installed && exit "$unit"
) >"$log" 2>&1 &
pid=$!
python -m pytest tests/mpi tests/slurm tests/unit/test_verify.py
first=$?
wait "$pid"
second=$?
echo "---- the other unit tests, then the Open MPI pass (run beside the above) ----"
cat "$log"
echo "MPICH's MPI and SLURM tests, the verification: exit $first;" \
    "the other unit tests, the Open MPI pass: exit $second"
[ "$first" = 0 ] && [ "$second" = 0 ]
