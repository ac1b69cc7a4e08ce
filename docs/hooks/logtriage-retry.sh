#!/usr/bin/env bash
# logtriage-retry.sh: run a job; when it fails, ask logtriage what to do and do it: run it again
# (without the hosts a hardware fault names), or stop because a rerun would fail the same way.
# Each attempt's ending is reported back, so the service learns which retries pass.
#
#   export LOGTRIAGE_URL=http://logtriage.internal:8000 LOGTRIAGE_TOKEN=lt_...   # ingest scope
#   logtriage-retry.sh -- srun --exclude='${LOGTRIAGE_EXCLUDE_HOSTS}' python train.py
#
# The command is run through `bash -c` for each attempt with LOGTRIAGE_EXCLUDE_HOSTS exported
# (comma-separated, empty at first): quote '${...}' as above so it is expanded per attempt.
#
# Environment (all optional except LOGTRIAGE_URL):
#   LOGTRIAGE_MAX_ATTEMPTS  attempts in all, the first included (default 3)
#   LOGTRIAGE_BACKOFF       seconds before the first rerun, doubled each time (default 30)
#   LOGTRIAGE_ON_UNKNOWN    what to do when there is no analysis (service unreachable): stop
#                           (default) or retry
#   LOGTRIAGE_JOB_ID        job id (default: $SLURM_JOB_ID, $RAY_JOB_ID, $JOB_ID, or host-pid)
#   LOGTRIAGE_BIN           the logtriage CLI (default: `logtriage` on PATH)
#   LOGTRIAGE_SUBMIT_ARGS   extra `logtriage submit` flags
#
# Decisions (`logtriage submit --action-exit`): 10 retry, 11 retry_excluding, 12 fix_and_rerun,
# 13 stop, 14 investigate, 0 no analysis. Only 10 and 11 run the job again; the rest end here with
# the job's own exit status and the reason printed.

set -u

if [ $# -eq 0 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
[ "$1" = "--" ] && shift

bin="${LOGTRIAGE_BIN:-logtriage}"
job_id="${LOGTRIAGE_JOB_ID:-${SLURM_JOB_ID:-${RAY_JOB_ID:-${JOB_ID:-$(hostname)-$$}}}}"
max_attempts="${LOGTRIAGE_MAX_ATTEMPTS:-3}"
delay="${LOGTRIAGE_BACKOFF:-30}"
export LOGTRIAGE_EXCLUDE_HOSTS="${LOGTRIAGE_EXCLUDE_HOSTS:-}"
log="$(mktemp "${TMPDIR:-/tmp}/logtriage-retry.XXXXXX.log")"
trap 'rm -f "$log"' EXIT

did=""        # what the previous attempt was: retry | retry_excluding (empty: the first)
attempt=1
while :; do
  : > "$log"
  bash -c "$*" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  if [ -n "$did" ] && [ -n "${LOGTRIAGE_URL:-}" ] && [ -n "${LOGTRIAGE_ANALYSIS_ID:-}" ]; then
    # how the rerun after the last failure ended, before this attempt's own log is posted
    outcome=failed
    [ "$rc" -eq 0 ] && outcome=succeeded
    "$bin" submit --outcome "$outcome" --job-id "$job_id" --did "$did" --analysis-id "$LOGTRIAGE_ANALYSIS_ID" \
      --attempt-id "$job_id-attempt-$attempt" --excluded-hosts "$LOGTRIAGE_EXCLUDE_HOSTS" >&2 || true
  fi
  [ "$rc" -eq 0 ] && exit 0

  decision=0
  if [ -n "${LOGTRIAGE_URL:-}" ] && command -v "$bin" >/dev/null 2>&1; then
    # shellcheck disable=SC2086  # LOGTRIAGE_SUBMIT_ARGS is a list of flags
    vars="$("$bin" submit "$log" --job-id "$job_id" --exit-code "$rc" --action-exit --shell \
      --idempotency-key "$job_id-attempt-$attempt" ${LOGTRIAGE_SUBMIT_ARGS:-})"
    decision=$?
    left_out="$LOGTRIAGE_EXCLUDE_HOSTS"
    eval "$vars"  # LOGTRIAGE_DECISION, LOGTRIAGE_EXCLUDE_HOSTS (this failure's), LOGTRIAGE_REPORT, ...
    # the hosts this failure names join those left out before
    LOGTRIAGE_EXCLUDE_HOSTS="$(printf '%s,%s' "$left_out" "${LOGTRIAGE_EXCLUDE_HOSTS:-}" \
      | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd, -)"
    export LOGTRIAGE_EXCLUDE_HOSTS
  fi
  if [ "$decision" -eq 0 ]; then
    [ "${LOGTRIAGE_ON_UNKNOWN:-stop}" = retry ] && decision=10
  fi

  case "$decision" in
    10) did=retry ;;
    11) did=retry_excluding ;;
    *)
      echo "logtriage-retry: not running it again (decision ${LOGTRIAGE_DECISION:-none}); see ${LOGTRIAGE_REPORT:-the log above}" >&2
      exit "$rc"
      ;;
  esac
  if [ "$attempt" -ge "$max_attempts" ]; then
    echo "logtriage-retry: $attempt attempts, the budget (LOGTRIAGE_MAX_ATTEMPTS=$max_attempts) is spent" >&2
    exit "$rc"
  fi
  echo "logtriage-retry: attempt $attempt failed; decision $did${LOGTRIAGE_EXCLUDE_HOSTS:+ without $LOGTRIAGE_EXCLUDE_HOSTS}; next in ${delay}s" >&2
  sleep "$delay"
  delay=$((delay * 2))
  attempt=$((attempt + 1))
done
