#!/usr/bin/env bash
# Set up everything logtriage needs on a fresh Debian machine. Idempotent: a second run only checks.
#   bash scripts/setup.sh          the tests' set-up: ripgrep, PostgreSQL, Chromium, a virtualenv with
#                                  the package and its dev extras (pytest, Playwright, mypy, ...)
#   bash scripts/setup.sh --serve  what serving needs and nothing more: a virtualenv with the package
#                                  (no system packages, no dev tools, PostgreSQL left as it is)
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=dev
if [ "${1:-}" = --serve ]; then MODE=serve; shift; fi
if [ "$MODE" = serve ]; then
  PY=${PYTHON:-python3}
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -e .
  exit 0
fi

need_apt=()
command -v rg >/dev/null 2>&1 || need_apt+=(ripgrep)
if [ ${#need_apt[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "note: optional system packages missing (${need_apt[*]}); install them for the benchmarks" >&2
  fi
fi

# --- PostgreSQL for the service's database tests -------------------------------------------------
# The DB tests run on SQLite and on PostgreSQL (database `test`, user postgres, trust auth on
# 127.0.0.1): install it if missing (Debian, as root), start the cluster if stopped, allow trust
# access to `test` from loopback, create `test`. LOGTRIAGE_SKIP_POSTGRES=1 skips all of it.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}
as_postgres() {
  if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null 2>&1; then runuser -u postgres -- "$@"
  else sudo -n -u postgres "$@"; fi
}
setup_postgres() {
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && as_root true 2>/dev/null; then
      echo "setup: installing PostgreSQL (apt)" >&2
      as_root apt-get update -qq
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
      echo "note: PostgreSQL is not installed and cannot be installed here; its tests will be skipped" >&2
      return 0
    fi
  fi
  local ver
  ver="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n1)"
  if [ -z "$ver" ]; then
    echo "note: no PostgreSQL cluster in /etc/postgresql; create one with pg_createcluster" >&2
    return 0
  fi
  local hba="/etc/postgresql/$ver/main/pg_hba.conf"
  if [ -r "$hba" ] && ! grep -q '# logtriage-tests' "$hba"; then
    # first match wins in pg_hba.conf: put the rules for the throw-away test database on top
    as_root sed -i "1i host test postgres 127.0.0.1/32 trust # logtriage-tests\\nhost test postgres ::1/128 trust # logtriage-tests" "$hba" \
      && as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main reload 2>/dev/null || true
  fi
  if ! pg_lsclusters -h 2>/dev/null | awk -v v="$ver" '$1 == v && $2 == "main" && $4 == "online" {ok=1} END {exit !ok}'; then
    echo "setup: starting PostgreSQL $ver" >&2
    as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || {
      echo "note: could not start PostgreSQL; its tests will be skipped (and fail in CI)" >&2
      return 0
    }
  fi
  if ! as_postgres psql -qtAc "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null | grep -q 1; then
    as_postgres createdb test || echo "note: could not create database test" >&2
  fi
}
if [ "${LOGTRIAGE_SKIP_POSTGRES:-}" != 1 ]; then
  setup_postgres || echo "note: PostgreSQL setup incomplete; its tests will be skipped outside CI" >&2
fi

# --- Chromium for the browser tests (tests/web) ---------------------------------------------------
# Debian's own `chromium`, driven by Playwright for Python (the `dev` extra) through
# executable_path=/usr/bin/chromium: no browser is ever downloaded (no `playwright install`).
# Installed if missing (Debian, as root) with the fonts the screenshots need.
# LOGTRIAGE_SKIP_BROWSER=1 skips it: the browser tests then skip, except in CI where they fail.
setup_chromium() {
  [ -x /usr/bin/chromium ] && return 0
  if command -v apt-get >/dev/null 2>&1 && as_root true 2>/dev/null; then
    echo "setup: installing Chromium (apt)" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium fonts-liberation fonts-dejavu-core >/dev/null
  else
    echo "note: /usr/bin/chromium is missing and cannot be installed here; the browser tests will be skipped (and fail in CI)" >&2
  fi
}
if [ "${LOGTRIAGE_SKIP_BROWSER:-}" != 1 ]; then
  setup_chromium || echo "note: Chromium setup incomplete; the browser tests will be skipped outside CI" >&2
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
