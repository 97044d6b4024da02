"""What a chat is made of (`ChatMessage`, `LlmReply`) and how big a prompt is in tokens before a
server has counted it: `estimate_tokens` (for the ledger) and `reserved_prompt_tokens` (the
budget's high-side hold)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel

CHARS_PER_TOKEN = 4
"""The estimate of tokens from characters, where the server has not counted them (yet)."""
RESERVE_CHARS_PER_TOKEN = 2.5
"""What a reservation assumes of a prompt: code and JSON run at 3-4 characters a token in
current tokenizers, so a prompt rarely holds more tokens than characters / 2.5."""
MESSAGE_OVERHEAD_TOKENS = 8
"""Tokens a chat template adds around each message (role markers), reserved on top."""


def estimate_tokens(chars: int) -> int:
    """Tokens in `chars` characters of text, roughly (characters / 4, at least 1)."""
    return max(1, chars // CHARS_PER_TOKEN)


def reserved_prompt_tokens(chars: int, messages: int) -> int:
    """What the budget holds for a prompt of `chars` characters in `messages` messages: the
    high side of its tokens (RESERVE_CHARS_PER_TOKEN, plus each message's template tokens)."""
    return math.ceil(chars / RESERVE_CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS * messages


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class LlmReply(BaseModel):
    text: str
    tokens_in: int
    tokens_out: int
    latency_s: float
    """Of the successful attempt only."""
    cost_usd: float
    model: str
    finish_reason: str | None = None
    """"length" means max_tokens cut the reply short."""
    attempts: int = 1
    usage_estimated: bool = False
    """True when the server reported no usage and tokens were estimated from characters."""
    call_id: str | None = None
    """The ledger id of the attempt that gave this reply."""


def as_message(message: ChatMessage | Mapping[str, str]) -> ChatMessage:
    return (
        message if isinstance(message, ChatMessage) else ChatMessage.model_validate(dict(message))
    )
