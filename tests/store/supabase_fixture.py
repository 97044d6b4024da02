"""Databases and PostgREST stand-ins for the store tests.

Applying schema_v2.txt takes a good part of a second and starting a stand-in (a real
subprocess, real HTTP on 127.0.0.1) about as long, and ~60 contract tests need both. So a test
session applies the schema once, to a template database, and each test gets a fresh clone of it
(CREATE DATABASE ... TEMPLATE: a file copy); and the contract suite's SupabaseStore talks to one
long-lived stand-in per session, pointed at each test's fresh clone. Tests stay as isolated as
before: every test has a database of its own, and no fault injected by one reaches the next.
Tests that stop a stand-in or need one running as another role start their own (`serve`).
"""

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

_templates: dict[str, str] = {}
"""Admin DSN -> name of this session's template database on that server (schema applied)."""


def _template(pg_admin_dsn: str) -> str:
    """The session's template database on the server of `pg_admin_dsn`, created on first use.
    Named per session, so that sessions sharing a server (xdist workers) never clone each
    other's template while it is being written."""
    name = _templates.get(pg_admin_dsn)
    if name is None:
        name = f"schema_template_{uuid.uuid4().hex[:12]}"
        dsn = create_database(pg_admin_dsn, name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA_FILE.read_text(encoding="utf-8"))
        _templates[pg_admin_dsn] = name
    return name


def fresh_schema_database(pg_admin_dsn: str, *, apply_schema: bool = True) -> str:
    """DSN of a new database on the test server, with schema_v2.txt applied (a clone of the
    session's template) unless told not."""
    name = f"supabase_{uuid.uuid4().hex[:16]}"
    if not apply_schema:
        return create_database(pg_admin_dsn, name)
    template = _template(pg_admin_dsn)
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return pg_admin_dsn.rsplit("/", 1)[0] + f"/{name}"


def serve(dsn: str, request: pytest.FixtureRequest, *, role: str | None = None) -> RunningStandIn:
    """A stand-in of the test's own in front of `dsn`, stopped when the requesting fixture or
    test ends; its requests run as `role` if given (as a Supabase key's role), else as the
    DSN's user."""
    running = start_standin(dsn, "test-key-" + secrets.token_hex(16), role=role)
    request.addfinalizer(running.stop)
    return running


def make_supabase_store(pg_admin_dsn: str, request: pytest.FixtureRequest) -> SupabaseStore:
    """A SupabaseStore on a fresh database, through the session's shared stand-in."""
    running: RunningStandIn = request.getfixturevalue("shared_standin")
    running.repoint(fresh_schema_database(pg_admin_dsn))
    return SupabaseStore(running.url, key=running.key, timeout_s=10)
