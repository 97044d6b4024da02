"""The run page: the run's row, its settings, best latency per iteration, every kernel as a
node of its lineage tree (ancestors outside the run included, each with its best profile and
its speedup over the beam kernel it was planned from), the edges between them and the beam's
tie decisions."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from accelopt_mcp import comparing, stats
from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.selection import AttemptRecord, TieDecision
from accelopt_mcp.models import from_record
from accelopt_mcp.models.evaluation import untrusted_flags
from accelopt_mcp.store.base import KernelStore, StoredProfile, StoredSolution
from accelopt_mcp.viewer.views.base import (
    NotFound,
    View,
    best_profile,
    percent_of_peak,
    read_leniently,
)
from accelopt_mcp.viewer.views.runs import RunRow, run_row

MAX_ANCESTORS = 200
"""Ancestors outside a run shown above its initial kernel; more are said, not drawn."""

Outcome = Literal["passed", "failed", "untrusted", "pending", "unprofiled"]


class Node(View):
    """One kernel in a run's tree."""

    id: str
    name: str
    parent_id: str | None
    column: int
    """Where it is drawn: -1 ancestors outside the run, 0 the initial kernel, then its
    iteration."""
    outcome: Outcome
    """passed (and trusted), failed, untrusted (passed with a flag that says its figures
    cannot be believed), pending (stored, not yet profiled), unprofiled (no profile stored)."""
    status: str | None = None
    """The evaluation status (PASSED, COMPILE_ERROR, ...) or the attempt's."""
    flags: list[str] = Field(default_factory=list)
    untrusted_flags: list[str] = Field(default_factory=list)
    latency_ms: float | None = None
    latency: str | None = None
    """Its median with its interval."""
    over_reference: str | None = None
    over_parent: str | None = None
    """Its speedup over the beam kernel it was planned from (its stored parent, unless it is a
    repair: then that is the failed try it fixed), with its interval and how it was had."""
    over_parent_x: float | None = None
    over_parent_verdict: str | None = None
    beam_parent_id: str | None = None
    """The beam kernel its attempt started from (the attempt's parent)."""
    percent_of_peak: float | None = None
    initial: bool = False
    best: bool = False
    in_beam: bool = False
    """In the beam now (the one the next iteration starts from)."""
    beam_after: list[int] = Field(default_factory=list)
    """Iterations after which it was in the beam."""
    outside_run: bool = False
    """Not made by this run: the initial kernel's ancestors, or a parent from elsewhere."""
    missing: bool = False
    """Named as a parent but not stored."""
    slot: str | None = None
    """The attempt slot (iteration/beam/plan/attempt) it came from."""
    repair_of: str | None = None
    """For a failed kernel that a repair replaced: the slot it belongs to."""
    error: str | None = None
    tie: bool = False


class Edge(View):
    parent: str
    child: str
    over_parent_x: float | None = None
    verdict: str | None = None


class TieView(View):
    iteration: int
    place: str
    slot: int
    placed: str
    challenger: str
    kept: str
    reason: str
    verdict: str | None = None
    """The head-to-head verdict: faster, indistinguishable, or None (not re-measured)."""
    text: str


class IterationPoint(View):
    iteration: int
    best_latency_ms: float | None = None
    best_solution_id: str | None = None
    percent_of_peak: float | None = None
    attempts: int | None = None
    passed: int | None = None
    flagged: int | None = None
    experiences_added: int | None = None
    wall_s: float | None = None
    beam: list[str] = Field(default_factory=list)
    no_kernel: int = 0
    """Attempts that produced no kernel (no code, the LLM failed)."""


class RunDetail(View):
    run: RunRow
    settings: dict[str, Any] = Field(default_factory=dict)
    """The run's settings (T, B, N, K, ... as stored)."""
    reference_latency_ms: float | None = None
    """The task's reference median, from the initial kernel's profile."""
    iterations: list[IterationPoint] = Field(default_factory=list)
    nodes: list[Node] = Field(default_factory=list)
    edges: list[Edge] = Field(default_factory=list)
    ties: list[TieView] = Field(default_factory=list)
    no_kernel: list[dict[str, Any]] = Field(default_factory=list)
    """Attempts without a kernel: slot, status, error."""
    problems: list[str] = Field(default_factory=list)


def _over_parent(
    slot: AttemptRecord | None, stored_parent: str | None
) -> tuple[str | None, float | None, str | None]:
    if slot is None:
        return None, None, None
    interval = slot.speedup_interval
    if interval is None:
        return None, None, None
    same = slot.speedup_measured == "same_rounds" or slot.parent_speedup is not None
    how = "same rounds" if same else "timed apart"
    high = None if math.isinf(interval.high) else interval.high
    low = slot.speedup_ci_low
    against = (
        "the parent"
        if slot.parent_id == stored_parent
        else f"the beam kernel {slot.parent_id[:8]} it was planned from"
    )
    text = comparing.speedup_text(
        interval.estimate, low, high if low is not None else None, against
    )
    # With a lower end, `interval` is the stored one (an upper end of None unbounded).
    said = stats.verdict(interval) if low is not None else None
    return f"{text} ({how})", interval.estimate, said


