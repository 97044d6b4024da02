"""LLM-call tools: what a run asked its models and what they answered (the ledger's audit
trail: one row per attempt, its prompt and reply stored redacted)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from accelopt_mcp.mcp_tools import ids
from accelopt_mcp.mcp_tools.app import NotFoundError
from accelopt_mcp.mcp_tools.state import ToolContext, state_of
from accelopt_mcp.mcp_tools.views import (
    DEFAULT_PAGE,
    MAX_PAGE,
    PageInfo,
    TextSlice,
    Timestamp,
    View,
    cut,
    page_info,
    redacted_tail,
)
from accelopt_mcp.models import LlmCallStatus, from_record
from accelopt_mcp.store.base import LlmCallRecord

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
TEXT_CHARS = 8_000
"""Characters of each message and of the reply per get_llm_call answer, by default."""


class LlmCallSummary(View):
    id: str
    """Pass it (or its first 8+ characters) to get_llm_call."""
    run_id: str | None = None
    role: str
    purpose: str | None = None
    """What the engine asked for, e.g. "plan 2/0", "attempt 2/0/1/1", "repair 2/0/1/1#1"."""
    model: str
    status: LlmCallStatus
    """in_flight (waiting on the reply), ok, failed, interrupted (its worker died waiting)."""
    tokens_in: int
    """Estimated (characters / 4) while in flight or interrupted."""
    tokens_out: int
    cost_usd: float
    latency_s: float
    error: str | None = None
    started_at: Timestamp = None
    finished_at: Timestamp = None


def call_summary(call: LlmCallRecord) -> LlmCallSummary:
    return from_record(
        LlmCallSummary,
        call,
        error=redacted_tail(call.error),
        started_at=call.started_at or call.created_at,
    )


class LlmCallPage(View):
    run_id: str
    calls: list[LlmCallSummary]
    """In the order they started, oldest first."""
    page: PageInfo


class MessageSlice(View):
    role: str
    content: TextSlice


class LlmCallDetail(View):
    call: LlmCallSummary
    messages: list[MessageSlice] | None = None
    """The prompt, each message sliced alike (page with text_offset); null for a call stored
    before prompts were kept."""
    reply: TextSlice | None = None
    """Null while in flight, and for a call that failed or was interrupted."""


def list_llm_calls(
    ctx: ToolContext,
    run_id: Annotated[str, Field(description="Run id or 8+ prefix (list_jobs shows runs).")],
    role: Annotated[
        str | None, Field(description="Only this role: planner, executor or summarizer.")
    ] = None,
    limit: Annotated[
        int, Field(ge=1, le=MAX_PAGE, description=f"Calls per page (max {MAX_PAGE}).")
    ] = DEFAULT_PAGE,
    offset: Annotated[int, Field(ge=0, description="Skip this many calls (next_offset).")] = 0,
) -> LlmCallPage:
    """A run's LLM calls, oldest first: role, purpose, model, status, tokens, cost, latency,
    error. get_llm_call shows one call's prompt and reply."""
    store = state_of(ctx).store()
    run_id = ids.run_id(store, run_id)
    totals = store.llm_totals(run_id)
    total = sum(t.calls for t in totals if role is None or t.role == role)
    found = store.list_llm_calls(run_id, role=role, limit=limit, offset=offset)
    return LlmCallPage(
        run_id=run_id,
        calls=[call_summary(c) for c in found],
        page=page_info(total, offset, limit),
    )


def get_llm_call(
    ctx: ToolContext,
    call_id: Annotated[
        str, Field(description="Call id from list_llm_calls, or its first 8+ characters.")
    ],
    text_offset: Annotated[
        int, Field(ge=0, description="Start of each text slice (from a next_offset).")
    ] = 0,
    text_limit: Annotated[
        int, Field(ge=1, le=30_000, description="Characters per message and of the reply.")
    ] = TEXT_CHARS,
) -> LlmCallDetail:
    """One LLM call in full: its figures, the prompt (each message) and the reply, as stored
    (secrets masked). Long texts come in slices: pass next_offset as text_offset."""
    found = state_of(ctx).store().get_llm_call(call_id)
    if found is None:
        raise NotFoundError(f"no LLM call with id {call_id!r}; list_llm_calls gives the ids")
    messages = None
    if found.messages is not None:
        messages = [
            MessageSlice(role=m.role, content=cut(m.content, text_offset, text_limit))
            for m in found.messages
        ]
    return LlmCallDetail(
        call=call_summary(found),
        messages=messages,
        reply=cut(found.reply, text_offset, text_limit) if found.reply is not None else None,
    )


TOOLS = [
    Tool.from_function(list_llm_calls, annotations=READ_ONLY),
    Tool.from_function(get_llm_call, annotations=READ_ONLY),
]
