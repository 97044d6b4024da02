"""The checkpoint as rows: attempts, pending kernels and plans are run entries; runs written
before entries existed keep theirs in the config until their first worker moves them."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from accelopt_mcp.engine.checkpoint import PendingAttempt
from accelopt_mcp.engine.checkpoint_writer import CheckpointWriter
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.engine.runs import change_settings, load_run, prepare_run
from accelopt_mcp.engine.selection import AttemptRecord
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import KernelStore, RunUpdate


def _slot(key: str, status: str = "RUNTIME_ERROR") -> dict[str, Any]:
    i, b, p, a = (int(x) for x in key.split("/"))
    return AttemptRecord(
        iteration=i,
        beam_index=b,
        plan_index=p,
        attempt_index=a,
        parent_id="parent",
        parent_latency_ms=1.0,
        status=status,
        error="boom",
    ).model_dump(mode="json")


def _old_style_run(store: KernelStore, task: Task, solution: Solution) -> str:
    """A run as a version before entries stored it: everything inside runs.config, and no
    plan_mode / repair_tries / memory_policy in its settings."""
    run_id = prepare_run(store, task, solution, OptimizeConfig(iterations=2))
    run = store.get_run(run_id)
    assert run is not None
    config = dict(run.config)
    for name in ("plan_mode", "repair_tries", "memory_policy", "max_consecutive_llm_failures"):
        config["optimize"].pop(name)
    config["checkpoint"] = {
        **config["checkpoint"],
        "slots": {"1/0/0/0": _slot("1/0/0/0"), "1/0/0/1": _slot("1/0/0/1", "LLM_FAILED")},
        "plans": {"1/0": ["vectorize", None]},
        "pending": {"1/0/0/1": {"solution_id": "s-pending", "source_hash": "h"}},
    }
    store.update_run(run_id, RunUpdate(config=config))
    return run_id


def test_an_old_run_keeps_its_settings_and_attempts_through_a_settings_change(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    run_id = _old_style_run(store, silu_task, silu_baseline)
    _, spec, checkpoint = load_run(store, run_id)
    # It goes on as it started: the paper's loop, not the new defaults.
    assert (spec.optimize.plan_mode, spec.optimize.repair_tries) == ("independent", 0)
    assert spec.optimize.memory_policy == "fifo"
    assert set(checkpoint.slots) == {"1/0/0/0", "1/0/0/1"}
    assert set(checkpoint.pending) == {"1/0/0/1"}  # its slot is unfinished (LLM_FAILED)

    change_settings(store, run_id, iterations=4)
    _, spec, after = load_run(store, run_id)
    assert spec.optimize.iterations == 4
    assert after.slots == checkpoint.slots
    assert after.plans == checkpoint.plans and after.pending == checkpoint.pending


def test_the_first_worker_moves_an_old_runs_attempts_into_entries(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    run_id = _old_style_run(store, silu_task, silu_baseline)
    _, spec, checkpoint = load_run(store, run_id)
    writer = CheckpointWriter(store, run_id, spec, LiveRun(checkpoint))

    async def take_over() -> None:
        assert await writer.move_inline_entries() == 4
        await writer.save(None)

    asyncio.run(take_over())
    run = store.get_run(run_id)
    assert run is not None
    assert "slots" not in run.config["checkpoint"]
    kinds = sorted((e.kind, e.key) for e in store.run_entries(run_id))
    assert kinds == [
        ("pending", "1/0/0/1"),
        ("plans", "1/0"),
        ("slot", "1/0/0/0"),
        ("slot", "1/0/0/1"),
    ]
    _, _, again = load_run(store, run_id)
    assert again.slots == checkpoint.slots and again.plans == checkpoint.plans


def test_an_entry_write_outlives_a_cancelled_caller(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    """A stop request that cancels the attempt while its record waits for the writer must not
    leave the finished attempt only in memory."""
    run_id = prepare_run(store, silu_task, silu_baseline, OptimizeConfig())
    _, spec, checkpoint = load_run(store, run_id)
    state = LiveRun(checkpoint)
    writer = CheckpointWriter(store, run_id, spec, state)

    async def scenario() -> None:
        await writer._lock.acquire()  # another write is under way
        checkpoint.slots["1/0/0/0"] = AttemptRecord.model_validate(_slot("1/0/0/0"))
        checkpoint.pending["1/0/0/1"] = PendingAttempt(solution_id="s", source_hash="h")
        waiting = [
            asyncio.ensure_future(writer.save_entry(None, "slot", "1/0/0/0")),
            asyncio.ensure_future(writer.save_entry(None, "pending", "1/0/0/1")),
        ]
        await asyncio.sleep(0.05)
        for task in waiting:
            task.cancel()  # the stop request
        await asyncio.sleep(0)
        writer._lock.release()
        for task in waiting:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(scenario())
    keys = {(e.kind, e.key) for e in store.run_entries(run_id)}
    assert keys == {("slot", "1/0/0/0"), ("pending", "1/0/0/1")}
