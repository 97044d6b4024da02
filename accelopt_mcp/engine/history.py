"""What was already tried on a kernel and its ancestors: the planner's history block.

A pure function of the run's attempt records (Checkpoint.slots) and plan texts
(Checkpoint.plans), so that the planner in iteration 2 sees that a plan gained nothing or that
its kernels failed, and does not propose it again. Lineage: a kernel's parent is the
`parent_id` of the (earliest) attempt whose `solution_id` is that kernel; the initial kernel
has none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from accelopt_mcp.comparing import interval_text
from accelopt_mcp.engine.selection import (
    LLM_FAILED,
    NO_CODE,
    NO_PLAN,
    AttemptRecord,
    TieDecision,
)
from accelopt_mcp.models.evaluation import untrusted_flags
from accelopt_mcp.stats import verdict

NO_HISTORY = "(no plans tried yet)"
SHORT_ID = 8
PLAN_EXCERPT_CHARS = 320
ERROR_CHARS = 200

# The jailed evaluator's work-dir paths say nothing to a reader; the file name is enough.
_WORK_PATH = re.compile(r"(?:/[\w.-]+)*/accelopt-[\w-]+/(?:kernel_[0-9a-f]+/)?")
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b(?::.*)?$"
)
_NOISE_LINE = re.compile(r"^(?:Traceback \(most recent call last\)|File \"|\^+$|~+$|stderr|stdout)")


def short_id(solution_id: str) -> str:
    return solution_id[:SHORT_ID]


def tidy_log(text: str) -> str:
    """An evaluation log with the evaluator's temporary paths taken out."""
    return _WORK_PATH.sub("", text)


def short_error(error: str | None) -> str:
    """The one line of an error log that says what went wrong: the last exception line of a
    traceback, else the first line that is not traceback scaffolding; at most ERROR_CHARS."""
    if not error:
        return "(no message)"
    lines = [line.strip() for line in tidy_log(error).splitlines() if line.strip()]
    exceptions = [line for line in lines if _EXCEPTION_LINE.match(line)]
    if exceptions:
        chosen = exceptions[-1]
    else:
        plain = [line for line in lines if not _NOISE_LINE.match(line)]
        chosen = plain[0] if plain else (lines[0] if lines else "(no message)")
    chosen = re.sub(r":\s*Traceback \(most recent call last\):?$", "", chosen)
    return chosen if len(chosen) <= ERROR_CHARS else chosen[: ERROR_CHARS - 3] + "..."


def attempt_outcome(slot: AttemptRecord) -> str:
    """One attempt in a few words: '1.12x [1.05, 1.19] vs parent (faster)', or the failure
    class with its message ('RUNTIME_ERROR: NameError: name 'np2' is not defined')."""
    if slot.status == LLM_FAILED:
        return "not tried (the LLM call failed)"
    if slot.status == NO_PLAN:
        return "not tried (the planner gave no plan for it)"
    if slot.status == NO_CODE:
        return f"NO_CODE: {short_error(slot.error)}"
    if slot.passed:
        if slot.solution_id is not None and slot.solution_id == slot.parent_id:
            return "returned the kernel unchanged"
        interval = slot.speedup_interval
        if interval is None:
            text = f"passed, {slot.latency_ms:.4g} ms (no speedup known)"
        else:
            has_interval = slot.speedup_ci_low is not None
            figure = interval_text(
                interval.estimate,
                interval.low if has_interval else None,
                interval.high if has_interval else None,
                "x",
            )
            word = {"faster": "faster", "slower": "slower"}.get(
                verdict(interval), "no clear change"
            )
            text = f"{figure} vs parent ({word}" + ("" if has_interval else ", no interval") + ")"
        if not slot.trusted:
            text += f" [untrusted: {', '.join(untrusted_flags(slot.flags))}]"
        return text
    return f"{slot.status}: {short_error(slot.error)}"


def lineage(solution_id: str, slots: Iterable[AttemptRecord]) -> list[str]:
    """[the kernel, its parent, its grandparent, ...] as far as the records go."""
    parents: dict[str, str] = {}
    ordered = sorted(
        slots,
        key=lambda s: (not s.passed, s.iteration, s.beam_index, s.plan_index, s.attempt_index),
    )
    for slot in ordered:
        if slot.solution_id and slot.solution_id != slot.parent_id:
            parents.setdefault(slot.solution_id, slot.parent_id)
    chain = [solution_id]
    while (parent := parents.get(chain[-1])) is not None and parent not in chain:
        chain.append(parent)
    return chain


@dataclass
class _Applied:
    """One plan applied to one kernel: its attempts."""

    iteration: int
    beam_index: int
    plan_index: int
    generation: int
    """0: the kernel itself, 1: its parent, ..."""
    kernel: str
    attempts: list[AttemptRecord] = field(default_factory=list)
    produced: str | None = None
    """The kernel of the lineage one generation down that an attempt of this plan became."""


def _plan_text(plans: Mapping[str, list[str | None]], applied: _Applied) -> str | None:
    texts = plans.get(f"{applied.iteration}/{applied.beam_index}") or []
    if applied.plan_index >= len(texts):
        return None
    return texts[applied.plan_index]


