"""The installed `accelopt-mcp` console script, run as a real subprocess."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import httpx

from tests.conftest import home_with_peaks
from tests.server_process import ServerProcess, end_process

REPO_ROOT = Path(__file__).resolve().parents[2]


def console_script() -> str:
    script = Path(sys.executable).parent / "accelopt-mcp"
    assert script.exists(), f"{script} is missing: install the package (pip install -e .)"
    return str(script)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(**extra: str) -> dict[str, str]:
    """The parent's environment minus any token or key, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ACCELOPT_MCP_TOKEN", "ACCELOPT_STORE") and "KEY" not in k.upper()
    }
    return {**env, **extra}


class HttpServer(ServerProcess):
    """`accelopt-mcp --http` on a free port; `url` is its /mcp endpoint."""

    def __init__(
        self,
        store: str,
        *,
        token: str | None = None,
        host: str = "127.0.0.1",
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        start_timeout_s: float = 30.0,
    ) -> None:
        self.store = store
        self.token = token
        self.host = host
        self.port = free_port()
        self.extra_args = extra_args or []
        self.env = env or {}
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        # Without a token given, the server makes one in its ACCELOPT_HOME: a private folder.
        # The home and the server's log share one temp folder, removed once this object is
        # gone (a test may still read the log after stop()), or at exit.
        self.folder = Path(tempfile.mkdtemp(prefix="accelopt-mcp-"))
        weakref.finalize(self, shutil.rmtree, self.folder, ignore_errors=True)
        (self.folder / "home").mkdir(mode=0o700)
        self.home = home_with_peaks(self.folder / "home", measure=False)
        self.log_path = self.folder / "server.log"
        self.log_path.touch(mode=0o600)

    @property
    def base(self) -> str:
        # A wildcard bind answers on 127.0.0.1; a specific address only on itself.
        address = "127.0.0.1" if self.host in ("0.0.0.0", "::", "localhost") else self.host
        return f"http://{f'[{address}]' if ':' in address else address}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stderr(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self) -> None:
        given = {"ACCELOPT_MCP_TOKEN": self.token} if self.token else {}
        env = server_env(**{"ACCELOPT_HOME": str(self.home), **self.env, **given})
        args = [console_script(), "--http", "--host", self.host, "--port", str(self.port)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*args, "--store", self.store, *self.extra_args],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"accelopt-mcp exited early:\n{self.stderr()}")
            try:
                if httpx.get(f"{self.base}/health", timeout=1).status_code == 200:
                    if not self.token:
                        self.token = (self.home / "mcp_token").read_text().strip()
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"accelopt-mcp did not answer /health:\n{self.stderr()}")

    def stop(self) -> None:
        if self.process is not None:
            end_process(self.process, timeout_s=10)
        self.process = None
