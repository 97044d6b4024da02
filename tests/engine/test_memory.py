"""Optimization memory on a real store: FIFO cap, seeding from a namespace, removal."""

from __future__ import annotations

from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.engine.runs import prepare_run
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import ExperienceIn, KernelStore


def _item(task: Task, title: str) -> ExperienceIn:
    return ExperienceIn(definition_name=task.definition.name, title=title, strategy="s")


def test_fifo_cap_seeds_and_removal(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    earlier = prepare_run(store, silu_task, silu_baseline, OptimizeConfig())
    shared = OptimizationMemory(store, run_id=earlier, namespace="cpu/test", capacity=3)
    for n in range(5):
        shared.add(_item(silu_task, f"old-{n}"))
    assert [i.title for i in shared.working_set()] == ["old-2", "old-3", "old-4"]

    run = prepare_run(store, silu_task, silu_baseline, OptimizeConfig())
    seeds = OptimizationMemory.seeds_from_namespace(store, "cpu/test", 3)
    memory = OptimizationMemory(store, run_id=run, namespace="cpu/test", capacity=3, seed_ids=seeds)
    assert [i.title for i in memory.working_set()] == ["old-2", "old-3", "old-4"]
    memory.add(_item(silu_task, "new-0"))
    memory.add(_item(silu_task, "new-1"))
    assert [i.title for i in memory.working_set()] == ["old-4", "new-0", "new-1"]

    # A removed item leaves the working set; the one before it comes back in.
    removed = memory.working_set()[1]
    assert store.remove_experience(removed.id)
    assert [i.title for i in memory.working_set()] == ["old-3", "old-4", "new-1"]
    assert store.get_experience(removed.id) is not None  # kept as history

    unseeded = OptimizationMemory(store, run_id=run, namespace="cpu/test", capacity=3)
    assert [i.title for i in unseeded.working_set()] == ["new-1"]
    assert OptimizationMemory(store, run_id=run, namespace="x", capacity=0).working_set() == []
