"""The suite tools: start_suite runs a benchmark in a process of its own, suite_status reads
its table so far, cancel_suite stops it and nothing further starts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from accelopt_mcp.engine.runs import local_worker_gone, local_worker_pid
from accelopt_mcp.mcp_tools.roots import Roots
from accelopt_mcp.store.sqlite import SqliteStore
from tests.mcp.conftest import BENCH, NKIBENCH_DIR, served
from tests.mcp.helpers import fails, ok

pytestmark = pytest.mark.anyio


def _suite(tmp_path: Path, names: tuple[str, ...]) -> Path:
    root = tmp_path / "suite"
    shutil.copytree(NKIBENCH_DIR, root)
    summary = json.loads((root / "summary.json").read_text())
    (root / "summary.json").write_text(json.dumps({k: summary[k] for k in names}))
    return root


def _preset(tmp_path: Path) -> str:
    """Run settings with quick profiling, as a preset file (what start_suite takes)."""
    path = tmp_path / "preset.json"
    path.write_text(json.dumps({"benchmark": BENCH}))
    return str(path)


async def _until(client: Client, suite_id: str, done: Any, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = await ok(client, "suite_status", {"suite_id": suite_id[:8]})
        if done(status) or time.monotonic() > deadline:
            return status
        await anyio.sleep(0.5)


async def test_a_baseline_suite_runs_in_the_background_and_reports_its_table(
    sqlite_url: str, tmp_path: Path
) -> None:
    root = _suite(tmp_path, ("rmsnorm", "silu"))
    # silu claims a thousand times the work it does: its percent of peak cannot be right.
    silu = root / "reference/silu_M512_N1024_numpy_0.py"
    silu.write_text(
        silu.read_text()
        + "\n\ndef roofline():\n"
        + "    return {'vector_flops': 4000 * M * N, 'bytes_moved': 8000 * M * N}\n"
    )
    async with served(sqlite_url, tmp_path, roots=Roots.of([tmp_path])) as client:
        started = await ok(
            client,
            "start_suite",
            {"directory": str(root), "baseline_only": True, "preset": _preset(tmp_path)},
        )
        assert started["status"] == "running" and len(started["tasks"]) == 2
        status = await _until(client, started["suite_id"], lambda s: s["status"] != "running", 180)
        assert status["status"] == "completed", status
        rows = {t["key"]: t for t in status["tasks"]}
        assert rows["rmsnorm/0"]["baseline"]["status"] == "PASSED"
        assert 0 < rows["rmsnorm/0"]["baseline"]["percent_of_peak"] <= 100
        assert rows["silu/0"]["baseline"]["percent_of_peak"] > 100
        means = status["geomean"]
        assert means["cases"] == 1
        # The geomean of one case is that case (to rounding: exp(log(x)) need not be x exactly).
        assert means["baseline_percent_of_peak"] == pytest.approx(
            rows["rmsnorm/0"]["baseline"]["percent_of_peak"], rel=1e-12
        )
        [excluded] = means["excluded"]
        assert excluded["key"] == "silu/0" and "above 100%" in excluded["reason"]
        assert rows["silu/0"]["excluded"] == excluded["reason"]
        assert status["about"]["hardware"].startswith("cpu")


async def test_a_folder_outside_the_roots_and_two_sources_are_refused(
    sqlite_url: str, tmp_path: Path
) -> None:
    inside = tmp_path / "inside"
    inside.mkdir()
    root = _suite(tmp_path, ("silu",))
    async with served(sqlite_url, tmp_path, roots=Roots.of([inside])) as client:
        await fails(client, "start_suite", {"directory": str(root)}, "outside")
        await fails(
            client,
            "start_suite",
            {"directory": str(root), "builtin": "cpu-nkibench"},
            "not both",
        )
        await fails(client, "start_suite", {"builtin": "nope"}, "known: cpu-nkibench")
        await fails(client, "suite_status", {"suite_id": "0" * 8}, "no suite")


async def test_a_cancelled_suite_starts_nothing_more(sqlite_url: str, tmp_path: Path) -> None:
    root = _suite(tmp_path, ("rmsnorm", "softmax", "silu", "matmul_bias", "layernorm"))
    async with served(sqlite_url, tmp_path, roots=Roots.of([tmp_path])) as client:
        started = await ok(
            client,
            "start_suite",
            {"directory": str(root), "baseline_only": True, "preset": _preset(tmp_path)},
        )
        cancelled = await ok(client, "cancel_suite", {"suite_id": started["suite_id"]})
        assert cancelled["status"] == "cancelled"
        status = await _until(
            client,
            started["suite_id"],
            lambda s: all(t["ended"] for t in s["tasks"]),
            120,
        )
        assert status["status"] == "cancelled"
        ended = [t["ended"] for t in status["tasks"]]
        # The baseline being profiled when the cancel came may finish; the rest never start.
        assert ended.count("cancelled before it ran") >= 3, ended


async def test_a_suite_whose_driver_died_gets_a_new_one(sqlite_url: str, tmp_path: Path) -> None:
    root = _suite(tmp_path, ("rmsnorm", "silu"))
    async with served(sqlite_url, tmp_path, roots=Roots.of([tmp_path])) as client:
        started = await ok(
            client,
            "start_suite",
            {"directory": str(root), "baseline_only": True, "preset": _preset(tmp_path)},
        )
        with SqliteStore(sqlite_url) as store:
            driver = None
            deadline = time.monotonic() + 60
            while driver is None and time.monotonic() < deadline:
                record = store.get_suite(started["suite_id"])
                driver = record.spec.get("driver") if record else None
                await anyio.sleep(0.1)
        assert driver is not None
        pid = local_worker_pid(driver)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        while not local_worker_gone(driver):
            await anyio.sleep(0.05)
        restarted = await ok(client, "suite_status", {"suite_id": started["suite_id"]})
        assert restarted["next"] == "its driver had stopped and was started again"
        status = await _until(client, started["suite_id"], lambda s: s["status"] != "running", 180)
        assert status["status"] == "completed", status
        assert all(t["baseline"]["status"] == "PASSED" for t in status["tasks"])


async def test_no_driver_is_restarted_for_a_suite_whose_config_sends_a_key_elsewhere(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running suite in the database whose driver is gone (a server's that died, one made
    before the check on model configs, or a row written by anyone with the database) names a
    config that sends OPENAI_API_KEY to a listener: suite_status starts no driver for it, which
    would run its jobs with that config, the key sent there."""
    from accelopt_mcp.engine.config import OptimizeConfig
    from accelopt_mcp.engine.runs import worker_id_of
    from accelopt_mcp.llm.key_destinations import TRUSTED_CONFIGS_ENV
    from accelopt_mcp.suites.runner import create_suite

    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-secret")
    monkeypatch.delenv(TRUSTED_CONFIGS_ENV, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    models = tmp_path / "models.json"
    elsewhere = {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "OPENAI_API_KEY"}
    models.write_text(json.dumps({"default": elsewhere}))
    gone = subprocess.Popen(["true"])
    gone.wait()
    with SqliteStore(sqlite_url) as store:
        record = create_suite(
            store,
            _suite(tmp_path, ("silu",)),
            name="planted",
            source="planted",
            config=OptimizeConfig(backend="cpu", models_config=str(models)),
            preset=None,
            baseline_only=False,
        )
        spec = {**record.spec, "driver": worker_id_of(gone.pid)}
        store.put_suite(record.model_copy(update={"spec": spec}))
    async with served(sqlite_url, tmp_path, roots=Roots.of([tmp_path])) as client:
        shown = await ok(client, "suite_status", {"suite_id": record.id})
    message = json.dumps(shown)
    assert "was not started again" in message and "OPENAI_API_KEY" in message
    assert "sk-server-secret" not in message
    with SqliteStore(sqlite_url) as store:
        after = store.get_suite(record.id)
    assert after is not None and after.spec.get("driver") == worker_id_of(gone.pid)
