"""The job manager: jobs in worker processes, read back from the store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from datetime import UTC, datetime
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
from accelopt_mcp.engine.runs import load_run, local_worker_pid, prepare_run, worker_id_of
from accelopt_mcp.engine.worker import events_path
from accelopt_mcp.store.base import KernelStore, RunUpdate
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.tasks.kernels import load_solution
from accelopt_mcp.tasks.loader import load_task
from tests.engine.conftest import FAST_BENCH, KERNEL_PATH, TASK_PATH, build_script, models_config
from tests.llm_standin.process import StartStandin
from tests.pg_server import create_database


def _request(models: Path, **fields: Any) -> OptimizeRequest:
    target = {"kernel_path": str(KERNEL_PATH), "task_path": str(TASK_PATH)}
    for key in ("kernel_path", "kernel_source", "task_path", "workload"):
        if key in fields:
            target[key] = fields.pop(key)
    # Narrow (one beam kernel, two plans, one attempt each: two attempts an iteration): these
    # tests are about a job's life (start, wait, cancel, kill, resume, leases), which any run
    # has; the beam's breadth is tests/engine/test_beam.py's. At 2 x 2 x 2 a job ran up to
    # twelve attempts, each a profile, and made this the longest file of the parallel stage.
    config: dict[str, Any] = {
        "iterations": 2,
        "beam": 1,
        "plans": 2,
        "attempts": 1,
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
        # The job's folder (its worker's log, events, kernels) is this user's alone.
        assert (tmp_path / "out" / job).stat().st_mode & 0o777 == 0o700
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
            run, _, checkpoint = load_run(manager.store, victim)
            pid = local_worker_pid(run.worker_id)
            if checkpoint.slots and pid is not None:
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


def _interrupted_run(store: KernelStore, request: OptimizeRequest, dead_holder: str) -> str:
    """A job's run left running by a worker of this host that is gone."""
    task = load_task(Path(request.task_path))
    run_id = prepare_run(
        store,
        task,
        load_solution(Path(str(request.kernel_path)), task),
        request.config,
        request={**request.model_dump(mode="json", exclude={"config"}), "origin": "job"},
    )
    store.update_run(run_id, RunUpdate(status="running"))
    assert store.claim_run(run_id, dead_holder, lease_s=600, statuses=["running"]) is not None
    return run_id


def _dead_holder() -> str:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return worker_id_of(gone.pid)


