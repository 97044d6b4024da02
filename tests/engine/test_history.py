"""The planner's history block: plans tried on a kernel's lineage, with their outcomes."""

from __future__ import annotations

from typing import Any

from accelopt_mcp.engine.history import (
    NO_HISTORY,
    attempt_outcome,
    lineage,
    lineage_history,
    short_error,
)
from accelopt_mcp.engine.selection import AttemptRecord, HeadToHead, TieDecision

INITIAL = "init0000aaaa"
CHILD = "child111bbbb"
GRANDCHILD = "grand222cccc"

NAME_ERROR_LOG = (
    "the kernel failed on seed 0: Traceback (most recent call last):\n"
    '  File "/tmp/accelopt-cpu-4026531836-16834-h1z5q9kp/kernel_d36d49c1/silu.py", line 5, '
    "in kernel\n    return np2.exp(x)\n           ^^^\nNameError: name 'np2' is not defined\n"
)


def _slot(
    iteration: int, b: int, p: int, a: int, parent: str, status: str = "PASSED", **fields: Any
) -> AttemptRecord:
    return AttemptRecord(
        iteration=iteration,
        beam_index=b,
        plan_index=p,
        attempt_index=a,
        parent_id=parent,
        parent_latency_ms=1.0,
        status=status,
        **fields,
    )


def _two_generations() -> tuple[list[AttemptRecord], dict[str, list[str | None]]]:
    """Iteration 1 on the initial kernel: plan 0 produced CHILD (1.31x), plan 1 failed with
    a NameError twice. Iteration 2 on CHILD: plan 0 gained nothing clear, plan 1 produced
    GRANDCHILD; a planner failure (None) in between."""
    slots = [
        _slot(1, 0, 0, 0, INITIAL, solution_id=CHILD, source_hash="h1", latency_ms=0.76,
              parent_speedup=1.31, speedup_ci_low=1.27, speedup_ci_high=1.35,
              speedup_measured="same_rounds"),
        _slot(1, 0, 0, 1, INITIAL, "INCORRECT_NUMERICAL", solution_id="wrong000",
              error="seed 0: output 0 is off: L2-relative error 0.544 exceeds rtol 2e-05"),
        _slot(1, 0, 1, 0, INITIAL, "RUNTIME_ERROR", solution_id="crash000", error=NAME_ERROR_LOG),
        _slot(1, 0, 1, 1, INITIAL, "RUNTIME_ERROR", solution_id="crash001", error=NAME_ERROR_LOG),
        _slot(2, 0, 0, 0, CHILD, solution_id="flat0000", source_hash="h2", latency_ms=0.75,
              parent_speedup=1.01, speedup_ci_low=0.97, speedup_ci_high=1.05,
              speedup_measured="same_rounds"),
        _slot(2, 0, 0, 1, CHILD, "LLM_FAILED", error="executor: timed out"),
        _slot(2, 0, 2, 0, CHILD, solution_id=GRANDCHILD, source_hash="h3", latency_ms=0.5,
              parent_speedup=1.5, speedup_ci_low=1.4, speedup_ci_high=1.6,
              speedup_measured="same_rounds"),
    ]  # fmt: skip
    plans: dict[str, list[str | None]] = {
        "1/0": ["Vectorize the row loop: one ufunc pass in float32.", "Alias numpy as np2."],
        "2/0": ["Use out= to reuse one buffer.", None, "Fuse exp and divide in place."],
    }
    return slots, plans


def test_lineage_follows_parent_ids_to_the_initial_kernel() -> None:
    slots, _ = _two_generations()
    assert lineage(GRANDCHILD, slots) == [GRANDCHILD, CHILD, INITIAL]
    assert lineage(INITIAL, slots) == [INITIAL]
    # An attempt that returned its parent unchanged is no generation (and no cycle).
    looped = [*slots, _slot(3, 0, 0, 0, CHILD, solution_id=CHILD, latency_ms=0.7)]
    assert lineage(CHILD, looped) == [CHILD, INITIAL]


