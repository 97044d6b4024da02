"""LlmCallIn: one LLM request as the ledger keeps it (tokens, latency, cost, outcome, and the
prompt and reply of the audit trail).

A call is written twice under one id: before the request is sent (status "in_flight", the
prompt, an estimate of its tokens) and when it ends ("ok" or "failed", the real tokens, cost,
latency and the reply). A row still "in_flight" when a later worker takes the run over belongs
to a worker that died waiting: the store turns it into "interrupted" and keeps its estimate,
since the provider billed the prompt all the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

LlmCallStatus = Literal["in_flight", "ok", "failed", "interrupted"]
LLM_CALL_STATUSES: tuple[LlmCallStatus, ...] = ("in_flight", "ok", "failed", "interrupted")


class LlmMessage(BaseModel):
    """One chat message of a prompt, as stored (redacted)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    role: str
    """system, user or assistant."""
    content: str


class LlmCallIn(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    id: str | None = None
    """The call's id, chosen by the client so that its in-flight row and its outcome are one
    row; None lets the store choose one. Storing a call whose id is stored already updates
    that row."""
    run_id: str | None = None
    role: str
    model: str
    tokens_in: int = 0
    """Prompt tokens: the server's count, or an estimate (characters / 4) while the call is
    in flight, once it is interrupted or timed out, or when the server reported no usage."""
    tokens_out: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    """For an in-flight or interrupted call, the estimated cost of its prompt."""
    ok: bool = True
    """Same as status == "ok" (kept for older readers and writers)."""
    error: str | None = None
    status: LlmCallStatus = "ok"
    """in_flight (sent, no reply yet), ok, failed, interrupted (its worker died waiting).
    Left out, it follows `ok`."""
    purpose: str | None = None
    """What the engine asked for, e.g. "plan 2/0", "attempt 2/0/1/1", "repair 2/0/1/1#1",
    "summary 2 slow->fast"."""
    started_at: datetime | None = None
    """When the request was sent."""
    finished_at: datetime | None = None
    """When its reply (or failure) came."""
    messages: list[LlmMessage] | None = None
    """The prompt. Stored redacted and compressed; listings leave it out (None), a single call
    read by id has it. None on an update keeps the stored one."""
    reply: str | None = None
    """The reply text, redacted; like `messages`, only on a call read by id."""

    @model_validator(mode="before")
    @classmethod
    def _status_and_ok_agree(cls, data: Any) -> Any:
        # Older writers (and traceset files) give only `ok`; newer ones give `status`.
        if isinstance(data, dict):
            data = dict(data)
            status = data.get("status")
            if status is None:
                data.pop("status", None)
                if "ok" in data and data["ok"] is not None:
                    data["status"] = "ok" if data["ok"] else "failed"
            else:
                data["ok"] = status == "ok"
        return data
