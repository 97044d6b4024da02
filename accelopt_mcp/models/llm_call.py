"""LlmCallIn: one LLM request as the cost ledger keeps it (tokens, latency, cost, outcome)."""

from __future__ import annotations

from pydantic import BaseModel


class LlmCallIn(BaseModel):
    run_id: str | None = None
    role: str
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    ok: bool = True
    error: str | None = None
