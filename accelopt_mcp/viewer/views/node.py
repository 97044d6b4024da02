"""The node panel: one kernel's code and its diff against its parent, the plan it came from,
its profiles (figures worded by `comparing`), the LLM calls that made it (and one call's prompt
and reply), the lessons it produced and the memory its planner saw."""

from __future__ import annotations

import difflib
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from accelopt_mcp import comparing
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.models import Evaluation, from_record
from accelopt_mcp.models.evaluation import untrusted_flags
from accelopt_mcp.store.base import KernelStore, LlmCallRecord, StoredProfile, StoredSolution
from accelopt_mcp.viewer.views.base import (
    MAX_SCAN,
    NotFound,
    View,
    percent_of_peak,
    read_leniently,
)
from accelopt_mcp.viewer.views.memory import LessonView, lesson_view

LOG_TAIL = 6000
"""Characters of a profile's log shown (its end: where errors are)."""


class DiffLine(View):
    kind: Literal["+", "-", " ", "@", "file"]
    text: str


class ComparisonView(View):
    against: str
    """The baseline as the measurement named it ('parent', a kernel's id)."""
    baseline_id: str | None = None
    text: str
    verdict: str


class ProfileView(View):
    id: str
    hardware: str
    status: str
    trusted: bool
    flags: list[str]
    untrusted_flags: list[str]
    latency: str | None = None
    """Median with its interval and confidence level."""
    over_reference: str | None = None
    comparisons: list[ComparisonView] = Field(default_factory=list)
    roofline: str | None = None
    percent_of_peak: float | None = None
    runs: int | None = None
    """Samples behind the median."""
    measurements: int = 1
    contended: bool = False
    breakdown: list[dict[str, Any]] = Field(default_factory=list)
    """Where one call spends its time (Evaluation.breakdown), largest first; empty when it
    was not taken."""
    counters: dict[str, float] = Field(default_factory=dict)
    log_tail: str = ""
    created_at: datetime | None = None


class CallView(View):
    """An LLM call's metadata (its prompt and reply: /api/call/<id>)."""

    id: str
    role: str
    model: str
    purpose: str | None = None
    status: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    latency_s: float
    error: str | None = None
    started_at: datetime | None = None


class NodeDetail(View):
    id: str
    name: str
    definition_name: str
    parent_id: str | None
    run_id: str | None = None
    language: str
    author: str
    entry_point: str
    files: list[dict[str, str]]
    """Its sources: path, content."""
    diff: list[DiffLine] = Field(default_factory=list)
    """Unified diff of its sources against its parent's; empty without a parent."""
    parent_missing: bool = False
    plan: str | None = None
    slot: dict[str, Any] | None = None
    """The attempt it came from as the run recorded it (status, error, repairs...)."""
    profiles: list[ProfileView] = Field(default_factory=list)
    calls: list[CallView] = Field(default_factory=list)
    """The LLM calls that made it: its plan's, its attempt's and repairs'."""
    lessons_produced: list[LessonView] = Field(default_factory=list)
    lessons_shown: list[LessonView] = Field(default_factory=list)
    """The memory its planner saw (the run's working set for its iteration, rebuilt now:
    items removed since are not in it)."""
    problems: list[str] = Field(default_factory=list)


def _profile_view(profile: StoredProfile) -> ProfileView:
    evaluation: Evaluation = profile.evaluation
    stats = evaluation.latency_stats
    return ProfileView(
        id=profile.id,
        hardware=profile.eval_hardware,
        status=profile.eval_status,
        trusted=profile.trusted,
        flags=list(evaluation.flags),
        untrusted_flags=untrusted_flags(evaluation.flags),
        latency=comparing.latency_text(evaluation),
        over_reference=comparing.reference_speedup_text(evaluation),
        comparisons=[
            ComparisonView(
                against=c.baseline,
                baseline_id=c.baseline_id,
                text=comparing.comparison_text(c),
                verdict=c.verdict,
            )
            for c in evaluation.comparisons
        ],
        roofline=comparing.roofline_text(evaluation) if evaluation.passed else None,
        percent_of_peak=percent_of_peak(profile),
        runs=stats.runs if stats else None,
        measurements=stats.measurements if stats else 1,
        contended=bool(stats and stats.contended),
        breakdown=[b.model_dump(mode="json") for b in evaluation.breakdown],
        counters=comparing.shown_counters(evaluation),
        log_tail=evaluation.log[-LOG_TAIL:],
        created_at=profile.created_at,
    )


def _diff(old: StoredSolution | None, new: StoredSolution) -> list[DiffLine]:
    if old is None:
        return []
    before = {f.path: f.content for f in old.solution.sources}
    after = {f.path: f.content for f in new.solution.sources}
    lines: list[DiffLine] = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path, ""), after.get(path, "")
        if a == b:
            continue
        lines.append(DiffLine(kind="file", text=path))
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=3):
            if line.startswith(("---", "+++")):
                continue
            kind = line[:1] if line[:1] in ("+", "-", " ") else "@"
            lines.append(DiffLine(kind=kind, text=line[1:] if kind != "@" else line))  # type: ignore[arg-type]
    return lines


