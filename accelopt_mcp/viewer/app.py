"""The viewer's web app: a token gate, a Host check, JSON endpoints over `views`, and the static
front end from the package.

Who may read: the viewer serves kernels' source and LLM prompts, and a loopback port is open to
every local user and, through DNS rebinding, to any web page the user visits. So every data
request (`/api/...`) must carry the token `accelopt view` printed, as `Authorization: Bearer
<token>`, and nothing else: no cookie, no query parameter. Cookies are not scoped by port, so a
cookie holding the token would be sent to every other service on 127.0.0.1, another user's
included. The shell (the pages, app.js, app.css: code, no data) is served without the token:
its script takes `?token=` from the printed URL once, keeps it in the browser's localStorage
(scoped by origin, so by port), takes it out of the address bar and sends it as that header.
Tokens are compared in constant time. The Host header must name the loopback address the viewer
listens on (a rebound name is refused even before the token is looked at). Pages carry a
Content-Security-Policy that runs only the package's own script: kernel and LLM text is
untrusted, and the front end writes it as text, never as markup (the policy is the second line
of defence).
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.status import WS_1008_POLICY_VIOLATION
from starlette.types import ASGIApp, Receive, Scope, Send

from accelopt_mcp.store.base import KernelStore, StoreError
from accelopt_mcp.viewer import views

CACHE_S = 1.0
"""How long one answer is reused: many open pages polling a run cost one read per second."""
STATIC_FILES = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
"""The only files /static/ serves (by exact name: no path from a request reaches the disk)."""
PAGES = ("/", "/runs", "/memory", "/suites")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def allowed_hosts(port: int) -> frozenset[bytes]:
    return frozenset(f"{name}:{port}".encode() for name in ("127.0.0.1", "localhost", "[::1]"))


NEED_TOKEN = (
    "this viewer needs its token: open the URL `accelopt view` printed (with ?token=...) once "
    "in this browser; start it again for a new one"
)


def is_shell(path: str) -> bool:
    """The paths served without the token: the pages and the static files, named exactly (an
    allowlist, so that no spelling of a data path slips through as a page)."""
    if path in PAGES or path == "/favicon.ico":
        return True
    if path.startswith("/static/"):
        return path[len("/static/") :] in STATIC_FILES
    if path.startswith("/run/"):
        run_id = path[len("/run/") :]
        return bool(run_id) and "/" not in run_id
    return False


class Gate:
    """ASGI middleware: the Host check and the token (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, token: str, port: int) -> None:
        self.app = app
        self.token = token.encode()
        self.port = port
        self.hosts = allowed_hosts(port)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            # Closed by default: the viewer has no websocket route, so every websocket is
            # refused (closed before it opens: uvicorn answers 403); one added later must be
            # given this gate's Host and token checks first.
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": WS_1008_POLICY_VIOLATION})
            return
        headers = dict(scope.get("headers") or [])
        if headers.get(b"host", b"") not in self.hosts:
            await _refuse(
                scope,
                receive,
                send,
                403,
                "this viewer answers only to 127.0.0.1 or localhost on its own port",
            )
            return
        if is_shell(scope["path"]):
            # The page's script reads a `?token=` and stores it; a wrong one is said here, at
            # once, rather than as a refused data request after the page loaded.
            given = Request(scope).query_params.get("token")
            if given is not None and not self._matches(given):
                await _refuse(
                    scope,
                    receive,
                    send,
                    403,
                    "wrong token: open the URL the running `accelopt view` printed last",
                )
                return
            await self.app(scope, receive, send)
            return
        bearer = headers.get(b"authorization", b"")
        if bearer.startswith(b"Bearer ") and self._matches(bearer[7:].decode(errors="replace")):
            await self.app(scope, receive, send)
            return
        await _refuse(scope, receive, send, 401, NEED_TOKEN)

    def _matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    path = scope.get("path", "")
    if path.startswith("/api/"):
        response: Response = JSONResponse(
            {"error": message}, status_code=status, headers=SECURITY_HEADERS
        )
    else:
        body = (
            "<!doctype html><meta charset=utf-8><title>accelopt view</title>"
            f"<p>{_html_escape(message)}</p>"
        )
        response = Response(
            body, status_code=status, media_type="text/html", headers=SECURITY_HEADERS
        )
    await response(scope, receive, send)


