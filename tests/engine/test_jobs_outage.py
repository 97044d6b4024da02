"""A job cut off from its database for longer than the store's retry window: the run is left
interrupted (not failed), and the server that ran it resumes it once the database answers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from accelopt_mcp.engine.jobs import JobManager
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.engine.worker import events_path
from accelopt_mcp.store.postgres import PostgresStore
from tests.engine.conftest import build_script, models_config
from tests.engine.test_jobs import _request
from tests.llm_standin.process import StartStandin
from tests.pg_server import create_database, private_server

pytestmark = pytest.mark.postgres


def test_a_long_outage_interrupts_the_job_and_the_server_resumes_it(
    start_standin: StartStandin, llm_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    standin = start_standin(build_script(faults=False, latency_s=0.3))
    models = models_config(standin.base_url, tmp_path / "models.json")
    # Store calls give up after 2 s of failures, so an 8 s outage outlasts them.
    monkeypatch.setenv("ACCELOPT_STORE_RETRY_S", "2")
    out = tmp_path / "out"
    with private_server() as server:
        dsn = create_database(server.dsn, "outage")
        PostgresStore(dsn, init_schema=True).close()
        manager = JobManager(dsn, output_dir=out)
        try:
            job = manager.start(_request(models, iterations=3))
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                _, _, checkpoint = load_run(manager.store, job)
                if checkpoint.slots:
                    break
                time.sleep(0.1)
            assert checkpoint.slots, "the job never finished an attempt"
            server.halt("immediate")
            log = out / job / "worker.log"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "interrupted:" not in log.read_text():
                time.sleep(0.2)
            assert "interrupted:" in log.read_text(), log.read_text()[-2000:]
            time.sleep(3)  # down for a while after the worker gave up
            server.resume()

            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                status = manager.status(job)
                if status.state in ("completed", "failed", "cancelled", "llm_unavailable"):
                    break
                time.sleep(0.3)
            assert status.state == "completed", (status.state, status.error)
            kinds = [json.loads(line)["kind"] for line in events_path(out, job).open()]
            assert kinds.count("run_interrupted") == 1
            assert kinds.count("run_started") == 2
            run = manager.store.get_run(job)
            assert run is not None and run.current_iteration == 3
        finally:
            manager.close()
