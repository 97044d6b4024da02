"""`accelopt-mcp`: the MCP server. stdio by default (nothing but protocol on stdout, logs on
stderr); `--http` serves streamable HTTP under uvicorn, on 127.0.0.1 unless told otherwise, with
a bearer token required on every interface, loopback included (any local process can reach a
loopback port): $ACCELOPT_MCP_TOKEN, else one generated at start and written to a 0600 file
under ACCELOPT_HOME that only this user can read.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import logging
import os
import secrets
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.status import WS_1008_POLICY_VIOLATION
from starlette.types import ASGIApp, Receive, Scope, Send

from accelopt_mcp import __version__
from accelopt_mcp.isolation.cgroups import remove_stale_groups
from accelopt_mcp.mcp_tools import (
    ADMIN_TOOLS_ENV,
    AccelOptServer,
    ServerState,
    admin_tools_from_env,
    build_server,
)
from accelopt_mcp.mcp_tools.roots import ROOTS_ENV, Roots, accelopt_home
from accelopt_mcp.store import STORE_ENV
from accelopt_mcp.store.url import password_on_command_line

TOKEN_ENV = "ACCELOPT_MCP_TOKEN"
TOKEN_FILE = "mcp_token"
# Nothing slows a client that tries tokens one after another: one shorter than this falls to
# guessing (a generated token has 43 characters; `openssl rand -hex 32` gives 64).
MIN_TOKEN_CHARS = 16
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
    """ASGI middleware: every connection but an HTTP request for /health must carry
    `Authorization: Bearer <token>`; an HTTP request without it gets 401, a websocket is
    closed before it opens (uvicorn answers 403). Closed by default: a connection of a kind it
    does not know (the app has no websocket route today, but one added later, or a new ASGI
    scope type, must not be open to anyone) gets nothing. The comparison takes constant time."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan" or (kind == "http" and scope.get("path") == HEALTH_PATH):
            await self.app(scope, receive, send)
            return
        # Exactly one Authorization header: with two, this gate and the app behind it could
        # each read a different one.
        given = [value for name, value in scope.get("headers") or [] if name == b"authorization"]
        one = given[0] if len(given) == 1 else b""
        if kind in ("http", "websocket") and hmac.compare_digest(one, self.expected):
            await self.app(scope, receive, send)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": WS_1008_POLICY_VIOLATION})
            return
        if kind != "http":
            return
        response = JSONResponse(
            {
                "error": "unauthorized",
                "message": f"send the header 'Authorization: Bearer <token>' with the token "
                f"the server was started with (${TOKEN_ENV}, else the file "
                f"$ACCELOPT_HOME/{TOKEN_FILE} it printed at start)",
            },
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve HTTP without a token, or with one short enough to guess, on any
    address: the tools run code on this machine, and a loopback port is open to every local
    user."""
    if not token:
        raise ServerConfigError(
            f"refusing to serve on {host} without a bearer token: anyone who can reach it could "
            f"run code on this machine. Set {TOKEN_ENV} to a long random secret (e.g. `export "
            f"{TOKEN_ENV}=$(openssl rand -hex 32)`) and give it to the client"
            + ("" if is_loopback(host) else ", or bind to 127.0.0.1 (which makes one itself)")
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise ServerConfigError(
            f"{TOKEN_ENV} is {len(token)} characters long, short enough to guess by trying: set "
            f"it to a long random secret of {MIN_TOKEN_CHARS} characters or more (e.g. `export "
            f"{TOKEN_ENV}=$(openssl rand -hex 32)`) and give it to the client"
        )


def write_token_file(home: Path) -> tuple[str, Path]:
    """A fresh token in home/mcp_token, readable by this user alone. The folder must be ours
    and not writable by others (else another user could swap the file for a link); the file is
    created anew, exclusively, 0600, never through a link."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.stat(home)
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ServerConfigError(
            f"{home} is not owned by this user or is writable by others; the token file cannot "
            f"be kept safe there: `chmod 700 {home}`, or point ACCELOPT_HOME elsewhere, or set "
            f"{TOKEN_ENV}"
        )
    path = home / TOKEN_FILE
    path.unlink(missing_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token, path


def http_token(host: str, home: Path | None = None) -> str:
    """$ACCELOPT_MCP_TOKEN, else (on loopback) a generated one written to the token file: its
    place, not the token, goes to stderr once. Off loopback the token must be given: a remote
    client cannot read the file, and a server that refuses is clearer than one nobody can use."""
    given = os.environ.get(TOKEN_ENV)
    if given:
        return given
    if not is_loopback(host):
        check_bind(host, None)
    token, path = write_token_file(home or accelopt_home())
    print(
        f"accelopt-mcp: bearer token written to {path} (mode 0600); clients send "
        f"'Authorization: Bearer $(cat {path})'",
        file=sys.stderr,
        flush=True,
    )
    return token


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

    # Open to anyone (liveness probes carry no token): it says it is up and nothing else.
    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    # Called, not used as a decorator: the SDK's custom_route is untyped.
    server.custom_route(HEALTH_PATH, methods=["GET"])(health)

    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, transport_security=rebinding_guard(host)
    )
    assert token  # check_bind refused a server without one
    return BearerTokenGate(app, token)


def serve_http(
    server: AccelOptServer, state: ServerState, *, host: str, port: int, token: str | None
) -> None:
    import uvicorn

    app = http_app(server, state, host=host, token=token)
    log.warning(
        "accelopt-mcp: streamable HTTP on http://%s:%d%s (bearer token required)",
        host,
        port,
        MCP_PATH,
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
        description="MCP server for AccelOpt kernel optimization (stdio unless --http). "
        "`accelopt-mcp install-skill --help`: write the skill and a project's .mcp.json.",
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
        "--root",
        action="append",
        default=None,
        metavar="PATH",
        help=f"A folder tools may read files under (repeatable; default ${ROOTS_ENV}, else the "
        "working directory and ACCELOPT_HOME).",
    )
    parser.add_argument(
        "--admin-tools",
        action="store_true",
        default=admin_tools_from_env(),
        help="Also list the tools that write records by hand (insert_definition, "
        "insert_workload, insert_solution, insert_profile, import_directory); default "
        f"${ADMIN_TOOLS_ENV}=1, else off: an optimizing agent never needs them.",
    )
    parser.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["install-skill"]:
        from accelopt_mcp.install_skill import main as install_skill

        raise SystemExit(install_skill(given[1:]))
    # Said, not refused: the password is already in the process list by the time we run.
    # Before the arguments are parsed, so that --help or a mistyped option says it too.
    warning = password_on_command_line(given)
    if warning:
        print(warning, file=sys.stderr)
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="%(levelname)s %(message)s")
    # What a killed server or job left (frozen jails, their cgroups), should its reaper be gone.
    remove_stale_groups()
    state = ServerState(
        args.store,
        jobs_output_dir=args.jobs_dir,
        max_parallel_jobs=args.max_parallel_jobs,
        roots=Roots.configured(args.root),
    )
    # The server's lifespan resumes interrupted jobs as it starts and closes the state as it
    # stops; the `finally` below covers a start that never got that far.
    server = build_server(
        state,
        resume_jobs=not args.no_resume,
        admin_tools=args.admin_tools,
        log_level=args.log_level,
    )
    try:
        if args.http:
            token = http_token(args.host)
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
