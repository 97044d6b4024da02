from __future__ import annotations

import os
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
# peaks are measured once in it, by the first test that needs them.
if not os.environ.get("ACCELOPT_HOME"):
    os.environ["ACCELOPT_HOME"] = tempfile.mkdtemp(prefix="accelopt-test-home-")


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
