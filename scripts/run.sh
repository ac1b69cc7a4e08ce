#!/usr/bin/env bash
# Set up and run logtriage on the bundled example: a multi-rank job where one GPU's ECC error
# makes every other rank time out in NCCL. Pass other paths to analyse your own logs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ $# -eq 0 ]; then set -- examples/ecc-cascade; fi
exec .venv/bin/logtriage analyze "$@"
