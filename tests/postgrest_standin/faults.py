"""Fault injection for the PostgREST stand-in (tests only): make the next requests fail the
way a Supabase project does during an outage.

`POST /_standin/faults` with the API key (`apikey` header) and a JSON body
`{"fault": F, "count": N}` arms a fault for the next N requests to /rest/v1 (N = -1: until
cleared), or only those with `"method"` (e.g. "POST") and a path that holds `"path"` (e.g.
"/measurements"); `DELETE /_standin/faults` clears it. The answer says how many requests the
fault hit so far (`hits`). Faults:

- "503": answered 503 with PostgREST's PGRST000 body, the request not run;
- "502": answered 502 with a gateway's HTML page, the request not run;
- "drop": the connection closed mid-answer, the request not run;
- "drop_after": the request run (and committed), then the connection closed mid-answer: the
  answer of a write that was applied is lost.
"""

from __future__ import annotations

import hmac
import json
import threading
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTROL_PATH = "/_standin/faults"
FAULTS = ("503", "502", "drop", "drop_after")


class _Dropped(Exception):
    """Raised after a response's headers, so that uvicorn closes the connection mid-answer."""


class FaultInjector:
    """ASGI middleware in front of the stand-in's app."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.api_key = api_key
        self._lock = threading.Lock()
        self._fault: str | None = None
        self._method: str | None = None
        self._path = ""
        self._left = 0
        self._hits = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == CONTROL_PATH:
            await self._control(scope, receive, send)
            return
        fault = self._take(scope) if scope["path"].startswith("/rest/v1") else None
        if fault is None:
            await self.app(scope, receive, send)
        elif fault == "503":
            body = {
                "code": "PGRST000",
                "details": "connection to server failed: Connection refused",
                "hint": None,
                "message": "Database connection error. Retrying the connection.",
            }
            await _answer(send, 503, json.dumps(body).encode(), b"application/json")
        elif fault == "502":
            page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
            await _answer(send, 502, page, b"text/html")
        else:
            if fault == "drop_after":
                await self.app(scope, receive, _swallow)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"64")],
                }
            )
            await send({"type": "http.response.body", "body": b"[", "more_body": True})
            raise _Dropped("fault injected: connection dropped mid-answer")

    def _take(self, scope: Scope) -> str | None:
        with self._lock:
            if self._fault is None or self._left == 0 or self._path not in scope["path"]:
                return None
            if self._method is not None and scope["method"] != self._method:
                return None
            if self._left > 0:
                self._left -= 1
            self._hits += 1
            return self._fault

    async def _control(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("apikey", "")
        if not hmac.compare_digest(given.encode(), self.api_key.encode()):
            await _answer(send, 401, b'{"message": "Invalid API key"}', b"application/json")
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request: dict[str, Any] = json.loads(body or b"{}") if scope["method"] == "POST" else {}
        if scope["method"] == "POST" and request.get("fault") not in FAULTS:
            await _answer(send, 400, b'{"message": "unknown fault"}', b"application/json")
            return
        with self._lock:
            if scope["method"] == "DELETE":
                self._fault, self._left = None, 0
            elif scope["method"] == "POST":
                self._fault, self._left = request["fault"], int(request.get("count", 1))
                self._method, self._path = request.get("method"), request.get("path") or ""
                self._hits = 0
            state = {"fault": self._fault, "left": self._left, "hits": self._hits}
        await _answer(send, 200, json.dumps(state).encode(), b"application/json")


async def _swallow(message: Message) -> None:
    """The send of a request whose answer is to be lost."""


async def _answer(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
