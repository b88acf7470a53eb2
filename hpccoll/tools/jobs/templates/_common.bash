# ---- common part of every hpccoll job (jobs/_common.bash, included at render time) ----------
# Settings shared by every template (see the header above for what they mean):
LAUNCHER={{launcher}}
SRUN_MPI={{srun_mpi}}
OUTPUT_DIR={{output_dir}}
HPCCOLL_VENV={{venv}}
HPCCOLL_PYTHON={{python}}
TEMPLATE={{template}}
RENDERED_NODES={{nodes}}
RENDERED_NTASKS_PER_NODE={{ntasks_per_node}}

set -uo pipefail
HPCCOLL=("$HPCCOLL_PYTHON" -m hpccoll)

# Where this job stands: under SLURM its allocation; run by hand (bash FILE, no SLURM), a
# "local" run of the rendered size with mpiexec, for trying a template out.
if [ -n "${SLURM_JOB_ID:-}" ]; then
    JOB_ID=$SLURM_JOB_ID
    JOB_NAME=${SLURM_JOB_NAME:-{{job_name}}}
    NNODES=${SLURM_JOB_NUM_NODES:-$RENDERED_NODES}
    NTASKS=${SLURM_NTASKS:-$((NNODES * RENDERED_NTASKS_PER_NODE))}
    NODELIST=${SLURM_JOB_NODELIST:-$(hostname)}
else
    JOB_ID=local-$(date +%Y%m%dT%H%M%S)-$$
    JOB_NAME={{job_name}}
    NNODES=$RENDERED_NODES
    NTASKS=$((RENDERED_NODES * RENDERED_NTASKS_PER_NODE))
    NODELIST=$(hostname)
fi
RUN_DIR=$OUTPUT_DIR/$JOB_NAME-$JOB_ID
mkdir -p "$RUN_DIR" || { echo "hpccoll job: cannot create $RUN_DIR" >&2; exit 1; }
cp "$0" "$RUN_DIR/job.sbatch" 2>/dev/null || true

json_string() {   # a JSON string literal for $1
    local s=${1//\\/\\\\}
    s=${s//\"/\\\"}
    printf '"%s"' "$s"
}

# job.json: what ran where (read by `hpccoll jobs collect/status`).
{
    printf '{\n'
    printf ' "template": %s,\n' "$(json_string "$TEMPLATE")"
    printf ' "job_name": %s,\n' "$(json_string "$JOB_NAME")"
    printf ' "job_id": %s,\n' "$(json_string "$JOB_ID")"
    printf ' "study": %s,\n' "$(json_string "${HPCCOLL_STUDY:-}")"
    printf ' "point": %s,\n' "$(json_string "${HPCCOLL_POINT:-}")"
    printf ' "nodes": %d,\n' "$NNODES"
    printf ' "ntasks": %d,\n' "$NTASKS"
    printf ' "nodelist": %s,\n' "$(json_string "$NODELIST")"
    printf ' "partition": %s,\n' "$(json_string "${SLURM_JOB_PARTITION:-}")"
    printf ' "launcher": %s,\n' "$(json_string "$LAUNCHER")"
    printf ' "python": %s,\n' "$(json_string "$HPCCOLL_PYTHON")"
    printf ' "log": %s,\n' "$(json_string "$OUTPUT_DIR/$JOB_NAME-$JOB_ID.out")"
    printf ' "start": %s\n' "$(json_string "$(date '+%Y-%m-%dT%H:%M:%S%z')")"
    printf '}\n'
} > "$RUN_DIR/job.json"

STEP_NAMES=()
STEP_CODES=()
STEP_SECONDS=()
PHASE=setup
TERMINATED=
RUNNING_STEP=

# status.json, written whatever way the script ends (a job killed with SIGKILL leaves none:
# `hpccoll jobs status` then asks SLURM).
write_status() {
    local code=$1 state=COMPLETED i failed=()
    # A signal from here on (SLURM's SIGTERM often comes just after a cancelled step ended and
    # the script went on to exit) is recorded but must not cut the writing short.
    trap 'TERMINATED=TERM' TERM
    trap 'TERMINATED=INT' INT
    [ "$code" -eq 0 ] || state=FAILED
    [ -z "$TERMINATED" ] || state=TERMINATED
    for i in "${!STEP_NAMES[@]}"; do
        [ "${STEP_CODES[i]}" -eq 0 ] || failed+=("$(json_string "${STEP_NAMES[i]}")")
    done
    {
        printf '{\n'
        printf ' "job_id": %s,\n' "$(json_string "$JOB_ID")"
        printf ' "job_name": %s,\n' "$(json_string "$JOB_NAME")"
        printf ' "state": "%s",\n' "$state"
        printf ' "exit_code": %d,\n' "$code"
        printf ' "phase": "%s",\n' "$PHASE"
        printf ' "signal": "%s",\n' "$TERMINATED"
        printf ' "running_step": %s,\n' "$(json_string "$RUNNING_STEP")"
        printf ' "failed_steps": [%s],\n' "$(IFS=,; echo "${failed[*]-}")"
        printf ' "steps": ['
        for i in "${!STEP_NAMES[@]}"; do
            [ "$i" -eq 0 ] || printf ','
            printf '\n  {"name": %s, "exit_code": %d, "seconds": %d}' \
                "$(json_string "${STEP_NAMES[i]}")" "${STEP_CODES[i]}" "${STEP_SECONDS[i]}"
        done
        printf '],\n'
        printf ' "end": %s\n' "$(json_string "$(date '+%Y-%m-%dT%H:%M:%S%z')")"
        printf '}\n'
    } > "$RUN_DIR/status.json.tmp" && mv -f "$RUN_DIR/status.json.tmp" "$RUN_DIR/status.json"
    echo "hpccoll job $JOB_NAME-$JOB_ID: $state (exit $code, phase $PHASE); results in $RUN_DIR"
}
trap 'write_status $?' EXIT
trap 'TERMINATED=TERM; echo "hpccoll job: SIGTERM (time limit or scancel)" >&2; exit 143' TERM
trap 'TERMINATED=INT; exit 130' INT

fail_setup() {
    echo "hpccoll job: $*" >&2
    exit 2
}

# Launch one MPI program on every task of the allocation.
launch() {
    case "$LAUNCHER" in
        srun) srun --mpi="$SRUN_MPI" --nodes="$NNODES" --ntasks="$NTASKS" --kill-on-bad-exit=1 "$@" ;;
        mpiexec) mpiexec -n "$NTASKS" "$@" ;;
        *) echo "hpccoll job: unknown launcher $LAUNCHER" >&2; return 2 ;;
    esac
}

