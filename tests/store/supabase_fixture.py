"""A SupabaseStore for the contract suite: a fresh database with schema_v2.txt applied, served
by the PostgREST stand-in for tests (a real subprocess, real HTTP) on 127.0.0.1."""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path

import psycopg
import pytest

from accelopt_mcp.store.supabase import SupabaseStore
from tests.pg_server import create_database
from tests.postgrest_standin.launcher import RunningStandIn, start_standin

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schema_v2.txt"


def fresh_schema_database(pg_admin_dsn: str, *, apply_schema: bool = True) -> str:
    """DSN of a new database on the test server, with schema_v2.txt applied unless told not."""
    dsn = create_database(pg_admin_dsn, f"supabase_{uuid.uuid4().hex[:16]}")
    if apply_schema:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA_FILE.read_text(encoding="utf-8"))
    return dsn


def serve(dsn: str, request: pytest.FixtureRequest, *, role: str | None = None) -> RunningStandIn:
    """The stand-in in front of `dsn`, stopped when the requesting fixture or test ends; its
    requests run as `role` if given (as a Supabase key's role), else as the DSN's user."""
    running = start_standin(dsn, "test-key-" + secrets.token_hex(16), role=role)
    request.addfinalizer(running.stop)
    return running


def make_supabase_store(pg_admin_dsn: str, request: pytest.FixtureRequest) -> SupabaseStore:
    running = serve(fresh_schema_database(pg_admin_dsn), request)
    return SupabaseStore(running.url, key=running.key, timeout_s=10)
