"""The summarizer role: a slow/fast pair in, one memory item (or "nothing changed") out.

The summarizer is shown the lessons already in memory, numbered (prompts.describe_memory). Its
reply may say that its lesson refines one of them ("refines": N: the new lesson replaces item
N, experience.py takes N out of the working memory) or that one of them already says it
("already_known": N: nothing is stored). Each text is capped (TITLE_CHARS, STRATEGY_CHARS,
PSEUDOCODE_CHARS, told to the model in the prompt): longer text is cut at a word boundary
here, so a lesson never crowds the planner's prompt."""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, Field, ValidationError, field_validator

from accelopt_mcp.llm import ChatMessage, LlmClient, MalformedReply

TITLE_CHARS = 100
STRATEGY_CHARS = 600
PSEUDOCODE_CHARS = 600
"""The longest title, strategy and pseudocode a lesson keeps (the prompt states them)."""


def cap_text(text: str, limit: int) -> str:
    """`text` when it fits in `limit` characters, else cut at the last word boundary before
    the limit, with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "\u2026"


class Summary(BaseModel):
    title: str = Field(min_length=1)
    """At most TITLE_CHARS (cut to it)."""
    strategy: str = Field(min_length=1)
    """At most STRATEGY_CHARS (cut to it)."""
    pseudocode: str = ""
    """At most PSEUDOCODE_CHARS (cut to it)."""
    refines: int | None = Field(default=None, ge=1)
    """The number of the memory item (as the prompt listed them, from 1) this lesson replaces:
    it sharpens, corrects or merges with it."""

    @field_validator("title", "strategy", mode="before")
    @classmethod
    def _stripped(cls, value: object) -> object:
        # The same rule as ExperienceIn: a blank title is a malformed reply (asked again),
        # not a memory item that the store would refuse mid-run.
        return value.strip() if isinstance(value, str) else value

    @field_validator("refines", mode="before")
    @classmethod
    def _number_or_none(cls, value: object) -> object:
        # "refines": null, 0 or "" means none; a number given as text is read as one.
        if value in (None, "", 0, False):
            return None
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
        return value

    def capped(self) -> Summary:
        """The summary with each text cut to its cap."""
        return self.model_copy(
            update={
                "title": cap_text(" ".join(self.title.split()), TITLE_CHARS),
                "strategy": cap_text(self.strategy, STRATEGY_CHARS),
                "pseudocode": cap_text(self.pseudocode, PSEUDOCODE_CHARS),
            }
        )


class NothingChanged(BaseModel):
    """The summarizer found no difference that explains the speed difference, or (`known`) a
    lesson already in memory says it."""

    known: int | None = None
    """The number of the memory item that already holds the lesson ("already_known")."""


def parse_summary(text: str) -> Summary | NothingChanged:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except (json.JSONDecodeError, RecursionError):  # nesting beyond Python's stack
            continue
        if not isinstance(value, dict):
            continue
        if value.get("nothing_changed") is True:
            return NothingChanged()
        known = value.get("already_known")
        if isinstance(known, int) and not isinstance(known, bool) and known >= 1:
            return NothingChanged(known=known)
        if isinstance(value.get("pseudocode"), list):
            value["pseudocode"] = "\n".join(str(line) for line in value["pseudocode"])
        try:
            return Summary.model_validate(value).capped()
        except ValidationError:
            continue
    raise MalformedReply(
        'no JSON object with "title" and "strategy" (or {"nothing_changed": true}, or '
        '{"already_known": N}) in the reply',
        text,
    )


async def summarize_pair(
    client: LlmClient, messages: list[ChatMessage], *, purpose: str | None = None
) -> Summary | NothingChanged:
    """purpose: the ledger's label for the call."""
    summary, _ = await client.complete_parsed(
        "summarizer", messages, parse_summary, tries=2, purpose=purpose
    )
    return summary
