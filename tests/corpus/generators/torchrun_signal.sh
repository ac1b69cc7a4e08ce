#!/usr/bin/env bash
# Reproduces torchrun runs killed from outside, as a user sees them.
#
#   torchrun_signal.sh kill9   - one worker gets SIGKILL mid-training (what the
#                                host OOM killer or `kill -9` does): torchelastic
#                                reports exitcode -9 in its ChildFailedError table.
#   torchrun_signal.sh sighup  - the torchrun launcher itself gets SIGHUP (the
#                                terminal/SSH session closed): SignalException.
#
# The workload is train_tiny.py (healthy on its own). Output goes to stdout.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
MODE=${1:?kill9|sighup}
PORT=${PORT:-29541}
torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$PORT" \
    "$HERE/train_tiny.py" --steps 400 --sleep 0.05 --log-every 20 &
TR=$!
sleep 12   # let the workers start and train for a while
if [ "$MODE" = kill9 ]; then
    VICTIM=$(pgrep -P "$TR" | tail -n 1)   # local_rank 1
    kill -9 "$VICTIM"
else
    kill -HUP "$TR"
fi
wait "$TR"
exit $?
