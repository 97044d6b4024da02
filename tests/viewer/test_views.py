"""The viewer's data layer (accelopt_mcp/viewer/views/) on SQLite and PostgreSQL: what the
pages are built from."""

from __future__ import annotations

from typing import Any

import pytest

from accelopt_mcp.engine.selection import AttemptRecord
from accelopt_mcp.models import LlmCallIn, LlmMessage
from accelopt_mcp.store.base import KernelStore, RunUpdate, SuiteRecord
from accelopt_mcp.viewer import views
from tests.viewer.conftest import HOSTILE, STORES
from tests.viewer.synthetic import (
    BENCH,
    REFERENCE_MS,
    failed,
    passed,
    variant,
    write_broken_run,
    write_run,
)


@STORES
def test_a_run_reads_as_a_tree_with_its_ancestors_outside_the_run(
    any_store: KernelStore, silu: tuple[Any, Any]
) -> None:
    made = write_run(any_store, *silu, kernels=9, iterations=3)
    detail = views.run_detail(any_store, made.run_id)
    nodes = {n.id: n for n in detail.nodes}
    # Every kernel of the run, the initial one, and both imported ancestors: none dropped.
    assert set(made.solution_ids) | {made.initial_id, *made.ancestor_ids} == set(nodes)
    for ancestor in made.ancestor_ids:
        assert nodes[ancestor].outside_run and nodes[ancestor].column == -1
    assert nodes[made.initial_id].initial and nodes[made.initial_id].column == 0
    # Every node's parent is a node, so every edge has both ends.
    assert {(e.parent, e.child) for e in detail.edges} == {
        (n.parent_id, n.id) for n in detail.nodes if n.parent_id
    }
    assert nodes[made.failed_id or ""].outcome == "failed"
    assert nodes[made.failed_id or ""].status == "COMPILE_ERROR"
    flagged = nodes[made.flagged_id or ""]
    assert flagged.outcome == "untrusted" and flagged.untrusted_flags == ["above_peak"]
    best = nodes[made.best_id or ""]
    assert best.best and best.in_beam and best.outcome == "passed"
    assert best.over_parent is not None and "over the parent (same rounds)" in best.over_parent
    assert [t.kept for t in detail.ties] == [made.best_id]
    assert detail.ties[0].verdict == "indistinguishable"
    assert nodes[made.tie.challenger if made.tie else ""].tie
    assert detail.reference_latency_ms == pytest.approx(REFERENCE_MS)
    assert [p.iteration for p in detail.iterations] == [0, 1, 2, 3]
    assert all(p.percent_of_peak is not None for p in detail.iterations)
    row = detail.run
    assert row.state == "completed" and row.wall_s == pytest.approx(42.0)
    assert row.best_over_reference is not None and "over the reference" in row.best_over_reference
    assert row.percent_of_peak is not None and row.hardware == "cpu/x86_64/synthetic"
    assert detail.problems == []


@STORES
def test_the_node_panel_has_code_diff_plan_profile_calls_and_lessons(
    any_store: KernelStore, silu: tuple[Any, Any]
) -> None:
    made = write_run(any_store, *silu, kernels=4, iterations=1, hostile=HOSTILE)
    first = made.solution_ids[0]
    any_store.add_llm_call(
        LlmCallIn(
            run_id=made.run_id,
            role="executor",
            model="m",
            purpose="attempt 1/0/0/0",
            messages=[LlmMessage(role="user", content=f"write it {HOSTILE}")],
            reply="```python\n...```",
        )
    )
    any_store.add_llm_call(
        LlmCallIn(run_id=made.run_id, role="executor", model="m", purpose="attempt 1/0/0/1")
    )
    detail = views.node_detail(any_store, first, made.run_id)
    assert detail.parent_id == made.initial_id
    assert HOSTILE in detail.plan if detail.plan else False
    assert any(line.kind == "+" and "variant" in line.text for line in detail.diff)
    assert any(line.kind == "-" for line in detail.diff)
    (profile,) = detail.profiles
    assert profile.latency is not None and "ms [" in profile.latency
    assert profile.over_reference is not None and "over the reference" in profile.over_reference
    assert [c.against for c in profile.comparisons] == ["parent"]
    assert [b["what"] for b in profile.breakdown] == ["np.exp", "L7: y = x / (1 + e)"]
    assert [c.purpose for c in detail.calls] == ["attempt 1/0/0/0"]
    call = views.call_detail(any_store, detail.calls[0].id)
    assert call.messages and HOSTILE in call.messages[0]["content"]
    assert [lesson.fast_solution_id for lesson in detail.lessons_produced] == [first]


@STORES
def test_a_broken_run_row_shows_what_is_there_and_says_what_is_missing(
    any_store: KernelStore, silu: tuple[Any, Any]
) -> None:
    run_id = write_broken_run(any_store, silu[0])
    detail = views.run_detail(any_store, run_id)
    said = " ".join(detail.problems)
    assert "settings could not be read" in said
    assert "slot entry 1/0/0/0 could not be read" in said
    assert "no initial kernel" in said
    assert detail.nodes == [] and detail.run.iterations_total is None
    # The runs page lists it too, with the same problems.
    (row,) = [r for r in views.list_runs(any_store).runs if r.id == run_id]
    assert row.problems and row.state == "interrupted"


