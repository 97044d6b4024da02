"""Pull the useful part out of a model's reply: the kernel's code block, or a JSON list of plans.

Models wrap answers in prose and fences in ways no prompt fully controls, so both helpers are
tolerant of what surrounds the answer and precise about what is wrong when there is none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_FENCE_OPEN = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+.#-]*)[^\n`]*$")
_SNIPPET_CHARS = 160
_LIST_KEYS = ("plans", "items", "list", "results")


class MalformedReply(ValueError):
    """The reply does not hold what was asked for; count it as a failed attempt."""

    def __init__(self, message: str, text: str) -> None:
        snippet = " ".join(text.split())[:_SNIPPET_CHARS]
        super().__init__(f"{message} (reply begins: {snippet!r})")
        self.reason = message
        self.reply: Any = None
        """The LlmReply that was rejected, when the client's complete_parsed raised this."""


@dataclass(frozen=True)
class _Block:
    lang: str
    body: str
    closed: bool


def _fenced_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opener = _FENCE_OPEN.match(lines[index])
        if opener is None:
            index += 1
            continue
        fence = opener["fence"]
        closer = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        index += 1
        while index < len(lines) and not closer.match(lines[index]):
            body.append(lines[index])
            index += 1
        closed = index < len(lines)
        blocks.append(_Block(lang=opener["lang"].lower(), body="\n".join(body), closed=closed))
        index += 1
    return blocks


_C_LIKE = frozenset({"cuda", "cu", "cpp", "c++", "c", "h", "hpp"})


def _defines(block: _Block, symbol: str) -> bool:
    """Whether the block defines `symbol` at its top level: `def symbol(` (decorated or not,
    async too), `class symbol`, `symbol = ...`; in C-like blocks a function definition or
    declaration with a return type before the name."""
    name = re.escape(symbol)
    if block.lang in _C_LIKE:
        pattern = rf"^[ \t]*(?!return\b)(?:[\w:<>,*&]+[ \t]+)+[*&]*{name}[ \t]*\("
    else:
        pattern = (
            rf"^(?:(?:async[ \t]+)?def[ \t]+{name}[ \t]*\(|class[ \t]+{name}\b"
            rf"|{name}[ \t]*(?::[^=\n]*)?=(?!=))"
        )
    return re.search(pattern, block.body, re.MULTILINE) is not None


def extract_code_block(
    text: str,
    languages: tuple[str, ...] = ("python", "py"),
    entry_symbol: str | None = None,
) -> str:
    """The kernel's fenced block: among the blocks tagged with one of `languages` (or left
    untagged), the last that defines `entry_symbol` at its top level (see `_defines`); when
    none does (or no entry_symbol is given), the last of them. Prose and other blocks around
    it (a usage snippet after the kernel, an earlier draft) are ignored.

    A reply whose last block was never closed was cut off: that is a malformed reply, unless
    an earlier closed block defines the entry and the cut-off one does not (a usage snippet
    cut off after the kernel)."""
    wanted = {language.lower() for language in languages}
    blocks = _fenced_blocks(text)
    candidates = [block for block in blocks if block.lang in wanted or not block.lang]
    defining = (
        [block for block in candidates if _defines(block, entry_symbol)] if entry_symbol else []
    )
    if blocks and not blocks[-1].closed:
        # A usage snippet cut off after a complete kernel loses nothing; a kernel cut off does.
        rescued = (
            entry_symbol is not None
            and not _defines(blocks[-1], entry_symbol)
            and any(block.closed for block in defining)
        )
        if not rescued:
            raise MalformedReply(
                "the last code block is never closed; the reply was probably cut off by max_tokens",
                text,
            )
    defining = [block for block in defining if block.closed]
    candidates = [block for block in candidates if block.closed]
    if not candidates:
        if blocks:
            found = ", ".join(sorted({block.lang or "untagged" for block in blocks}))
            raise MalformedReply(
                f"no code block in {'/'.join(languages)}; the reply only has blocks in {found}",
                text,
            )
        raise MalformedReply(f"no fenced code block (```{languages[0]} ... ```) in the reply", text)
    chosen = defining[-1] if defining else candidates[-1]
    if not chosen.body.strip():
        raise MalformedReply("the last code block is empty", text)
    return chosen.body + "\n"


def parse_json_list(text: str) -> list[Any]:
    """A JSON list from the reply: a fenced ```json block, the whole reply, a {"plans": [...]}
    object, or the longest list embedded in prose."""
    candidates = [
        block.body for block in reversed(_fenced_blocks(text)) if block.lang in ("json", "")
    ]
    candidates.append(text.strip())
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, RecursionError):  # nesting beyond Python's stack
            continue
        found = _as_list(value)
        if found is not None:
            return found
    embedded = _longest_embedded_list(text)
    if embedded is not None:
        return embedded
    raise MalformedReply(
        'no JSON list in the reply; expected e.g. ["first plan", "second plan"] or '
        '{"plans": [...]}',
        text,
    )


def _as_list(value: Any) -> list[Any] | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        for key in _LIST_KEYS:
            if isinstance(value.get(key), list):
                return list(value[key])
        lists = [item for item in value.values() if isinstance(item, list)]
        if len(lists) == 1:
            return list(lists[0])
    return None


def _longest_embedded_list(text: str) -> list[Any] | None:
    decoder = json.JSONDecoder()
    best: tuple[int, list[Any]] | None = None
    for match in re.finditer(r"[\[{]", text):
        try:
            value, end = decoder.raw_decode(text, match.start())
        except (json.JSONDecodeError, RecursionError):
            continue
        found = _as_list(value)
        span = end - match.start()
        if found is not None and (best is None or span > best[0]):
            best = (span, found)
    return best[1] if best is not None else None
