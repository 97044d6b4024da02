"""Fixtures for the MCP server tests: a database per test and MCP clients of every kind."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from mcp import Client

from accelopt_mcp.mcp_tools import ServerState, build_server
from accelopt_mcp.mcp_tools.roots import Roots
from accelopt_mcp.store import open_store
from accelopt_mcp.store.base import KernelStore
from accelopt_mcp.store.postgres import PostgresStore
from tests.bench import quick_bench_fields
from tests.pg_server import create_database

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "cpu"
TRACE_DIR = EXAMPLES / "flashinfer"
NKIBENCH_DIR = EXAMPLES / "nkibench"
SILU_TASK = TRACE_DIR / "definitions" / "silu_n1024.json"
SILU_SLOW = TRACE_DIR / "solutions" / "silu_n1024" / "silu_n1024_python_loop.json"
SILU_FAST = TRACE_DIR / "solutions" / "silu_n1024" / "silu_n1024_fast.json"

# Small and quick profiling (a tool's `benchmark` argument): two seeds, three timed runs, one
# short round.
BENCH = quick_bench_fields(
    seeds=[0, 1], processes=(1, 2), max_measurement_rounds=1, max_timing_seconds=1.0
)

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


@contextlib.asynccontextmanager
async def served(
    url: str,
    tmp_path: Path,
    *,
    mode: str = "legacy",
    roots: Roots | None = None,
    admin_tools: bool = False,
) -> AsyncIterator[Client]:
    """An in-process MCP client of a fresh server on the database `url` (jobs write under
    tmp_path/jobs), closed with its state afterwards; `admin_tools`: as `--admin-tools`."""
    extra = {} if roots is None else {"roots": roots}
    state = ServerState(url, jobs_output_dir=tmp_path / "jobs", **extra)
    try:
        server = build_server(state, admin_tools=admin_tools)
        async with Client(server, mode=mode) as connected:
            yield connected
    finally:
        state.close()


@pytest.fixture
async def client(sqlite_url: str, tmp_path: Path) -> AsyncIterator[Client]:
    """A server on a fresh SQLite file, over the legacy handshake Claude Code uses."""
    async with served(sqlite_url, tmp_path) as connected:
        yield connected


@pytest.fixture
async def admin_client(sqlite_url: str, tmp_path: Path) -> AsyncIterator[Client]:
    """As `client`, on a server started with --admin-tools (insert_*, import_directory)."""
    async with served(sqlite_url, tmp_path, admin_tools=True) as connected:
        yield connected


@pytest.fixture
def store(sqlite_url: str) -> Iterator[KernelStore]:
    """The database the `client` fixture's server uses, opened beside it."""
    opened = open_store(sqlite_url)
    try:
        yield opened
    finally:
        opened.close()
