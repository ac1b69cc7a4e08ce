#!/usr/bin/env bash
# Set up and run the logtriage service: REST API, report pages and docs on
# http://127.0.0.1:8000, SQLite in ./data (LOGTRIAGE_DATA_DIR), nothing else to install or run.
# Extra arguments go to `logtriage serve` (e.g. --port 9000 --workers 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --serve  # the package only: no dev tools, no PostgreSQL, no browser
exec .venv/bin/logtriage serve "$@"
