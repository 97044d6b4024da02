"""Executor repair: a kernel that fails is shown back to the executor with its error, and the
fix is stored as its own solution whose parent is the failed one (cfg.repair_tries)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import KernelStore, RunRecord
from tests.engine import kernels
from tests.engine.conftest import ScriptedSettings, one_plan_script, run_engine, text
from tests.llm_standin.process import StandinProcess

NAME_ERROR = """import numpy as np


def kernel(x):
    out = np2.negative(x)
    return out
"""


def _script(executor: list[dict[str, Any]]) -> dict[str, Any]:
    return one_plan_script(json.dumps(["Compute silu in place, in float32."]), executor)


RepairRun = Callable[..., tuple[StandinProcess, RunRecord, Checkpoint]]


@pytest.fixture
def repair_run(
    scripted_settings: ScriptedSettings,
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
) -> RepairRun:
    """Runs one attempt, on one plan, of a run whose executor plays `replies`, with
    `repair_tries`, on `store`; gives the stand-in, the run and its checkpoint."""

    def run(
        replies: list[dict[str, Any]], *, repair_tries: int
    ) -> tuple[StandinProcess, RunRecord, Checkpoint]:
        standin, config = scripted_settings(
            _script(replies),
            iterations=1,
            beam=1,
            plans=1,
            attempts=1,
            summarize=False,
            repair_tries=repair_tries,
        )
        run_id, record = run_engine(store, silu_task, silu_baseline, config)
        _, _, checkpoint = load_run(store, run_id)
        return standin, record, checkpoint

    return run


def _executor_prompts(standin: StandinProcess) -> list[str]:
    return [
        r["body"]["messages"][-1]["content"]
        for r in standin.requests()
        if r["role"] == "executor" and r["outcome"] == "text"
    ]


def test_a_name_error_is_fed_back_and_the_fix_is_its_child(
    repair_run: RepairRun, store: KernelStore
) -> None:
    replies = [text(kernels.reply(NAME_ERROR)), text(kernels.reply(kernels.FAST))]
    standin, run, checkpoint = repair_run(replies, repair_tries=2)
    assert run.status == "completed", run.error
    (slot,) = checkpoint.slots.values()
    assert slot.status == "PASSED"
    assert slot.repairs == 1  # the fix passed: no second try
    (failed_id,) = slot.repaired_from
    assert slot.solution_id is not None
    fixed = store.get_solution(slot.solution_id)
    failed = store.get_solution(failed_id)
    assert fixed is not None and failed is not None
    # Lineage: initial -> failed attempt -> its repair; the attempt's own parent stays the
    # beam kernel, which its speedup is measured against.
    assert fixed.parent_id == failed_id
    assert checkpoint.initial is not None
    assert failed.parent_id == slot.parent_id == checkpoint.initial.solution_id
    assert fixed.evolve_metadata["repair"] == 1
    assert fixed.evolve_metadata["repaired_status"] == "RUNTIME_ERROR"
    assert "np2" in failed.solution.entry_source.content
    failed_profiles = store.list_profiles(solution_id=failed_id)
    assert [p.evaluation.status.value for p in failed_profiles] == ["RUNTIME_ERROR"]
    assert slot.speedup_measured == "same_rounds"
    # The repair prompt showed the failed kernel, the failure class and the NameError.
    prompts = _executor_prompts(standin)
    assert len(prompts) == 2
    repair = prompts[1]
    assert "np2.negative" in repair
    assert "RUNTIME_ERROR" in repair
    assert "NameError" in repair
    assert "np2" not in prompts[0]
    assert checkpoint.history[0].repaired == 1


def test_repairs_stop_at_the_limit_and_the_last_failure_stands(repair_run: RepairRun) -> None:
    replies = [
        text(kernels.reply(NAME_ERROR)),
        text(kernels.reply(kernels.WRONG)),
        text(kernels.reply(kernels.FAST)),  # never asked for: one repair only
    ]
    standin, run, checkpoint = repair_run(replies, repair_tries=1)
    assert run.status == "completed", run.error
    (slot,) = checkpoint.slots.values()
    assert slot.status == "INCORRECT_NUMERICAL"
    assert slot.repairs == 1 and len(slot.repaired_from) == 1
    assert len(_executor_prompts(standin)) == 2


def test_no_repair_in_the_paper_setting(repair_run: RepairRun) -> None:
    standin, run, checkpoint = repair_run([text(kernels.reply(NAME_ERROR))], repair_tries=0)
    assert run.status == "completed"
    (slot,) = checkpoint.slots.values()
    assert slot.status == "RUNTIME_ERROR" and slot.repairs == 0
    assert len(_executor_prompts(standin)) == 1
    # A run that ends with no passed attempt says so where a script reads it.
    assert checkpoint.history[0].passed == 0
