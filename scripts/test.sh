#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, then runs lint and tests.
# Usage: ./scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

# Every stage runs, whatever an earlier one did: a failing lint or timing stage must not hide
# the rest of the suite. Each stage's outcome (its pytest counts, or ok/FAILED) and wall time go
# into a summary printed at the end, so that CI's log says what ran, what failed and where the
# minutes went; the script exits 1 when any stage failed. Installing is the exception: without
# it nothing can run, so a failed install stops here (an EXIT trap still prints the summary).
SUMMARY=""
FAILED=0
PASSED_TOTAL=0 FAILED_TOTAL=0 SKIPPED_TOTAL=0
PART_STARTED=$SECONDS
part_done() {  # NAME OUTCOME
  SUMMARY="${SUMMARY}  $(printf '%-17s' "$1") $2 ($((SECONDS - PART_STARTED))s)"$'\n'
  PART_STARTED=$SECONDS
}
print_summary() {
  local status=$?
  [ "$status" -eq 0 ] || [ -n "$SUMMARY" ] || part_done install "FAILED (exit $status)"
  echo
  echo "stages (total ${SECONDS}s):"
  printf '%s' "$SUMMARY"
  # One closing line over every pytest stage, in the plain form any reader of a log takes.
  echo "${PASSED_TOTAL} passed, ${FAILED_TOTAL} failed, ${SKIPPED_TOTAL} skipped"
  # The home made below for the stages goes with them (one given in ACCELOPT_HOME stays).
  [ -z "${OWN_HOME:-}" ] || rm -rf "$OWN_HOME"
}
trap print_summary EXIT
# Ctrl-C stops the whole script (pytest exits 2 on it, which a stage would take for a failure
# and go on): bash runs this once the stage in the foreground has ended.
trap 'echo "interrupted"; exit 130' INT

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

# chromium, the browser the viewer's tests drive through Playwright (tests/viewer/): Debian's,
# since Playwright's own browser download needs a host a closed network cannot reach.
# Screenshots go to $ACCELOPT_ARTIFACTS/viewer (default test-artifacts/viewer): keep that folder.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium missing, the viewer's browser tests will be skipped: sudo apt-get install -y chromium" >&2
  fi
fi

PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# uv installs what pip would (the same resolution of pyproject's ranges) in well under half the
# time: 13 s against 35 s into a fresh venv here. pip stays the fallback for a host where uv
# cannot be had or cannot reach the index pip is set up for.
# Bytecode is compiled at install time, as pip does by default and uv does only when asked:
# where PYTHONDONTWRITEBYTECODE is set (this project's machines set it), a package left without
# its .pyc files is compiled again by every process that imports it: 0.4 s more CPU for each
# CLI, MCP server and job worker the tests start (importing accelopt_mcp.server and .cli: 1.3 s
# against 0.9). The same goes for this package's own modules, compiled here once for the run.
# The editable install is setuptools' "compat" mode, a plain path in a .pth file: the default
# mode's import hook is a module that every Python process in the venv imports at start-up
# (pathlib, urllib.parse, re and more), jailed kernels and references included: site took 19 ms
# against 3, and importing NumPy 82 ms against 75, thousands of times in a run.
if .venv/bin/python -m pip install -q uv >/dev/null 2>&1 &&
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python \
    -C editable_mode=compat -e ".[dev]"; then
  installer=uv
else
  echo "uv could not install the dependencies; installing them with pip" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -C editable_mode=compat -e ".[dev]"
  installer=pip
fi
.venv/bin/python -m compileall -q -j 0 accelopt_mcp >/dev/null
part_done install "ok ($installer)"
# From here on, bytecode is cached (in __pycache__, which git ignores), pytest's rewritten test
# modules included: pytest reads a cached rewrite even where it may not write one, but with
# PYTHONDONTWRITEBYTECODE set none is ever written, and each pytest process (the serial and
# busy-core stages, every parallel worker) parsed and rewrote the asserts of all 180 test
# modules again: 7 s of collection against under 4 with them cached. What the product starts
# in its sandbox and jails sets the variable itself, so this changes nothing the tests check.
unset PYTHONDONTWRITEBYTECODE

