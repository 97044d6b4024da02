from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.pg_server import PostgresServer


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
