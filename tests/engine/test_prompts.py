"""What each role is shown."""

from __future__ import annotations

import random

import pytest

from accelopt_mcp.engine.prompts import (
    FAMILIES,
    executor_messages,
    family_for,
    planner_messages,
    summarizer_messages,
)
from accelopt_mcp.models import Environment, Evaluation, EvaluationStatus, Solution, Task
from accelopt_mcp.store.base import ExperienceRecord

COUNTERS = {f"counter_{n}": float(n) for n in range(12)}


def _profile() -> Evaluation:
    return Evaluation(
        status=EvaluationStatus.RUNTIME_ERROR,
        environment=Environment(hardware="cpu/test"),
        timestamp="2026-01-01T00:00:00Z",
        hardware_counters=COUNTERS,
    )


def _order(text: str) -> list[str]:
    return [line.split(":")[0] for line in text.splitlines() if line.startswith("counter_")]


def test_planner_sees_task_kernel_memory_and_shuffled_counters(
    silu_task: Task, silu_baseline: Solution
) -> None:
    memory = [
        ExperienceRecord(
            id="e1",
            definition_name="silu",
            title="fuse the exp",
            strategy="one pass over memory",
            pseudocode="a -> b",
        )
    ]
    orders = []
    for seed in range(4):
        system, user = planner_messages(
            "cpu", silu_task, silu_baseline, _profile(), memory, random.Random(seed)
        )
        assert "[accelopt role: planner]" in system.content
        assert silu_baseline.entry_source.content.strip() in user.content
        assert "fuse the exp" in user.content and "one pass over memory" in user.content
        assert silu_task.definition.name in user.content
        orders.append(_order(user.content))
    assert all(sorted(order) == sorted(COUNTERS) for order in orders)
    assert len({tuple(order) for order in orders}) > 1  # shuffled...
    again = planner_messages("cpu", silu_task, silu_baseline, _profile(), memory, random.Random(2))
    assert _order(again[1].content) == orders[2]  # ...reproducibly


def test_executor_and_summarizer_prompts(silu_task: Task, silu_baseline: Solution) -> None:
    tricky = silu_baseline.model_copy(deep=True)
    tricky.sources[0].content += "\n# {{plan}} must stay as written\n"
    for family in FAMILIES:
        _, user = executor_messages(family, silu_task, tricky, "use float32 throughout")
        assert "use float32 throughout" in user.content
        assert "{{plan}} must stay as written" in user.content
        _, user = summarizer_messages(family, silu_task, tricky, silu_baseline, 3.5)
        assert "3.5x faster" in user.content
    assert family_for("cpu") == "cpu"
    assert family_for("nki") == "nki"
    assert family_for("flashinfer") == "gpu"
    with pytest.raises(ValueError, match="unknown backend"):
        family_for("tpu")