def _node_from_profile(node: Node, profile: StoredProfile | None) -> None:
    if profile is None:
        return
    evaluation = profile.evaluation
    node.status = profile.eval_status
    node.flags = list(evaluation.flags)
    node.untrusted_flags = untrusted_flags(evaluation.flags)
    node.latency_ms = profile.latency_ms
    node.latency = comparing.latency_text(evaluation)
    node.over_reference = comparing.reference_speedup_text(evaluation)
    node.percent_of_peak = percent_of_peak(profile)
    if evaluation.passed:
        node.outcome = "untrusted" if node.untrusted_flags else "passed"
    else:
        node.outcome = "failed"


def run_detail(store: KernelStore, run_id: str) -> RunDetail:
    """The run page: its row, best latency per iteration, every kernel as a node of the tree
    (ancestors outside the run included), its edges and ties."""
    run = store.get_run(run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r} in this database; the runs page lists them")
    read = read_leniently(store, run)
    checkpoint, spec = read.checkpoint, read.spec
    row = run_row(store, run, read)
    detail = RunDetail(run=row, problems=list(row.problems))
    if spec is not None:
        cfg = spec.optimize
        detail.settings = {
            "T": cfg.iterations,
            "B": cfg.beam,
            "N": cfg.plans,
            "K": cfg.attempts,
            "TopK": cfg.topk,
            "ExpN": cfg.exp_n,
            "backend": cfg.backend,
            "plans": cfg.plan_mode,
            "repair_tries": cfg.repair_tries,
            "memory": cfg.memory_policy,
        }
    solutions = store.list_solutions(run_id=run.id)
    by_solution: dict[str, list[StoredProfile]] = {}
    for profile in store.list_profiles(run_id=run.id):
        by_solution.setdefault(profile.solution_id, []).append(profile)
    slot_of: dict[str, AttemptRecord] = {}
    repair_of: dict[str, str] = {}
    for slot in checkpoint.slots.values():
        if slot.solution_id:
            slot_of[slot.solution_id] = slot
        for failed in slot.repaired_from:
            repair_of[failed] = slot.key
    pending_ids = {p.solution_id: key for key, p in checkpoint.pending.items()}
    beam_after: dict[str, list[int]] = {}
    for summary in checkpoint.history:
        for sid in summary.beam:
            beam_after.setdefault(sid, []).append(summary.iteration)
    in_beam = {entry.solution_id for entry in checkpoint.beam}
    tied = {t.placed for t in checkpoint.ties} | {t.challenger for t in checkpoint.ties}
    initial_id = checkpoint.initial.solution_id if checkpoint.initial else run.initial_solution_id

    stored: dict[str, StoredSolution] = {s.id: s for s in solutions}
    outside: dict[str, StoredSolution] = {}
    if initial_id and initial_id not in stored:
        found = store.get_solution(initial_id)
        if found is not None:
            outside[initial_id] = found
        else:
            detail.problems.append(f"the initial kernel {initial_id} is not stored")
    nodes: dict[str, Node] = {}

    def add(solution: StoredSolution, *, is_outside: bool) -> Node:
        meta = solution.evolve_metadata or {}
        slot = slot_of.get(solution.id)
        iteration = slot.iteration if slot else meta.get("iteration")
        column = iteration if isinstance(iteration, int) else 0
        if solution.id == initial_id:
            column = 0
        elif is_outside:
            column = -1
        node = Node(
            id=solution.id,
            name=solution.solution.name,
            parent_id=solution.parent_id,
            column=column,
            outcome="unprofiled",
            initial=solution.id == initial_id,
            best=solution.id == run.best_solution_id,
            in_beam=solution.id in in_beam,
            beam_after=beam_after.get(solution.id, []),
            outside_run=is_outside and solution.id != initial_id,
            slot=slot.key if slot else pending_ids.get(solution.id),
            repair_of=repair_of.get(solution.id),
            tie=solution.id in tied,
        )
        profiles = by_solution.get(solution.id)
        if profiles is None and (is_outside or solution.id == initial_id):
            profiles = store.list_profiles(solution_id=solution.id)
        _node_from_profile(node, best_profile(profiles or [], checkpoint.hardware))
        if slot is not None:
            node.over_parent, node.over_parent_x, node.over_parent_verdict = _over_parent(
                slot, solution.parent_id
            )
            node.beam_parent_id = slot.parent_id
            node.error = slot.error
            if node.status is None:
                node.status = slot.status
                node.outcome = "passed" if slot.passed else "failed"
        elif solution.id in pending_ids and node.status is None:
            node.outcome = "pending"
        nodes[solution.id] = node
        return node

    for solution in list(outside.values()) + solutions:
        add(solution, is_outside=solution.id in outside)
    # Parents that are not the run's: walk up, so that no kernel hangs without its parent.
    for node in list(nodes.values()):
        parent = node.parent_id
        steps = 0
        while parent and parent not in nodes:
            if steps >= MAX_ANCESTORS:
                detail.problems.append(
                    f"more than {MAX_ANCESTORS} ancestors outside the run above {node.id[:8]}; "
                    "the oldest are not drawn"
                )
                break
            found = store.get_solution(parent)
            if found is None:
                nodes[parent] = Node(
                    id=parent,
                    name="(not stored)",
                    parent_id=None,
                    column=-1,
                    outcome="unprofiled",
                    outside_run=True,
                    missing=True,
                )
                detail.problems.append(f"kernel {parent[:8]} is named as a parent but not stored")
                break
            add(found, is_outside=True)
            parent = found.parent_id
            steps += 1
    detail.nodes = sorted(
        nodes.values(), key=lambda n: (n.column, n.slot or n.repair_of or "", n.id)
    )
    detail.edges = [
        # The edge carries the speedup only when it is over this very parent (a repair's
        # figure is over the beam kernel, not over the failed try it hangs from).
        Edge(
            parent=n.parent_id,
            child=n.id,
            over_parent_x=n.over_parent_x if n.beam_parent_id == n.parent_id else None,
            verdict=n.over_parent_verdict if n.beam_parent_id == n.parent_id else None,
        )
        for n in detail.nodes
        if n.parent_id and n.parent_id in nodes
    ]
    detail.ties = [_tie_view(t) for t in checkpoint.ties]
    detail.no_kernel = [
        {"slot": s.key, "status": s.status, "error": s.error}
        for s in sorted(checkpoint.slots.values(), key=lambda s: s.key)
        if not s.solution_id
    ]
    detail.iterations = _iterations(checkpoint, nodes)
    initial_node = nodes.get(initial_id or "")
    reference = None
    for profile in (by_solution.get(initial_id or "") or []) + [
        p for ps in by_solution.values() for p in ps
    ]:
        perf = profile.evaluation.performance
        if perf is not None and perf.reference_latency_ms > 0:
            reference = perf.reference_latency_ms
            break
    if reference is None and initial_node is not None and initial_id:
        for profile in store.list_profiles(solution_id=initial_id):
            perf = profile.evaluation.performance
            if perf is not None and perf.reference_latency_ms > 0:
                reference = perf.reference_latency_ms
                break
    detail.reference_latency_ms = reference
    if checkpoint.slots and not solutions:
        detail.problems.append("its attempts are recorded but none of their kernels is stored")
    return detail


