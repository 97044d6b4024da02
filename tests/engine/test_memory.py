"""Optimization memory on a real store: FIFO cap, seeding from a namespace, removal, and the
one namespace default that runs and the memory tools share."""

from __future__ import annotations

import pytest

from accelopt_mcp.backends.registry import backend_names
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.memory import (
    OptimizationMemory,
    add_experience,
    default_namespace,
    memory_namespace_of,
    namespace_note,
    run_namespace,
)
from accelopt_mcp.engine.runs import prepare_run
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import DEFAULT_BACKEND, DEFAULT_NAMESPACE, ExperienceIn, KernelStore
from tests.engine.conftest import BOTH_STORES


def _item(task: Task, title: str) -> ExperienceIn:
    return ExperienceIn(definition_name=task.definition.name, title=title, strategy="s")


def _earlier_run_left(
    store: KernelStore, task: Task, baseline: Solution, namespace: str, titles: list[str]
) -> OptimizationMemory:
    """The memory of an earlier run that added `titles` to `namespace` (room for 3)."""
    earlier = prepare_run(store, task, baseline, OptimizeConfig())
    shared = OptimizationMemory(store, run_id=earlier, namespace=namespace, capacity=3)
    for title in titles:
        shared.add(_item(task, title))
    return shared


@BOTH_STORES
def test_fifo_cap_seeds_and_removal(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    old = [f"old-{n}" for n in range(5)]
    shared = _earlier_run_left(store, silu_task, silu_baseline, "cpu/test", old)
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


def _learned(task: Task, title: str, iteration: int) -> ExperienceIn:
    return ExperienceIn(
        definition_name=task.definition.name, title=title, strategy="s", iteration=iteration
    )


@BOTH_STORES
def test_the_sample_policy_keeps_the_newest_iteration_and_samples_the_rest(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    _earlier_run_left(store, silu_task, silu_baseline, "pool", [f"seed-{n}" for n in range(3)])
    run = prepare_run(store, silu_task, silu_baseline, OptimizeConfig())
    seeds = OptimizationMemory.seeds_from_namespace(store, "pool", 3)

    def memory(capacity: int = 4) -> OptimizationMemory:
        return OptimizationMemory(
            store, run_id=run, namespace="pool", capacity=capacity, seed_ids=seeds,
            policy="sample",
        )  # fmt: skip

    # Before the run learned anything: the seeds, oldest first.
    assert [i.title for i in memory().working_set(1)] == ["seed-0", "seed-1", "seed-2"]
    for n in range(3):
        memory().add(_learned(silu_task, f"it1-{n}", 1))
    for n in range(2):
        memory().add(_learned(silu_task, f"it2-{n}", 2))
    older = ["seed-0", "seed-1", "seed-2", "it1-0", "it1-1", "it1-2"]

    samples = set()
    for iteration in range(3, 12):
        shown = [i.title for i in memory().working_set(iteration)]
        assert len(shown) == 4
        assert shown[2:] == ["it2-0", "it2-1"]  # every item of the newest iteration, last
        picked = shown[:2]
        assert set(picked) <= set(older)
        assert picked == sorted(picked, key=older.index)  # oldest first
        # A resumed run (a new memory object) sees the same working set.
        assert [i.title for i in memory().working_set(iteration)] == shown
        samples.add(tuple(picked))
    assert len(samples) > 1, "the older items are sampled anew each iteration"

    # The memory as iteration 2 started: iteration 1's items all, then one sampled seed.
    at_two = [i.title for i in memory().working_set(2)]
    assert at_two[1:] == ["it1-0", "it1-1", "it1-2"] and at_two[0].startswith("seed-")
    # More new items than room: the newest ExpN of them.
    assert [i.title for i in memory(capacity=2).working_set(2)] == ["it1-1", "it1-2"]
    # Without an iteration: as for the one after the newest.
    assert memory().working_set() == memory().working_set(3)


@BOTH_STORES
def test_fifo_as_an_iteration_started(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    run = prepare_run(store, silu_task, silu_baseline, OptimizeConfig())
    memory = OptimizationMemory(store, run_id=run, namespace="cpu", capacity=3)
    for iteration, count in ((1, 3), (2, 2)):
        for n in range(count):
            memory.add(_learned(silu_task, f"it{iteration}-{n}", iteration))
    assert [i.title for i in memory.working_set()] == ["it1-2", "it2-0", "it2-1"]
    assert [i.title for i in memory.working_set(3)] == ["it1-2", "it2-0", "it2-1"]
    assert [i.title for i in memory.working_set(2)] == ["it1-0", "it1-1", "it1-2"]


# --------------------------------------------------------------------------- namespaces


def test_runs_and_hand_added_items_share_one_default_namespace() -> None:
    assert OptimizeConfig().backend == DEFAULT_BACKEND == "cpu"
    assert OptimizeConfig().memory_namespace() == DEFAULT_NAMESPACE == "cpu"
    for backend in backend_names():
        config = OptimizeConfig(backend=backend)
        assert config.memory_namespace() == default_namespace(backend) == backend
        assert memory_namespace_of(None, backend) == config.memory_namespace()
    assert OptimizeConfig(backend="nki", namespace="pool").memory_namespace() == "pool"
    assert memory_namespace_of("pool", "nki") == "pool"
    assert memory_namespace_of() == "cpu"
    # An item that names no namespace lands where a default run reads.
    assert ExperienceIn(definition_name="d", title="t", strategy="s").namespace == "cpu"
    with pytest.raises(ValueError, match="unknown backend 'gpu'; choose one of cpu"):
        memory_namespace_of(None, "gpu")


def test_a_hand_added_item_seeds_the_next_default_run(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    store.upsert_definition(silu_task.definition)
    item = add_experience(store, _item(silu_task, "by hand"))  # no namespace given
    config = OptimizeConfig(seed_from_namespace=True)
    seeds = OptimizationMemory.seeds_from_namespace(store, config.memory_namespace(), 16)
    assert seeds == [item.id]


def test_the_note_says_when_no_job_reads_a_namespace(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    for backend in backend_names():
        assert namespace_note(store, default_namespace(backend)) is None
    note = namespace_note(store, "cpu/x86_64")
    assert note is not None
    assert "no run has used namespace 'cpu/x86_64'" in note
    assert "jobs read 'cpu' (backend cpu) unless started with namespace='cpu/x86_64'" in note
    assert "'nki' (backend nki)" in (namespace_note(store, "mine", "nki") or "")
    run = prepare_run(store, silu_task, silu_baseline, OptimizeConfig(namespace="cpu/x86_64"))
    assert run_namespace(store.get_run(run)) == "cpu/x86_64"  # type: ignore[arg-type]
    assert namespace_note(store, "cpu/x86_64") is None  # a stored run used it
    assert namespace_note(store, "mine") is not None
