"""The installed `accelopt-mcp` console script over stdio and over streamable HTTP (uvicorn on
127.0.0.1), through the SDK's clients and raw requests: tokens, 401s, /health, a clean stdout."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from accelopt_mcp.mcp_tools import ADMIN_TOOLS_ENV
from tests.mcp.conftest import TRACE_DIR
from tests.mcp.helpers import TOOLS_LIST_BYTES, fails, ok
from tests.mcp.processes import REPO_ROOT, HttpServer, console_script, free_port, server_env

pytestmark = pytest.mark.anyio

TOKEN = "test-token-0123456789abcdef"


async def exercise(client: Client) -> None:
    """A few calls that need the database, one that fails, and one after the failure."""
    tools = {t.name for t in (await client.list_tools()).tools}
    # Each server here was started with the admin tools (by flag or by environment).
    assert {"profile_kernel", "list_definitions", "add_memory", "import_directory"} <= tools
    imported = await ok(client, "import_directory", {"path": str(TRACE_DIR)})
    assert imported["counts"]["definitions"] == 5
    await fails(client, "get_solution", {"solution_id": "nope"}, "no solution with id 'nope'")
    listed = await ok(client, "list_definitions", {"limit": 2})
    assert listed["page"]["total"] == 5 and len(listed["items"]) == 2


# --------------------------------------------------------------------------- stdio


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio_console_script(mode: str, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=console_script(),
        args=["--store", str(tmp_path / "k.db"), "--admin-tools"],
        env=server_env(),
        cwd=str(tmp_path),
    )
    async with Client(params, mode=mode) as client:
        await exercise(client)


def test_stdio_stdout_holds_only_protocol(tmp_path: Path) -> None:
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "get_solution", "arguments": {"solution_id": "nope"}},
        },
    ]
    log = (tmp_path / "stderr.log").open("wb")
    process = subprocess.Popen(
        [console_script(), "--store", str(tmp_path / "k.db"), "--log-level", "INFO"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=server_env(),
        cwd=tmp_path,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("".join(json.dumps(r) + "\n" for r in requests).encode())
    process.stdin.flush()
    messages = []
    sizes: dict[object, int] = {}
    # Stdin stays open until the last answer is in: EOF ends the session.
    while not any(m.get("id") == 3 for m in messages):
        line = process.stdout.readline()
        assert line, "the server closed stdout early"
        messages.append(json.loads(line))  # every line must be JSON-RPC
        sizes[messages[-1].get("id")] = len(line)
    process.stdin.close()
    process.wait(timeout=30)
    log.close()
    stdout_rest, stderr = process.stdout.read(), (tmp_path / "stderr.log").read_bytes()
    assert process.returncode == 0, stderr.decode()
    assert stdout_rest.strip() == b""
    assert all(m["jsonrpc"] == "2.0" for m in messages)
    by_id = {m["id"]: m for m in messages if "id" in m}
    assert by_id[1]["result"]["serverInfo"]["name"] == "accelopt"
    assert len(by_id[2]["result"]["tools"]) >= 18
    # tools/list, as sent: every tool's schema lands in each session's context.
    assert sizes[2] < TOOLS_LIST_BYTES, sizes[2]
    assert all("outputSchema" not in t for t in by_id[2]["result"]["tools"])
    assert by_id[3]["result"]["isError"] is True
    # The failure was logged, on stderr.
    assert "nope" in stderr.decode()


async def test_a_new_default_database_is_readable_by_this_user_alone(tmp_path: Path) -> None:
    """The per-user database holds every kernel, LLM prompt and reply (what the viewer and
    the HTTP token keep from other local users): the server that creates it and its folder,
    under a usual umask of 022, leaves neither open to other users."""
    home = tmp_path / "fresh-home"
    script = f"umask 022 && exec {shlex.quote(console_script())}"
    params = StdioServerParameters(
        command="sh",
        args=["-c", script],
        env=server_env(ACCELOPT_HOME=str(home)),
        cwd=str(tmp_path),
    )
    async with Client(params) as client:
        await ok(client, "list_definitions")
    database = home / "kernels.db"
    assert database.is_file()
    assert home.stat().st_mode & 0o077 == 0, oct(home.stat().st_mode)
    for path in home.glob("kernels.db*"):  # the file, and its -wal and -shm beside it
        assert path.stat().st_mode & 0o077 == 0, (path.name, oct(path.stat().st_mode))


# --------------------------------------------------------------------------- HTTP


async def test_http_on_localhost_with_generated_token(tmp_path: Path) -> None:
    with HttpServer(str(tmp_path / "k.db"), env={ADMIN_TOOLS_ENV: "1"}) as server:
        health = httpx.get(f"{server.base}/health", timeout=5)
        assert health.json() == {"status": "ok"}  # open, and tells nothing
        token_file = server.home / "mcp_token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert str(token_file) in server.stderr() and server.token not in server.stderr()
        assert httpx.post(server.url, json={}, timeout=5).status_code == 401
        async with (
            httpx2.AsyncClient(headers=server.headers, timeout=30) as http,
            Client(streamable_http_client(server.url, http_client=http)) as client,
        ):
            await exercise(client)
        async with (
            httpx2.AsyncClient(headers=server.headers, timeout=30) as http,
            Client(streamable_http_client(server.url, http_client=http), mode="legacy") as client,
        ):
            assert (await ok(client, "list_definitions"))["page"]["total"] == 5


async def test_http_token_required_when_set(tmp_path: Path) -> None:
    with HttpServer(str(tmp_path / "k.db"), token=TOKEN, extra_args=["--admin-tools"]) as server:
        assert httpx.get(f"{server.base}/health", timeout=5).status_code == 200
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            denied = httpx.post(server.url, json=body, headers=headers, timeout=5)
            assert denied.status_code == 401, headers
            assert "ACCELOPT_MCP_TOKEN" in denied.json()["message"]
            assert TOKEN not in denied.text
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(server.url, http_client=http)) as client,
        ):
            await exercise(client)
        with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in its own error
            async with Client(server.url) as client:
                await client.list_tools()
        assert TOKEN not in server.stderr()


def test_http_refuses_public_bind_without_token(tmp_path: Path) -> None:
    done = subprocess.run(
        [console_script(), "--http", "--host", "0.0.0.0", "--store", str(tmp_path / "k.db")],
        capture_output=True,
        env=server_env(),
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert done.returncode == 2
    assert "ACCELOPT_MCP_TOKEN" in done.stderr.decode()
    assert not (tmp_path / "k.db").exists()  # it stopped before touching anything


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_http_refuses_a_token_short_enough_to_guess(host: str, tmp_path: Path) -> None:
    """A one-letter $ACCELOPT_MCP_TOKEN falls to a few dozen tries (nothing slows them), on
    the network or from any local user: the server refuses it, without repeating it."""
    short = "Zq7"
    port = str(free_port())
    done = subprocess.run(
        [
            console_script(),
            "--http",
            "--host",
            host,
            "--port",
            port,
            "--store",
            str(tmp_path / "k.db"),
        ],
        capture_output=True,
        env=server_env(ACCELOPT_MCP_TOKEN=short),
        cwd=REPO_ROOT,
        timeout=30,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert "ACCELOPT_MCP_TOKEN" in stderr and "openssl rand" in stderr
    assert short not in stderr
    assert not (tmp_path / "k.db").exists()


async def test_http_public_bind_with_token(tmp_path: Path) -> None:
    with HttpServer(str(tmp_path / "k.db"), token=TOKEN, host="0.0.0.0") as server:
        assert httpx.post(server.url, json={}, timeout=5).status_code == 401
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(server.url, http_client=http)) as client,
        ):
            assert (await ok(client, "list_backends"))["backends"]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
async def test_http_on_loopback_refuses_rebound_names(host: str, tmp_path: Path) -> None:
    """Behind the token, the Host and Origin checks still stop a web page from driving a
    loopback server through the browser (DNS rebinding: a name of the attacker's that
    resolves to 127.x.y.z). They must hold on every loopback address it may bind."""
    with HttpServer(str(tmp_path / "k.db"), host=host) as server:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        accept = {"Accept": "application/json, text/event-stream", **server.headers}
        rebound = httpx.post(
            server.url, json=body, headers={**accept, "Host": "evil.example"}, timeout=5
        )
        assert rebound.status_code == 421
        cross_site = httpx.post(
            server.url, json=body, headers={**accept, "Origin": "http://evil.example"}, timeout=5
        )
        assert cross_site.status_code == 403
        async with (
            httpx2.AsyncClient(headers=server.headers, timeout=30) as http,
            Client(streamable_http_client(server.url, http_client=http)) as client,
        ):
            assert (await ok(client, "list_backends"))["backends"]
