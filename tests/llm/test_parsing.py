"""Reply parsing: the final code block and JSON plan lists."""

from __future__ import annotations

import pytest

from accelopt_mcp.llm import MalformedReply, extract_code_block, parse_json_list


def test_the_last_python_block_wins() -> None:
    reply = (
        "First attempt:\n```python\ndef f():\n    return 1\n```\n"
        "Better:\n```python\ndef f():\n    return 2\n```\nDone."
    )
    assert extract_code_block(reply) == "def f():\n    return 2\n"


def test_other_languages_are_skipped_and_untagged_blocks_accepted() -> None:
    reply = "```py\nold = 1\n```\n```\nnew = 2\n```\n```bash\npython run.py\n```"
    assert extract_code_block(reply) == "new = 2\n"


def test_longer_fences_may_hold_triple_backticks() -> None:
    reply = '````python\ndoc = """\n```\n"""\n````'
    assert extract_code_block(reply) == 'doc = """\n```\n"""\n'


def test_nki_blocks_can_be_asked_for() -> None:
    reply = "```nki\n@nki.jit\ndef k(): ...\n```"
    assert extract_code_block(reply, ("nki", "python")).startswith("@nki.jit")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("just prose, no code", r"no fenced code block"),
        ("```json\n{}\n```", r"only has blocks in json"),
        ("```python\ndef f():\n    return", r"never closed.*max_tokens"),
        ("```python\n\n```", r"empty"),
    ],
)
def test_missing_code_is_a_malformed_reply(reply: str, expected: str) -> None:
    with pytest.raises(MalformedReply, match=expected) as info:
        extract_code_block(reply)
    assert "reply begins" in str(info.value)


@pytest.mark.parametrize(
    "reply",
    [
        '["unroll", "tile"]',
        'Here are my plans:\n```json\n["unroll", "tile"]\n```\nGood luck.',
        'Plans follow. ["unroll", "tile"] That is all.',
        '{"plans": ["unroll", "tile"]}',
        'I considered [1] option first.\n{"ideas": ["unroll", "tile"]}',
    ],
)
def test_json_plan_lists_are_found_in_prose_and_fences(reply: str) -> None:
    assert parse_json_list(reply) == ["unroll", "tile"]


def test_plan_objects_survive_parsing() -> None:
    reply = '```json\n[{"title": "tile", "steps": ["a", "b"]}]\n```'
    assert parse_json_list(reply) == [{"title": "tile", "steps": ["a", "b"]}]


@pytest.mark.parametrize("reply", ["no list here", '["unterminated", ', '{"plan": "one"}'])
def test_no_list_is_a_malformed_reply(reply: str) -> None:
    with pytest.raises(MalformedReply, match="no JSON list in the reply"):
        parse_json_list(reply)


@pytest.mark.parametrize(
    "reply",
    ["[" * 5000, "Plans:\n```json\n" + "[" * 5000 + "\n```", '["tile", ' + "[" * 5000],
)
def test_runaway_nesting_is_a_malformed_reply_not_a_recursion_error(reply: str) -> None:
    """A degenerate generation ("[[[[..." repeated) is a bad reply to ask again for, not an
    exception that ends the run."""
    with pytest.raises(MalformedReply, match="no JSON list in the reply"):
        parse_json_list(reply)


def test_a_list_after_runaway_nesting_is_still_found() -> None:
    assert parse_json_list("[" * 5000 + '\nsorry, the plans: ["tile", "unroll"]') == [
        "tile",
        "unroll",
    ]
