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


KERNEL = "import numpy as np\n\n\ndef kernel(x):\n    return x / (1.0 + np.exp(-x))\n"
USAGE = "x = np.random.rand(512, 1024).astype(np.float32)\nprint(kernel(x).shape)\n"


def test_the_block_that_defines_the_entry_wins_over_a_later_usage_snippet() -> None:
    reply = (
        "The loop is gone; the whole array goes through one ufunc chain.\n\n"
        f"```python\n{KERNEL}```\n\nYou can try it like this:\n\n```python\n{USAGE}```\n"
    )
    assert extract_code_block(reply, entry_symbol="kernel") == KERNEL
    # Without the entry symbol the old rule stands: the last block.
    assert extract_code_block(reply) == USAGE


def test_of_two_defining_blocks_the_last_one_wins() -> None:
    draft = KERNEL.replace("1.0", "np.float32(1.0)")
    reply = (
        f"A first version:\n```python\n{KERNEL}```\nOn second thought, stay in float32:\n"
        f"```py\n{draft}```\nAnd a check:\n```python\n{USAGE}```"
    )
    assert extract_code_block(reply, entry_symbol="kernel") == draft


@pytest.mark.parametrize(
    "definition",
    [
        "@nki.jit\ndef kernel(x):\n    return x\n",
        "async def kernel(x):\n    return x\n",
        "class kernel:\n    pass\n",
        "kernel = _impl\n",
        "kernel: Callable[..., Any] = _impl\n",
    ],
)
def test_what_counts_as_defining_the_entry(definition: str) -> None:
    reply = f"```python\n{definition}```\n```python\nother = kernel\n```"
    assert extract_code_block(reply, entry_symbol="kernel") == definition


def test_calls_comparisons_and_nested_defs_do_not_define_the_entry() -> None:
    not_defining = [
        "y = kernel(x)\n",
        "if kernel == other:\n    pass\n",
        "def helper():\n    def kernel(x):\n        return x\n",
        "my_kernel = 1\n",
    ]
    reply = "".join(f"```python\n{body}```\n" for body in not_defining)
    # No block defines it: the last block in a wanted language, as before.
    assert extract_code_block(reply, entry_symbol="kernel") == not_defining[-1]


def test_cuda_entry_definitions_are_found() -> None:
    launcher = "torch::Tensor run(torch::Tensor x) {\n  return x;\n}\n"
    reply = f"```cuda\n{launcher}```\nCall it:\n```cpp\nauto y = run(x);\nreturn run(x);\n```"
    assert extract_code_block(reply, ("cuda", "cpp"), entry_symbol="run") == launcher


def test_a_usage_snippet_cut_off_after_the_kernel_loses_nothing() -> None:
    reply = f"```python\n{KERNEL}```\nTry:\n```python\nx = np.ones((4, 4))\nprint(ker"
    assert extract_code_block(reply, entry_symbol="kernel") == KERNEL
    # A cut-off block that defines the entry is the kernel cut off: malformed.
    cut_kernel = f"```python\n{USAGE}```\n```python\ndef kernel(x):\n    return"
    with pytest.raises(MalformedReply, match="never closed"):
        extract_code_block(cut_kernel, entry_symbol="kernel")
    with pytest.raises(MalformedReply, match="never closed"):
        extract_code_block(reply)
