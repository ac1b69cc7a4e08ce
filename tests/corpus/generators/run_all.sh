#!/usr/bin/env bash
# Regenerates the real logs of the corpus by running the real software.
#
#   bash tests/corpus/generators/run_all.sh            # every scenario
#   bash tests/corpus/generators/run_all.sh nan-loss-loop ray-oom-killer   # some
#
# Needs: a venv with torch==2.13.0 (CPU), ray and numpy active; gcc/g++; root
# for the scenarios that mount a tiny tmpfs inside a private mount namespace
# (disk-full-*, dataloader-shm-*, torchrun-worker-sigbus-*). Everything binds
# to 127.0.0.1; every command runs under `timeout`.
#
# The generators are copied to $JOB_DIR (default /tmp/rl-job) and run from
# there, so tracebacks show that path rather than this repository's.
# Writes tests/corpus/real/<name>.log and rules/_baseline/<name>.log.
set -u
SRC=$(cd "$(dirname "$0")" && pwd)
CORPUS=$(dirname "$SRC")
REPO=$(cd "$CORPUS/../.." && pwd)
REAL=$CORPUS/real
BASE=$REPO/rules/_baseline
JOB=${JOB_DIR:-/tmp/rl-job}
mkdir -p "$REAL" "$BASE"
rm -rf "$JOB" && mkdir -p "$JOB" && cp "$SRC"/*.py "$SRC"/*.sh "$SRC"/*.cpp "$JOB"/
cd "$JOB"
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0   # single-node Ray stays on 127.0.0.1
export PYTHONDONTWRITEBYTECODE=1
TR="torchrun --nproc-per-node 2 --master-addr 127.0.0.1"

# run NAME DEST SECONDS CMD...: stdout+stderr of CMD, as a user sees them, into DEST/NAME.log
run() {
    local name=$1 dest=$2 secs=$3; shift 3
    if [ ${#SELECTED[@]} -gt 0 ] && [[ ! " ${SELECTED[*]} " == *" $name "* ]]; then return; fi
    echo "== $name"
    timeout -k 15 "$secs" "$@" > "$dest/$name.log" 2>&1
    echo "   exit $?, $(wc -c < "$dest/$name.log") bytes"
}
SELECTED=("$@")

# --- torch.distributed (gloo) ------------------------------------------------
run gloo-collective-timeout-torchrun   "$REAL" 120 $TR --master-port 29511 gloo_timeout.py
run gloo-collective-timeout-mp-spawn   "$REAL" 120 python gloo_timeout.py --spawn
run gloo-peer-crash-connection-reset   "$REAL" 120 $TR --master-port 29521 gloo_peer_crash.py
run torchrun-port-in-use               "$REAL" 120 bash port_in_use.sh
run pg-not-initialized                 "$REAL" 60  python pg_not_initialized.py
run torchrun-worker-sigkill            "$REAL" 120 bash torchrun_signal.sh kill9
run torchrun-sighup                    "$REAL" 120 env PORT=29542 bash torchrun_signal.sh sighup
run torchrun-worker-sigbus-small-shm   "$REAL" 120 bash shm_sigbus.sh
run user-typeerror-torchrun            "$REAL" 120 $TR --master-port 29571 user_bugs.py typeerror
# TORCH_DISTRIBUTED_DEBUG=DETAIL makes DDP's constructor segfault with gloo on torch 2.13.0+cpu
run torchrun-debug-detail-ddp-sigsegv  "$REAL" 120 env LOGLEVEL=INFO TORCH_CPP_LOG_LEVEL=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL \
    NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 \
    $TR --master-port 29575 train_tiny.py --steps 60 --dump-env

# --- single-process PyTorch ------------------------------------------------------
run dataloader-shm-enospc              "$REAL" 120 bash dataloader_shm.sh
run dataloader-worker-killed           "$REAL" 120 python dataloader_worker_death.py kill
run nan-loss-loop                      "$REAL" 60  python nan_loss.py loop
run nan-detect-anomaly-logbackward     "$REAL" 60  python nan_loss.py anomaly
run disk-full-jsonl                    "$REAL" 60  bash disk_full.sh jsonl
run disk-full-torch-save               "$REAL" 60  bash disk_full.sh torch
run inductor-cache-jsondecodeerror     "$REAL" 400 bash inductor_cache_corrupt.sh
run import-undefined-symbol-abi        "$REAL" 120 bash abi_mismatch_ext.sh
run user-dataset-filenotfound          "$REAL" 60  python user_bugs.py filenotfound
run warnings-only                      "$REAL" 60  python warnings_only.py
run masked-exit-status                 "$REAL" 60  bash masked_exit.sh

# --- Ray (local, num_cpus=2, no dashboard) -------------------------------------
run ray-actor-died                     "$REAL" 120 python ray_actor_died.py
run ray-unschedulable-gpu8             "$REAL" 150 env RAY_STATUS_OUT="$REAL/ray-unschedulable-gpu8-ray-status.log" python ray_unschedulable.py
run ray-resources-busy-driver          "$REAL" 150 env RAYLET_OUT="$REAL/ray-resources-busy-raylet-out.log" python ray_resources_busy.py
run ray-cgraph-channel-timeout         "$REAL" 150 env RAY_CGRAPH_get_timeout=5 python ray_cgraph_timeout.py
run ray-task-keyerror                  "$REAL" 120 python ray_task_error.py
run ray-oom-killer                     "$REAL" 120 python ray_oom.py

# --- healthy baselines ------------------------------------------------------------
run gloo-ddp-2rank-200steps-tqdm       "$BASE" 300 $TR --master-port 29581 train_tiny.py --steps 200 --sleep 0.02
DEBUG_ENV="LOGLEVEL=INFO TORCH_CPP_LOG_LEVEL=INFO NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
    NCCL_P2P_DISABLE=1 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCH_NCCL_BLOCKING_WAIT=0 GLOO_SOCKET_IFNAME=lo
    CUDA_DEVICE_MAX_CONNECTIONS=1"
run torchrun-env-dump                  "$BASE" 300 env $DEBUG_ENV TORCH_DISTRIBUTED_DEBUG=INFO \
    $TR --master-port 29591 train_tiny.py --steps 60 --dump-env
run ray-actors-healthy                 "$BASE" 120 python ray_healthy.py

cd / && rm -rf "$JOB"
