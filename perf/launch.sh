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
