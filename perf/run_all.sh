#!/usr/bin/env bash
# Every recorded run of perf/README.md, in order (repository root, in the venv; about 40
# minutes on the 2-core machine with the iteration counts of the recorded runs, before every
# cell got at least hpccoll bench's --min-time; not timed since).  perf/run_core.sh is the
# core-issue part; perf/peers.sh, the comparison with the libraries' forced algorithms, runs
# apart.
set -euo pipefail
mkdir -p perf/results
source perf/launch.sh
bash perf/run_core.sh 2 4
for run in 1 2 3; do        # log-round vs pairwise alltoall at 8 ranks, small messages
  launch 8 hpccoll bench alltoall -a pairwise,xor,bruck,hypercube,direct -m 8:4K -i 100 \
    --json "perf/results/alltoall_8ranks_small_run$run.json"
done
hpccoll report perf/results/alltoall_8ranks_small_run{1,2,3}.json > perf/results/alltoall_8ranks_small.md
rm -f perf/results/tuning.json
for ranks in 2 3 4; do
  launch "$ranks" hpccoll tune -m 8:16M -i 20 --out perf/results/tuning.json
done
cp perf/results/tuning.json hpccoll/tuning.json     # the table shipped with the package
# (check_auto exits 1 when a size misses; the report records which, so the run goes on)
python perf/check_auto.py --ranks 2 4 --tuning perf/results/tuning.json \
  --out perf/results/auto_check_tuned.md || true
python perf/check_auto.py --ranks 2 4 --tuning none --out perf/results/auto_check_cost_model.md \
  || true
python perf/bench_kernels.py --json perf/results/kernels.json > perf/results/kernels.md
for ranks in 2 3 4; do
  launch "$ranks" hpccoll bench allgather -a ring,multiring -m 8:16M \
    --json "perf/results/multiring_allgather_${ranks}ranks.json"
done
hpccoll report perf/results/multiring_allgather_{2,3,4}ranks.json > perf/results/multiring_tables.md
python perf/multiring_model.py > perf/results/multiring_model.md
for straggler in "" "--delay 1:2000" "--pause 1:0.05:2000"; do
  name=$(echo "${straggler:-none}" | tr -d ' -' | tr ':' '_')
  HPCCOLL_TOPOLOGY=nodes=2,ppn=2 launch 4 hpccoll bench allreduce \
    -a ring,rat,ps,rabenseifner -m 1K:16M -i 50 $straggler \
    --json "perf/results/straggler_allreduce_4ranks_${name}.json"
done
hpccoll report perf/results/straggler_allreduce_4ranks_{none,delay1_2000,pause1_0.05_2000}.json \
  > perf/results/straggler_tables.md
python perf/degradation.py perf/results/straggler_allreduce_4ranks_{none,delay1_2000,pause1_0.05_2000}.json \
  > perf/results/straggler_degradation.md
for ranks in 2 4; do
  launch "$ranks" python perf/bench_shared.py -m 1K:64M \
    --json "perf/results/shared_${ranks}ranks.json" > "perf/results/shared_${ranks}ranks.md"
  launch "$ranks" python perf/bench_fusion.py --json "perf/results/fusion_${ranks}ranks.json" \
    > "perf/results/fusion_${ranks}ranks.md"
done
for collective in allgather reduce_scatter allreduce alltoall; do
  launch 2 hpccoll bench "$collective" -a all -m 8:16M \
    --plot "perf/results/${collective}_2ranks.png" > /dev/null
done
{ echo "# csc allgather against native MPICH with and without its single-copy (CMA) transfers"
  for cma in 1 0; do
    echo; echo "\`MPIR_CVAR_CH4_CMA_ENABLE=$cma mpiexec -n 2 hpccoll bench allgather -a csc,direct -m 1M:4M -i 50\`"
    echo; echo '```text'
    MPIR_CVAR_CH4_CMA_ENABLE=$cma launch 2 hpccoll bench allgather -a csc,direct -m 1M:4M -i 50
    echo '```'
  done; } > perf/results/csc_cma.md
