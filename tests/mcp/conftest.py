"""Fixtures for the MCP server tests: a database per test and MCP clients of every kind."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from accelopt_mcp.store.postgres import PostgresStore
from tests.pg_server import create_database

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "cpu"
TRACE_DIR = EXAMPLES / "flashinfer"
NKIBENCH_DIR = EXAMPLES / "nkibench"
SILU_TASK = TRACE_DIR / "definitions" / "silu_n1024.json"
SILU_SLOW = TRACE_DIR / "solutions" / "silu_n1024" / "silu_n1024_python_loop.json"
SILU_FAST = TRACE_DIR / "solutions" / "silu_n1024" / "silu_n1024_fast.json"

# Protocols the in-process client speaks: the handshake Claude Code uses, and the 2026 one.
MODES = ["legacy", "2026-07-28"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "kernels.db")


@pytest.fixture
def postgres_url(pg_admin_dsn: str) -> str:
    dsn = create_database(pg_admin_dsn, f"mcp_{uuid.uuid4().hex[:16]}")
    PostgresStore(dsn, init_schema=True).close()
    return dsn
