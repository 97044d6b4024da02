"""Starts the PostgREST stand-in for tests as a real subprocess and waits until it answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.postgrest_standin.__main__ import KEY_ENV, ROLE_ENV
from tests.postgrest_standin.app import DATABASE_PATH
from tests.postgrest_standin.faults import CONTROL_PATH
from tests.server_process import end_process

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RunningStandIn:
    url: str
    """The Supabase-style project URL; the REST API is at {url}/rest/v1."""
    key: str
    dsn: str
    """The database the stand-in serves."""
    process: subprocess.Popen[bytes]
    log: Path
    """The stand-in's stderr: uvicorn's warnings and any traceback."""

    def inject(
        self, fault: str, count: int = 1, *, method: str | None = None, path: str = ""
    ) -> None:
        """Make the next `count` requests (-1: until cleared; only `method`'s, to a path that
        holds `path`, if given) fail with `fault`; see faults.py."""
        self._faults("POST", {"fault": fault, "count": count, "method": method, "path": path})

    def clear_faults(self) -> int:
        """End the fault; returns how many requests it hit."""
        return int(self._faults("DELETE", None)["hits"])

    def fault_hits(self) -> int:
        return int(self._faults("GET", None)["hits"])

    def _faults(self, method: str, body: dict[str, object] | None) -> dict[str, Any]:
        response = httpx.request(
            method, f"{self.url}{CONTROL_PATH}", headers={"apikey": self.key}, json=body, timeout=5
        )
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def repoint(self, dsn: str) -> None:
        """Serve `dsn` from now on, with no fault pending (one stand-in, many tests' databases)."""
        response = httpx.post(
            f"{self.url}{DATABASE_PATH}",
            headers={"apikey": self.key},
            json={"dsn": dsn},
            timeout=30,
        )
        response.raise_for_status()
        self.dsn = dsn
        self.clear_faults()

    def stop(self) -> None:
        end_process(self.process, timeout_s=10)
        self.log.unlink(missing_ok=True)


def start_standin(
    dsn: str, key: str, *, timeout_s: float = 30, role: str | None = None
) -> RunningStandIn:
    """Start the stand-in on a free port; a port taken between choosing and binding it (other
    test processes run beside this one) is retried with another. role: the database role its
    requests run as (as Supabase's anon key runs as `anon`); default the DSN's user."""
    for _ in range(3):
        try:
            return _start_once(dsn, key, free_port(), timeout_s, role)
        except _PortTaken:
            continue
    raise RuntimeError("the PostgREST stand-in found no free port in three tries")


class _PortTaken(Exception):
    pass


def _start_once(
    dsn: str, key: str, port: int, timeout_s: float, role: str | None
) -> RunningStandIn:
    env = {**os.environ, KEY_ENV: key}
    if role is not None:
        env[ROLE_ENV] = role
    else:
        env.pop(ROLE_ENV, None)
    log_fd, log_name = tempfile.mkstemp(prefix="postgrest-standin-", suffix=".log")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.postgrest_standin", "--dsn", dsn, "--port", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log_fd,
    )
    os.close(log_fd)
    url = f"http://127.0.0.1:{port}"
    running = RunningStandIn(url, key, dsn, process, Path(log_name))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = running.log.read_text(errors="replace")
            running.log.unlink(missing_ok=True)
            if "address already in use" in error.lower():
                raise _PortTaken
            raise RuntimeError(f"the PostgREST stand-in exited at start-up:\n{error}")
        try:
            response = httpx.get(f"{url}/rest/v1/", headers={"apikey": key}, timeout=1)
            if response.status_code == 200:
                return running
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    running.stop()
    raise RuntimeError(f"the PostgREST stand-in did not answer on {url} within {timeout_s}s")
