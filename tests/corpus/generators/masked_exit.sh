#!/usr/bin/env bash
# Reproduces a job script that reports success although training crashed:
# the trainer's output is piped through `tee` and the script checks $?, which
# is tee's status, not python's (no `set -o pipefail`, no ${PIPESTATUS[0]}).
# This file IS the job script; its whole output is the log.
HERE=$(cd "$(dirname "$0")" && pwd)
LOG=$(mktemp /tmp/train.XXXXXX.log)
echo "[job] $(date -u '+%F %T') starting training, log: $LOG"
python "$HERE/user_bugs.py" shape 2>&1 | tee "$LOG"
status=$?
if [ $status -eq 0 ]; then
    echo "[job] $(date -u '+%F %T') training finished successfully (exit status $status)"
    echo "[job] uploading checkpoints ... done"
else
    echo "[job] training failed with exit status $status"
fi
rm -f "$LOG"
exit $status
