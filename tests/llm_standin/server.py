"""A scripted OpenAI-compatible HTTP server: a stand-in for a paid model API in the tests.

It serves POST /v1/chat/completions and GET /v1/models on 127.0.0.1, answering from a
StandinScript, and GET /_standin/log with every request it got and the most requests it had in
flight at once. Usage counts words, so tests can predict tokens and cost; like a real server
it never reports (nor writes) more output than a request's max_tokens.

Run: python -m tests.llm_standin --script script.json [--port 0]
It prints "STANDIN LISTENING <base_url>" once it accepts connections.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.llm_standin.script import (
    DelayFault,
    EmptyChoicesFault,
    GarbageFault,
    Reply,
    StandinScript,
    StatusFault,
    TextReply,
)


class StandinState:
    """Queues, request log and in-flight counters, shared by the handler threads."""

    def __init__(self, script: StandinScript) -> None:
        self.script = script
        self.lock = threading.Lock()
        self.next_reply: dict[str, int] = defaultdict(int)
        self.requests: list[dict[str, Any]] = []
        self.in_flight: dict[str, int] = defaultdict(int)
        self.max_in_flight: dict[str, int] = defaultdict(int)
        self.started = time.monotonic()

    def route(self, body: dict[str, Any]) -> str | None:
        model = str(body.get("model", ""))
        if model in self.script.roles:
            return model
        system = "\n".join(
            str(message.get("content", ""))
            for message in body.get("messages", [])
            if isinstance(message, dict) and message.get("role") in ("system", "developer")
        )
        for name, role in self.script.roles.items():
            if role.marker and role.marker in system:
                return name
        return "*" if "*" in self.script.roles else None

    def take_reply(self, role: str) -> Reply | None:
        with self.lock:
            replies = self.script.roles[role].replies
            index = self.next_reply[role]
            self.next_reply[role] += 1
            if index < len(replies):
                return replies[index]
            if self.script.roles[role].when_exhausted == "repeat_last" and replies:
                return replies[-1]
            return None

    def enter(self, role: str) -> None:
        with self.lock:
            self.in_flight[role] += 1
            self.in_flight["*total*"] += 1
            for key in (role, "*total*"):
                self.max_in_flight[key] = max(self.max_in_flight[key], self.in_flight[key])

    def leave(self, role: str) -> None:
        with self.lock:
            self.in_flight[role] -= 1
            self.in_flight["*total*"] -= 1

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(entry)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": list(self.requests),
                "max_in_flight": dict(self.max_in_flight),
            }


def _words(text: str) -> int:
    return len(text.split())


class StandinHandler(BaseHTTPRequestHandler):
    server_version = "llm-standin/1"
    state: StandinState  # set on the subclass made by make_server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log endpoint is the record."""

    # ------------------------------------------------------------------ routes

    def do_GET(self) -> None:
        if self.path == "/_standin/log":
            self._send_json(200, self.state.snapshot())
        elif self.path == "/v1/models":
            if self._authorized():
                models = [name for name in self.state.script.roles if name != "*"]
                data = [{"id": m, "object": "model", "owned_by": "standin"} for m in models]
                self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_error_body(404, f"stand-in: no route GET {self.path}")

    def do_POST(self) -> None:
        if self.path != "/v1/chat/completions":
            self._send_error_body(404, f"stand-in: no route POST {self.path}")
            return
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send_error_body(400, "stand-in: request body is not JSON")
            return
        role = self.state.route(body)
        entry: dict[str, Any] = {
            "role": role,
            "model": body.get("model"),
            "body": body,
            "received_at": time.monotonic() - self.state.started,
            "auth_ok": self._auth_ok(),
        }
        self.state.record(entry)
        if not self._authorized():
            entry["outcome"] = "401"
            return
        if role is None:
            entry["outcome"] = "unrouted"
            # As vLLM answers a model it does not serve.
            self._send_error_body(
                404, f"stand-in: no scripted role: the model `{body.get('model')}` does not exist"
            )
            return
        reply = self.state.take_reply(role)
        if reply is None:
            entry["outcome"] = "exhausted"
            self._send_error_body(400, f"stand-in: the script for role {role!r} is exhausted")
            return
        entry["outcome"] = reply.kind
        self.state.enter(role)
        try:
            latency = (
                reply.latency_s if reply.latency_s is not None else self.state.script.latency_s
            )
            time.sleep(latency)
            self._play(reply, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout); that is what a delay fault is for
        finally:
            self.state.leave(role)

    # ------------------------------------------------------------------ replies

    def _play(self, reply: Reply, body: dict[str, Any]) -> None:
        model = str(body.get("model", ""))
        if isinstance(reply, TextReply):
            self._send_completion(reply, body)
        elif isinstance(reply, StatusFault):
            headers = {"retry-after": reply.retry_after} if reply.retry_after is not None else {}
            self._send_error_body(reply.status, reply.message, headers)
        elif isinstance(reply, DelayFault):
            time.sleep(reply.seconds)
            self._send_completion(TextReply(text=reply.text), body)
        elif isinstance(reply, GarbageFault):
            self._send_raw(200, reply.body.encode(), reply.content_type)
        elif isinstance(reply, EmptyChoicesFault):
            self._send_json(200, _completion(model, [], None))

    def _send_completion(self, reply: TextReply, body: dict[str, Any]) -> None:
        prompt_words = sum(
            _words(str(message.get("content", "")))
            for message in body.get("messages", [])
            if isinstance(message, dict)
        )
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else prompt_words
        completion = (
            reply.completion_tokens if reply.completion_tokens is not None else _words(reply.text)
        )
        text, finish = reply.text, reply.finish_reason
        # As a real server does: never more output than the request's limit; a reply cut
        # there ends with "length".
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if isinstance(limit, int) and completion > limit:
            completion, finish = limit, "length"
            text = " ".join(text.split()[:limit])
        usage = None if reply.omit_usage else (prompt, completion)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }
        self._send_json(200, _completion(str(body.get("model", "")), [choice], usage))

    # ------------------------------------------------------------------ plumbing

    def _auth_ok(self) -> bool:
        return self.headers.get("authorization") == f"Bearer {self.state.script.api_key}"

    def _authorized(self) -> bool:
        if self._auth_ok():
            return True
        self._send_error_body(401, "stand-in: missing or wrong API key", error_type="auth")
        return False

    def _send_error_body(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        error_type: str = "standin_error",
    ) -> None:
        if self.state.script.echo_key_in_errors:
            message += f" (request had Authorization: {self.headers.get('authorization')})"
        payload = {"error": {"message": message, "type": error_type, "code": status}}
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json")

    def _send_raw(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _completion(
    model: str, choices: list[dict[str, Any]], usage: tuple[int, int] | None
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        payload["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        }
    return payload


def make_server(
    script: StandinScript, host: str = "127.0.0.1", port: int = 0
) -> ThreadingHTTPServer:
    state = StandinState(script)
    handler = type("BoundStandinHandler", (StandinHandler,), {"state": state})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
