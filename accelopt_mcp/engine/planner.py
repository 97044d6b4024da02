"""The planner role, in two modes (OptimizeConfig.plan_mode):

- "independent": one plan per call, N calls for N plans (the AccelOpt paper's N samples);
  `propose_plan`.
- "distinct": one call asks for N plans that differ from each other, as a JSON list of
  strings; a reply with fewer (after dropping duplicates) gets one follow-up call that is
  shown the plans made so far and asked for the rest; `propose_plans`.

`plan_diversity` measures how different a set of plans is, so that the engine can record it
per iteration and the two modes can be compared on real runs.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any

from accelopt_mcp.engine.prompts import more_plans_message
from accelopt_mcp.llm import (
    ChatMessage,
    LlmCallFailed,
    LlmClient,
    LlmReply,
    MalformedReply,
    parse_json_list,
)

MAX_PLAN_CHARS = 8_000
MIN_PLAN_WORDS = 3
"""A list item shorter than this is no plan (a shape, a number, a one-word label)."""

_PLAN_HEADER = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*|__)?[ \t]*plan[ \t]*#?[ \t]*(\d+)[ \t]*(?:\*\*|__)?"
    r"[ \t]*[:.)\u2013\u2014-]?[ \t]*(?:\*\*|__)?[ \t]*",
    re.IGNORECASE | re.MULTILINE,
)
_TEXT_KEYS = ("plan", "description", "text", "details", "content", "summary")
_WORD = re.compile(r"[a-z0-9_]+")
# Words that carry no technique: left out of the diversity measure, so that two plans are not
# called similar for sharing "the" and "to".
_STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "each", "for", "from", "in", "into",
        "is", "it", "its", "of", "on", "one", "or", "so", "that", "the", "then", "this", "to",
        "use", "using", "we", "which", "while", "with", "will", "kernel", "plan",
    }
)  # fmt: skip


def parse_plan(text: str) -> str:
    """The plan is the reply's prose; a reply that is empty or only a code block is no plan."""
    plan = text.strip()
    if plan.startswith("```") and plan.endswith("```"):
        plan = plan.strip("`").partition("\n")[2].strip()
    if not plan:
        raise MalformedReply("the planner's reply holds no plan text", text)
    return plan[:MAX_PLAN_CHARS]


async def propose_plan(
    client: LlmClient, messages: list[ChatMessage], *, purpose: str | None = None
) -> tuple[str, LlmReply]:
    """One plan from one call ("independent" mode). purpose: the ledger's label."""
    return await client.complete_parsed("planner", messages, parse_plan, tries=2, purpose=purpose)


# --------------------------------------------------------------------------- distinct mode


def _item_text(item: Any) -> str | None:
    if isinstance(item, str):
        return item.strip()
    if isinstance(item, dict):
        parts = []
        title = item.get("title") or item.get("name")
        if isinstance(title, str) and title.strip():
            parts.append(title.strip().rstrip(".:") + ":")
        for key in _TEXT_KEYS:
            value = item.get(key)
            if isinstance(value, str) and value.strip():
                parts.append(value.strip())
                break
        steps = item.get("steps")
        if isinstance(steps, list):
            parts += [str(step).strip() for step in steps if str(step).strip()]
        return " ".join(parts) or None
    return None


def _as_plans(items: list[Any]) -> list[str]:
    texts = [_item_text(item) for item in items]
    return [
        text[:MAX_PLAN_CHARS]
        for text in texts
        if text is not None and len(text.split()) >= MIN_PLAN_WORDS
    ]


def _headed_sections(text: str) -> list[str]:
    """Sections under 'Plan 1:' / '## Plan 2' / '**Plan 3.**' headers; prose before the
    first header is an introduction, not a plan."""
    headers = list(_PLAN_HEADER.finditer(text))
    sections = []
    for header, following in itertools.zip_longest(headers, headers[1:]):
        end = following.start() if following is not None else len(text)
        body = text[header.end() : end].strip().strip("-*_ \n")
        if body:
            sections.append(body[:MAX_PLAN_CHARS])
    return sections


