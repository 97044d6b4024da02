"""The fixture script a stand-in server plays back: per role, a queue of replies and faults.

Example (JSON):

    {
      "api_key": "test-key",
      "latency_s": 0.05,
      "roles": {
        "planner": {
          "marker": "ROLE: planner",
          "replies": [
            {"kind": "status", "status": 429, "retry_after": "0.2"},
            {"kind": "text", "text": "[\\"tile the loop\\"]"}
          ]
        },
        "*": {"replies": [{"kind": "text", "text": "ok"}], "when_exhausted": "repeat_last"}
      }
    }

A request goes to the role whose name equals its `model`, else to the first role whose
`marker` occurs in its system prompt, else to the role "*".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    latency_s: float | None = Field(default=None, ge=0)
    """Overrides the script's latency for this reply."""


class TextReply(_Reply):
    kind: Literal["text"] = "text"
    text: str
    finish_reason: str = "stop"
    prompt_tokens: int | None = None
    """None: the word count of every message in the request."""
    completion_tokens: int | None = None
    """None: the word count of `text`."""
    omit_usage: bool = False


class StatusFault(_Reply):
    kind: Literal["status"]
    status: int = Field(ge=400, le=599)
    retry_after: str | None = None
    """Sent as the Retry-After header, as is."""
    message: str = "stand-in fault"


class DelayFault(_Reply):
    """Answers only after `seconds`, longer than the client's timeout."""

    kind: Literal["delay"]
    seconds: float = Field(gt=0)
    text: str = "too late"


class GarbageFault(_Reply):
    kind: Literal["garbage"]
    body: str = "<html>502 upstream hiccup</html>"
    content_type: str = "application/json"


class EmptyChoicesFault(_Reply):
    kind: Literal["empty_choices"]


def _reply_kind(value: Any) -> str:
    """A reply without `kind` is a text reply."""
    if isinstance(value, dict):
        return str(value.get("kind", "text"))
    return str(getattr(value, "kind", "text"))


Reply = Annotated[
    Annotated[TextReply, Tag("text")]
    | Annotated[StatusFault, Tag("status")]
    | Annotated[DelayFault, Tag("delay")]
    | Annotated[GarbageFault, Tag("garbage")]
    | Annotated[EmptyChoicesFault, Tag("empty_choices")],
    Discriminator(_reply_kind),
]


class RoleScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    marker: str | None = None
    replies: list[Reply] = Field(default_factory=list)
    when_exhausted: Literal["error", "repeat_last"] = "error"


class StandinScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_key: str = "standin-test-key"
    latency_s: float = Field(default=0.0, ge=0)
    roles: dict[str, RoleScript] = Field(default_factory=dict)
    echo_key_in_errors: bool = False
    """Put the received Authorization header in error bodies, as careless proxies do; lets a
    test check that the client scrubs it."""

    @classmethod
    def load(cls, path: Path) -> StandinScript:
        return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
