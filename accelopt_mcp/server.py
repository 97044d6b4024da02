"""`accelopt-mcp`: the MCP server. stdio by default (nothing but protocol on stdout, logs on
stderr); `--http` serves streamable HTTP under uvicorn, on 127.0.0.1 unless told otherwise, with
a bearer token required off localhost (and on localhost too when ACCELOPT_MCP_TOKEN is set).
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from accelopt_mcp import __version__
from accelopt_mcp.mcp_tools import AccelOptServer, ServerState, build_server
from accelopt_mcp.store import STORE_ENV

TOKEN_ENV = "ACCELOPT_MCP_TOKEN"
DEFAULT_PORT = 8765
MCP_PATH = "/mcp"
HEALTH_PATH = "/health"
# Long tool calls (profiling, waiting on a job) keep a request open for minutes; an idle
# keep-alive connection between calls should not be dropped after uvicorn's default 5 s.
KEEP_ALIVE_S = 120

log = logging.getLogger("accelopt_mcp.server")


class ServerConfigError(Exception):
    """The command line asks for something unsafe or impossible; the message says what to do."""


# --------------------------------------------------------------------------- HTTP


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BearerTokenGate:
    """ASGI middleware: every HTTP request but /health must carry `Authorization: Bearer
    <token>`; others get 401. The comparison takes constant time."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == HEALTH_PATH:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {
                "error": "unauthorized",
                "message": f"send the header 'Authorization: Bearer <token>' with the token "
                f"the server was started with (${TOKEN_ENV})",
            },
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback address without a token: the tools run code on this machine."""
    if not is_loopback(host) and not token:
        raise ServerConfigError(
            f"refusing to serve on {host} without a bearer token: anyone who can reach it could "
            f"run code on this machine. Set {TOKEN_ENV} to a long random secret (e.g. `export "
            f"{TOKEN_ENV}=$(openssl rand -hex 32)`) and give it to the client, or bind to "
            "127.0.0.1"
        )


def rebinding_guard(host: str) -> TransportSecuritySettings | None:
    """Host/Origin checks against DNS rebinding for a loopback bind (where no token may be
    needed): the SDK adds them only for 127.0.0.1, localhost and ::1 spelled just so, not for
    127.0.0.2 or 0:0:0:0:0:0:0:1. Elsewhere the token is the guard."""
    if not is_loopback(host):
        return None
    named = f"[{host}]" if ":" in host else host
    hosts = list(dict.fromkeys(["127.0.0.1:*", "localhost:*", "[::1]:*", f"{named}:*"]))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )


def http_app(
    server: AccelOptServer, state: ServerState, *, host: str, token: str | None
) -> ASGIApp:
    """The streamable-HTTP app at /mcp, with /health, behind the token gate when a token is
    set."""
    check_bind(host, token)

    async def health(_: Request) -> Response:
        kind, _location = state.describe_store()
        tools = await server.list_tools()
        return JSONResponse(
            {"status": "ok", "server": server.name, "store": kind, "tools": len(tools)}
        )

    # Called, not used as a decorator: the SDK's custom_route is untyped.
    server.custom_route(HEALTH_PATH, methods=["GET"])(health)

    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, transport_security=rebinding_guard(host)
    )
    return BearerTokenGate(app, token) if token else app


def serve_http(
    server: AccelOptServer, state: ServerState, *, host: str, port: int, token: str | None
) -> None:
    import uvicorn

    app = http_app(server, state, host=host, token=token)
    log.warning(
        "accelopt-mcp: streamable HTTP on http://%s:%d%s (token %s)",
        host,
        port,
        MCP_PATH,
        "required" if token else "not required",
    )
    uvicorn.run(
        app,
        host=host,
        port=port,
        timeout_keep_alive=KEEP_ALIVE_S,
        log_level="warning",
        access_log=False,
    )


# --------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="accelopt-mcp",
        description="MCP server for AccelOpt kernel optimization (stdio unless --http).",
    )
    parser.add_argument("--version", action="version", version=f"accelopt-mcp {__version__}")
    parser.add_argument("--http", action="store_true", help="Serve streamable HTTP at /mcp.")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address.")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP port.")
    parser.add_argument(
        "--store",
        default=os.environ.get(STORE_ENV),
        help=f"Kernel database URL (default ${STORE_ENV}, else the per-user SQLite file).",
    )
    parser.add_argument(
        "--jobs-dir", type=Path, default=None, help="Where job outputs (winning kernels) go."
    )
    parser.add_argument("--max-parallel-jobs", type=int, default=1)
    parser.add_argument(
        "--no-resume", action="store_true", help="Do not resume jobs interrupted by a restart."
    )
    parser.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="%(levelname)s %(message)s")
    state = ServerState(
        args.store, jobs_output_dir=args.jobs_dir, max_parallel_jobs=args.max_parallel_jobs
    )
    # The server's lifespan resumes interrupted jobs as it starts and closes the state as it
    # stops; the `finally` below covers a start that never got that far.
    server = build_server(state, resume_jobs=not args.no_resume, log_level=args.log_level)
    token = os.environ.get(TOKEN_ENV) or None
    try:
        if args.http:
            serve_http(server, state, host=args.host, port=args.port, token=token)
        else:
            server.run("stdio")
    except ServerConfigError as exc:
        print(f"accelopt-mcp: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        pass
    finally:
        state.close()
