#!/usr/bin/env bash
# Runs the gloo (CPU) versions of the scenarios that make sense without a GPU,
# one after another (2 ranks each under torchrun, 127.0.0.1). Logs go to
# OUT_ROOT/<scenario>/ (default tests/corpus/gloo).
#
#   PY=python bash tests/corpus/generators/gpu/run_cpu.sh [OUT_ROOT] [scenario ...]
#
# As root (and with unshare available) the whole run happens in a private
# network namespace that has only the loopback interface, so nothing (the
# TCPStore listens on the wildcard address) is reachable from outside.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" = 0 ] && [ -z "${IN_NETNS:-}" ] && command -v unshare >/dev/null; then
    exec unshare --net --mount bash -c '
        ip link set lo up
        echo "127.0.0.1 localhost $(hostname)" > /tmp/.hosts_netns && mount --bind /tmp/.hosts_netns /etc/hosts
        IN_NETNS=1 exec bash "$0" "$@"' "$0" "$@"
fi
OUT_ROOT=$(mkdir -p "${1:-$HERE/../../gloo}" && cd "${1:-$HERE/../../gloo}" && pwd)
shift || true
PY=${PY:-python3}
BACKEND=gloo
JOB_TIMEOUT=${JOB_TIMEOUT:-240}
source "$HERE/lib.sh"
COMMON_ENV=(PYTHONUNBUFFERED=1 GLOO_SOCKET_IFNAME=lo)
SELECT=("$@")
want() {
    [ ${#SELECT[@]} -eq 0 ] && return 0
    local s; for s in "${SELECT[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1
}
{
    echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; uname -a; nproc
    "$PY" -c 'import torch,sys; print("python", sys.version.split()[0]); print("torch", torch.__version__)' 2>&1
} > "$OUT_ROOT/env.txt"

T0=$(date +%s)
JOB_WRAP=()
if want skipped-collective; then
    JOB_ENV=()
    run_job skipped-collective 29601 skipped_collective.py --steps 30 --fault-step 12
fi
if want straggler-timeout; then
    JOB_ENV=()
    run_job straggler-timeout 29602 straggler_timeout.py --steps 30 --fault-step 10
fi
if want ckpt-gather-deadlock; then
    JOB_ENV=(TORCH_CPP_LOG_LEVEL=INFO)
    run_job ckpt-gather-deadlock 29603 ckpt_gather_deadlock.py --steps 30 --ckpt-every 10 \
        --ckpt-dir /tmp/corpus_ckpt_cpu/ckpt-gather-deadlock
fi
if want ckpt-barrier-deadlock; then
    JOB_ENV=()
    run_job ckpt-barrier-deadlock 29609 ckpt_gather_deadlock.py --variant barrier --steps 30 --ckpt-every 10 \
        --ckpt-dir /tmp/corpus_ckpt_cpu/ckpt-barrier-deadlock
fi
if want silent-rank-death; then
    JOB_ENV=()
    run_job silent-rank-death 29604 silent_rank_death.py --steps 30 --fault-step 14 --how exit0
fi
if want nan-loss; then
    JOB_ENV=()
    run_job nan-loss 29605 nan_loss.py --steps 60 --optimizer sgd --lr 0.5 --warmup-steps 10 --max-grad-norm 0
fi
if want nan-rollout-multinomial; then
    JOB_ENV=()
    run_job nan-rollout-multinomial 29606 nan_loss.py --steps 60 --optimizer sgd --lr 2 --warmup-steps 10 --max-grad-norm 0
fi
if want fail-slow; then
    JOB_ENV=()
    run_job fail-slow 29607 fail_slow.py --steps 160 --fault-step 40 --eval-every 20 --slow-per-step 0.005
fi
if want healthy-dist-debug-info; then
    JOB_ENV=(TORCH_DISTRIBUTED_DEBUG=INFO)
    run_job healthy-dist-debug-info 29608 healthy.py --steps 50 --eval-every 10 --ckpt-every 25 \
        --ckpt-dir /tmp/corpus_ckpt_cpu/healthy-dist-debug-info
fi
echo "all scenarios done in $(( $(date +%s) - T0 )) s"
for d in "$OUT_ROOT"/*/; do
    [ -f "$d/run.txt" ] && printf '%-32s %s\n' "$(basename "$d")" "$(grep exit_code "$d/run.txt")"
done