def _iterations(checkpoint: Checkpoint, nodes: dict[str, Node]) -> list[IterationPoint]:
    points: list[IterationPoint] = []
    initial = checkpoint.initial
    if initial is not None:
        node = nodes.get(initial.solution_id)
        points.append(
            IterationPoint(
                iteration=0,
                best_latency_ms=initial.latency_ms,
                best_solution_id=initial.solution_id,
                percent_of_peak=node.percent_of_peak if node else None,
                beam=[initial.solution_id],
            )
        )
    done = {s.iteration for s in checkpoint.history}
    for summary in checkpoint.history:
        head = summary.beam[0] if summary.beam else None
        node = nodes.get(head or "")
        points.append(
            from_record(
                IterationPoint,
                summary,
                best_solution_id=head,
                percent_of_peak=node.percent_of_peak if node else None,
                no_kernel=sum(
                    1 for s in checkpoint.slots_of(summary.iteration) if not s.solution_id
                ),
            )
        )
    # The iteration under way: its best so far (provisional until it settles its beam).
    current = sorted({s.iteration for s in checkpoint.slots.values()} - done)
    for iteration in current:
        passed = [
            s
            for s in checkpoint.slots_of(iteration)
            if s.passed and s.trusted and s.latency_ms is not None
        ]
        best = min(passed, key=lambda s: s.latency_ms or math.inf) if passed else None
        points.append(
            IterationPoint(
                iteration=iteration,
                best_latency_ms=best.latency_ms if best else None,
                best_solution_id=best.solution_id if best else None,
                attempts=len(checkpoint.slots_of(iteration)),
                passed=sum(1 for s in checkpoint.slots_of(iteration) if s.passed),
            )
        )
    return points


def _tie_view(tie: TieDecision) -> TieView:
    outcome = tie.head_to_head
    return from_record(
        TieView,
        tie,
        verdict=outcome.verdict if outcome is not None else None,
        text=tie.describe(),
    )
