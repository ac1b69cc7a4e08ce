#!/usr/bin/env bash
# Dump the Python stack of every training rank on this node with py-spy, one file per rank
# (pyspy_rank<RANK>.txt), for logtriage's stack autopsy: upload them with the job's log and the
# report names the rank(s) stopped somewhere the others are not.
#
#   pyspy-ranks.sh [--out DIR] [--match REGEX] [--native] [PID ...]
#   pyspy-ranks.sh --watch LOG --stall-seconds N [--out DIR] ...   # dump once LOG stops growing
#
# Without PIDs it finds the ranks itself: every process whose environment sets RANK (torchrun,
# deepspeed, accelerate, Ray train workers) and whose command line matches --match (default:
# python). The rank in the file name is that RANK (else LOCAL_RANK, else the pid).
#
# py-spy reads another process's memory with ptrace: run as root, or give the container
# CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE; Kubernetes securityContext.capabilities.add:
# ["SYS_PTRACE"]), or as the ranks' own user with kernel.yama.ptrace_scope=0. A dump never stops
# the job for more than a moment (py-spy pauses each process while it reads the stack).
# Exit status: 0 when at least one rank was dumped, 1 when none was found, 2 on bad usage.
set -uo pipefail

out=.
match=python
native=""
watch=""
stall=""
pids=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --match) match=$2; shift 2 ;;
    --native) native=--native; shift ;;
    --watch) watch=$2; shift 2 ;;
    --stall-seconds) stall=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    --*) echo "pyspy-ranks: unknown option $1" >&2; exit 2 ;;
    *) pids+=("$1"); shift ;;
  esac
done
PYSPY=${PYSPY:-py-spy}
command -v "$PYSPY" >/dev/null || { echo "pyspy-ranks: py-spy not found (pip install py-spy)" >&2; exit 2; }
mkdir -p "$out"

if [ -n "$watch" ]; then
  [ -n "$stall" ] || { echo "pyspy-ranks: --watch needs --stall-seconds" >&2; exit 2; }
  # poll the log's size: a job that prints nothing for N seconds is dumped once
  last=-1; quiet_since=$(date +%s)
  while :; do
    size=$(stat -c %s "$watch" 2>/dev/null || echo 0)
    now=$(date +%s)
    if [ "$size" != "$last" ]; then last=$size; quiet_since=$now; fi
    [ $((now - quiet_since)) -ge "$stall" ] && break
    sleep 5
  done
  echo "pyspy-ranks: $watch has not grown for ${stall}s; dumping the ranks" >&2
fi

env_of() {  # env_of PID NAME -> value of NAME in the process's environment
  tr '\0' '\n' 2>/dev/null < "/proc/$1/environ" | sed -n "s/^$2=//p" | head -n1
}

if [ ${#pids[@]} -eq 0 ]; then
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null < "$d/cmdline") || continue
    [[ "$cmd" =~ $match ]] || continue
    [ -n "$(env_of "$pid" RANK)" ] && pids+=("$pid")
  done
fi
[ ${#pids[@]} -gt 0 ] || { echo "pyspy-ranks: no rank process found (match: $match)" >&2; exit 1; }

dumped=0
for pid in "${pids[@]}"; do
  rank=$(env_of "$pid" RANK); [ -n "$rank" ] || rank=$(env_of "$pid" LOCAL_RANK); [ -n "$rank" ] || rank=pid$pid
  file="$out/pyspy_rank${rank}.txt"
  {
    echo "\$ py-spy dump $native --pid $pid   # rank $rank, $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname)"
    timeout 60 "$PYSPY" dump $native --pid "$pid" 2>&1
  } > "$file" && dumped=$((dumped + 1))
  echo "pyspy-ranks: rank $rank (pid $pid) -> $file" >&2
done
[ "$dumped" -gt 0 ]
