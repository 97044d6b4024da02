"""The `store` fixture: every contract test runs once per store, each on a fresh database
(PostgreSQL and Supabase: a clone of the session's schema template, supabase_fixture.py)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from accelopt_mcp.store.base import KernelStore, StoreUnavailableError
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.sqlite import SqliteStore
from tests.pg_server import create_database
from tests.postgrest_standin.launcher import RunningStandIn, start_standin
from tests.store.supabase_fixture import fresh_schema_database, serve

RECORD_TABLES = (
    "definitions",
    "workloads",
    "solutions",
    "profiles",
    "measurements",
    "runs",
    "experiences",
    "llm_calls",
    "run_entries",
    "suites",
)
"""The record tables (what stats() counts), written out here, not taken from the package, so
that the schema tests notice a table the package adds or drops."""
SCHEMA_TABLES = (*RECORD_TABLES, "hardware_peaks")
"""Every table of the schema: the records and the cache of measured peaks."""

STORE_KINDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("supabase", marks=pytest.mark.postgres),
]


def fresh_database(admin_dsn: str) -> str:
    """DSN of a new, empty database on the test server."""
    return create_database(admin_dsn, f"store_{uuid.uuid4().hex[:16]}")


def open_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> KernelStore:
    if kind == "sqlite":
        return SqliteStore(tmp_path / "k.db")
    admin_dsn = request.getfixturevalue("pg_admin_dsn")
    if kind == "postgres":
        # The template holds schema_v2.txt applied, as init_schema=True would leave it.
        return PostgresStore(fresh_schema_database(admin_dsn))
    from tests.store.supabase_fixture import make_supabase_store

    return make_supabase_store(admin_dsn, request)


@pytest.fixture(scope="session")
def shared_standin(pg_admin_dsn: str) -> Iterator[RunningStandIn]:
    """The session's one PostgREST stand-in; make_supabase_store points it at each test's
    fresh database (starting one per test cost about a second each)."""
    template = fresh_schema_database(pg_admin_dsn)
    running = start_standin(template, "test-key-" + secrets.token_hex(16))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KernelStore]:
    opened = open_store(request.param, request, tmp_path)
    try:
        yield opened
    finally:
        opened.close()


def serve_older_schema(
    pg_dsn: str,
    request: pytest.FixtureRequest,
    schema: str,
    rows: list[tuple[str, tuple[Any, ...]]],
    missing: list[str],
) -> RunningStandIn:
    """Applies `schema` (an older schema_v2.txt) to the empty database `pg_dsn`, writes `rows`
    (SQL and its parameters) into it, starts a PostgREST stand-in in front of it (whose schema
    cache is the older one) and checks that a store refuses the database, naming every one of
    `missing`; gives the stand-in, stopped when the test ends."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(schema)
        for statement, parameters in rows:
            conn.execute(statement, parameters or None)
    running = serve(pg_dsn, request)
    with pytest.raises(StoreUnavailableError, match=r"older than this accelopt") as caught:
        PostgresStore(pg_dsn)
    for name in missing:
        assert name in str(caught.value)
    return running


@pytest.fixture
def pg_dsn(pg_admin_dsn: str) -> str:
    """A fresh, empty PostgreSQL database (no schema)."""
    return fresh_database(pg_admin_dsn)
