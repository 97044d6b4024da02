from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.flashinfer_bench_copy import flashinfer_bench_site
from tests.pg_server import PostgresServer
from tests.ray_cluster import in_private_network

# The Ray cluster tests run only inside the private network namespace that
# tests/test_ray_cluster.py starts them in (Ray binds to non-loopback addresses elsewhere).
collect_ignore = [] if in_private_network() else ["cluster"]

# Nothing a test runs writes into the user's own data directory (the default database, the
# cached cpu peaks): one per-session folder instead, inherited by every subprocess. The cpu
# peaks are measured once in it, by the first test that needs them, unless scripts/test.sh has
# given every stage one home with the peaks measured up front (tests/session_peaks.py).
# The folder goes when the process that made it exits (the xdist workers and every subprocess
# inherit it and leave it alone), so runs do not pile up folders in the temp dir.
if not os.environ.get("ACCELOPT_HOME"):
    os.environ["ACCELOPT_HOME"] = tempfile.mkdtemp(prefix="accelopt-test-home-")
    atexit.register(shutil.rmtree, os.environ["ACCELOPT_HOME"], ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """DSN of a real PostgreSQL server for this test session (started here unless
    ACCELOPT_TEST_PG_DSN names one)."""
    existing = os.environ.get("ACCELOPT_TEST_PG_DSN")
    if existing:
        yield existing
        return
    server = PostgresServer()
    dsn = server.start()
    try:
        yield dsn
    finally:
        server.stop()


@pytest.fixture(scope="session")
def fib_site() -> Path:
    """Unpacked sources of flashinfer-bench 0.1.2 (fetched from PyPI once per machine)."""
    return flashinfer_bench_site()


BUSY_VARIABLE = "ACCELOPT_TEST_BUSY_CORES"
"""Set to 1 to run the tests with a busy loop on every usable core (scripts/test.sh does, for
the timing-sensitive subset): a measurement that is fair only on a quiet host fails then."""


@pytest.fixture(scope="session", autouse=True)
def busy_cores() -> Iterator[int]:
    """One spinning process pinned to each usable core for the whole session when
    ACCELOPT_TEST_BUSY_CORES=1 (else none); yields how many spin."""
    import subprocess
    import sys

    if os.environ.get(BUSY_VARIABLE) != "1":
        yield 0
        return
    spin = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass\n"
    spinners = [
        subprocess.Popen([sys.executable, "-c", spin, str(core)])
        for core in sorted(os.sched_getaffinity(0))
    ]
    try:
        yield len(spinners)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.fixture(autouse=True)
def mcp_path_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests write tasks and kernels under tmp_path and read the shipped examples: those are
    the roots of every MCP server they start (in process, or as a subprocess inheriting the
    environment: tests/mcp, the cluster and job tests). tests/mcp/test_access.py sets its own."""
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("ACCELOPT_MCP_ROOTS", os.pathsep.join([str(tmp_path), str(repo)]))


# The longest test files (seconds of test time on this 2-core machine, `--durations` of the
# parallel stage), in the order they start. `--dist loadfile` hands files out in collection
# order, and collection order is alphabetical: the Ray cluster suite (90 s, one test) came
# last and ran alone while the other worker sat idle. Starting the longest first leaves
# short files to fill the end (longest-first scheduling). Only the order changes, never
# what runs. pytest-xdist 3.7 and later hand files out by their number of tests instead,
# most first, unless told `--no-loadscope-reorder` (scripts/test.sh does): files of a few
# long tests, such as the suite, outage and store-restart tests, then started last and were
# still running at the stage's end (seen with py-spy). On three workers the stage is about as
# long either way (628 s kept in order, 625-634 s reordered): it is CPU-bound now, and the
# order keeps a long file from ever being the one left running alone.
LONGEST_FIRST = (
    "tests/engine/test_jobs.py",  # 98-110 s
    "tests/test_ray_cluster.py",  # 92 s
    "tests/suites/test_suite_run.py",  # 68-78 s
    "tests/mcp/test_jobs.py",  # 71 s (in this stage since it stopped being marked serial)
    "tests/backends/test_breakdown_stress.py",  # 59 s
    "tests/backends/test_attacks.py",  # 54 s
    "tests/backends/test_cpu_backend.py",  # 49 s
    "tests/engine/test_jobs_outage.py",  # 39 s
    "tests/engine/test_resume.py",  # 31-39 s
    "tests/test_cli.py",  # 32 s
    "tests/store/test_reconnect.py",  # 33 s
    "tests/mcp/test_suites.py",  # 32 s
    "tests/backends/test_nki_backend.py",  # 29 s
    "tests/viewer/test_browser.py",  # 30 s (an accelopt optimize run, then chromium)
    "tests/engine/test_store_restart.py",  # 19 s
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def position(item: pytest.Item) -> int:
        try:
            where = item.path.relative_to(root).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(where, len(rank))

    # sort is stable: within a file, and among the rest, the collected order is kept.
    items.sort(key=position)


def home_with_peaks(home: Path, *, measure: bool = True) -> Path:
    """`home` made an ACCELOPT_HOME that already keeps this host's cpu peaks, copied from the
    session's (measured there first if no test has yet, unless `measure` is False): for a test
    whose processes need a home of their own but not a measurement of their own, which takes
    every core for about 8 s (tests/backends/test_cpu_peaks.py and test_backend_hooks.py
    measure on purpose)."""
    from accelopt_mcp.backends.cpu_peaks import default_peaks_file
    from tests.session_peaks import measure as measure_session_peaks

    if measure:
        measure_session_peaks()  # the same figures scripts/test.sh measures up front
    home.mkdir(parents=True, exist_ok=True)
    kept = default_peaks_file()
    if kept.is_file():  # figures taken under load may be kept in memory only
        shutil.copy2(kept, home / kept.name)
    return home
