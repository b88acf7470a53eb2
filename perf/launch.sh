# Sourced by the perf drivers: `launch N command...` runs mpiexec -n N.  MPICH busy-polls;
# with more ranks than cores it must yield (MPIR_CVAR_ENABLE_HEAVY_YIELD=1), with no more
# ranks than cores it must not: yielding slows native MPICH at 2 ranks on this 2-core
# machine from ~5 us to ~190 us per small call, which would flatter every ratio.
launch() {
  local ranks=$1
  shift
  if [ "$ranks" -gt "$(nproc)" ]; then
    MPIR_CVAR_ENABLE_HEAVY_YIELD=1 mpiexec -n "$ranks" "$@"
  else
    env -u MPIR_CVAR_ENABLE_HEAVY_YIELD mpiexec -n "$ranks" "$@"
  fi
}
