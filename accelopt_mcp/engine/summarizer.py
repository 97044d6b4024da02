"""The summarizer role: a slow/fast pair in, one memory item (or "nothing changed") out."""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, Field, ValidationError, field_validator

from accelopt_mcp.llm import ChatMessage, LlmClient, MalformedReply


class Summary(BaseModel):
    title: str = Field(min_length=1, max_length=300)
    strategy: str = Field(min_length=1)
    pseudocode: str = ""

    @field_validator("title", "strategy", mode="before")
    @classmethod
    def _stripped(cls, value: object) -> object:
        # The same rule as ExperienceIn: a blank title is a malformed reply (asked again),
        # not a memory item that the store would refuse mid-run.
        return value.strip() if isinstance(value, str) else value


class NothingChanged(BaseModel):
    """The summarizer found no difference that explains the speed difference."""


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
        if isinstance(value.get("pseudocode"), list):
            value["pseudocode"] = "\n".join(str(line) for line in value["pseudocode"])
        try:
            return Summary.model_validate(value)
        except ValidationError:
            continue
    raise MalformedReply(
        'no JSON object with "title" and "strategy" (or {"nothing_changed": true}) in the reply',
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
