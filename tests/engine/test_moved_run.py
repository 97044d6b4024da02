"""A run whose stored figures were measured on other hardware than where it would now profile
(resumed on another cluster, or on a host that is not the one it ran on) is refused before
anything runs: its beam, parents and reused profiles would be ranked against new numbers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelopt_mcp.cli import _register, app
from accelopt_mcp.engine.beam import BeamSearch
from accelopt_mcp.engine.checkpoint import read_run, run_config
from accelopt_mcp.engine.config import RunSettingsError
from accelopt_mcp.engine.runs import prepare_run
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import KernelStore, RunUpdate
from accelopt_mcp.store.sqlite import SqliteStore
from tests.engine.conftest import models_config, settings

ELSEWHERE = "cpu/x86_64/Some Other CPU @ 9.9GHz"
_register()


def moved_run(db: KernelStore, task: Task, baseline: Solution, tmp_path: Path) -> str:
    config = settings(models_config("http://127.0.0.1:9", tmp_path / "models.json"))
    run_id = prepare_run(db, task, baseline, config)
    run = db.get_run(run_id)
    assert run is not None
    spec, checkpoint = read_run(run)
    checkpoint.hardware = ELSEWHERE
    db.update_run(run_id, RunUpdate(status="failed", config=run_config(spec, checkpoint)))
    return run_id


def test_resume_on_other_hardware_is_refused_in_one_line(
    silu_task: Task, silu_baseline: Solution, tmp_path: Path
) -> None:
    path = tmp_path / "kernels.db"
    with SqliteStore(path) as db:
        run_id = moved_run(db, silu_task, silu_baseline, tmp_path)
    done = CliRunner().invoke(
        app, ["resume", run_id, "--store", str(path), "--skip-llm-check", "--quiet"]
    )
    assert done.exit_code == 2, done.output
    assert f"was measured on {ELSEWHERE}" in done.output and "--cluster" in done.output
    with SqliteStore(path) as db:
        run = db.get_run(run_id)
    assert run is not None and run.status == "failed"  # nothing was written


def test_the_engine_refuses_it_too_and_says_why_on_the_run(
    store: KernelStore, silu_task: Task, silu_baseline: Solution, tmp_path: Path
) -> None:
    run_id = moved_run(store, silu_task, silu_baseline, tmp_path)
    with pytest.raises(RunSettingsError, match="was measured on"):
        asyncio.run(BeamSearch(store, run_id).run())
    run = store.get_run(run_id)
    assert run is not None and run.status == "failed"
    assert ELSEWHERE in (run.error or "")
    assert store.list_profiles() == []  # nothing profiled
