#!/usr/bin/env bash
# Issue 24 on a machine with 2 GPUs: the real service (SQLite) and the real retry hook
# (docs/hooks/logtriage-retry.sh) around real torchrun jobs on NCCL:
#   1. straggler_once.py: rank 1 stalls past the process-group timeout on the first attempt only
#      -> NCCL watchdog timeout -> decision retry -> the second attempt finishes: outcome succeeded
#   2. cuda_oom.py: rank 1 asks for ~200 GiB -> decision fix_and_rerun -> not run again
# Writes every log, the hook's output and the service's analyses and outcomes to $OUT (or
# /tmp/retry-e2e). Python packages the service needs that the machine lacks come from the wheel
# folder given as $WHEELS (pip download'ed for its Python; nothing is fetched from the network).
#   WHEELS=.devicewheels bash tests/corpus/generators/gpu/retry_e2e.sh
set -u
ROOT=$(cd "$(dirname "$0")/../../../.." && pwd)
OUT=${OUT:-/tmp/retry-e2e}
mkdir -p "$OUT"
cd "$ROOT" || exit 1
# beside the machine's own packages (torch, numpy, regex, ...): a folder on PYTHONPATH
SITE=/tmp/ltsite
python3 -m pip install -q --no-index --find-links "${WHEELS:-.devicewheels}" --target "$SITE" pydantic \
  pydantic-settings ruamel.yaml zstandard fastapi uvicorn sqlalchemy alembic python-multipart hyperscan \
  httptools isal > "$OUT/pip.txt" 2>&1 || { echo "pip failed"; tail -20 "$OUT/pip.txt"; exit 1; }
BIN=/tmp/ltbin
mkdir -p "$BIN"
printf '#!/bin/sh\nPYTHONPATH=%s:%s exec %s -m app.cli "$@"\n' "$ROOT" "$SITE" "$(command -v python3)" > "$BIN/logtriage"
chmod +x "$BIN/logtriage"
export PATH="$BIN:$PATH" LOGTRIAGE_DATA_DIR=/tmp/ltdata LOGTRIAGE_URL=http://127.0.0.1:8765
rm -rf /tmp/ltdata /tmp/flap.marker
logtriage serve --port 8765 > "$OUT/serve.log" 2>&1 &
SERVE=$!
trap 'kill $SERVE 2>/dev/null' EXIT
for _ in $(seq 120); do
  curl -sf "$LOGTRIAGE_URL/readyz" > /dev/null && break
  sleep 1
done
curl -sf "$LOGTRIAGE_URL/readyz" > /dev/null || { echo "service did not start"; tail -30 "$OUT/serve.log"; exit 1; }

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LOGTRIAGE_BACKOFF=2 LOGTRIAGE_MAX_ATTEMPTS=3
G="$ROOT/tests/corpus/generators/gpu"
TR="python3 -m torch.distributed.run --nnodes 1 --nproc-per-node 2 --master-addr 127.0.0.1"

start=$(date +%s)
LOGTRIAGE_JOB_ID=gpu-flap bash docs/hooks/logtriage-retry.sh \
  "$TR --master-port 29611 $G/straggler_once.py --backend nccl --steps 20 --fault-step 5 --pg-timeout 20 --once-file /tmp/flap.marker" \
  > "$OUT/flap.stdout" 2> "$OUT/flap.stderr"
echo "flap: exit $? in $(( $(date +%s) - start )) s" | tee "$OUT/flap.rc"

start=$(date +%s)
LOGTRIAGE_JOB_ID=gpu-oom bash docs/hooks/logtriage-retry.sh \
  "$TR --master-port 29612 $G/cuda_oom.py --backend nccl --steps 20 --fault-step 5" \
  > "$OUT/oom.stdout" 2> "$OUT/oom.stderr"
echo "oom: exit $? in $(( $(date +%s) - start )) s" | tee "$OUT/oom.rc"

for job in gpu-flap gpu-oom; do
  curl -sf "$LOGTRIAGE_URL/api/v1/jobs/$job/outcomes" > "$OUT/$job.outcomes.json"
  curl -sf "$LOGTRIAGE_URL/api/v1/analyses?job_id=$job" > "$OUT/$job.analyses.json"
done
grep -h "logtriage-retry\|the job:" "$OUT"/*.stderr
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpus.txt"
