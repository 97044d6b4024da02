"""The job manager: jobs in worker processes, read back from the store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.jobs import (
    JobManager,
    JobNotFinished,
    JobNotFound,
    OptimizeRequest,
    ProgressEvent,
)
from accelopt_mcp.engine.runs import load_run, prepare_run
from accelopt_mcp.engine.worker import events_path
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task
from tests.engine.conftest import FAST_BENCH, KERNEL_PATH, TASK_PATH, build_script, models_config
from tests.llm_standin.process import StandinProcess
from tests.pg_server import create_database

StartStandin = Callable[[dict[str, Any]], StandinProcess]


def _request(models: Path, **fields: Any) -> OptimizeRequest:
    target = {"kernel_path": str(KERNEL_PATH), "task_path": str(TASK_PATH)}
    for key in ("kernel_path", "kernel_source", "task_path", "workload"):
        if key in fields:
            target[key] = fields.pop(key)
    config: dict[str, Any] = {
        "iterations": 2,
        "beam": 2,
        "plans": 2,
        "attempts": 2,
        "topk": 2,
        "exp_n": 4,
        "positive_threshold": 1.04,
        "negative_threshold": 0.87,
        "models_config": str(models),
        "workers": 2,
        "benchmark": FAST_BENCH.model_dump(),
    }
    return OptimizeRequest(**target, config=OptimizeConfig(**{**config, **fields}))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "kernels.db")
    admin = request.getfixturevalue("pg_admin_dsn")
    dsn = create_database(admin, f"jobs_{uuid.uuid4().hex[:10]}")
    PostgresStore(dsn, init_schema=True).close()
    return dsn


def test_start_wait_result_list(
    store_url: str, start_standin: StartStandin, llm_key: str, tmp_path: Path
) -> None:
    standin = start_standin(build_script(faults=False))
    models = models_config(standin.base_url, tmp_path / "models.json")
    manager = JobManager(store_url, output_dir=tmp_path / "out")
    try:
        job = manager.start(_request(models))
        assert manager.status(job).state in ("pending", "running")
        events: list[ProgressEvent] = []

        async def collect(event: ProgressEvent) -> None:
            events.append(event)

        final = asyncio.run(manager.wait(job, on_progress=collect, timeout_s=120))
        assert final.state == "completed", final.error
        kinds = [e.kind for e in events]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
        assert kinds.count("iteration_finished") == 2
        assert [e.progress for e in events] == sorted(e.progress for e in events)

        result = manager.result(job)
        assert result.status.attempts_done == final.attempts_done > 0
        assert result.best_solution_id == final.best_solution_id
        assert result.speedup and result.speedup > 1
        assert final.best_latency_ms and final.initial_latency_ms
        assert result.speedup == pytest.approx(final.initial_latency_ms / final.best_latency_ms)
        assert [i.iteration for i in result.iterations] == [1, 2]
        assert result.winning_kernel_path
        assert Path(result.winning_kernel_path).read_text() == result.best_source
        assert [s.job_id for s in manager.list()] == [job]
        with pytest.raises(JobNotFound, match="no job"):
            manager.status("00000000-0000-0000-0000-000000000000")
    finally:
        manager.close()


def test_bad_request_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of kernel_path"):
        _request(tmp_path / "m.json", kernel_source="def kernel(x): return x")


def test_cancel_and_resume_interrupted(
    start_standin: StartStandin, llm_key: str, tmp_path: Path
) -> None:
    # Slow replies keep the jobs running long enough to cancel and to kill.
    standin = start_standin(build_script(faults=False, latency_s=0.3))
    models = models_config(standin.base_url, tmp_path / "models.json")
    db = str(tmp_path / "kernels.db")
    manager = JobManager(db, output_dir=tmp_path / "out", max_parallel_jobs=2)
    try:
        doomed = manager.start(_request(models, iterations=5))
        victim = manager.start(_request(models, iterations=2))
        assert asyncio.run(manager.wait(doomed, timeout_s=1.5)).state in ("pending", "running")
        cancelled = manager.cancel(doomed)
        assert cancelled.state == "cancelled"
        with pytest.raises(JobNotFinished):
            manager.result(victim)

        # Kill the other job's worker outright, as a crash would.
        deadline = time.monotonic() + 60
        pid = None
        while time.monotonic() < deadline:
            _, _, checkpoint = load_run(manager.store, victim)
            if checkpoint.slots and checkpoint.worker_pid:
                pid = checkpoint.worker_pid
                break
            time.sleep(0.05)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
    finally:
        manager.close()
    time.sleep(0.2)

    restarted = JobManager(db, output_dir=tmp_path / "out")
    try:
        assert restarted.status(victim).state == "interrupted"
        assert restarted.resume_interrupted() == [victim]
        final = asyncio.run(restarted.wait(victim, timeout_s=120))
        assert final.state == "completed", final.error
        assert restarted.status(doomed).state == "cancelled"
    finally:
        restarted.close()


def test_two_managers_resuming_one_run_run_it_once(
    start_standin: StartStandin, llm_key: str, tmp_path: Path
) -> None:
    # Two MCP servers started at once on one database both find the same interrupted run.
    standin = start_standin(build_script(faults=False, latency_s=0.2))
    models = models_config(standin.base_url, tmp_path / "models.json")
    db = str(tmp_path / "kernels.db")
    out = tmp_path / "out"
    first = JobManager(db, output_dir=out)
    second = JobManager(db, output_dir=out)
    try:
        request = _request(models)
        task = load_task(Path(request.task_path))
        run_id = prepare_run(
            first.store,
            task,
            load_solution(Path(str(request.kernel_path)), task),
            request.config,
            request=request.model_dump(mode="json"),
        )
        assert first.status(run_id).state == "interrupted"
        assert first.resume_interrupted() == [run_id]
        assert second.resume_interrupted() == [run_id]
        # Either worker may win; the manager whose worker stood down can see the run as
        # interrupted until the winner records itself, so poll rather than wait().
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and first.status(run_id).state not in (
            "completed",
            "failed",
            "cancelled",
            "budget_exhausted",
        ):
            time.sleep(0.2)
        final = first.status(run_id)
        assert final.state == "completed", final.error
        # The other worker found the run taken and left it alone.
        log = out / run_id / "worker.log"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "left alone" not in log.read_text():
            time.sleep(0.1)
        assert "left alone" in log.read_text()
        events = [json.loads(line) for line in events_path(out, run_id).read_text().splitlines()]
        assert [e["kind"] for e in events].count("run_started") == 1
        experiences = first.store.recent_experiences(run_id=run_id, limit=1000)
        assert len(experiences) <= request.config.topk * request.config.iterations
        assert first.status(run_id).state == "completed"
    finally:
        first.close()
        second.close()


def test_a_job_cancelled_by_another_manager_is_not_run_later(
    start_standin: StartStandin, llm_key: str, tmp_path: Path
) -> None:
    # Server A queues a job behind a running one; server B, on the same database, cancels it.
    standin = start_standin(build_script(faults=False, latency_s=0.3))
    models = models_config(standin.base_url, tmp_path / "models.json")
    db = str(tmp_path / "kernels.db")
    out = tmp_path / "out"
    first = JobManager(db, output_dir=out, max_parallel_jobs=1)
    second = JobManager(db, output_dir=out)
    try:
        busy = first.start(_request(models, iterations=5))
        queued = first.start(_request(models, iterations=1))
        assert second.cancel(queued).state == "cancelled"
        assert first.cancel(busy).state == "cancelled"  # frees the slot the queued job waited for
        log = out / queued / "worker.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "left alone" not in (
            log.read_text() if log.exists() else ""
        ):
            time.sleep(0.1)
        assert "left alone" in log.read_text()
        assert first.status(queued).state == "cancelled"
        run, _, checkpoint = load_run(first.store, queued)
        assert checkpoint.initial is None and not checkpoint.slots
        assert run.error == "cancelled on request"
    finally:
        first.close()
        second.close()
