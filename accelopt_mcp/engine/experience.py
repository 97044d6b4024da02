"""Turning an iteration's selected (slow, fast) pairs into optimization memory items."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import Any

from accelopt_mcp.engine.context import RunContext
from accelopt_mcp.engine.lesson_filter import lesson_refusal
from accelopt_mcp.engine.prompts import summarizer_memory, summarizer_messages
from accelopt_mcp.engine.run_control import RunControl
from accelopt_mcp.engine.selection import AttemptRecord, Pair
from accelopt_mcp.engine.summarizer import NothingChanged, Summary, summarize_pair
from accelopt_mcp.llm import BudgetExceeded, LlmCallFailed, MalformedReply
from accelopt_mcp.models import Evaluation, MeasuringConditions, measuring_conditions_of
from accelopt_mcp.store.base import ExperienceIn, ExperienceRecord

log = logging.getLogger(__name__)


def slow_fast(pair: Pair) -> tuple[str, str]:
    """(slow solution id, fast solution id) of a pair, whichever way the attempt went: a
    positive pair's attempt beat its parent by its whole interval, a negative one's lost."""
    attempt = pair.attempt
    assert attempt.solution_id is not None
    if pair.positive:
        return attempt.parent_id, attempt.solution_id
    return attempt.solution_id, attempt.parent_id


def pair_conditions(
    attempt_profile: Evaluation | None, profile_key: Mapping[str, Any]
) -> MeasuringConditions | None:
    """What a pair's speedup was measured under: its attempt's evaluation (the one that timed
    the attempt beside its parent) read by measuring_conditions_of, with how many evaluations
    ran at once (the profile key's `workers`; absent: one)."""
    workers = profile_key.get("workers", 1)
    return measuring_conditions_of(
        attempt_profile, evaluations_at_once=workers if isinstance(workers, int) else None
    )


async def summarize_pairs(
    ctx: RunContext, control: RunControl, iteration: int, pairs: list[Pair]
) -> int:
    """Summarize the pairs into memory, at most TopK items for the iteration; how many the
    iteration has in memory now. The summarizer calls are control's tasks."""
    if not ctx.cfg.summarize or not pairs:
        return 0
    known = await asyncio.to_thread(ctx.memory.learned)
    existing = [i for i in known if i.run_id == ctx.memory.run_id and i.iteration == iteration]
    done = {(item.slow_solution_id, item.fast_solution_id) for item in existing}
    # A resumed iteration may select other pairs than before the stop (its LLM_FAILED
    # attempts were tried again); what it already stored still counts against TopK.
    # Each slow -> fast pair once: within the batch, in this run (a pair that stays the best
    # move for many iterations would otherwise be summarized in every one of them), and in the
    # namespace unless its measurement changed (another setup, or a speedup that moved).
    learned: dict[tuple[str | None, str | None], list[ExperienceRecord]] = {}
    for item in known:
        learned.setdefault((item.slow_solution_id, item.fast_solution_id), []).append(item)
    todo = []
    seen = set(done)
    for pair in pairs:
        key = slow_fast(pair)
        if key in seen:
            continue
        seen.add(key)
        before = await _learned_before(ctx, pair, learned.get(key, []))
        if before is not None:
            log.info(
                "pair %s -> %s is memory item %s already (iteration %s of run %s); not again",
                key[0][:8],
                key[1][:8],
                before.id[:8],
                before.iteration,
                (before.run_id or "-")[:8],
            )
            continue
        todo.append(pair)
    todo = todo[: max(0, ctx.cfg.topk - len(done))]
    tasks = [control.spawn(_summarize_one(ctx, control, iteration, pair)) for pair in todo]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result
    return len(done) + sum(r for r in results if isinstance(r, int))


SAME_SPEEDUP = 0.05
"""A pair measured again within this fraction of the speedup it was summarized at is the same
lesson (above it, the re-measurement moved the figure and the pair is summarized anew)."""


async def _learned_before(
    ctx: RunContext, pair: Pair, items: list[ExperienceRecord]
) -> ExperienceRecord | None:
    """The item that already holds this pair's lesson, if any: one of this run's, or one of
    the namespace's measured on the same setup (cores, BLAS threads, pinning, evaluations at
    once) at the same speedup. Host load and which core are left out: they differ between any
    two measurements."""
    if not items:
        return None
    own = [item for item in items if item.run_id == ctx.memory.run_id]
    if own:
        return own[0]
    slow_id, fast_id = slow_fast(pair)
    measured = await ctx.profiles.stored_evaluation(fast_id if pair.positive else slow_id)
    setup = _setup(pair_conditions(measured, ctx.profiles.perf))
    factor = max(pair.speedup, 1.0 / pair.speedup)
    for item in items:
        same_speedup = item.speedup is not None and (
            abs(item.speedup - factor) <= SAME_SPEEDUP * factor
        )
        if same_speedup and _setup(item.conditions) == setup:
            return item
    return None


def _setup(conditions: MeasuringConditions | None) -> tuple[Any, ...]:
    if conditions is None:
        return ()
    return (
        conditions.cores,
        conditions.blas_threads,
        conditions.pinned,
        conditions.evaluations_at_once,
    )


async def _plan_of(ctx: RunContext, attempt: AttemptRecord) -> str | None:
    """The plan the attempt implemented: from the checkpoint, else from its stored kernel's
    evolve_metadata (the same source stored earlier by another plan has that plan's)."""
    plans = ctx.checkpoints.state.checkpoint.plans.get(f"{attempt.iteration}/{attempt.beam_index}")
    if plans is not None and attempt.plan_index < len(plans) and plans[attempt.plan_index]:
        return plans[attempt.plan_index]
    if attempt.solution_id is None:
        return None
    stored = await asyncio.to_thread(ctx.profiles.store.get_solution, attempt.solution_id)
    plan = stored.evolve_metadata.get("plan") if stored is not None else None
    return plan if isinstance(plan, str) else None


async def _summarize_one(ctx: RunContext, control: RunControl, iteration: int, pair: Pair) -> int:
    """1 when the pair became a memory item, else 0."""
    attempt = pair.attempt
    slow_id, fast_id = slow_fast(pair)
    if control.stopping:
        return 0
    slow, fast = await ctx.profiles.solution(slow_id), await ctx.profiles.solution(fast_id)
    factor = max(pair.speedup, 1.0 / pair.speedup)
    # The interval of "fast over slow": the attempt's own over its parent, or its inverse when
    # the attempt is the slow one (a negative pair).
    interval = attempt.speedup_interval
    bounds: tuple[float, float] | None = None
    if interval is not None and interval.low > 0 and math.isfinite(interval.high):
        bounds = (
            (interval.low, interval.high)
            if pair.positive
            else (1.0 / interval.high, 1.0 / interval.low)
        )
    slow_profile = await ctx.profiles.stored_evaluation(slow_id)
    fast_profile = await ctx.profiles.stored_evaluation(fast_id)
    conditions = pair_conditions(fast_profile if pair.positive else slow_profile, ctx.profiles.perf)
    # The namespace's memory as it stands (this run's items so far included): the lesson may
    # refine one of them, or be one of them already.
    shown = summarizer_memory(await asyncio.to_thread(ctx.memory.working_set))
    messages = summarizer_messages(
        ctx.family,
        ctx.task,
        slow,
        fast,
        factor,
        interval=bounds,
        confidence=ctx.profiles.benchmark.confidence,
        plan=await _plan_of(ctx, attempt),
        positive=pair.positive,
        slow_profile=slow_profile,
        fast_profile=fast_profile,
        conditions=conditions,
        memory=shown,
        contract=ctx.contract,
    )
    try:
        summary = await summarize_pair(
            ctx.client,
            messages,
            purpose=f"summary {iteration} {slow_id[:8]}->{fast_id[:8]}",
        )
    except BudgetExceeded as exc:
        control.call_refused(exc)
        return 0
    except (LlmCallFailed, MalformedReply) as exc:
        log.warning("run %s: summarizer failed for %s: %s", ctx.run_id, attempt.key, exc)
        return 0
    if isinstance(summary, NothingChanged):
        if summary.known is not None and summary.known <= len(shown):
            ctx.events.emit(
                "experience_refused",
                iteration,
                f"lesson for {slow_id[:8]} -> {fast_id[:8]} is memory item "
                f"{shown[summary.known - 1].id[:8]} already; not stored again",
            )
        return 0
    replaced = _refined_item(summary, shown, ctx.run_id)
    lesson = "\n".join((summary.title, summary.strategy, summary.pseudocode))
    refusal = lesson_refusal(lesson, slow.entry_source.content, fast.entry_source.content)
    if refusal is not None:
        # Logged, not stored: a later planner would read it as advice (lesson_filter).
        log.warning(
            "run %s: lesson for %s -> %s refused: %s",
            ctx.run_id,
            slow_id[:8],
            fast_id[:8],
            refusal,
        )
        ctx.events.emit(
            "experience_refused",
            iteration,
            f"lesson for {slow_id[:8]} -> {fast_id[:8]} not stored: {refusal}",
        )
        return 0
    await asyncio.to_thread(
        ctx.memory.add,
        ExperienceIn(
            definition_name=ctx.task.definition.name,
            title=summary.title,
            strategy=summary.strategy,
            pseudocode=summary.pseudocode,
            slow_solution_id=slow_id,
            fast_solution_id=fast_id,
            speedup=factor,
            iteration=iteration,
            conditions=conditions,
        ),
    )
    if replaced is not None:
        # The new item holds what both said: the old one leaves the working memory (its row
        # stays as history, as an item removed by hand does), so no planner sees both.
        await asyncio.to_thread(ctx.memory.remove, replaced.id)
        ctx.events.emit(
            "experience_added",
            iteration,
            f"memory item: {summary.title} (replaces {replaced.id[:8]}: {replaced.title})",
        )
        return 1
    ctx.events.emit("experience_added", iteration, f"memory item: {summary.title}")
    return 1


def _refined_item(
    summary: Summary, shown: list[ExperienceRecord], run_id: str
) -> ExperienceRecord | None:
    """The memory item the summary says it refines ("refines": N, numbered as the prompt
    listed `shown`), or None: none named, a number the prompt did not list, or an item this
    run did not learn. A seed (added by hand, or by another run of the namespace) is shared:
    one model reply must not take it out of every run's memory, so the new item is stored
    beside it."""
    number = summary.refines
    if number is None or not 1 <= number <= len(shown):
        return None
    item = shown[number - 1]
    return item if item.run_id == run_id else None
