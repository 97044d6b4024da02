"""Start a stand-in server as a real subprocess and read back what it saw."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.llm_standin.script import StandinScript
from tests.server_process import ServerProcess, end_process

_REPO_ROOT = Path(__file__).resolve().parents[2]
_READY_PREFIX = "STANDIN LISTENING "


class StandinProcess(ServerProcess):
    """`with StandinProcess(script) as standin:` gives `standin.base_url` (ends in /v1)."""

    def __init__(self, script: StandinScript, *, start_timeout_s: float = 20.0) -> None:
        self.script = script
        self.start_timeout_s = start_timeout_s
        self.base_url = ""
        self._process: subprocess.Popen[str] | None = None
        self._workdir = tempfile.TemporaryDirectory(prefix="llm-standin-")

    def start(self) -> None:
        script_path = Path(self._workdir.name) / "script.json"
        script_path.write_text(self.script.model_dump_json(), encoding="utf-8")
        stderr_path = Path(self._workdir.name) / "stderr.txt"
        env = {key: value for key, value in os.environ.items() if "KEY" not in key.upper()}
        env["PYTHONPATH"] = str(_REPO_ROOT)
        with stderr_path.open("w") as stderr:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tests.llm_standin", "--script", str(script_path)],
                cwd=_REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.base_url = self._wait_ready(stderr_path)

    def _wait_ready(self, stderr_path: Path) -> str:
        assert self._process is not None and self._process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self._process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if selector.select(timeout=0.1):
                line = self._process.stdout.readline()
                if line.startswith(_READY_PREFIX):
                    return line[len(_READY_PREFIX) :].strip()
            if self._process.poll() is not None:
                break
        self.stop()
        raise RuntimeError(
            "the LLM stand-in server did not start; its stderr:\n" + stderr_path.read_text()
        )

    def stop(self) -> None:
        if self._process is not None:
            end_process(self._process, timeout_s=5)
            if self._process.stdout is not None:
                self._process.stdout.close()
        self._process = None
        self._workdir.cleanup()

    def log(self) -> dict[str, Any]:
        """{"requests": [...], "max_in_flight": {role: n, "*total*": n}}"""
        root = self.base_url.removesuffix("/v1")
        response = httpx.get(f"{root}/_standin/log", timeout=10)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def requests(self) -> list[dict[str, Any]]:
        requests: list[dict[str, Any]] = self.log()["requests"]
        return requests


StartStandin = Callable[[dict[str, Any]], StandinProcess]
"""What a `start_standin` fixture gives: starts a stand-in from a script dict."""


@contextmanager
def standin_starter(**defaults: Any) -> Iterator[StartStandin]:
    """Starts stand-ins (real subprocesses) from script dicts, `defaults` filling in what a
    script leaves out, and stops every one it started on leaving."""
    started: list[StandinProcess] = []

    def start(script: dict[str, Any]) -> StandinProcess:
        process = StandinProcess(StandinScript.model_validate({**defaults, **script}))
        process.start()
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()