def parse_plan_list(text: str) -> list[str]:
    """The plans of a "distinct" reply: a JSON list (of strings, or of objects with a
    plan/description text), else the sections under two or more "Plan N" headers, else the
    whole reply as one plan. Raises MalformedReply only for a reply with no plan text at all."""
    try:
        plans = _as_plans(parse_json_list(text))
    except MalformedReply:
        plans = []
    if plans:
        return plans
    # One "Plan N:" header is a one-plan reply: kept whole, header included.
    sections = [s for s in _headed_sections(text) if len(s.split()) >= MIN_PLAN_WORDS]
    if len(sections) > 1:
        return sections
    return [parse_plan(text)]


def normalise_plan(plan: str) -> str:
    """Lower case, words only: the form two plans are compared in for duplicates."""
    return " ".join(_WORD.findall(plan.lower()))


def distinct_plans(plans: list[str]) -> list[str]:
    """The plans in order, each normalised text once (empty ones dropped)."""
    seen: set[str] = set()
    kept = []
    for plan in plans:
        key = normalise_plan(plan)
        if key and key not in seen:
            seen.add(key)
            kept.append(plan)
    return kept


def _new_plans(known: Sequence[str], plans: list[str]) -> list[str]:
    """The plans (distinct among themselves) that are not among `known`."""
    return distinct_plans([*known, *plans])[len(distinct_plans(list(known))) :]


async def propose_plans(
    client: LlmClient,
    messages: list[ChatMessage],
    n: int,
    *,
    tries: int = 2,
    known: Sequence[str] = (),
    purpose: str | None = None,
) -> list[str]:
    """Up to n distinct plans for one kernel ("distinct" mode): one call (a reply without
    any plan is asked again, up to `tries` replies), then, when it gave fewer than n distinct
    plans, one follow-up call that is shown them and asked for the rest. A follow-up that
    fails or gives nothing new leaves the plans at what the first call gave (fewer than n:
    the caller records the missing samples as failed, or fills them another way).

    known: plans the kernel already has (a resumed iteration whose planner reply was partly
    lost): the call is shown them and asked for n more, and only new plans are returned.

    Raises what the first call raises (LlmCallFailed, MalformedReply, BudgetExceeded), and
    BudgetExceeded from the follow-up too."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    asked = [*messages, more_plans_message(list(known), n)] if known else list(messages)
    first, reply = await client.complete_parsed(
        "planner", asked, parse_plan_list, tries=tries, purpose=purpose
    )
    plans = _new_plans(known, first)[:n]
    if len(plans) < n:
        follow_up = [
            *asked,
            ChatMessage(role="assistant", content=reply.text),
            more_plans_message([*known, *plans], n - len(plans)),
        ]
        try:
            more, _ = await client.complete_parsed(
                "planner",
                follow_up,
                parse_plan_list,
                tries=1,
                purpose=f"{purpose} (more)" if purpose else None,
            )
        except (LlmCallFailed, MalformedReply):
            more = []
        plans = _new_plans(known, plans + more)[:n]
    return plans


# --------------------------------------------------------------------------- diversity


def plan_words(plan: str) -> frozenset[str]:
    """The plan's content words: lower case, stop words and one-letter words left out."""
    return frozenset(
        word for word in _WORD.findall(plan.lower()) if len(word) > 1 and word not in _STOPWORDS
    )


def plan_diversity(plans: list[str]) -> float | None:
    """How different the plans are from each other: 1 - the mean Jaccard similarity of their
    word sets (`plan_words`) over every pair. 0.0: all plans use the same words (identical
    samples); 1.0: no two plans share a content word. None for fewer than two plans. Word
    sets, not embeddings: cheap, deterministic and model-free; it undercounts two plans that
    say the same thing in other words, so compare modes on it, not single plans."""
    if len(plans) < 2:
        return None
    words = [plan_words(plan) for plan in plans]
    similarities = []
    for a, b in itertools.combinations(words, 2):
        union = a | b
        similarities.append(len(a & b) / len(union) if union else 1.0)
    return 1.0 - sum(similarities) / len(similarities)
