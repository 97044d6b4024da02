"""Reading the summarizer's reply: an item, "nothing changed", or a malformed reply."""

from __future__ import annotations

import pytest

from accelopt_mcp.engine.summarizer import NothingChanged, Summary, parse_summary
from accelopt_mcp.llm import MalformedReply


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