# stage NAME COMMAND...: run it, record how it ended, go on either way.
stage() {
  local name=$1 log rc counts n
  shift
  log=$(mktemp)
  set +e
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # pytest's closing line, e.g. "1 failed, 28 passed, 1 skipped in 45.33s (0:00:45)".
  counts=$(grep -E '^[0-9]+ (passed|failed|skipped|errors?|deselected)' "$log" | tail -1 |
    sed -E 's/ in [0-9.]+s.*//')
  for n in $(grep -oE '[0-9]+ passed' <<<"$counts" | grep -oE '^[0-9]+'); do
    PASSED_TOTAL=$((PASSED_TOTAL + n))
  done
  for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$counts" | grep -oE '^[0-9]+'); do
    FAILED_TOTAL=$((FAILED_TOTAL + n))
  done
  for n in $(grep -oE '[0-9]+ skipped' <<<"$counts" | grep -oE '^[0-9]+'); do
    SKIPPED_TOTAL=$((SKIPPED_TOTAL + n))
  done
  set -e
  rm -f "$log"
  if [ "$rc" -eq 0 ]; then
    part_done "$name" "${counts:-ok}"
  else
    FAILED=1
    part_done "$name" "FAILED (exit $rc)${counts:+: $counts}"
  fi
}

stage lint sh -c '.venv/bin/ruff check . && .venv/bin/ruff format --check .'
if [ "$#" -gt 0 ]; then
  stage mypy .venv/bin/mypy accelopt_mcp
  # Given tests: run them as asked, in one process.
  stage tests .venv/bin/python -m pytest -q "$@"
  exit "$FAILED"
fi
# One ACCELOPT_HOME for every stage (tests/conftest.py would make one per pytest run), with
# this host's cpu peaks measured into it first, while nothing else runs: left to the parallel
# stage, they are measured on a busy host and then again (tests/session_peaks.py).
if [ -z "${ACCELOPT_HOME:-}" ]; then
  ACCELOPT_HOME="$(mktemp -d -t accelopt-test-home-XXXXXX)"
  export ACCELOPT_HOME
  OWN_HOME=$ACCELOPT_HOME
fi
stage peaks .venv/bin/python -m tests.session_peaks
# Timing-sensitive tests (marked serial: measured speedups decide what they check) run alone
# first; then the rest, WORKERS at a time (ACCELOPT_TEST_WORKERS, default 3: much of it waits on
# subprocesses and servers, and two workers left a fifth of two cores idle), each test file
# kept on one worker, the longest files started first (tests/conftest.py LONGEST_FIRST).
WORKERS="${ACCELOPT_TEST_WORKERS:-3}"
stage serial .venv/bin/python -m pytest -q -m serial --durations=10
# The type check runs beside the busy-core stage, which keeps every core busy on purpose (a
# spinning process per core): mypy's one core of work is more of the same load, and what it
# costs there comes out of the spinners' share. Measured on this 2-core host: the stage took
# 48 s with a cold mypy beside it (45 s) and 50 s without. Beside the parallel stage it had
# added its 20 core-s to the stage that bounds the suite. It must not run beside the quiet
# stages (peaks, serial). Its report and outcome are printed after the busy-core stage's, in
# a stage of its own.
MYPY_LOG="$(mktemp)"
MYPY_STARTED=$SECONDS
(
  set +e
  .venv/bin/mypy accelopt_mcp >"$MYPY_LOG" 2>&1
  echo "$? $((SECONDS - MYPY_STARTED))" >"$MYPY_LOG.rc"
) &
MYPY_PID=$!
# The measurements that decide what a run keeps, again with a busy loop on every core: a
# timing that is fair only on a quiet host fails here (tests/conftest.py: busy_cores).
stage "busy-core serial" env ACCELOPT_TEST_BUSY_CORES=1 .venv/bin/python -m pytest -q -m serial \
  --durations=5 tests/backends/test_measurement.py tests/backends/test_stopping.py \
  tests/engine/test_noise_selection.py
wait "$MYPY_PID" || true
read -r MYPY_RC MYPY_SECONDS <"$MYPY_LOG.rc" || { MYPY_RC=1 MYPY_SECONDS=?; }
cat "$MYPY_LOG"
rm -f "$MYPY_LOG" "$MYPY_LOG.rc"
# The stage's own seconds are the wait past the busy-core stage (0 when it ended first).
if [ "$MYPY_RC" -eq 0 ]; then
  part_done mypy "ok (${MYPY_SECONDS}s beside the busy-core stage)"
else
  FAILED=1
  part_done mypy "FAILED (exit $MYPY_RC, ${MYPY_SECONDS}s beside the busy-core stage)"
fi
stage parallel .venv/bin/python -m pytest -q -m "not serial" -n "$WORKERS" \
  --dist loadfile --no-loadscope-reorder --durations=15
exit "$FAILED"
