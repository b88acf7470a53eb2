#!/usr/bin/env bash
# The GPU check: the one command a session with a lent NVIDIA GPU runs first (perf/README.md,
# "The GPU check", says how through the device tool; about 5 minutes on one H100):
#   bash perf/gpu_check.sh [--simulate] [RESULTS_DIR]
# It records the machine (nvidia-smi, driver and CUDA versions, pip list, the git revision,
# stderr), installs the wheels carried in .whl/ without a package index (pip --no-index
# --prefix; none needed where everything is installed), runs tests/mpi/test_gpu.py (every
# collective and algorithm on CuPy, Numba and PyTorch device arrays, staged and through the
# GPU-aware executor where MPI reads GPU memory, MPI's own call on managed memory, inputs
# from other streams, a call that must not wait for a kernel sleeping on another stream,
# the issue-34 cases) and fails if any of them
# skipped (no CUDA, no NVVM) or failed, then measures the kernels' first compile (cache
# empty, then full), an 8 B allreduce against host buffers, what a staged call waits for
# while a kernel sleeps on another stream (perf/gpu_check.py waits), and a short
# benchmark (allreduce, allgather, alltoall, 8 B - 4 MiB, 1 and 2 ranks).  Everything goes
# to RESULTS_DIR (default perf/results/gpu-HOST-DATE/), the summary to the last lines of
# stdout.  Without a GPU it prints one line and exits 2.  --simulate rehearses the GPU mode
# under Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1: Numba arrays only, no GPU, no
# managed memory; the benchmark at 8 B - 1 KiB).
set -uo pipefail
cd "$(dirname "$0")/.."
simulate=0
if [ "${1:-}" = "--simulate" ]; then
    simulate=1
    shift
fi
out=${1:-perf/results/gpu-$(hostname)-$(date +%Y%m%d-%H%M%S)}
python=${PYTHON:-python3}
if [ $simulate = 0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi finds none): nothing checked"
    exit 2
fi
mkdir -p "$out"
exec 2> >(tee "$out/stderr.txt" >&2)
status=0
fail() {
    echo "gpu_check: FAILED: $*"
    status=1
}

if ls .whl/*.whl >/dev/null 2>&1; then     # carried wheels: no index on the GPU machine
    prefix=/tmp/hpccoll-gpu-check
    $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --ignore-installed --prefix "$prefix" .whl/*.whl || {
        echo "gpu_check: the wheels in .whl/ did not install"
        exit 1
    }
    site=$($python -c "import sys; print(f'lib/python{sys.version_info[0]}.{sys.version_info[1]}')")
    export PYTHONPATH=$prefix/$site/site-packages PATH=$prefix/bin:$PATH
    export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export NUMBA_CACHE_DIR=$out/numba-cache HPCCOLL_TIMEOUT=120
if [ $simulate = 1 ]; then
    export NUMBA_ENABLE_CUDASIM=1 HPCCOLL_REHEARSAL=1
    sizes=8:1K
else
    sizes=8:4M
fi

{
    echo "date: $(date -u +%FT%TZ)  host: $(hostname)  simulate: $simulate"
    echo "git: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
    if [ $simulate = 0 ]; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free --format=csv
        nvidia-smi | sed -n 's/.*\(CUDA Version: *[0-9.]*\).*/\1/p' | head -n 1
    fi
    $python - <<'EOF'
import sys
print("python", sys.version.split()[0])
for name in ("numpy", "numba", "numba.cuda", "mpi4py", "cupy", "torch"):
    try:
        module = __import__(name, fromlist=["_"])
        print(name, getattr(module, "__version__", ""), module.__file__)
    except Exception as error:
        print(name, "missing:", error)
from numba import cuda
print("numba.cuda available:", cuda.is_available())
from mpi4py import MPI
print(MPI.Get_library_version().splitlines()[0])
from hpccoll.runtime import buffers
print("MPIX_Query_cuda_support:", buffers.library_gpu_aware())
EOF
} 2>&1 | tee "$out/machine.txt" || fail "the machine could not be read (see $out/machine.txt)"
[ $simulate = 0 ] && nvidia-smi > "$out/nvidia-smi.txt" 2>&1
$python -m pip list > "$out/pip-list.txt" 2>&1

timeout 360 $python -m pytest tests/mpi/test_gpu.py -rs -p no:cacheprovider 2>&1 \
    | tee "$out/tests.txt"
tests=$?
summary=$(grep -E "^=+ .*(passed|failed|skipped|error).* =+$" "$out/tests.txt" | tail -n 1)
if [ $tests != 0 ] || ! grep -q "passed" <<<"$summary" || grep -qE "skipped|failed|error" <<<"$summary"; then
    fail "tests/mpi/test_gpu.py: ${summary:-no summary (exit $tests)}"
fi

for run in "cache empty" "cache full"; do
    timeout 120 $python perf/gpu_check.py compile 2>&1 | sed "s/\$/ ($run)/" \
        | tee -a "$out/compile.txt" || fail "compile ($run)"
done
for ranks in 1 2; do
    timeout 120 mpiexec -n $ranks $python perf/gpu_check.py latency 2>&1 \
        | tee -a "$out/latency.txt" || fail "latency at $ranks rank(s)"
done
if [ $simulate = 0 ]; then                 # the simulator has no streams to wait for
    for ranks in 1 2; do
        timeout 120 mpiexec -n $ranks $python perf/gpu_check.py waits 2>&1 \
            | tee -a "$out/waits.txt" || fail "waits at $ranks rank(s)"
    done
fi
for ranks in 1 2; do
    for collective in allreduce allgather alltoall; do
        timeout 60 mpiexec -n $ranks $python -m hpccoll bench $collective -a ring,native \
            -m $sizes -d cuda -i 20 --json "$out/bench-$collective-$ranks.json" \
            > "$out/bench-$collective-$ranks.txt" 2>&1 \
            || fail "bench $collective at $ranks rank(s) (see $out/bench-$collective-$ranks.txt)"
    done
done

echo "gpu_check: tests: ${summary:-none}"
grep -h "^gpu_check:" "$out/compile.txt" "$out/latency.txt" "$out/waits.txt" 2>/dev/null
echo "gpu_check: results in $out; $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
