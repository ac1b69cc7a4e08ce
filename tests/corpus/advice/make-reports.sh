#!/usr/bin/env bash
# The reports a grading round reads: one `logtriage analyze LOG --format markdown` per log of a
# set, with framework detection (no --framework). Usage: make-reports.sh OUTDIR [SETDIR]
set -euo pipefail
out=${1:?usage: make-reports.sh OUTDIR [SETDIR]}
set_dir=${2:-$(dirname "$0")}
mkdir -p "$out"
for log in "$set_dir"/*.log; do
  name=$(basename "$log" .log)
  logtriage analyze "$log" --format markdown > "$out/$name.md"
done
ls "$out" | wc -l