def _html_escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


class _Cache:
    """Answers reused for CACHE_S, one computation at a time per key (concurrent pollers of
    one run wait for the same read instead of each starting one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[Any, ...], tuple[float, bytes, str]] = {}
        self._key_locks: dict[tuple[Any, ...], threading.Lock] = {}

    def get(self, key: tuple[Any, ...], compute: Callable[[], BaseModel]) -> tuple[bytes, str]:
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            now = time.monotonic()
            found = self._entries.get(key)
            if found is not None and now - found[0] < CACHE_S:
                return found[1], found[2]
            body = compute().model_dump_json().encode()
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            with self._lock:
                if len(self._entries) > 512:
                    self._entries.clear()
                self._entries[key] = (time.monotonic(), body, etag)
            return body, etag


def _static_file(name: str) -> bytes:
    return resources.files("accelopt_mcp.viewer").joinpath("static", name).read_bytes()


def build_app(store: KernelStore, *, token: str, port: int) -> ASGIApp:
    """The whole app, behind its gate. `port` is the one it is reached on (the Host check)."""
    cache = _Cache()
    finished_rows: dict[tuple[str, str], views.RunRow] = {}
    index = _static_file("index.html")
    static = {name: _static_file(name) for name in STATIC_FILES}

    def q(request: Request, name: str) -> str | None:
        value = request.query_params.get(name)
        return value or None

    def api(
        path: str, compute: Callable[[Request], BaseModel], query: tuple[str, ...] = ()
    ) -> Route:
        """A JSON endpoint at `path`: compute(request) read through the cache, by the path's
        parameters and the `query` parameters it reads (every one compute reads must be named,
        or one answer would be served for another)."""

        def key(request: Request) -> tuple[Any, ...]:
            return (path, *request.path_params.values(), *(q(request, n) for n in query))

        async def endpoint(request: Request) -> Response:
            try:
                body, etag = await run_in_threadpool(
                    cache.get, key(request), lambda: compute(request)
                )
            except views.NotFound as exc:
                return JSONResponse({"error": str(exc)}, status_code=404, headers=SECURITY_HEADERS)
            except StoreError as exc:
                return JSONResponse({"error": str(exc)}, status_code=503, headers=SECURITY_HEADERS)
            except ValueError as exc:  # a malformed id or filter
                return JSONResponse({"error": str(exc)}, status_code=400, headers=SECURITY_HEADERS)
            headers = {**SECURITY_HEADERS, "ETag": etag}
            if request.headers.get("if-none-match") == etag:
                return Response(status_code=304, headers=headers)
            return Response(body, media_type="application/json", headers=headers)

        return Route(path, endpoint)

    async def page(_: Request) -> Response:
        return Response(index, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)

    async def static_file(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return Response("not found", status_code=404, headers=SECURITY_HEADERS)
        return Response(static[name], media_type=STATIC_FILES[name], headers=SECURITY_HEADERS)

    async def no_icon(_: Request) -> Response:
        return Response(status_code=204, headers=SECURITY_HEADERS)

    routes = [Route(path, page) for path in PAGES]
    routes += [
        Route("/favicon.ico", no_icon),
        Route("/run/{run_id}", page),
        Route("/static/{name:path}", static_file),
        api(
            "/api/runs",
            lambda r: views.list_runs(
                store, task=q(r, "task"), status=q(r, "status"), finished_rows=finished_rows
            ),
            query=("task", "status"),
        ),
        api("/api/run/{run_id}", lambda r: views.run_detail(store, r.path_params["run_id"])),
        api(
            "/api/node/{solution_id}",
            lambda r: views.node_detail(store, r.path_params["solution_id"], q(r, "run")),
            query=("run",),
        ),
        api("/api/call/{call_id}", lambda r: views.call_detail(store, r.path_params["call_id"])),
        api(
            "/api/memory",
            lambda r: views.memory_page(store, namespace=q(r, "namespace"), text=q(r, "q")),
            query=("namespace", "q"),
        ),
        api(
            "/api/suites",
            lambda r: views.suites_page(store, q(r, "a"), q(r, "b")),
            query=("a", "b"),
        ),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "not found"}, status_code=404, headers=SECURITY_HEADERS)

    app = Starlette(routes=routes, exception_handlers={404: not_found})
    return Gate(app, token=token, port=port)
