"""The ledger rows of a chat call's attempts: one written "in_flight" before a request is sent
(the redacted prompt and its estimate), then updated under the same id with how it ended
("ok", "failed", or "interrupted" when the attempt was cancelled while it waited).

`Attempt` is one request as the ledger and the budget follow it; `AttemptLedger` writes its
rows through the caller's callback (the kernel database's, in a run), off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from accelopt_mcp.llm.config import ModelConfig
from accelopt_mcp.llm.errors import Outcome, short_error
from accelopt_mcp.llm.messages import ChatMessage
from accelopt_mcp.models import LlmCallIn, LlmCallStatus, LlmMessage
from accelopt_mcp.redaction import mask_secrets

log = logging.getLogger(__name__)

LedgerFn = Callable[[LlmCallIn], None]


@dataclass
class Attempt:
    """One request as the ledger and the budget follow it."""

    role: str
    config: ModelConfig
    purpose: str | None
    api_key: str
    prompt_tokens: int
    """Estimated."""
    prompt_cost_usd: float
    """Of the estimated prompt tokens."""
    reserved_prompt_tokens: int = 0
    """The prompt as the budget reserves it (on the high side)."""
    max_output: int | None = None
    """The output limit sent with the request (None: the server's own)."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))


class AttemptLedger:
    """Writes the rows of one client's attempts; with no callback, writes nothing."""

    def __init__(self, ledger: LedgerFn | None, run_id: str | None) -> None:
        self._ledger = ledger
        self.run_id = run_id

    def _row(self, call: Attempt, status: LlmCallStatus, **fields: object) -> LlmCallIn:
        return LlmCallIn.model_validate(
            {
                "id": call.id,
                "run_id": self.run_id,
                "role": call.role,
                "model": call.config.model,
                "status": status,
                "purpose": call.purpose,
                "started_at": call.started_at,
                **fields,
            }
        )

    async def record_start(self, call: Attempt, chat: list[ChatMessage]) -> None:
        """The in-flight row, before the request is sent: the prompt and its estimate."""
        ledger = self._ledger
        if ledger is None:
            return
        secrets = [call.api_key]

        def write() -> None:
            ledger(
                self._row(
                    call,
                    "in_flight",
                    tokens_in=call.prompt_tokens,
                    cost_usd=call.prompt_cost_usd,
                    messages=[
                        LlmMessage(role=m.role, content=mask_secrets(m.content, secrets))
                        for m in chat
                    ],
                )
            )

        # Redacting a long prompt and a database round trip must not stall the event loop.
        await asyncio.to_thread(write)

    async def record(self, call: Attempt, outcome: Outcome, latency: float) -> None:
        """The attempt's outcome, on the row written before it was sent."""
        ledger = self._ledger
        if ledger is None:
            return
        reply = outcome.reply
        finished_at = datetime.now(UTC)
        billed = reply is None and outcome.prompt_billed
        tokens_in = reply.tokens_in if reply else (call.prompt_tokens if billed else 0)
        cost_usd = reply.cost_usd if reply else (call.prompt_cost_usd if billed else 0.0)

        def write() -> None:
            ledger(
                self._row(
                    call,
                    "ok" if reply is not None else "failed",
                    tokens_in=tokens_in,
                    tokens_out=reply.tokens_out if reply else 0,
                    latency_s=latency,
                    cost_usd=cost_usd,
                    error=outcome.error if reply is None else None,
                    finished_at=finished_at,
                    reply=mask_secrets(reply.text, [call.api_key]) if reply is not None else None,
                )
            )

        await asyncio.to_thread(write)

    def record_unfinished(self, call: Attempt, latency: float, exc: BaseException) -> None:
        """Best effort, while the attempt's exception propagates: written here and now
        (awaiting a thread could itself be cancelled), never raising over the exception."""
        if self._ledger is None:
            return
        estimate = "tokens and cost are the prompt's estimate"
        if isinstance(exc, Exception):
            status: LlmCallStatus = "failed"
            error = short_error(f"{type(exc).__name__}: {exc}; {estimate}", [call.api_key])
        else:
            status = "interrupted"
            error = f"interrupted ({type(exc).__name__}) before the reply came; {estimate}"
        row = self._row(
            call,
            status,
            tokens_in=call.prompt_tokens,
            cost_usd=call.prompt_cost_usd,
            latency_s=latency,
            error=error,
            finished_at=datetime.now(UTC),
        )
        try:
            self._ledger(row)
        except Exception as exc:
            log.warning("could not record the interrupted %s call %s: %s", call.role, call.id, exc)