def test_two_servers_resuming_the_same_runs_take_each_exactly_once(
    start_standin: StartStandin, llm_key: str, tmp_path: Path, pg_admin_dsn: str
) -> None:
    # Two MCP servers (different jobs folders) start at once on one PostgreSQL database and
    # both find the same 10 interrupted runs: each run goes to exactly one of them.
    standin = start_standin(build_script(faults=False, latency_s=0.5))
    models = models_config(standin.base_url, tmp_path / "models.json")
    dsn = create_database(pg_admin_dsn, f"jobs_{uuid.uuid4().hex[:10]}")
    PostgresStore(dsn, init_schema=True).close()
    first = JobManager(dsn, output_dir=tmp_path / "out-a")
    second = JobManager(dsn, output_dir=tmp_path / "out-b")
    try:
        request = _request(models, iterations=1)
        dead = _dead_holder()
        runs = [_interrupted_run(first.store, request, dead) for _ in range(10)]
        gate = threading.Barrier(2)
        taken: dict[str, list[str]] = {}

        def resume(name: str, manager: JobManager) -> None:
            gate.wait()
            taken[name] = manager.resume_interrupted()

        threads = [
            threading.Thread(target=resume, args=(name, manager))
            for name, manager in (("a", first), ("b", second))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert sorted(taken["a"] + taken["b"]) == sorted(runs), taken
        assert not set(taken["a"]) & set(taken["b"])
        # Every run is now held, queued or running, by the server that took it.
        for run_id in runs:
            run = first.store.get_run(run_id)
            assert run is not None and run.worker_id is not None
            other = second if run_id in taken["a"] else first
            assert run.worker_id != other.holder_id
            assert first.status(run_id).state in ("pending", "running")
        for run_id in runs:
            (first if run_id in taken["a"] else second).cancel(run_id)
        for run_id in runs:
            assert first.status(run_id).state == "cancelled"
            # Started (if at all) by one worker, in one of the two servers' folders.
            started = 0
            for folder in ("out-a", "out-b"):
                events = events_path(tmp_path / folder, run_id)
                started += events.read_text().count('"run_started"') if events.exists() else 0
            assert started <= 1
    finally:
        first.close()
        second.close()


def test_a_resumed_job_runs_once_to_completion(
    start_standin: StartStandin, llm_key: str, tmp_path: Path
) -> None:
    standin = start_standin(build_script(faults=False, latency_s=0.2))
    models = models_config(standin.base_url, tmp_path / "models.json")
    db = str(tmp_path / "kernels.db")
    first = JobManager(db, output_dir=tmp_path / "out-a")
    second = JobManager(db, output_dir=tmp_path / "out-b")
    try:
        request = _request(models)
        run_id = _interrupted_run(first.store, request, _dead_holder())
        assert first.status(run_id).state == "interrupted"
        assert first.resume_interrupted() == [run_id]
        assert second.resume_interrupted() == []  # held by the first server now
        assert second.status(run_id).state in ("pending", "running")
        final = asyncio.run(first.wait(run_id, timeout_s=120))
        assert final.state == "completed", final.error
        events = events_path(tmp_path / "out-a", run_id).read_text().splitlines()
        assert [json.loads(e)["kind"] for e in events].count("run_started") == 1
        assert not events_path(tmp_path / "out-b", run_id).exists()
        experiences = first.store.recent_experiences(run_id=run_id, limit=1000)
        assert len(experiences) <= request.config.topk * request.config.iterations
        run = first.store.get_run(run_id)
        assert run is not None and run.lease_expires_at is None  # released at the end
    finally:
        first.close()
        second.close()


def test_a_run_started_in_a_terminal_is_not_taken_by_a_server(
    start_standin: StartStandin, llm_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    standin = start_standin(build_script(faults=False))
    models = models_config(standin.base_url, tmp_path / "models.json")
    db = str(tmp_path / "kernels.db")
    manager = JobManager(db, output_dir=tmp_path / "out")
    try:
        request = _request(models)
        task = load_task(Path(request.task_path))
        solution = load_solution(Path(str(request.kernel_path)), task)
        # What `accelopt optimize` stores, interrupted (its terminal closed).
        cli_run = prepare_run(
            manager.store,
            task,
            solution,
            request.config,
            request={
                "kernel_path": str(KERNEL_PATH),
                "task_path": str(TASK_PATH),
                "workload": None,
            },
        )
        # A job whose LLM key this server's environment lacks.
        keyless = _request(models)
        keyless_config = keyless.config.model_copy(update={"models_config": None})
        keyless_run = prepare_run(
            manager.store,
            task,
            solution,
            keyless_config,
            request={**keyless.model_dump(mode="json", exclude={"config"}), "origin": "job"},
        )
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        assert manager.resume_interrupted() == []
        left = manager.left_alone()
        assert (
            "accelopt optimize" in left[cli_run] and f"accelopt resume {cli_run}" in left[cli_run]
        )
        assert "OPENAI_API_KEY is not set" in left[keyless_run]
        status = manager.status(cli_run)
        assert status.state == "interrupted" and status.resume_hint == left[cli_run]
        run = manager.store.get_run(cli_run)
        assert run is not None and run.worker_id is None and run.status == "pending"
    finally:
        manager.close()


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
        # The first server finds it cancelled: when renewing its hold, or its worker when it
        # claims the run; either way the job never runs.
        log = out / queued / "worker.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log.exists() and "left alone" in log.read_text():
                break
            # Never started after 20 s: dropped when its hold was found cancelled. The pump
            # starts a queued job within a second or two of the slot freeing (cancel waits for
            # the busy worker to exit); a start after this would find a log without the line.
            if not log.exists() and time.monotonic() > deadline - 40:
                break
            time.sleep(0.1)
        if log.exists():
            assert "left alone" in log.read_text()
        assert first.status(queued).state == "cancelled"
        run, _, checkpoint = load_run(first.store, queued)
        assert checkpoint.initial is None and not checkpoint.slots
        assert run.error == "cancelled on request"
    finally:
        first.close()
        second.close()


def test_a_worker_killed_on_another_host_is_taken_over_once_its_lease_ends(
    start_standin: StartStandin, llm_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    standin = start_standin(build_script(faults=False, latency_s=0.3))
    models = models_config(standin.base_url, tmp_path / "models.json")
    db = str(tmp_path / "kernels.db")
    monkeypatch.setenv("ACCELOPT_LEASE_S", "3")
    # The first server and its worker say they run on another host, so from here their
    # processes cannot be checked: only the lease tells that they are gone.
    monkeypatch.setenv("ACCELOPT_WORKER_HOST", "far-away")
    remote = JobManager(db, output_dir=tmp_path / "far")
    try:
        job = remote.start(_request(models, iterations=2))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run, _, checkpoint = load_run(remote.store, job)
            if checkpoint.slots and run.worker_id and "queue" not in run.worker_id:
                break
            time.sleep(0.05)
        assert run.worker_id is not None and run.worker_id.startswith("far-away|")
        # The lease it holds ends no earlier than this (a renewal after the read only moves
        # it later): until then no one may take the run, and the dead worker still holds it.
        held_until = run.lease_expires_at
        assert held_until is not None
        os.kill(int(run.worker_id.split("|")[1]), signal.SIGKILL)
    finally:
        remote.close()
    monkeypatch.delenv("ACCELOPT_WORKER_HOST")

    here = JobManager(db, output_dir=tmp_path / "here", auto_resume=True)
    try:
        seen = here.status(job)
        # Checked whenever the status was read inside that lease, by the database's clock
        # (SQLite's is this host's): not "within 1 s of the kill", which assumed the last
        # renewal came on time and a busy host can delay it.
        if datetime.now(UTC) < held_until:
            assert seen.state == "running" and seen.worker_id == run.worker_id
        deadline = time.monotonic() + 180
        states = set()
        while time.monotonic() < deadline:
            seen = here.status(job)
            states.add(seen.state)
            if seen.state in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.2)
        assert seen.state == "completed", (seen.error, states)
        resumed = events_path(tmp_path / "here", job).read_text()
        assert resumed.count('"run_started"') == 1
        assert events_path(tmp_path / "far", job).read_text().count('"run_started"') == 1
    finally:
        here.close()