def call_view(call: LlmCallRecord) -> CallView:
    return from_record(CallView, call)


def _made_it(purpose: str | None, slot: str | None, plan_key: str | None) -> bool:
    """Whether a call's purpose ('plans 2/0', 'attempt 2/0/1/1', 'repair 2/0/1/1#1') is one
    that made the kernel of `slot`."""
    if not purpose:
        return False
    what, _, key = purpose.partition(" ")
    if what in ("plan", "plans") and plan_key is not None:
        return key == plan_key
    if slot is None:
        return False
    if what == "attempt":
        return key == slot
    if what == "repair":
        return key.split("#")[0] == slot
    return False


def node_detail(store: KernelStore, solution_id: str, run_id: str | None = None) -> NodeDetail:
    """The node panel: code, diff against the parent, plan, profiles, the LLM calls that made
    it, the lessons it produced and the memory its planner saw."""
    solution = store.get_solution(solution_id)
    if solution is None:
        raise NotFound(f"no kernel {solution_id!r} in this database")
    meta = solution.evolve_metadata or {}
    run_id = run_id or (meta.get("run_id") if isinstance(meta.get("run_id"), str) else None)
    spec_solution = solution.solution
    detail = NodeDetail(
        id=solution.id,
        name=spec_solution.name,
        definition_name=solution.definition_name,
        parent_id=solution.parent_id,
        run_id=run_id,
        language=solution.spec_language,
        author=solution.author,
        entry_point=spec_solution.spec.entry_point,
        files=[{"path": f.path, "content": f.content} for f in spec_solution.sources],
        plan=meta.get("plan") if isinstance(meta.get("plan"), str) else None,
    )
    parent = store.get_solution(solution.parent_id) if solution.parent_id else None
    if solution.parent_id and parent is None:
        detail.parent_missing = True
        detail.problems.append(f"its parent {solution.parent_id} is not stored: no diff")
    detail.diff = _diff(parent, solution)
    detail.profiles = [_profile_view(p) for p in store.list_profiles(solution_id=solution.id)]
    if not detail.profiles:
        detail.problems.append("no profile stored for it (not profiled yet, or it failed first)")
    run = store.get_run(run_id) if run_id else None
    if run is None:
        return detail
    read = read_leniently(store, run)
    slot = next((s for s in read.checkpoint.slots.values() if s.solution_id == solution.id), None)
    if slot is None:
        slot = next(
            (s for s in read.checkpoint.slots.values() if solution.id in s.repaired_from), None
        )
    slot_key = slot.key if slot else None
    if slot is None:
        iteration, beam = meta.get("iteration"), meta.get("beam_index")
        if isinstance(iteration, int) and isinstance(meta.get("attempt_index"), int):
            slot_key = f"{iteration}/{beam}/{meta.get('plan_index')}/{meta.get('attempt_index')}"
    else:
        detail.slot = slot.model_dump(mode="json")
    iteration = slot.iteration if slot else meta.get("iteration")
    beam_index = slot.beam_index if slot else meta.get("beam_index")
    plan_key = f"{iteration}/{beam_index}" if iteration is not None else None
    detail.calls = [
        call_view(c)
        for c in store.list_llm_calls(run.id, limit=MAX_SCAN)
        if _made_it(c.purpose, slot_key, plan_key)
    ]
    items = store.recent_experiences(run_id=run.id, limit=MAX_SCAN)
    detail.lessons_produced = [
        lesson_view(i) for i in items if solution.id in (i.fast_solution_id, i.slow_solution_id)
    ]
    if read.spec is not None and isinstance(iteration, int):
        cfg = read.spec.optimize
        memory = OptimizationMemory(
            store,
            run_id=run.id,
            namespace=cfg.memory_namespace(),
            capacity=cfg.exp_n,
            seed_ids=read.checkpoint.seed_experience_ids,
            policy=cfg.memory_policy,
        )
        detail.lessons_shown = [lesson_view(i) for i in memory.working_set(iteration)]
    detail.problems += read.problems
    return detail


class CallDetail(CallView):
    run_id: str | None = None
    messages: list[dict[str, str]] | None = None
    """The prompt as stored (redacted when it was stored)."""
    reply: str | None = None


def call_detail(store: KernelStore, call_id: str) -> CallDetail:
    call = store.get_llm_call(call_id)
    if call is None:
        raise NotFound(f"no LLM call {call_id!r} in this database")
    return from_record(
        CallDetail,
        call,
        messages=[{"role": m.role, "content": m.content} for m in call.messages]
        if call.messages is not None
        else None,
    )
