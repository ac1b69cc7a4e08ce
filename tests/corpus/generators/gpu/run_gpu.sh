#!/usr/bin/env bash
# Runs every GPU scenario CONCURRENTLY on one machine with 2 GPUs (each job: 2
# ranks under torchrun, its own MASTER_PORT; the models are tiny, so the jobs
# share the GPUs). Logs go to OUT_ROOT/<scenario>/ (default tests/corpus/gpu).
#
#   bash tests/corpus/generators/gpu/run_gpu.sh [OUT_ROOT] [scenario ...]
#
# Needs: python3 with torch (CUDA) + NCCL, root for the disk-full scenario
# (tmpfs in a private mount namespace), py-spy on PATH or in /tmp/site/bin for
# hang-pyspy (skipped otherwise). NVLink multicast is kept off everywhere.
# For a dry run of the plumbing on a CPU box: BACKEND=gloo PY=... run_gpu.sh /tmp/x
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT_ROOT=$(mkdir -p "${1:-$HERE/../../gpu}" && cd "${1:-$HERE/../../gpu}" && pwd)
shift || true
PY=${PY:-python3}
BACKEND=${BACKEND:-nccl}
JOB_TIMEOUT=${JOB_TIMEOUT:-330}
source "$HERE/lib.sh"

COMMON_ENV=(NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    PYTHONUNBUFFERED=1 GLOO_SOCKET_IFNAME=lo)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
fr_env() {  # flight recorder, dumped on timeout into the scenario folder
    echo TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 \
        "TORCH_FR_DUMP_TEMP_FILE=$OUT_ROOT/$1/nccl_trace_rank_"
}
want() {  # scenario selected on the command line (all when none given)
    [ ${#SELECT[@]} -eq 0 ] && return 0
    local s; for s in "${SELECT[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1
}
SELECT=("$@")
PYSPY=$(command -v py-spy || ls /tmp/site/bin/py-spy 2>/dev/null || true)

{
    echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; uname -a
    "$PY" -c 'import torch,sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda); print("nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None); print("gpus", torch.cuda.device_count())' 2>&1
    nvidia-smi -L 2>&1; nvidia-smi topo -m 2>&1
    echo "py-spy: ${PYSPY:-none}"
} > "$OUT_ROOT/env.txt"

T0=$(date +%s)
declare -a PIDS=()
go() { "$@" & PIDS+=($!); }

if want skipped-collective; then
    JOB_ENV=(NCCL_DEBUG=WARN $(fr_env skipped-collective)); JOB_WRAP=()
    go run_job skipped-collective 29501 skipped_collective.py --steps 30 --fault-step 12
fi
if want mismatched-size; then
    JOB_ENV=($(fr_env mismatched-size)); JOB_WRAP=()
    go run_job mismatched-size 29502 mismatched_size.py --no-ddp --steps 30 --fault-step 8
fi
if want mismatched-size-debug-detail; then
    JOB_ENV=(TORCH_DISTRIBUTED_DEBUG=DETAIL $(fr_env mismatched-size-debug-detail)); JOB_WRAP=()
    go run_job mismatched-size-debug-detail 29503 mismatched_size.py --no-ddp --steps 30 --fault-step 8
fi
if want straggler-timeout; then
    JOB_ENV=(NCCL_DEBUG=WARN $(fr_env straggler-timeout)); JOB_WRAP=()
    go run_job straggler-timeout 29504 straggler_timeout.py --steps 30 --fault-step 10
fi
if want ckpt-gather-deadlock; then
    JOB_ENV=($(fr_env ckpt-gather-deadlock)); JOB_WRAP=()
    go run_job ckpt-gather-deadlock 29505 ckpt_gather_deadlock.py --steps 30 --ckpt-every 10 \
        --ckpt-dir /tmp/corpus_ckpt/ckpt-gather-deadlock
fi
if want ckpt-barrier-deadlock; then
    JOB_ENV=(NCCL_DEBUG=WARN $(fr_env ckpt-barrier-deadlock)); JOB_WRAP=()
    go run_job ckpt-barrier-deadlock 29518 ckpt_gather_deadlock.py --variant barrier --steps 30 --ckpt-every 10 \
        --ckpt-dir /tmp/corpus_ckpt/ckpt-barrier-deadlock
fi
if want silent-rank-death; then
    JOB_ENV=($(fr_env silent-rank-death)); JOB_WRAP=()
    go run_job silent-rank-death 29506 silent_rank_death.py --steps 30 --fault-step 14 --how exit0
fi
if want silent-rank-death-sigkill; then
    JOB_ENV=(NCCL_DEBUG=WARN $(fr_env silent-rank-death-sigkill)); JOB_WRAP=()
    go run_job silent-rank-death-sigkill 29507 silent_rank_death.py --steps 30 --fault-step 14 --how kill
fi
if want cuda-oom; then
    JOB_ENV=(NCCL_DEBUG=WARN); JOB_WRAP=()
    go run_job cuda-oom 29508 cuda_oom.py --steps 30 --fault-step 7
fi
if want device-assert; then
    JOB_ENV=(); JOB_WRAP=()
    go run_job device-assert 29509 device_assert.py --steps 30 --fault-step 6 --fault-rank 0
fi
if want device-assert-launch-blocking; then
    JOB_ENV=(CUDA_LAUNCH_BLOCKING=1 NCCL_DEBUG=WARN); JOB_WRAP=()
    go run_job device-assert-launch-blocking 29510 device_assert.py --steps 30 --fault-step 6 --fault-rank 0
fi
if want disk-full-ckpt; then
    JOB_ENV=(NCCL_DEBUG=WARN)
    # 8 MiB tmpfs at /mnt/tiny, visible only inside this private mount namespace
    JOB_WRAP=(unshare --mount --propagation private bash -c
        'mkdir -p /mnt/tiny && mount -t tmpfs -o size=8m tmpfs /mnt/tiny && exec "$@"' bash)
    go run_job disk-full-ckpt 29511 disk_full_ckpt.py --steps 30 --ckpt-every 10 --ckpt-dir /mnt/tiny/checkpoints
fi
if want nan-loss; then
    JOB_ENV=(); JOB_WRAP=()
    go run_job nan-loss 29512 nan_loss.py --steps 60 --optimizer sgd --lr 0.5 --warmup-steps 10 --max-grad-norm 0
fi
if want nan-rollout-multinomial; then
    JOB_ENV=(NCCL_DEBUG=WARN); JOB_WRAP=()
    go run_job nan-rollout-multinomial 29513 nan_loss.py --steps 60 --optimizer sgd --lr 2 --warmup-steps 10 --max-grad-norm 0
fi
if want nccl-bad-ifname; then
    JOB_ENV=(NCCL_SOCKET_IFNAME=doesnotexist0 NCCL_DEBUG=INFO); JOB_WRAP=()
    go run_job nccl-bad-ifname 29514 nccl_bad_ifname.py --steps 30
fi
if want fail-slow; then
    JOB_ENV=(NCCL_DEBUG=WARN); JOB_WRAP=()
    go run_job fail-slow 29515 fail_slow.py --steps 160 --fault-step 40 --eval-every 20 --slow-per-step 0.005
fi
if want healthy-nccl-info; then
    JOB_ENV=(NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=INFO); JOB_WRAP=()
    go run_job healthy-nccl-info 29516 healthy.py --steps 50 --eval-every 10 --ckpt-every 25 \
        --ckpt-dir /tmp/corpus_ckpt/healthy-nccl-info
fi
if want silent-straggler; then
    # the straggler without a heartbeat: rank 1 prints nothing while stuck, then torchrun
    # SIGTERMs it (exitcode -15) once rank 0's watchdog has aborted: it was alive, not dead
    JOB_ENV=(NCCL_DEBUG=WARN); JOB_WRAP=()
    go run_job silent-straggler 29519 straggler_timeout.py --steps 30 --fault-step 10 --heartbeat 0
fi
if want stuck-rank-sigterm; then
    # rank 1 stalls for 10x the timeout without a heartbeat: rank 0's watchdog aborts (torch
    # 2.11 waits ~60 s for the debug dump first) while rank 1 still sleeps, silent; torchrun then
    # SIGTERMs rank 1 (exitcode -15): alive and stuck, not dead
    JOB_ENV=(NCCL_DEBUG=WARN TORCH_NCCL_DUMP_ON_TIMEOUT=0); JOB_WRAP=()
    go run_job stuck-rank-sigterm 29522 straggler_timeout.py --steps 30 --fault-step 10 --heartbeat 0 \
        --stall-factor 10
fi
if want silent-ckpt-barrier-deadlock; then
    JOB_ENV=(NCCL_DEBUG=WARN); JOB_WRAP=()
    go run_job silent-ckpt-barrier-deadlock 29520 ckpt_gather_deadlock.py --variant barrier --steps 30 \
        --ckpt-every 10 --heartbeat 0 --ckpt-dir /tmp/corpus_ckpt/silent-ckpt-barrier-deadlock
fi
if want oom-colocated; then
    JOB_ENV=(NCCL_DEBUG=WARN); JOB_WRAP=()
    go run_job oom-colocated 29521 oom_colocated.py --steps 30 --fault-step 6
fi
if want hang-pyspy; then
    MK=/tmp/corpus_markers/hang-pyspy; rm -rf "$MK"; mkdir -p "$MK"
    JOB_ENV=(HANG_MARKER_DIR=$MK $(fr_env hang-pyspy)); JOB_WRAP=()
    go run_job hang-pyspy 29517 hang_pyspy.py --steps 30 --eval-every 10 --fault-step 10
    (   # py-spy both ranks 10 s after they block
        for _ in $(seq 1 240); do
            [ -e "$MK/blocking_rank0" ] && [ -e "$MK/blocking_rank1" ] && break; sleep 0.5
        done
        sleep 10
        for r in 0 1; do
            pid=$(cat "$MK/rank$r.pid" 2>/dev/null)
            f="$OUT_ROOT/hang-pyspy/pyspy_rank$r.txt"
            if [ -z "$PYSPY" ] || [ -z "$pid" ]; then echo "py-spy not available or no pid" > "$f"; continue; fi
            {
                echo "\$ py-spy dump --pid $pid   # rank $r, $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
                "$PYSPY" dump --pid "$pid"
                echo
                echo "\$ py-spy dump --native --pid $pid   # rank $r, $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)"
                "$PYSPY" dump --native --pid "$pid"
            } > "$f" 2>&1
        done
    ) &
    PIDS+=($!)
fi

for p in "${PIDS[@]}"; do wait "$p"; done
echo "all scenarios done in $(( $(date +%s) - T0 )) s"
for d in "$OUT_ROOT"/*/; do
    [ -f "$d/run.txt" ] && printf '%-32s %s\n' "$(basename "$d")" "$(grep exit_code "$d/run.txt")"
done
