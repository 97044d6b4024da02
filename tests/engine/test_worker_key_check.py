"""A job worker started by the MCP server (`--check-key-destinations`) checks where the model
config it loads sends this environment's keys, on the configs it then uses: a file rewritten
after the server's own check (at start or take-over) cannot send a key anywhere new. A real
worker process, a real SQLite store and a real HTTP listener standing where the config points."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

from accelopt_mcp.engine.runs import prepare_run
from accelopt_mcp.llm.key_destinations import TRUSTED_CONFIGS_ENV
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.sqlite import SqliteStore
from tests.engine.conftest import KEY, KEY_ENV, models_config, settings
from tests.http_listener import serve_in_thread


class Listener(http.server.BaseHTTPRequestHandler):
    """Where the config points: keeps the Authorization header of every request, answers 500."""

    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        Listener.seen.append(self.headers.get("Authorization", ""))
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST

    def log_message(self, *_: object) -> None:
        pass


def _worker(run_id: str, tmp_path: Path, *, trusted: Path | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in (TRUSTED_CONFIGS_ENV, "OPENAI_BASE_URL")}
    env.update(
        {
            KEY_ENV: KEY,
            "ACCELOPT_STORE": str(tmp_path / "kernels.db"),
            "ACCELOPT_HOME": str(tmp_path),
        }
    )
    if trusted is not None:
        env[TRUSTED_CONFIGS_ENV] = str(trusted)
    argv = ["--output-dir", str(tmp_path / "out"), "--check-key-destinations"]
    return subprocess.Popen(
        [sys.executable, "-m", "accelopt_mcp.engine.worker", run_id, *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _new_run(folder: Path, task: Task, baseline: Solution, models: Path) -> str:
    """A pending run in folder/kernels.db whose model config is `models`."""
    store = SqliteStore(folder / "kernels.db")
    try:
        return prepare_run(store, task, baseline, settings(models))
    finally:
        store.close()


def test_a_worker_refuses_a_config_that_sends_a_key_where_no_operator_config_does(
    tmp_path: Path, silu_task: Task, silu_baseline: Solution
) -> None:
    Listener.seen.clear()
    with serve_in_thread(Listener) as url:
        models = models_config(f"{url}/v1", tmp_path / "client-models.json")
        run_id = _new_run(tmp_path, silu_task, silu_baseline, models)
        worker = _worker(run_id, tmp_path, trusted=None)
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 1, err
        store = SqliteStore(tmp_path / "kernels.db")
        try:
            run = store.get_run(run_id)
        finally:
            store.close()
        assert run is not None and run.status == "failed", run
        assert KEY_ENV in (run.error or "") and TRUSTED_CONFIGS_ENV in (run.error or ""), run.error
        assert KEY not in (run.error or "") + err.decode(errors="replace")
        assert Listener.seen == []

        # The control: the same worker, the config now listed by the operator, sends the key
        # there; so the listener would have seen the refused one's.
        other = tmp_path / "second"
        other.mkdir()
        second = _new_run(other, silu_task, silu_baseline, models)
        worker = _worker(second, other, trusted=models)
        try:
            deadline = time.monotonic() + 120
            while not Listener.seen and worker.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            worker.kill()
            worker.wait(timeout=30)
        assert f"Bearer {KEY}" in Listener.seen, worker.stderr.read() if worker.stderr else ""
