#!/usr/bin/env bash
# SLURM epilog: post a failed batch job's output to logtriage (runs as root on each node after a job).
#
# slurm.conf:   Epilog=/etc/slurm/epilog.d/logtriage.sh      (or add this to your existing epilog)
# /etc/default/logtriage (read below):
#   LOGTRIAGE_URL=http://logtriage.internal:8000
#   LOGTRIAGE_TOKEN=lt_...            # a token with the `ingest` scope
#   LOGTRIAGE_BIN=/opt/logtriage/.venv/bin/logtriage
#   LOGTRIAGE_REQUEUE=1               # optional: requeue on retry/retry_excluding (see below)
#   LOGTRIAGE_MAX_REQUEUES=2          # ... at most this many restarts of one job
#
# Slurm runs epilogs without a PATH and kills slow ones: everything here is bounded, runs in the
# background and always exits 0 (a failing epilog would drain the node).

[ -r /etc/default/logtriage ] && . /etc/default/logtriage
export LOGTRIAGE_URL LOGTRIAGE_TOKEN
PATH="${LOGTRIAGE_PATH:-/usr/local/bin:/usr/bin:/bin}"  # Slurm gives none; tests point it at a stand-in scontrol
BIN="${LOGTRIAGE_BIN:-/usr/local/bin/logtriage}"
[ -n "${LOGTRIAGE_URL:-}" ] && [ -n "${SLURM_JOB_ID:-}" ] && [ -x "$BIN" ] || exit 0

info="$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null)" || exit 0
field() { printf '%s\n' "$info" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n1; }

# only the batch host submits (the epilog runs on every node of the job)
batch_host="$(field BatchHost)"
[ -z "$batch_host" ] || [ "$batch_host" = "$(hostname -s)" ] || [ "$batch_host" = "$(hostname)" ] || exit 0

# ExitCode=<status>:<signal>; EpilogSlurmctld also gets SLURM_JOB_EXIT_CODE2 in the same form
exit_pair="${SLURM_JOB_EXIT_CODE2:-$(field ExitCode)}"
status="${exit_pair%%:*}"
signal="${exit_pair##*:}"
[ "${signal:-0}" != 0 ] && status=$((128 + signal))
if [ "${LOGTRIAGE_REQUEUE:-0}" = 1 ] && [ "$(field Restarts)" != "" ] && [ "$(field Restarts)" != 0 ]; then
  # this attempt is a requeue that followed an analysed failure: say how it ended
  outcome=failed
  [ "${status:-0}" = 0 ] && outcome=succeeded
  timeout 120 "$BIN" submit --outcome "$outcome" --job-id "$SLURM_JOB_ID" --deadline 100 \
    --attempt-id "$SLURM_JOB_ID-$(field Restarts)" --excluded-hosts "$(field ExcNodeList | sed 's/(null)//')" \
    >> "${LOGTRIAGE_EPILOG_LOG:-/var/log/logtriage-epilog.log}" 2>&1 < /dev/null
fi
[ "${status:-0}" = 0 ] && exit 0

logs=()
for f in "$(field StdOut)" "$(field StdErr)"; do
  [ -n "$f" ] && [ -f "$f" ] && [[ " ${logs[*]-} " != *" $f "* ]] && logs+=("$f")
done
[ ${#logs[@]} -gt 0 ] || exit 0

# as the job's user would see it; bounded in time; detached so the epilog returns at once
LOG="${LOGTRIAGE_EPILOG_LOG:-/var/log/logtriage-epilog.log}"
if [ "${LOGTRIAGE_REQUEUE:-0}" != 1 ]; then
  timeout 300 "$BIN" submit "${logs[@]}" --job-id "$SLURM_JOB_ID" --exit-code "$status" --deadline 280 \
    --host "$(field BatchHost)" --label "user=${SLURM_JOB_USER:-?}" --label "partition=$(field Partition)" \
    >> "$LOG" 2>&1 < /dev/null &
  exit 0
fi

# LOGTRIAGE_REQUEUE=1: act on the decision. A transient fault is requeued (a machine's fault
# with its hosts added to the job's excluded nodes), within LOGTRIAGE_MAX_REQUEUES (default 2)
# of the job's restarts; anything else stays failed. The requeued attempt's ending is reported
# by this same epilog when it ends (`--outcome`), so the service learns which requeues pass.
(
  restarts="$(field Restarts)"
  restarts="${restarts:-0}"
  vars="$(timeout 300 "$BIN" submit "${logs[@]}" --job-id "$SLURM_JOB_ID" --exit-code "$status" \
    --deadline 280 --host "$(field BatchHost)" --label "user=${SLURM_JOB_USER:-?}" \
    --idempotency-key "$SLURM_JOB_ID-$restarts" --action-exit --shell 2>> "$LOG")"
  decision=$?
  eval "$vars"
  if [ "$decision" != 10 ] && [ "$decision" != 11 ]; then
    echo "logtriage: job $SLURM_JOB_ID not requeued (decision ${LOGTRIAGE_DECISION:-none})"
    exit 0
  fi
  if [ "$restarts" -ge "${LOGTRIAGE_MAX_REQUEUES:-2}" ]; then
    echo "logtriage: job $SLURM_JOB_ID not requeued: $restarts restarts already (LOGTRIAGE_MAX_REQUEUES)"
    exit 0
  fi
  if [ "$decision" = 11 ] && [ -n "${LOGTRIAGE_EXCLUDE_HOSTS:-}" ]; then
    before="$(field ExcNodeList)"
    [ "$before" = "(null)" ] && before=""
    scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="${before:+$before,}$LOGTRIAGE_EXCLUDE_HOSTS"
  fi
  scontrol requeue "$SLURM_JOB_ID" && echo "logtriage: job $SLURM_JOB_ID requeued (${LOGTRIAGE_DECISION})"
) >> "$LOG" 2>&1 < /dev/null &
exit 0
