"""The executor role: one plan in, one complete kernel (or a recorded failure) out."""

from __future__ import annotations

from pydantic import BaseModel

from accelopt_mcp.llm import ChatMessage, LlmClient, MalformedReply, extract_code_block
from accelopt_mcp.models import Solution, SourceFile

_LANGUAGES = {
    "cpu": ("python", "py"),
    "nki": ("python", "py"),
    "gpu": ("python", "py", "triton", "cuda", "cpp", "c++"),
}


class ExecutorOutcome(BaseModel):
    source: str | None
    """The kernel source, or None when the reply held none."""
    error: str | None = None
    reply_text: str = ""
    model: str = ""


async def implement_plan(
    client: LlmClient,
    messages: list[ChatMessage],
    family: str,
    *,
    entry_symbol: str | None = None,
    purpose: str | None = None,
) -> ExecutorOutcome:
    """A reply without a usable code block is a failed attempt (data), not an exception.
    LlmCallFailed and BudgetExceeded propagate: they are about the service, not the attempt.
    entry_symbol: the kernel's entry function; the block that defines it is taken (a usage
    snippet or an earlier draft around it is not), else the reply's last code block.
    Used for repair prompts (prompts.repair_messages) alike. purpose: the ledger's label."""
    languages = _LANGUAGES.get(family, _LANGUAGES["cpu"])
    reply = await client.complete("executor", messages, purpose=purpose)
    try:
        source = extract_code_block(reply.text, languages, entry_symbol)
    except MalformedReply as exc:
        return ExecutorOutcome(
            source=None, error=exc.reason, reply_text=reply.text, model=reply.model
        )
    return ExecutorOutcome(source=source, reply_text=reply.text, model=reply.model)


def derived_solution(parent: Solution, source: str, name: str) -> Solution:
    """The parent's build spec with its entry file replaced by the new source."""
    sources = [
        SourceFile(path=s.path, content=source) if s.path == parent.entry_file else s
        for s in parent.sources
    ]
    return Solution(
        name=name,
        definition=parent.definition,
        author="accelopt",
        spec=parent.spec,
        sources=sources,
        description=None,
    )
