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

import httpx

from tests.postgrest_standin.__main__ import KEY_ENV

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

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log.unlink(missing_ok=True)


def start_standin(dsn: str, key: str, *, timeout_s: float = 30) -> RunningStandIn:
    """Start the stand-in on a free port; a port taken between choosing and binding it (other
    test processes run beside this one) is retried with another."""
    for _ in range(3):
        try:
            return _start_once(dsn, key, free_port(), timeout_s)
        except _PortTaken:
            continue
    raise RuntimeError("the PostgREST stand-in found no free port in three tries")


class _PortTaken(Exception):
    pass


def _start_once(dsn: str, key: str, port: int, timeout_s: float) -> RunningStandIn:
    env = {**os.environ, KEY_ENV: key}
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
