# Sourced by run_gpu.sh and run_cpu.sh.
# run_job NAME PORT SCRIPT [ARGS...]
#   Runs SCRIPT under torchrun (2 ranks, 127.0.0.1:PORT) with --redirects 3 --tee 3,
#   writing $OUT_ROOT/NAME/console.log (torchrun's combined stdout+stderr) and the
#   per-rank files under $OUT_ROOT/NAME/ranks/. Extra environment for the job comes
#   from the array JOB_ENV; a command prefix (e.g. a mount namespace) from JOB_WRAP.
#   run.txt records the command, the environment, start/end time and exit code.
run_job() {
    local name=$1 port=$2 script=$3
    shift 3
    local dir="$OUT_ROOT/$name"
    rm -rf "$dir"
    mkdir -p "$dir"
    local -a cmd=("$PY" -m torch.distributed.run --nnodes 1 --nproc-per-node 2
        --master-addr 127.0.0.1 --master-port "$port"
        --log-dir "$dir/ranks" --redirects 3 --tee 3
        "$HERE/$script" --backend "$BACKEND" "$@")
    local -a envs=("${COMMON_ENV[@]}" "${JOB_ENV[@]}")
    {
        echo "scenario: $name"
        echo "host: $(hostname)"
        printf 'env:'; printf ' %q' "${envs[@]}"; echo
        printf 'wrap:'; printf ' %q' "${JOB_WRAP[@]}"; echo
        printf 'command:'; printf ' %q' "${cmd[@]}"; echo
        echo "start: $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
    } > "$dir/run.txt"
    (
        cd "$dir" || exit 1
        env "${envs[@]}" "${JOB_WRAP[@]}" timeout -s TERM -k 20 "$JOB_TIMEOUT" "${cmd[@]}" > "$dir/console.log" 2>&1
        rc=$?
        { echo "end: $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"; echo "exit_code: $rc"; } >> "$dir/run.txt"
    )
}