def test_a_two_generation_history_shows_own_plans_first_then_the_ancestors() -> None:
    slots, plans = _two_generations()
    text = lineage_history(CHILD, slots, plans)
    lines = text.splitlines()
    # The child's own plans (iteration 2) first, then the plan that produced it, then the rest.
    assert lines[0].startswith("1. Iteration 2, applied to this kernel (child111): Use out=")
    assert "1.01x [0.97, 1.05] vs parent (no clear change)" in lines[1]
    assert "not tried (the LLM call failed)" in lines[1]
    assert lines[2].startswith("2. Iteration 2, applied to this kernel (child111): Fuse exp")
    assert "1.50x [1.40, 1.60] vs parent (faster)" in lines[3]
    assert lines[4].startswith(
        "3. Iteration 1, applied to its parent init0000; it produced this kernel: Vectorize"
    )
    assert "1.31x [1.27, 1.35] vs parent (faster)" in lines[5]
    assert "INCORRECT_NUMERICAL: seed 0: output 0 is off: L2-relative error 0.544" in lines[5]
    assert lines[6].startswith("4. Iteration 1, applied to its parent init0000: Alias numpy")
    assert lines[7] == (
        "   Outcome: RUNTIME_ERROR: NameError: name 'np2' is not defined (2 attempts)"
    )
    assert len(lines) == 8
    assert "/tmp/accelopt" not in text


def test_the_grandchild_sees_its_ancestors_by_generation() -> None:
    slots, plans = _two_generations()
    text = lineage_history(GRANDCHILD, slots, plans)
    first = text.splitlines()[0]
    assert first.startswith("1. Iteration 2, applied to its parent child111; it produced this")
    assert "its ancestor init0000, 2 generations up; it produced child111" in text


def test_history_before_an_iteration_leaves_that_iteration_out() -> None:
    slots, plans = _two_generations()
    text = lineage_history(CHILD, slots, plans, before_iteration=2)
    assert "Iteration 2" not in text and "Iteration 1" in text
    assert lineage_history(INITIAL, slots, plans, before_iteration=1) == NO_HISTORY
    assert lineage_history("unknown", slots, plans) == NO_HISTORY


def test_history_is_bounded_in_plans_and_characters() -> None:
    long_plan = "Tile the loop " + "and tune it " * 200
    slots = [
        _slot(1, 0, p, 0, INITIAL, solution_id=f"s{p}", source_hash=f"h{p}", latency_ms=1.0)
        for p in range(20)
    ]
    plans: dict[str, list[str | None]] = {"1/0": [f"{long_plan} #{p}" for p in range(20)]}
    text = lineage_history(INITIAL, slots, plans, max_plans=5)
    assert text.count("Iteration 1, applied") == 5
    assert text.endswith("(15 older plan(s) on this lineage not shown)")
    assert all(len(line) < 400 for line in text.splitlines())  # plan excerpts are cut
    short = lineage_history(INITIAL, slots, plans, max_chars=900)
    assert short.count("Iteration 1, applied") == 2
    assert len(short) < 1000


def test_outcome_words_for_flags_missing_intervals_and_no_code() -> None:
    flagged = _slot(1, 0, 0, 0, INITIAL, solution_id="f", latency_ms=0.1,
                    parent_speedup=10.0, flags=["constant_output"])  # fmt: skip
    assert attempt_outcome(flagged) == (
        "10.0x vs parent (faster, no interval) [untrusted: constant_output]"
    )
    no_code = _slot(1, 0, 0, 1, INITIAL, "NO_CODE", error="no fenced code block in the reply")
    assert attempt_outcome(no_code) == "NO_CODE: no fenced code block in the reply"
    assert short_error(None) == "(no message)"
    assert short_error("timed out after 4 s during timing\nstderr (tail):\n...") == (
        "timed out after 4 s during timing"
    )


def test_head_to_head_verdicts_on_the_lineage_follow_the_plans() -> None:
    slots, plans = _two_generations()
    on_lineage = TieDecision(
        iteration=1,
        place="first",
        slot=1,
        placed=CHILD,
        challenger="other999dddd",
        head_to_head=HeadToHead(
            verdict="faster", faster=CHILD, slower="other999dddd", speedup=1.04,
            ci_low=1.01, ci_high=1.07,
        ),
        kept=CHILD,
        reason="faster head-to-head",
    )  # fmt: skip
    elsewhere = on_lineage.model_copy(
        update={"placed": "far00000", "challenger": "far11111", "kept": "far00000"}
    )
    later = on_lineage.model_copy(update={"iteration": 2})
    text = lineage_history(
        CHILD, slots, plans, before_iteration=2, ties=[elsewhere, on_lineage, later]
    )
    lines = text.splitlines()
    assert lines[-2] == "Head-to-head re-measures of ties on this lineage (newest first):"
    assert lines[-1] == f"- {on_lineage.describe()}"
    assert "head-to-head: child111 faster 1.040x [1.010, 1.070]" in lines[-1]
    assert "far00000" not in text  # another lineage's tie
    # A kernel with no plan tried yet still sees its lineage's ties.
    only = lineage_history(CHILD, [], {}, ties=[on_lineage])
    assert only.startswith("Head-to-head re-measures") and only != NO_HISTORY
