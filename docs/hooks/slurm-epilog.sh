#!/usr/bin/env bash
# SLURM epilog: post a failed batch job's output to logtriage (runs as root on each node after a job).
#
# slurm.conf:   Epilog=/etc/slurm/epilog.d/logtriage.sh      (or add this to your existing epilog)
# /etc/default/logtriage (read below):
#   LOGTRIAGE_URL=http://logtriage.internal:8000
#   LOGTRIAGE_TOKEN=lt_...            # a token with the `ingest` scope
#   LOGTRIAGE_BIN=/opt/logtriage/.venv/bin/logtriage
#
# Slurm runs epilogs without a PATH and kills slow ones: everything here is bounded, runs in the
# background and always exits 0 (a failing epilog would drain the node).

[ -r /etc/default/logtriage ] && . /etc/default/logtriage
export LOGTRIAGE_URL LOGTRIAGE_TOKEN
PATH=/usr/local/bin:/usr/bin:/bin
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
[ "${status:-0}" = 0 ] && exit 0

logs=()
for f in "$(field StdOut)" "$(field StdErr)"; do
  [ -n "$f" ] && [ -f "$f" ] && [[ " ${logs[*]-} " != *" $f "* ]] && logs+=("$f")
done
[ ${#logs[@]} -gt 0 ] || exit 0

# as the job's user would see it; bounded in time; detached so the epilog returns at once
timeout 300 "$BIN" submit "${logs[@]}" --job-id "$SLURM_JOB_ID" --exit-code "$status" --deadline 280 \
  --host "$(field BatchHost)" --label "user=${SLURM_JOB_USER:-?}" --label "partition=$(field Partition)" \
  >> "/var/log/logtriage-epilog.log" 2>&1 < /dev/null &
exit 0
