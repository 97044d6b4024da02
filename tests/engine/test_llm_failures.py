"""A run whose LLM service fails stops with status llm_unavailable and says why, instead of
"completing" with nothing but failed attempts (engine/llm_health.py)."""

from __future__ import annotations

from typing import Any

from accelopt_mcp.engine.runs import load_run
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import KernelStore
from tests.engine.conftest import KEY, ScriptedSettings, one_plan_script, run_engine, text
from tests.llm_standin.process import StandinProcess


def _script(executor: list[dict[str, Any]]) -> dict[str, Any]:
    return one_plan_script("Vectorize the rows.", executor)


def _executor_calls(standin: StandinProcess) -> int:
    return sum(1 for r in standin.requests() if r["role"] == "executor")


def test_every_executor_failing_stops_the_run_with_the_reason(
    scripted_settings: ScriptedSettings,
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
) -> None:
    standin, config = scripted_settings(
        _script([{"kind": "status", "status": 503, "message": "overloaded"}]),
        iterations=3,
        beam=1,
        plans=1,
        attempts=2,
        summarize=False,
    )
    run_id, run = run_engine(store, silu_task, silu_baseline, config)
    assert run.status == "llm_unavailable"
    assert run.error is not None
    # 2 executor calls of 4 requests each (1 try + 3 retries): the ledger's 8 failed rows
    # (beside the planner's one that answered).
    assert "every LLM call of iteration 1 failed: 2 calls (8 requests with retries" in run.error
    assert "none of its 2 attempts got a kernel" in run.error
    ledger = store.list_llm_calls(run_id, limit=100)
    assert [c.role for c in ledger if c.status == "failed"] == ["executor"] * 8
    assert "HTTP 503" in run.error and "overloaded" in run.error
    _, _, checkpoint = load_run(store, run_id)
    assert checkpoint.completed_iteration == 0
    assert checkpoint.stop_reason == run.error
    # Iterations 2 and 3 never asked anything: 2 attempts x (1 try + 3 retries).
    assert _executor_calls(standin) == 2 * 4


def test_a_failed_planner_call_is_counted_as_the_ledger_counts_it(
    scripted_settings: ScriptedSettings,
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
) -> None:
    # One planner call for three plans fails; its six attempts never reach the executor. The
    # message once said "6 attempts" where list_llm_calls held the planner's requests.
    script = _script([text("unused")])
    script["roles"]["planner"] = {
        "replies": [{"kind": "status", "status": 503, "message": "overloaded"}],
        "when_exhausted": "repeat_last",
    }
    standin, config = scripted_settings(
        script, iterations=2, beam=1, plans=3, attempts=2, summarize=False
    )
    run_id, run = run_engine(store, silu_task, silu_baseline, config)
    assert run.status == "llm_unavailable" and run.error is not None
    ledger = store.list_llm_calls(run_id, limit=100)
    assert {c.role for c in ledger} == {"planner"} and _executor_calls(standin) == 0
    # 1 call, 1 try + 3 retries: the ledger's rows, counted in the message.
    assert len(ledger) == 4 and all(c.status == "failed" for c in ledger)
    assert f"1 call ({len(ledger)} requests with retries" in run.error, run.error
    assert "none of its 6 attempts got a kernel" in run.error


def test_consecutive_failures_stop_the_run_before_the_iteration_ends(
    scripted_settings: ScriptedSettings,
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
) -> None:
    standin, config = scripted_settings(
        _script([{"kind": "status", "status": 401, "message": "bad key"}]),
        # One executor call at a time: the attempts fail one after the other.
        models={"executor": {"concurrency": 1}},
        iterations=2,
        beam=1,
        plans=2,
        attempts=3,
        summarize=False,
        max_consecutive_llm_failures=2,
    )
    _, run = run_engine(store, silu_task, silu_baseline, config)
    assert run.status == "llm_unavailable"
    assert run.error is not None
    assert "2 LLM calls in a row failed (max_consecutive_llm_failures=2)" in run.error
    assert "HTTP 401" in run.error
    assert KEY not in run.error
    # A 401 is not retried; the run stopped after the second of six attempts.
    assert _executor_calls(standin) == 2


def test_a_run_that_recovers_keeps_going(
    scripted_settings: ScriptedSettings,
    store: KernelStore,
    silu_task: Task,
    silu_baseline: Solution,
) -> None:
    """Failures that are not in a row, in an iteration where some calls work, stop nothing."""
    from tests.engine import kernels

    good = text(kernels.reply(kernels.FAST))
    bad = {"kind": "status", "status": 400, "message": "context too long"}
    _, config = scripted_settings(
        _script([bad, good, bad, good]),
        models={"executor": {"concurrency": 1}},
        iterations=1,
        beam=1,
        plans=1,
        attempts=4,
        summarize=False,
        max_consecutive_llm_failures=2,
    )
    _, run = run_engine(store, silu_task, silu_baseline, config)
    assert run.status == "completed", run.error
