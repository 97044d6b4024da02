"""Reading the summarizer's reply: an item, "nothing changed", or a malformed reply."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import cast

import pytest

from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.context import RunContext
from accelopt_mcp.engine.experience import _plan_of, _refined_item
from accelopt_mcp.engine.selection import AttemptRecord
from accelopt_mcp.engine.summarizer import (
    PSEUDOCODE_CHARS,
    STRATEGY_CHARS,
    TITLE_CHARS,
    NothingChanged,
    Summary,
    cap_text,
    parse_summary,
)
from accelopt_mcp.llm import MalformedReply
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import ExperienceRecord, KernelStore


def test_an_item_is_found_in_prose_and_pseudocode_lines_are_joined() -> None:
    reply = (
        "Here is the lesson:\n"
        '{"title": "Vectorize rows", "strategy": "Replace the row loop with one ufunc.",'
        ' "pseudocode": ["y = x / (1 + exp(-x))", "return y"]}'
    )
    summary = parse_summary(reply)
    assert isinstance(summary, Summary)
    assert summary.title == "Vectorize rows"
    assert summary.pseudocode == "y = x / (1 + exp(-x))\nreturn y"


def test_nothing_changed_is_its_own_answer() -> None:
    assert isinstance(parse_summary('{"nothing_changed": true}'), NothingChanged)


@pytest.mark.parametrize(
    "reply",
    [
        "no json here",
        '{"title": ""}',
        '{"a": ' * 5000,
        # Blank after stripping: the store would refuse it as a memory item mid-run.
        '{"title": "   ", "strategy": "use a ufunc"}',
        '{"title": "Vectorize", "strategy": "\\n\\t "}',
    ],
)
def test_a_reply_without_an_item_is_malformed_not_a_crash(reply: str) -> None:
    with pytest.raises(MalformedReply):
        parse_summary(reply)


def test_title_and_strategy_are_stored_stripped() -> None:
    summary = parse_summary('{"title": "  Vectorize rows ", "strategy": " one ufunc\\n"}')
    assert isinstance(summary, Summary)
    assert (summary.title, summary.strategy) == ("Vectorize rows", "one ufunc")


def test_the_plan_of_a_pair_comes_from_the_checkpoint_else_the_stored_kernel(
    store: KernelStore, silu_task: Task, silu_baseline: Solution
) -> None:
    store.upsert_definition(silu_task.definition)
    variant = silu_baseline.model_copy(deep=True)
    variant.name = "variant"
    variant.sources[0].content += "\n# variant\n"
    stored_id = store.upsert_solution(variant, evolve_metadata={"plan": "plan from metadata"})
    checkpoint = Checkpoint(plans={"1/0": ["plan from checkpoint", None]})
    ctx = cast(
        RunContext,
        SimpleNamespace(
            checkpoints=SimpleNamespace(state=SimpleNamespace(checkpoint=checkpoint)),
            profiles=SimpleNamespace(store=store),
        ),
    )

    def attempt(plan_index: int, solution_id: str | None) -> AttemptRecord:
        return AttemptRecord(
            iteration=1, beam_index=0, plan_index=plan_index, attempt_index=0, parent_id="p",
            parent_latency_ms=1.0, status="PASSED", solution_id=solution_id,
        )  # fmt: skip

    assert asyncio.run(_plan_of(ctx, attempt(0, stored_id))) == "plan from checkpoint"
    assert asyncio.run(_plan_of(ctx, attempt(1, stored_id))) == "plan from metadata"
    assert asyncio.run(_plan_of(ctx, attempt(1, None))) is None


def test_a_lesson_is_cut_to_its_caps_and_may_name_the_item_it_refines() -> None:
    reply = json.dumps(
        {
            "title": "Vectorize " * 30,
            "strategy": "word " * 400,
            "pseudocode": "x" * 2000,
            "refines": "2",
        }
    )
    summary = parse_summary(reply)
    assert isinstance(summary, Summary)
    assert len(summary.title) <= TITLE_CHARS and summary.title.endswith("\u2026")
    assert len(summary.strategy) <= STRATEGY_CHARS and not summary.strategy.endswith(" \u2026")
    assert len(summary.pseudocode) <= PSEUDOCODE_CHARS
    assert summary.refines == 2
    plain = parse_summary('{"title": "t", "strategy": "s", "refines": null}')
    assert isinstance(plain, Summary) and plain.refines is None
    assert cap_text("short", 10) == "short"


def test_a_lesson_already_in_memory_is_its_own_answer() -> None:
    known = parse_summary('{"already_known": 3}')
    assert isinstance(known, NothingChanged) and known.known == 3
    # Not a number: no answer of that kind (and no item either).
    with pytest.raises(MalformedReply):
        parse_summary('{"already_known": "yes"}')


def test_only_a_listed_item_of_this_run_can_be_refined() -> None:
    shown = [
        ExperienceRecord(id="e1", definition_name="d", title="one", strategy="s", run_id="r1"),
        ExperienceRecord(id="e2", definition_name="d", title="two", strategy="s", run_id="r1"),
        # A seed: added by hand (no run), or learned by another run of the namespace.
        ExperienceRecord(id="e3", definition_name="d", title="by hand", strategy="s"),
        ExperienceRecord(id="e4", definition_name="d", title="other", strategy="s", run_id="r0"),
    ]
    summary = Summary(title="t", strategy="s", refines=2)
    assert _refined_item(summary, shown, "r1") is shown[1]
    assert _refined_item(summary.model_copy(update={"refines": 5}), shown, "r1") is None
    assert _refined_item(summary.model_copy(update={"refines": None}), shown, "r1") is None
    # A shared item stays in every run's memory, whatever the reply says.
    assert _refined_item(summary.model_copy(update={"refines": 3}), shown, "r1") is None
    assert _refined_item(summary.model_copy(update={"refines": 4}), shown, "r1") is None
