"""The planner role: one optimization plan per call (N calls give N independent samples)."""

from __future__ import annotations

from accelopt_mcp.llm import ChatMessage, LlmClient, LlmReply, MalformedReply

MAX_PLAN_CHARS = 8_000


def parse_plan(text: str) -> str:
    """The plan is the reply's prose; a reply that is empty or only a code block is no plan."""
    plan = text.strip()
    if plan.startswith("```") and plan.endswith("```"):
        plan = plan.strip("`").partition("\n")[2].strip()
    if not plan:
        raise MalformedReply("the planner's reply holds no plan text", text)
    return plan[:MAX_PLAN_CHARS]


async def propose_plan(client: LlmClient, messages: list[ChatMessage]) -> tuple[str, LlmReply]:
    return await client.complete_parsed("planner", messages, parse_plan, tries=2)
