"""A worker and its lease: one that loses its run stops and writes nothing more to it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from accelopt_mcp.engine.beam import BeamSearch, RunNotRunnable, RunTakenOver
from accelopt_mcp.engine.runs import load_run, prepare_run
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import KernelStore
from tests.engine.conftest import ScriptedSettings, build_script

SUCCESSOR = "other-host|1|1"


def test_a_worker_whose_run_is_taken_over_stops_and_writes_nothing_more(
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
    scripted_settings: ScriptedSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCELOPT_LEASE_S", "2")  # renewed every 0.5 s
    _, config = scripted_settings(build_script(faults=False, latency_s=0.3), iterations=4)
    run_id = prepare_run(store, silu_task, silu_baseline, config)

    async def scenario() -> tuple[Any, list[Any]]:
        engine = asyncio.ensure_future(BeamSearch(store, run_id, output_dir=tmp_path).run())
        for _ in range(600):
            await asyncio.sleep(0.1)
            run, _, checkpoint = await asyncio.to_thread(load_run, store, run_id)
            if checkpoint.slots:
                break
        assert checkpoint.slots and run.worker_id is not None
        # As when its lease ran out while it was cut off: another worker has the run now.
        taken = store.claim_run(
            run_id, SUCCESSOR, lease_s=60, statuses=["running"], steal_from=run.worker_id
        )
        assert taken is not None
        snapshot = (taken.config, taken.current_iteration, taken.status, taken.best_solution_id)
        entries = store.run_entries(run_id)
        with pytest.raises(RunTakenOver) as lost:
            await asyncio.wait_for(engine, 60)
        assert not lost.value.outage
        return snapshot, entries

    snapshot, entries = asyncio.run(scenario())
    after = store.get_run(run_id)
    assert after is not None
    assert after.worker_id == SUCCESSOR and after.lease_expires_at is not None
    assert (after.config, after.current_iteration, after.status, after.best_solution_id) == snapshot
    assert [(e.kind, e.key, e.data) for e in store.run_entries(run_id)] == [
        (e.kind, e.key, e.data) for e in entries
    ]


def test_a_completed_run_is_not_run_again_without_new_iterations(
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
    scripted_settings: ScriptedSettings,
) -> None:
    standin, config = scripted_settings(build_script(faults=False), iterations=1)
    run_id = prepare_run(store, silu_task, silu_baseline, config)
    first = asyncio.run(BeamSearch(store, run_id).run())
    assert first.status == "completed", first.error
    calls = len(standin.requests())
    with pytest.raises(RunNotRunnable, match="completed"):
        asyncio.run(BeamSearch(store, run_id).run())
    assert len(standin.requests()) == calls
    again = store.get_run(run_id)
    assert again is not None and again.status == "completed"