def _excerpt(plan: str) -> str:
    flat = " ".join(plan.split())
    return flat if len(flat) <= PLAN_EXCERPT_CHARS else flat[: PLAN_EXCERPT_CHARS - 3] + "..."


def _outcomes(attempts: list[AttemptRecord]) -> str:
    counted: dict[str, int] = {}
    for attempt in sorted(attempts, key=lambda a: a.attempt_index):
        text = attempt_outcome(attempt)
        counted[text] = counted.get(text, 0) + 1
    return "; ".join(
        text if count == 1 else f"{text} ({count} attempts)" for text, count in counted.items()
    )


def _where(applied: _Applied, chain: list[str]) -> str:
    kernel = short_id(applied.kernel)
    if applied.generation == 0:
        where = f"this kernel ({kernel})"
    elif applied.generation == 1:
        where = f"its parent {kernel}"
    else:
        where = f"its ancestor {kernel}, {applied.generation} generations up"
    if applied.produced is not None:
        child = "this kernel" if applied.produced == chain[0] else short_id(applied.produced)
        where += f"; it produced {child}"
    return where


def lineage_history(
    solution_id: str,
    slots: Iterable[AttemptRecord],
    plans: Mapping[str, list[str | None]],
    *,
    max_plans: int = 12,
    max_chars: int = 4000,
    before_iteration: int | None = None,
    ties: Iterable[TieDecision] = (),
    max_ties: int = 4,
) -> str:
    """The plans tried on `solution_id` and its ancestors, each with what its attempts gave,
    most relevant first: plans on the kernel itself (newest first), then on its parent (the
    one that produced the kernel first), and so on up the lineage. At most `max_plans`
    entries and about `max_chars` characters; a last line counts what was left out.

    slots: the run's attempt records; plans: "iteration/beam_index" -> plan texts (None: the
    planner failed; such samples are left out). before_iteration: only attempts of earlier
    iterations (an iteration's own plans, still running, are not history yet; a resumed
    iteration then sees the same history). ties: the run's beam decisions that were ties
    (Checkpoint.ties); those of earlier iterations that involve a kernel of this lineage
    follow the plans, newest first, at most `max_ties`, each with its head-to-head verdict.
    NO_HISTORY when nothing was tried."""
    records = [s for s in slots if before_iteration is None or s.iteration < before_iteration]
    chain = lineage(solution_id, records)
    generation = {kernel: index for index, kernel in enumerate(chain)}
    applied: dict[tuple[str, int, int, int], _Applied] = {}
    for slot in records:
        if slot.parent_id not in generation:
            continue
        key = (slot.parent_id, slot.iteration, slot.beam_index, slot.plan_index)
        entry = applied.setdefault(
            key,
            _Applied(
                slot.iteration,
                slot.beam_index,
                slot.plan_index,
                generation[slot.parent_id],
                slot.parent_id,
            ),
        )
        entry.attempts.append(slot)
    for entry in applied.values():
        if entry.generation >= 1:
            child = chain[entry.generation - 1]
            if any(a.solution_id == child for a in entry.attempts):
                entry.produced = child
    ordered = sorted(
        (e for e in applied.values() if _plan_text(plans, e) is not None),
        key=lambda e: (
            e.generation,
            e.produced is None,
            -e.iteration,
            e.beam_index,
            e.plan_index,
        ),
    )
    settled = _tie_lines(ties, chain, before_iteration, max_ties)
    if not ordered:
        return "\n".join(settled) if settled else NO_HISTORY
    blocks: list[str] = []
    used = 0
    for entry in ordered:
        if len(blocks) >= max_plans:
            break
        plan = _plan_text(plans, entry)
        assert plan is not None
        block = (
            f"{len(blocks) + 1}. Iteration {entry.iteration}, applied to "
            f"{_where(entry, chain)}: {_excerpt(plan)}\n"
            f"   Outcome: {_outcomes(entry.attempts)}"
        )
        if blocks and used + len(block) + 1 > max_chars:
            break
        blocks.append(block)
        used += len(block) + 1
    left = len(ordered) - len(blocks)
    if left:
        blocks.append(f"({left} older plan(s) on this lineage not shown)")
    return "\n".join(blocks + settled)


def _tie_lines(
    ties: Iterable[TieDecision], chain: list[str], before_iteration: int | None, limit: int
) -> list[str]:
    """'Head-to-head re-measures' lines: the ties of earlier iterations that involve a kernel
    of the lineage (`chain`), newest first (TieDecision.describe: who, what overlapped, the
    verdict, who was kept)."""
    members = set(chain)
    found = [
        tie
        for tie in ties
        if (before_iteration is None or tie.iteration < before_iteration)
        and (tie.placed in members or tie.challenger in members)
    ]
    if not found:
        return []
    found.sort(key=lambda tie: -tie.iteration)
    lines = ["Head-to-head re-measures of ties on this lineage (newest first):"]
    lines += [f"- {tie.describe()}" for tie in found[:limit]]
    return lines