# run_step NAME COMMAND...: run it, its output to the job log and RUN_DIR/NAME.log, and record
# its exit status; a failed step does not stop the job (the others still run) but fails it.
run_step() {
    local name=$1 start=$SECONDS code
    shift
    echo "=== $name: $*"
    RUNNING_STEP=$name
    "$@" 2>&1 | tee "$RUN_DIR/$name.log"
    code=${PIPESTATUS[0]}
    if [ "$code" -gt 128 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
        # The step was killed by a signal.  When SLURM is ending the job (scancel, time limit)
        # it cancels the step first and signals this script moments later: wait for that, so
        # the job is recorded as terminated during this step, not as a step that failed.
        sleep 3 & wait $!
    fi
    RUNNING_STEP=
    STEP_NAMES+=("$name")
    STEP_CODES+=("$code")
    STEP_SECONDS+=($((SECONDS - start)))
    echo "=== $name: exit $code after $((SECONDS - start)) s"
    return 0
}

# Exit status of the job: non-zero when any step failed (SLURM then reports FAILED).
finish() {
    local code i
    PHASE=done
    code=0
    for i in "${!STEP_CODES[@]}"; do
        [ "${STEP_CODES[i]}" -eq 0 ] || code=1
    done
    exit "$code"
}

echo "hpccoll job $JOB_NAME-$JOB_ID ($TEMPLATE): $NNODES node(s) [$NODELIST], $NTASKS task(s), launcher $LAUNCHER; results in $RUN_DIR"

# Setup: environment, the user's commands (module load ...), the Python environment.  Any
# failure here ends the job (FAILED, phase setup).
set -e
{{lines setup}}
if [ -n "$HPCCOLL_VENV" ]; then
    [ -f "$HPCCOLL_VENV/bin/activate" ] || fail_setup "no virtual environment at $HPCCOLL_VENV"
    # shellcheck disable=SC1091
    source "$HPCCOLL_VENV/bin/activate"
else
    PATH=$(dirname "$HPCCOLL_PYTHON"):$PATH    # where pip put mpiexec, for a non-venv install
fi
[ -x "$HPCCOLL_PYTHON" ] || fail_setup "no Python interpreter at $HPCCOLL_PYTHON"
"$HPCCOLL_PYTHON" -c "import hpccoll" || fail_setup "$HPCCOLL_PYTHON cannot import hpccoll"
if [ "$LAUNCHER" = srun ] && [ -z "${SLURM_JOB_ID:-}" ]; then
    fail_setup "launcher srun needs a SLURM job: submit with sbatch (or render with --launcher mpiexec to run it by hand)"
fi
if [ "$LAUNCHER" = mpiexec ]; then
    command -v mpiexec > /dev/null || fail_setup "no mpiexec on PATH"
fi
set +e
PHASE=steps
# ---- end of the common part --------------------------------------------------------------
