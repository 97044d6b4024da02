"""A whole optimization through MCP on the cpu backend, with the scripted OpenAI-compatible
stand-in as the LLM: start -> progress -> status -> result, cancel mid-run, and a server restart
mid-job that resumes it."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from accelopt_mcp.engine.runs import local_worker_pid
from accelopt_mcp.llm.key_destinations import TRUSTED_CONFIGS_ENV
from accelopt_mcp.mcp_tools import ServerState, build_server
from accelopt_mcp.store import open_store
from tests.engine import kernels
from tests.llm_standin.process import StandinProcess
from tests.llm_standin.script import StandinScript
from tests.mcp.conftest import BENCH, MODES, NKIBENCH_DIR, served
from tests.mcp.helpers import fails, ok, payload
from tests.mcp.processes import HttpServer

# Not marked serial: what these jobs keep is decided between the naive silu and a vectorized
# one (several times faster), a margin no neighbouring test's load closes.
pytestmark = pytest.mark.anyio

TASK = NKIBENCH_DIR / "reference" / "silu_M512_N1024_numpy_0.py"
KERNEL = NKIBENCH_DIR / "kernels" / "silu_M512_N1024_0.py"
KEY_ENV = "ACCELOPT_MCP_TEST_LLM_KEY"
KEY = "standin-mcp-key-8c41"
# Small and quick profiling (conftest.BENCH), within a short timeout and memory limit.
JOB_BENCH = {**BENCH, "timeout_seconds": 10.0, "memory_limit_mb": 1024}


def text(reply: str) -> dict[str, Any]:
    return {"kind": "text", "text": reply}


def script(latency_s: float = 0.0) -> StandinScript:
    lesson = {
        "title": "vectorize rows",
        "strategy": "avoid per-row Python work",
        "pseudocode": "for row: f(row)  ->  f(all rows)",
    }
    executor = [
        text(kernels.reply(kernels.FAST)),
        text(kernels.reply(kernels.WRONG)),
        text(kernels.reply(kernels.MEDIUM)),
        text(kernels.reply(kernels.SYNTAX_ERROR)),
    ]
    return StandinScript.model_validate(
        {
            "api_key": KEY,
            "latency_s": latency_s,
            "roles": {
                "planner": {
                    "replies": [text("Plan: vectorize the row loop, stay in float32.")],
                    "when_exhausted": "repeat_last",
                },
                "executor": {"replies": executor * 20, "when_exhausted": "repeat_last"},
                "summarizer": {
                    "replies": [text(json.dumps(lesson))],
                    "when_exhausted": "repeat_last",
                },
            },
        }
    )


def models_config(base_url: str, folder: Path) -> str:
    config = {
        "default": {
            "base_url": base_url,
            "api_key_env": KEY_ENV,
            "max_retries": 2,
            "retry_base_s": 0.01,
            "timeout_s": 30,
        },
        "planner": {"model": "planner"},
        "executor": {"model": "executor"},
        "summarizer": {"model": "summarizer"},
        "prices": {
            role: {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
            for role in ("planner", "executor", "summarizer")
        },
    }
    path = folder / "models.json"
    path.write_text(json.dumps(config))
    # The server's operator lists it: a config a client names sends a key of the server's
    # only where one of those does (test_access.py). Set directly, so that a server started
    # after this inherits it; llm_key's monkeypatch puts the variable back after the test.
    listed = os.environ.get(TRUSTED_CONFIGS_ENV, "")
    os.environ[TRUSTED_CONFIGS_ENV] = os.pathsep.join(filter(None, (listed, str(path))))
    return str(path)


def job_args(models: str, **overrides: Any) -> dict[str, Any]:
    return {
        "task_path": str(TASK),
        "kernel_path": str(KERNEL),
        "iterations": 2,
        "beam": 1,
        "plans": 2,
        "attempts": 1,
        "topk": 2,
        "exp_n": 4,
        "workers": 1,
        "models_config": models,
        "namespace": "mcp-test",
        "benchmark": JOB_BENCH,
        **overrides,
    }


@pytest.fixture
def llm_key(monkeypatch: pytest.MonkeyPatch) -> str:
    # Job workers inherit the server's environment, which is where the key lives.
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(TRUSTED_CONFIGS_ENV, "")  # models_config adds to it
    return KEY


@pytest.fixture
def fast_llm() -> Iterator[StandinProcess]:
    with StandinProcess(script()) as standin:
        yield standin


@pytest.fixture
def slow_llm() -> Iterator[StandinProcess]:
    with StandinProcess(script(latency_s=0.4)) as standin:
        yield standin


@pytest.fixture(params=MODES)
async def client(request: pytest.FixtureRequest, sqlite_url: str, tmp_path: Path):
    async with served(sqlite_url, tmp_path, mode=request.param) as c:
        yield c


async def test_job_start_progress_status_result(
    client: Client, fast_llm: StandinProcess, llm_key: str, tmp_path: Path
) -> None:
    models = models_config(fast_llm.base_url, tmp_path)
    started = await ok(client, "start_optimization", job_args(models))
    job_id = started["job_id"]
    assert started["status"]["state"] in ("pending", "running")

    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    waited = await client.call_tool(
        "wait_for_job", {"job_id": job_id, "timeout_s": 240}, progress_callback=on_progress
    )
    assert not waited.is_error, waited.content
    final = payload("wait_for_job", waited)
    assert final["state"] == "completed", final
    assert progress, "no progress notifications arrived"
    assert any("iteration" in (m or "") for _, m in progress)
    assert max(v for v, _ in progress) <= 1.0

    status = await ok(client, "job_status", {"job_id": job_id[:8]})  # a prefix will do
    assert status["job_id"] == job_id
    assert status["iteration"] == 2 and status["attempts_done"] >= 4
    assert status["best_speedup_vs_initial"] and status["best_speedup_vs_initial"] > 1.0
    assert status["cost_usd"] > 0

    result = await ok(client, "job_result", {"job_id": job_id, "source_limit": 40})
    assert result["speedup_vs_initial"] == status["best_speedup_vs_initial"]
    assert result["best_source"]["total_chars"] > 40 and result["best_source"]["truncated"]
    assert len(result["iterations"]) == 2
    best = await ok(client, "get_solution", {"solution_id": result["best_solution_id"]})
    assert "np.exp" in best["sources"][0]["content"]["text"]

    listed = await ok(client, "list_jobs")
    assert [j["job_id"] for j in listed["jobs"]] == [job_id]
    memory = await ok(client, "list_memory", {"run_id": job_id})
    assert memory["items"] and memory["items"][0]["title"] == "vectorize rows"
    lineage = await ok(client, "solution_lineage", {"solution_id": result["best_solution_id"]})
    assert lineage["ancestors"], "the winner should descend from the initial kernel"

    # Bad input for every job tool.
    await fails(client, "start_optimization", {**job_args(models), "backend": "tpu"}, "tpu")
    await fails(
        client,
        "start_optimization",
        {**job_args(models), "kernel_path": None},
        "exactly one of kernel_path",
    )
    await fails(
        client, "start_optimization", {**job_args(models), "task_path": "/nope.py"}, "/nope.py"
    )
    await fails(client, "start_optimization", job_args("no-such-preset"), "no-such-preset")
    broken = tmp_path / "broken-models.json"
    broken.write_text(json.dumps({"default": {"api_key": "sk-inline"}}))
    message = await fails(client, "start_optimization", job_args(str(broken)), "broken-models.json")
    assert "sk-inline" not in message  # a secret never comes back in an error
    await fails(client, "start_optimization", {**job_args(models), "preset": "huge"}, "huge")
    for tool in ("job_status", "job_result", "cancel_job", "wait_for_job"):
        await fails(client, tool, {"job_id": "nope"}, "no job with id 'nope'")
    await fails(client, "list_jobs", {"limit": 0}, "limit")


async def test_cancel_mid_run(
    client: Client, slow_llm: StandinProcess, llm_key: str, tmp_path: Path
) -> None:
    models = models_config(slow_llm.base_url, tmp_path)
    job_id = (await ok(client, "start_optimization", job_args(models, iterations=6)))["job_id"]
    running = await ok(client, "wait_for_job", {"job_id": job_id, "timeout_s": 3})
    assert running["state"] in ("pending", "running")
    await fails(client, "job_result", {"job_id": job_id}, "wait", "job_status")
    cancelled = await ok(client, "cancel_job", {"job_id": job_id})
    assert cancelled["state"] == "cancelled"
    assert cancelled["iteration"] < 6
    again = await ok(client, "cancel_job", {"job_id": job_id})  # idempotent
    assert again["state"] == "cancelled"
    result = await ok(client, "job_result", {"job_id": job_id})
    assert result["status"]["state"] == "cancelled"


def _worker_pid(store_url: str, job_id: str, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    with open_store(store_url) as store:
        while time.monotonic() < deadline:
            run = store.get_run(job_id)
            pid = local_worker_pid(run.worker_id if run else None)
            if pid is not None:
                return pid
            time.sleep(0.1)
    raise AssertionError("the job's worker never recorded its pid")


async def test_server_restart_resumes_interrupted_job(
    slow_llm: StandinProcess, llm_key: str, tmp_path: Path
) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    models = models_config(slow_llm.base_url, tmp_path)
    store_url = str(tmp_path / "kernels.db")
    jobs_dir = ["--jobs-dir", str(tmp_path / "jobs")]
    env = {KEY_ENV: llm_key}  # the server's environment is what its job workers get
    token = "restart-token-0123456789abcdef"
    auth = {"Authorization": f"Bearer {token}"}
    first = HttpServer(store_url, token=token, extra_args=jobs_dir, env=env)
    first.start()
    try:
        async with (
            httpx2.AsyncClient(headers=auth, timeout=30) as http,
            Client(streamable_http_client(first.url, http_client=http)) as c,
        ):
            job_id = (await ok(c, "start_optimization", job_args(models, iterations=4)))["job_id"]
            status = await ok(c, "job_status", {"job_id": job_id})
            deadline = time.monotonic() + 120
            while status["iteration"] < 1 and time.monotonic() < deadline:
                status = await ok(c, "wait_for_job", {"job_id": job_id, "timeout_s": 0.5})
            # Mid-job: one iteration checkpointed, more to go.
            assert status["state"] == "running" and 1 <= status["iteration"] < 4, status
        # The client that started it has gone; the job has not.
        async with (
            httpx2.AsyncClient(headers=auth, timeout=30) as http,
            Client(streamable_http_client(first.url, http_client=http)) as c,
        ):
            after = await ok(c, "job_status", {"job_id": job_id})
            assert after["state"] == "running", after
        # A crash: the server and the job's worker die without cleaning up.
        worker = _worker_pid(store_url, job_id)
        assert first.process is not None
        first.process.kill()
        first.process.wait()
        os.kill(worker, signal.SIGKILL)
    finally:
        first.stop()

    second = HttpServer(
        store_url, token=token, extra_args=[*jobs_dir, "--log-level", "INFO"], env=env
    )
    with second:
        async with (
            httpx2.AsyncClient(headers=auth, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(second.url, http_client=http)) as c,
        ):
            progress: list[str] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(message or "")

            waited = await c.call_tool(
                "wait_for_job",
                {"job_id": job_id, "timeout_s": 240},
                progress_callback=on_progress,
            )
            assert not waited.is_error, waited.content
            final = payload("wait_for_job", waited)
            assert final["state"] == "completed", final
            assert final["iteration"] == 4
            # Progress notifications travel over streamable HTTP too.
            assert any("iteration 4" in m for m in progress), progress[-5:]
            assert _worker_pid(store_url, job_id) != worker
            result = await ok(c, "job_result", {"job_id": job_id})
            assert [i["iteration"] for i in result["iterations"]] == [1, 2, 3, 4]
            assert result["speedup_vs_initial"] > 1.0
        assert f"resumed 1 interrupted job(s): {job_id}" in second.stderr()


async def test_a_dead_llm_is_refused_and_a_failing_one_ends_the_job_with_why(
    sqlite_url: str, llm_key: str, tmp_path: Path
) -> None:
    state = ServerState(sqlite_url, jobs_output_dir=tmp_path / "jobs")
    failing = StandinProcess(
        StandinScript.model_validate(
            {
                "api_key": KEY,
                "roles": {
                    "planner": {
                        "replies": [text("Plan: vectorize.")],
                        "when_exhausted": "repeat_last",
                    },
                    "executor": {
                        "replies": [{"kind": "status", "status": 503, "message": "model offline"}],
                        "when_exhausted": "repeat_last",
                    },
                    "summarizer": {"replies": [text("{}")], "when_exhausted": "repeat_last"},
                },
            }
        )
    )
    try:
        async with Client(build_server(state), mode=MODES[0]) as client:
            dead = models_config("http://127.0.0.1:9/v1", tmp_path)
            message = await fails(
                client, "start_optimization", job_args(dead), "LLM check failed", "unreachable"
            )
            assert "127.0.0.1:9" in message
            assert (await ok(client, "list_jobs"))["jobs"] == [], "a refused job left a run"

            failing.start()
            (tmp_path / "live").mkdir()
            models = models_config(failing.base_url, tmp_path / "live")
            args = job_args(models, plans=1, iterations=2)
            job_id = (await ok(client, "start_optimization", args))["job_id"]
            final = await ok(client, "wait_for_job", {"job_id": job_id, "timeout_s": 120})
            assert final["state"] == "llm_unavailable", final
            assert "every LLM call of iteration 1 failed" in final["error"]
            assert final["outcome"].startswith("but no attempt passed"), final
            assert "model offline" in final["error"]
            result = await ok(client, "job_result", {"job_id": job_id})
            assert result["status"]["state"] == "llm_unavailable"
    finally:
        failing.stop()
        state.close()
