#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, then runs lint and tests.
# Usage: ./scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

# Wall time of each part, printed at the end (`times: install 52s, lint 3s, ...`) so that CI's
# log says where its minutes went. An EXIT trap: after a failure the line still comes, with
# the time spent in the part that failed.
TIMES=""
PART_STARTED=$SECONDS
part_done() {
  TIMES="${TIMES:+$TIMES, }$1 $((SECONDS - PART_STARTED))s"
  PART_STARTED=$SECONDS
}
print_times() {
  local status=$?
  [ "$status" -eq 0 ] || part_done "failed part"
  echo "times: $TIMES (total ${SECONDS}s)"
}
trap print_times EXIT

# The PostgreSQL server that the tests start on 127.0.0.1 (tests/pg_server.py).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
  else
    echo "PostgreSQL server binaries missing: sudo apt-get install -y postgresql-15" >&2
    exit 1
  fi
fi

# bubblewrap, the jail that LLM-written kernels run in (accelopt_mcp/isolation/jail.py).
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    # Not fatal: without it the jail tests skip and evaluations are flagged not_isolated.
    echo "bubblewrap missing, the jail tests will be skipped: sudo apt-get install -y bubblewrap" >&2
  fi
fi

# unshare and ip: the Ray cluster tests run in a private network namespace with loopback up
# (tests/test_ray_cluster.py).
if ! command -v ip >/dev/null 2>&1 || ! command -v unshare >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 util-linux >/dev/null
  else
    echo "ip or unshare missing, the Ray cluster tests will be skipped: sudo apt-get install -y iproute2 util-linux" >&2
  fi
fi

PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[dev]"
part_done install

.venv/bin/ruff check .
.venv/bin/ruff format --check .
part_done lint
.venv/bin/mypy accelopt_mcp
part_done mypy
if [ "$#" -gt 0 ]; then
  # Given tests: run them as asked, in one process.
  .venv/bin/python -m pytest -q "$@"
  part_done tests
  exit 0
fi
# Timing-sensitive tests (marked serial: measured speedups decide what they check) run alone
# first; then the rest, two workers at a time (most of it waits on subprocesses and servers),
# each test file kept on one worker.
.venv/bin/python -m pytest -q -m serial --durations=10
part_done serial
# The measurements that decide what a run keeps, again with a busy loop on every core: a
# timing that is fair only on a quiet host fails here (tests/conftest.py: busy_cores).
ACCELOPT_TEST_BUSY_CORES=1 .venv/bin/python -m pytest -q -m serial --durations=5 \
  tests/backends/test_measurement.py tests/backends/test_stopping.py \
  tests/engine/test_noise_selection.py
part_done "busy-core serial"
.venv/bin/python -m pytest -q -m "not serial" -n 2 --dist loadfile --durations=15
part_done parallel
