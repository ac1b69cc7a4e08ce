#!/usr/bin/env bash
# logtriage-wrap.sh: run a training command; if it fails, post its log to logtriage and print the
# root cause, the fix and the report URL. The command's own exit status is always kept.
#
#   export LOGTRIAGE_URL=http://logtriage.internal:8000 LOGTRIAGE_TOKEN=lt_...   # token: ingest scope
#   logtriage-wrap.sh python train.py --config job.yaml
#
# Environment (all optional except LOGTRIAGE_URL, without which the job just runs):
#   LOGTRIAGE_URL        the service, e.g. http://logtriage.internal:8000
#   LOGTRIAGE_TOKEN      API token with the `ingest` scope (not needed while the service runs open)
#   LOGTRIAGE_JOB_ID     job id (default: $SLURM_JOB_ID, $RAY_JOB_ID, $JOB_ID, or host-pid)
#   LOGTRIAGE_LOG        keep the job's output in this file (default: a temp file, deleted after)
#   LOGTRIAGE_SUBMIT     `failure` (default) or `always`: `always` also catches jobs that exit 0
#                        after a fatal error (a masked exit status, e.g. `python train.py | tee`)
#   LOGTRIAGE_CONFIG     the job's config (YAML or launch script): patches come back as a diff
#   LOGTRIAGE_FRAMEWORK  verl, openrlhf, roll, slime, chatlearn, ... (default: detected)
#   LOGTRIAGE_BIN        the logtriage CLI (default: `logtriage` on PATH; without it: curl)
#   LOGTRIAGE_SUBMIT_ARGS  extra `logtriage submit` flags, e.g. "--retries 2 --label team=rl"
#   LOGTRIAGE_TAIL_BYTES curl fallback only: send at most the last N bytes (default 256 MiB)
#
# Why a wrapper: `python train.py 2>&1 | tee job.log` exits with tee's status (0) unless the
# shell keeps ${PIPESTATUS[0]}; this wrapper keeps it, and never fails because of logtriage.

set -u  # no `set -e`: a failing job must still reach the EXIT trap

if [ $# -eq 0 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
[ "$1" = "--" ] && shift

job_id="${LOGTRIAGE_JOB_ID:-${SLURM_JOB_ID:-${RAY_JOB_ID:-${JOB_ID:-$(hostname)-$$}}}}"
keep_log=1
log="${LOGTRIAGE_LOG:-}"
if [ -z "$log" ]; then
  keep_log=0
  log="$(mktemp "${TMPDIR:-/tmp}/logtriage-${job_id//[^A-Za-z0-9._-]/_}.XXXXXX.log")"
fi
rc=0

submit_cli() {  # $1 = exit status
  local args=(submit "$log" --exit-code "$1" --job-id "$job_id")
  [ -n "${LOGTRIAGE_CONFIG:-}" ] && args+=(--config "$LOGTRIAGE_CONFIG")
  [ -n "${LOGTRIAGE_FRAMEWORK:-}" ] && args+=(--framework "$LOGTRIAGE_FRAMEWORK")
  # URL and token are read from LOGTRIAGE_URL / LOGTRIAGE_TOKEN: no secret on the command line
  # shellcheck disable=SC2086  # LOGTRIAGE_SUBMIT_ARGS is a list of flags
  "$bin" "${args[@]}" ${LOGTRIAGE_SUBMIT_ARGS:-}
}

submit_curl() {  # $1 = exit status; no logtriage CLI on this node: post the log's tail with curl
  local gz="$log.gz" out="$log.json" auth=() q
  tail -c "${LOGTRIAGE_TAIL_BYTES:-268435456}" "$log" | gzip -c > "$gz"
  [ -n "${LOGTRIAGE_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $LOGTRIAGE_TOKEN")
  q="exit_code=$1&job_id=${job_id//[^A-Za-z0-9._-]/_}&host=$(hostname)"
  [ -n "${LOGTRIAGE_FRAMEWORK:-}" ] && q="$q&framework=$LOGTRIAGE_FRAMEWORK"
  if curl -sS --retry 4 --retry-delay 2 --retry-connrefused --max-time 300 -o "$out" -X POST \
      -H "Content-Type: text/plain" -H "Content-Encoding: gzip" \
      -H "Idempotency-Key: $job_id-$$-$1" "${auth[@]}" \
      -T "$gz" "${LOGTRIAGE_URL%/}/api/v1/analyses?$q"; then
    if command -v python3 >/dev/null 2>&1; then
      python3 - "$out" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
if "detail" in a and "status" in a and isinstance(a["status"], int):
    print(f"logtriage: submit failed: {a['detail']}")
    sys.exit(0)
r = a.get("root_cause")
print(f"logtriage: root cause: {r['title']} ({r['failure_class']})" if r else "logtriage: no known failure matched")
if r:
    for line in r["remediation"].strip().splitlines()[:12]:
        print(f"    {line}")
print(f"  report: {a.get('permalink')}")
PY
    else
      sed -n 's/.*"permalink":"\([^"]*\)".*/logtriage: report: \1/p' "$out"
    fi
  else
    echo "logtriage: could not reach ${LOGTRIAGE_URL} (the job's exit status is unaffected)"
  fi
  rm -f "$gz" "$out"
}

finish() {
  local status=$rc
  trap - EXIT INT TERM HUP
  if [ -n "${LOGTRIAGE_URL:-}" ] && { [ "$status" -ne 0 ] || [ "${LOGTRIAGE_SUBMIT:-failure}" = always ]; }; then
    bin="${LOGTRIAGE_BIN:-logtriage}"
    {
      if command -v "$bin" >/dev/null 2>&1; then
        submit_cli "$status"
      elif command -v curl >/dev/null 2>&1; then
        submit_curl "$status"
      else
        echo "logtriage: neither the logtriage CLI nor curl is available; log kept at $log"
        keep_log=1
      fi
    } >&2 || true
  fi
  [ "$keep_log" = 1 ] || rm -f "$log"
  exit "$status"
}

trap finish EXIT
trap 'rc=130; exit 130' INT
trap 'rc=143; exit 143' TERM
trap 'rc=129; exit 129' HUP

"$@" 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
exit "$rc"
