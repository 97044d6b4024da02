"""How a chat call fails: the client's errors (`LlmError`, `LlmCallFailed`), the outcome of one
attempt (`Outcome`), which HTTP failures retrying fixes and how long to wait before the next
try (the server's Retry-After, else exponential backoff with jitter), and `short_error`, the
redacted one-line text every error is written as.

The OpenAI SDK is imported for type checking only: its exceptions reach this module already
raised, and importing it costs every `accelopt` command half a second at start-up.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from accelopt_mcp.llm.config import ModelConfig
from accelopt_mcp.llm.messages import LlmReply
from accelopt_mcp.redaction import redact

if TYPE_CHECKING:
    import openai

# A server asking for a longer pause than this is treated as "give up", not waited on.
_MAX_RETRY_AFTER_S = 300.0
_MAX_ERROR_CHARS = 500


class LlmError(Exception):
    """Base of the client's errors; messages never hold a key."""


class LlmCallFailed(LlmError):
    """A call failed for good: retries ran out or the error is not one that retrying fixes."""

    def __init__(self, message: str, *, role: str, model: str, attempts: int, last_error: str):
        super().__init__(message)
        self.role = role
        self.model = model
        self.attempts = attempts
        self.last_error = last_error


@dataclass
class Outcome:
    """How one attempt ended: a reply, or an error, whether retrying may fix it and how long the
    server asked us to wait first."""

    reply: LlmReply | None = None
    error: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    prompt_billed: bool = False
    """No reply, but the server may have worked on (and billed) the request: a timeout. Its
    prompt estimate is counted, in the ledger and the budget."""


def status_outcome(exc: openai.APIStatusError, config: ModelConfig, secrets: list[str]) -> Outcome:
    status = exc.status_code
    message = re.sub(r"^Error code: \d+ - ", "", exc.message)
    detail = short_error(f"HTTP {status}: {message}", secrets)
    if status == 401 and not os.environ.get(config.api_key_env):
        # A local server is sent a placeholder when the variable is unset (client._api_key).
        detail += f" (the server wants a key: {config.api_key_env} is not set)"
    elif status == 401:
        detail += f" (the server rejected the key in {config.api_key_env})"
    retry_after = retry_after_s(exc.response.headers)
    if retry_after is not None and retry_after > _MAX_RETRY_AFTER_S:
        return Outcome(error=f"{detail} (server asks to wait {retry_after:.0f} s)", retryable=False)
    retryable = status in (408, 409, 429) or status >= 500
    return Outcome(error=detail, retryable=retryable, retry_after_s=retry_after)


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def backoff_s(config: ModelConfig, attempt: int, retry_after: float | None) -> float:
    """Exponential backoff with jitter, never shorter than the server's Retry-After."""
    exponential = min(config.retry_max_s, config.retry_base_s * 2.0 ** (attempt - 1))
    jittered = exponential * random.uniform(0.5, 1.0)
    return max(jittered, retry_after) if retry_after is not None else jittered


def short_error(text: str, secrets: Sequence[str] = ()) -> str:
    """A redacted, one-line, bounded error text for the ledger and exception messages."""
    flat = " ".join(redact(text, secrets).split())
    if len(flat) > _MAX_ERROR_CHARS:
        return flat[: _MAX_ERROR_CHARS - 3] + "..."
    return flat
