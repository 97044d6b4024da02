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
from accelopt_mcp.models import (
    Comparison,
    Correctness,
    Environment,
    Evaluation,
    EvaluationStatus,
    LatencyStats,
    Performance,
    Solution,
    Task,
)
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
        assert "## Fast kernel: 3.50x over the slow kernel\n" in user.content
    assert family_for("cpu") == "cpu"
    assert family_for("nki") == "nki"
    assert family_for("flashinfer") == "gpu"
    with pytest.raises(ValueError, match="unknown backend"):
        family_for("tpu")


HARNESS = {
    "timed_calls": 120.0,
    "timed_total_ms": 49.4,
    "reference_timed_total_ms": 64.8,
    "harness_overhead_us": 3.1,
    "runqueue_wait_ms": 0.2,
    "calls_per_sample": 1.0,
}


def _measured() -> Evaluation:
    """A cpu profile: intervals on the median and on both speedups; harness internals in
    `measurement`, and (as in profiles stored before it existed) among the counters too."""
    return Evaluation(
        status=EvaluationStatus.PASSED,
        environment=Environment(hardware="cpu/test"),
        timestamp="2026-01-01T00:00:00Z",
        correctness=Correctness(),
        performance=Performance(
            latency_ms=0.412,
            reference_latency_ms=0.54,
            speedup_factor=1.31,
            speedup_ci_low=1.27,
            speedup_ci_high=1.35,
        ),
        latency_stats=LatencyStats(
            mean_ms=0.413,
            median_ms=0.412,
            min_ms=0.401,
            max_ms=0.47,
            relative_spread=0.02,
            runs=60,
            measurement_rounds=3,
            ci_low_ms=0.405,
            ci_high_ms=0.419,
        ),
        hardware_counters={"gflops": 2.5, "latency_ms": 0.412, **HARNESS},
        measurement=HARNESS,
        comparisons=[
            Comparison(
                baseline="parent",
                baseline_latency_ms=0.45,
                speedup=1.09,
                ci_low=1.05,
                ci_high=1.13,
                verdict="faster",
            )
        ],
    )


def test_the_planner_sees_intervals_and_against_what_never_harness_internals(
    silu_task: Task, silu_baseline: Solution
) -> None:
    _, user = planner_messages("cpu", silu_task, silu_baseline, _measured(), [], random.Random(0))
    text = user.content
    assert "latency: 0.412 ms [0.405, 0.419] (95% CI)" in text
    assert "speedup: 1.31x [1.27, 1.35] over the reference" in text
    assert "speedup: 1.09x [1.05, 1.13] over the parent (faster)" in text
    assert "gflops: 2.5" in text
    for name in HARNESS:
        assert name not in text
    assert "latency_ms" not in text  # shown once, with its interval


def test_an_old_profile_without_intervals_reads_as_it_was(
    silu_task: Task, silu_baseline: Solution
) -> None:
    old = _measured().model_copy(
        update={
            "performance": Performance(
                latency_ms=0.412, reference_latency_ms=0.54, speedup_factor=1.31
            ),
            "latency_stats": None,
            "comparisons": [],
            "measurement": {},
        }
    )
    _, user = planner_messages("cpu", silu_task, silu_baseline, old, [], random.Random(0))
    assert "latency: 0.412 ms\n" in user.content
    assert "speedup: 1.31x over the reference\n" in user.content
    assert "timed_total_ms" not in user.content and "calls_per_sample" not in user.content


def test_the_summarizer_sees_the_pair_speedup_with_its_interval(
    silu_task: Task, silu_baseline: Solution
) -> None:
    for family in FAMILIES:
        _, user = summarizer_messages(
            family, silu_task, silu_baseline, silu_baseline, 3.5, interval=(3.3, 3.7)
        )
        assert "## Fast kernel: 3.50x [3.30, 3.70] over the slow kernel (95% CI)" in user.content
        assert "timed_total_ms" not in user.content
