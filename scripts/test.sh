#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run every check: ruff, mypy, the rule fixtures, the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check .
ruff format --check .
mypy app
logtriage rules lint
set +e
python -m pytest -n 2 "$@"
rc=$?
set -e
[ $rc -eq 5 ] && { echo "pytest collected no tests" >&2; exit 1; }
exit $rc
