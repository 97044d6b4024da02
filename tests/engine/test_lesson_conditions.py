"""A lesson carries the conditions its speedup was measured under: the summarizer is told them,
the item stores them, a planner reading the item sees them. One small real run (two
evaluations) checks the path end to end; the prompts are checked on their own."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from accelopt_mcp.engine.experience import pair_conditions
from accelopt_mcp.engine.prompts import planner_messages, summarizer_messages
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.models import MeasuringConditions, Solution, Task
from accelopt_mcp.store.base import ExperienceRecord, KernelStore
from tests.engine import kernels
from tests.engine.conftest import build_script, models_config, run_engine, settings, text
from tests.llm_standin.process import StartStandin

TWO_CORES = MeasuringConditions(
    cores=2, cpus=[0, 1], blas_threads=2, pinned=True, host_load=3.8, evaluations_at_once=1
)


def test_the_summarizer_is_told_the_conditions(silu_task: Task, silu_baseline: Solution) -> None:
    _, told = summarizer_messages(
        "cpu", silu_task, silu_baseline, silu_baseline, 1.99, interval=(1.9, 2.1),
        conditions=TWO_CORES,
    )  # fmt: skip
    assert (
        "- Measured on 2 cores (cores 0,1), 2 BLAS threads, host load 3.8, 1 evaluation at "
        "once: a speedup holds under the conditions it was measured in."
    ) in told.content
    assert "do not claim it for other conditions" in told.content
    _, untold = summarizer_messages("cpu", silu_task, silu_baseline, silu_baseline, 1.99)
    assert "Measured on" not in untold.content


def test_a_planner_sees_what_each_lesson_was_measured_on(
    silu_task: Task, silu_baseline: Solution
) -> None:
    def item(title: str, conditions: MeasuringConditions | None) -> ExperienceRecord:
        return ExperienceRecord(
            id=title, definition_name="d", title=title, strategy="s", conditions=conditions
        )

    memory = [item("Split heads", TWO_CORES), item("By hand", None)]
    _, user = planner_messages("cpu", silu_task, silu_baseline, None, memory, random.Random(0))
    assert (
        "1. Split heads\n   Strategy: s\n   Measured on: 2 cores (cores 0,1), 2 BLAS threads, "
        "host load 3.8, 1 evaluation at once\n2. By hand\n   Strategy: s\n"
    ) in user.content


@pytest.mark.serial
def test_a_runs_lesson_stores_its_measuring_conditions(
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
    start_standin: StartStandin,
    llm_key: str,
    tmp_path: Path,
) -> None:
    script = build_script(faults=False, executor=[text(kernels.reply(kernels.FAST))])
    standin = start_standin(script)
    usable = sorted(os.sched_getaffinity(0))
    workers = min(2, len(usable))
    config = settings(
        models_config(standin.base_url, tmp_path / "models.json"),
        iterations=1, beam=1, plans=1, attempts=1, topk=2, workers=workers,
    )  # fmt: skip
    run_id, run = run_engine(store, silu_task, silu_baseline, config)
    assert run.status == "completed", run.error
    _, _, checkpoint = load_run(store, run_id)
    (attempt,) = checkpoint.slots.values()
    assert attempt.beats_parent and attempt.solution_id is not None
    assert checkpoint.initial is not None

    # The attempt's stored profile says which kernel its 'parent' was.
    (profile,) = store.list_profiles(solution_id=attempt.solution_id)
    (comparison,) = profile.evaluation.comparisons
    assert comparison.baseline_id == checkpoint.initial.solution_id == attempt.parent_id

    (lesson,) = store.recent_experiences(run_id=run_id, limit=10)
    conditions = lesson.conditions
    assert conditions is not None
    # A run's workers are each pinned to their share of the cores, one BLAS thread per core
    # (DevicePool.for_cpu), and run at once.
    groups = [usable[i::workers] for i in range(workers)]
    assert conditions.pinned is True and conditions.cpus in groups
    assert conditions.cores == conditions.blas_threads == len(conditions.cpus)
    assert conditions.evaluations_at_once == workers
    assert conditions.host_load == profile.evaluation.measurement["host_load"]
    assert conditions.foreign_share == profile.evaluation.measurement["foreign_share"]
    key = {"workers": workers} if workers != 1 else {}
    assert conditions == pair_conditions(profile.evaluation, key)
    (prompt,) = [
        r["body"]["messages"][-1]["content"]
        for r in standin.requests()
        if r["role"] == "summarizer"
    ]
    assert f"- Measured on {conditions.text()}: a speedup holds" in prompt
    assert f"{workers} evaluation{'s' if workers > 1 else ''} at once" in prompt
