"""A run on PostgreSQL rides out a restart of its database server mid-run: the store retries
through the outage (store/_retry.py), so the run completes instead of failing. The server is
the test's own (the session's is shared) and really goes down, in immediate mode (as a
crash), for a few seconds."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import psycopg
import pytest

from accelopt_mcp.engine.beam import BeamSearch
from accelopt_mcp.engine.runs import load_run, prepare_run
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.postgres import PostgresStore
from tests.engine.conftest import build_script, models_config, settings
from tests.llm_standin.process import StartStandin
from tests.pg_server import PostgresServer, create_database, private_server

pytestmark = pytest.mark.postgres


class _RestartMidRun(threading.Thread):
    """Restarts the server (down `down_s` seconds) once the run has finished `after` attempts,
    noting the run's status at that moment."""

    def __init__(
        self, server: PostgresServer, dsn: str, run_id: str, *, after: int, down_s: float
    ) -> None:
        super().__init__(daemon=True)
        self.server, self.dsn, self.run_id = server, dsn, run_id
        self.after, self.down_s = after, down_s
        self.status_at_restart: str | None = None
        self.error: BaseException | None = None
        self._stop_asked = threading.Event()

    def finish(self) -> None:
        self._stop_asked.set()
        self.join(timeout=120)

    def run(self) -> None:
        try:
            while not self._stop_asked.wait(0.1):
                with psycopg.connect(self.dsn, connect_timeout=5) as conn:
                    done = conn.execute(
                        "SELECT count(*) FROM run_entries WHERE run_id = %s AND kind = 'slot'",
                        (self.run_id,),
                    ).fetchone()
                    status = conn.execute(
                        "SELECT status FROM runs WHERE id = %s", (self.run_id,)
                    ).fetchone()
                if done is not None and done[0] >= self.after:
                    self.status_at_restart = None if status is None else status[0]
                    self.server.restart(down_s=self.down_s, mode="immediate")
                    return
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_a_run_completes_across_a_restart_of_its_database(
    silu_task: Task,
    silu_baseline: Solution,
    start_standin: StartStandin,
    llm_key: str,
    tmp_path: Path,
) -> None:
    with private_server() as server:
        dsn = create_database(server.dsn, "engine_restart")
        store = PostgresStore(dsn, init_schema=True)
        try:
            standin = start_standin(build_script(faults=False, latency_s=0.05))
            config = settings(models_config(standin.base_url, tmp_path / "models.json"))
            run_id = prepare_run(store, silu_task, silu_baseline, config)
            restarter = _RestartMidRun(server, dsn, run_id, after=3, down_s=4)
            restarter.start()
            started = time.monotonic()
            try:
                run = asyncio.run(BeamSearch(store, run_id).run())
            finally:
                restarter.finish()
            assert restarter.error is None, restarter.error
            # The restart happened while the run was going on.
            assert restarter.status_at_restart == "running"
            assert time.monotonic() - started < 280  # bounds a hang only

            assert run.status == "completed", run.error
            stored = store.get_run(run_id)
            assert stored is not None and stored.status == "completed"
            assert stored.current_iteration == config.iterations
            # Every finished attempt is stored, with its kernel.
            _, _, checkpoint = load_run(store, run_id)
            slots = list(checkpoint.slots.values())
            assert len(slots) >= 4
            for slot in slots:
                if slot.solution_id is not None:
                    assert store.get_solution(slot.solution_id) is not None
        finally:
            store.close()