@STORES
def test_runs_filter_by_task_and_status_and_memory_by_namespace_and_text(
    any_store: KernelStore, silu: tuple[Any, Any]
) -> None:
    done = write_run(any_store, *silu, kernels=3, iterations=1)
    broken = write_broken_run(any_store, silu[0])
    everything = views.list_runs(any_store)
    assert {r.id for r in everything.runs} == {done.run_id, broken}
    assert [r.id for r in views.list_runs(any_store, status="completed").runs] == [done.run_id]
    assert [r.id for r in views.list_runs(any_store, status="interrupted").runs] == [broken]
    assert views.list_runs(any_store, task="no-such-task").runs == []
    page = views.memory_page(any_store)
    assert page.namespaces == {"cpu": 1}
    assert [i.title for i in views.memory_page(any_store, text="tile rows").items] == [
        "tile the rows"
    ]
    assert views.memory_page(any_store, namespace="elsewhere").items == []
    assert views.memory_page(any_store, text="the").error is not None


@STORES
def test_two_suites_side_by_side(any_store: KernelStore) -> None:
    case = {
        "key": "silu/0",
        "task": "silu",
        "task_path": "t.py",
        "kernel_path": "k.py",
        "best": {"latency_ms": 1.0, "percent_of_peak": 12.5},
        "baseline": {"latency_ms": 2.0, "percent_of_peak": 6.0},
        "ended": "completed",
    }
    common = {"source": "builtin:cpu-nkibench", "backend": "cpu", "status": "completed"}
    a = any_store.put_suite(
        SuiteRecord(
            id="11111111-0000-4000-8000-000000000000",
            name="a",
            spec={"settings": {}, "cases": [case]},
            **common,
        )
    )
    other = {**case, "best": {"latency_ms": 0.5, "percent_of_peak": 25.0}}
    b = any_store.put_suite(
        SuiteRecord(
            id="22222222-0000-4000-8000-000000000000",
            name="b",
            spec={"settings": {}, "cases": [other]},
            **common,
        )
    )
    page = views.suites_page(any_store, a.id, b.id)
    assert page.error is None and page.table is not None
    assert page.table["rows"][0][0] == "silu/0"
    assert page.comparison is not None
    (row,) = page.comparison["rows"]
    assert "12.5" in row["a_percent"] and "25" in row["b_percent"]
    assert views.suites_page(any_store, "ffffffff").error is not None


def test_an_unknown_run_or_kernel_is_not_found(any_store: KernelStore) -> None:
    with pytest.raises(views.NotFound):
        views.run_detail(any_store, "00000000-0000-4000-8000-000000000000")
    with pytest.raises(views.NotFound):
        views.node_detail(any_store, "00000000-0000-4000-8000-000000000000")


@STORES
def test_a_repair_hangs_from_its_failed_try_and_its_speedup_names_the_beam_kernel(
    any_store: KernelStore, silu: tuple[Any, Any]
) -> None:
    task, base = silu
    made = write_run(any_store, task, base, kernels=2, iterations=1)
    workload = any_store.list_workloads(task.definition.name)[0].uuid
    head = made.best_id or ""
    meta = {"run_id": made.run_id, "iteration": 2, "beam_index": 0, "plan_index": 0}
    tried = any_store.upsert_solution(
        variant(base, "tried"), parent_id=head, evolve_metadata={**meta, "attempt_index": 0}
    )
    any_store.upsert_profile(workload, tried, failed(), BENCH)
    fixed = any_store.upsert_solution(
        variant(base, "fixed"), parent_id=tried, evolve_metadata={**meta, "attempt_index": 0}
    )
    any_store.upsert_profile(workload, fixed, passed(1.0, parent_ms=2.0), BENCH)
    record = AttemptRecord(
        iteration=2, beam_index=0, plan_index=0, attempt_index=0, parent_id=head,
        parent_latency_ms=2.0, status="PASSED", solution_id=fixed, latency_ms=1.0,
        parent_speedup=2.0, speedup_ci_low=1.9, speedup_ci_high=2.1,
        speedup_measured="same_rounds", repairs=1, repaired_from=[tried],
    )  # fmt: skip
    any_store.put_run_entry(made.run_id, "slot", record.key, record.model_dump(mode="json"))
    detail = views.run_detail(any_store, made.run_id)
    nodes = {n.id: n for n in detail.nodes}
    assert nodes[tried].repair_of == "2/0/0/0" and nodes[tried].column == 2
    assert nodes[fixed].parent_id == tried and nodes[fixed].slot == "2/0/0/0"
    assert nodes[fixed].over_parent is not None
    assert f"over the beam kernel {head[:8]}" in nodes[fixed].over_parent
    (edge,) = [e for e in detail.edges if e.child == fixed]
    assert edge.parent == tried and edge.verdict is None  # the figure is not over the try
    panel = views.node_detail(any_store, tried, made.run_id)
    assert panel.slot is not None and panel.slot["solution_id"] == fixed


def test_rows_of_finished_runs_are_read_once(any_store: KernelStore, silu: tuple[Any, Any]) -> None:
    done = write_run(any_store, *silu, kernels=2, iterations=1)
    going = write_run(any_store, *silu, kernels=2, iterations=1, status="running")
    kept: dict[tuple[str, str], views.RunRow] = {}
    first = {r.id: r for r in views.list_runs(any_store, finished_rows=kept).runs}
    again = {r.id: r for r in views.list_runs(any_store, finished_rows=kept).runs}
    assert again[done.run_id] is first[done.run_id]
    assert again[going.run_id] is not first[going.run_id]
    # A change to the run row (a resume, say) reads it afresh.
    any_store.update_run(done.run_id, RunUpdate(cost_usd=1.5))
    changed = {r.id: r for r in views.list_runs(any_store, finished_rows=kept).runs}
    assert changed[done.run_id].cost_usd == 1.5
