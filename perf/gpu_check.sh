#!/usr/bin/env bash
# The GPU check, one command on a machine with an NVIDIA GPU and nothing else prepared:
#   bash perf/gpu_check.sh [RESULTS_DIR]
# Installs hpccoll (MPICH wheel, tests) with Numba's CUDA target and CuPy for the CUDA version
# the driver reports into .venv-gpu, runs the GPU-marked tests (tests/mpi/test_gpu.py: CuPy,
# Numba and PyTorch arrays when installed, staged and, with a GPU-aware MPI, direct) and a
# short device benchmark (allgather, allreduce, alltoall, -a all, 8 B - 64 MiB, 1 and 2 ranks
# on the GPU), and writes everything under RESULTS_DIR (default
# perf/results/gpu-HOST-DATE/).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-perf/results/gpu-$(hostname)-$(date +%Y%m%d-%H%M%S)}
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check: nvidia-smi not found: this check needs an NVIDIA GPU and its driver" >&2
    exit 2
fi
cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' | head -n 1)
case "$cuda" in
    11) cupy=cupy-cuda11x; toolkit=cu11 ;;
    12|13) cupy=cupy-cuda12x; toolkit=cu12 ;;
    *) echo "gpu_check: the driver reports CUDA '${cuda}'; CuPy wheels exist for 11 and 12" >&2
       exit 2 ;;
esac
mkdir -p "$out"
python3 -m venv .venv-gpu
. .venv-gpu/bin/activate
pip install -q '.[mpich,test]' "numba-cuda[$toolkit]" "$cupy"
nvidia-smi > "$out/nvidia-smi.txt"
python -c "from hpccoll.runtime import buffers; print('GPU-aware MPI:', buffers.library_gpu_aware())" \
    | tee "$out/mpi.txt"
status=0
python -m pytest tests/mpi/test_gpu.py -rs 2>&1 | tee "$out/tests.txt" || status=1
for ranks in 1 2; do
    for collective in allgather allreduce alltoall; do
        mpiexec -n "$ranks" hpccoll bench "$collective" -a all -m 8:64M -d cuda \
            --json "$out/bench-$collective-$ranks.json" | tee "$out/bench-$collective-$ranks.txt" \
            || status=1
    done
done
echo "gpu_check: results in $out (status $status)"
exit $status
