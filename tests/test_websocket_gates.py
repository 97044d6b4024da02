"""The two HTTP gates (the MCP server's bearer token, the viewer's Host and token checks) are
closed to websockets by default. Neither app has a websocket route today, but uvicorn speaks
websockets whenever the `websockets` package is installed (supabase pulls it in), so a route
added later must not be open to anyone who skips the token. Each gate is put in front of a
Starlette app with a websocket route that accepts everyone, served by a real uvicorn on
loopback, and a real websocket client knocks with and without the token."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from accelopt_mcp.server import BearerTokenGate
from accelopt_mcp.viewer.app import Gate

TOKEN = "a-websocket-test-token-0123456789"


async def open_door(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("opened")
    await websocket.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(make_app: type[BearerTokenGate] | type[Gate], port: int) -> Iterator[None]:
    inner = Starlette(
        routes=[WebSocketRoute("/mcp", open_door), WebSocketRoute("/api/x", open_door)]
    )
    app: ASGIApp = (
        BearerTokenGate(inner, TOKEN)
        if make_app is BearerTokenGate
        else Gate(inner, token=TOKEN, port=port)
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def knock(port: int, path: str, headers: dict[str, str] | list[tuple[str, str]]) -> str:
    """What the route said ("opened"), or "refused <status>" when the handshake was refused."""
    try:
        with connect(f"ws://127.0.0.1:{port}{path}", additional_headers=headers) as connection:
            return str(connection.recv(timeout=10))
    except InvalidStatus as refused:
        return f"refused {refused.response.status_code}"


def test_the_mcp_gate_opens_a_websocket_only_with_the_token() -> None:
    port = free_port()
    with served(BearerTokenGate, port):
        assert knock(port, "/mcp", {}) == "refused 403"
        assert knock(port, "/mcp", {"Authorization": "Bearer not-the-token"}) == "refused 403"
        # The token in another place than the header does not count either.
        assert knock(port, f"/mcp?token={TOKEN}", {}) == "refused 403"
        # Two Authorization headers, the right one last: the gate and the app behind it could
        # read different ones, so neither counts.
        both = [("Authorization", "Bearer not-the-token"), ("Authorization", f"Bearer {TOKEN}")]
        assert knock(port, "/mcp", both) == "refused 403"
        # The gate does not refuse what it should let through: the same door opens with it.
        assert knock(port, "/mcp", {"Authorization": f"Bearer {TOKEN}"}) == "opened"


@pytest.mark.parametrize("path", ["/api/x", "/mcp"])
def test_the_viewer_gate_opens_no_websocket(path: str) -> None:
    port = free_port()
    with served(Gate, port):
        assert knock(port, path, {}) == "refused 403"
        # Not even with the token (the client names the Host the gate wants): the viewer
        # serves no websocket.
        assert knock(port, path, {"Authorization": f"Bearer {TOKEN}"}) == "refused 403"
