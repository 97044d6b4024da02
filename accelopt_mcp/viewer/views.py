"""What the viewer's JSON endpoints return: the store read into pydantic views.

Every figure is worded by `comparing` (a median with its interval, a speedup with its interval
and against what), as the CLI and the MCP tools word it. A run whose row is broken or half
written (its config without settings, an entry that no longer validates, a parent that is not
stored) is shown with what could be read; `problems` says, one line each, what could not.
Nothing here raises on a bad row: only an unknown id (`NotFound`) or a store error does.
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from accelopt_mcp import comparing
from accelopt_mcp.engine.checkpoint import Checkpoint, PendingAttempt, RunSpec, read_run
from accelopt_mcp.engine.memory import OptimizationMemory
from accelopt_mcp.engine.runs import (
    best_figures,
    figure_text,
    holder_alive,
    result_text,
    run_state,
)
from accelopt_mcp.engine.selection import AttemptRecord, TieDecision
from accelopt_mcp.models import Evaluation
from accelopt_mcp.models.evaluation import untrusted_flags
from accelopt_mcp.store.base import (
    ExperienceRecord,
    KernelStore,
    LlmCallRecord,
    RunRecord,
    StoredProfile,
    StoredSolution,
)
from accelopt_mcp.suites.compare import compare_suites
from accelopt_mcp.suites.runner import spec_of
from accelopt_mcp.suites.table import columns, geomean_cells, geomeans, row_cells

MAX_ANCESTORS = 200
"""Ancestors outside a run shown above its initial kernel; more are said, not drawn."""
MAX_SCAN = 100_000
"""Most memory items or calls read for one view."""
LOG_TAIL = 6000
"""Characters of a profile's log shown (its end: where errors are)."""
PCT_COUNTER = "roofline_pct_of_peak"


class NotFound(LookupError):
    """No record with that id; the message says which and what to do."""


class View(BaseModel):
    """Base of the viewer's views: a field's docstring is its description."""

    model_config = ConfigDict(use_attribute_docstrings=True)


# --------------------------------------------------------------------------- reading a run


class ReadRun(BaseModel):
    """A run as far as it could be read."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run: RunRecord
    spec: RunSpec | None = None
    checkpoint: Checkpoint
    problems: list[str] = Field(default_factory=list)


def read_leniently(store: KernelStore, run: RunRecord) -> ReadRun:
    """The run's spec and checkpoint, or as much of them as validates (a run written by an
    older or newer version, or cut off while it was being written)."""
    entries = store.run_entries(run.id)
    try:
        spec, checkpoint = read_run(run, entries)
        return ReadRun(run=run, spec=spec, checkpoint=checkpoint)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        first = _first_error(exc)
    problems = [
        f"the run's settings could not be read ({first}): figures that need them are left out"
    ]
    raw = run.config.get("checkpoint") if isinstance(run.config, dict) else None
    try:
        checkpoint = Checkpoint.model_validate(raw if isinstance(raw, dict) else {})
    except ValidationError as exc:
        problems.append(f"its checkpoint could not be read ({_first_error(exc)})")
        checkpoint = Checkpoint()
    for entry in entries:
        try:
            if entry.kind == "slot":
                checkpoint.slots[entry.key] = AttemptRecord.model_validate(entry.data)
            elif entry.kind == "pending":
                checkpoint.pending[entry.key] = PendingAttempt.model_validate(entry.data)
            elif entry.kind == "plans":
                checkpoint.plans[entry.key] = list(entry.data.get("plans") or [])
        except (ValidationError, TypeError, AttributeError) as exc:
            problems.append(
                f"its {entry.kind} entry {entry.key} could not be read ({_first_error(exc)})"
            )
    return ReadRun(run=run, checkpoint=checkpoint, problems=problems)


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and exc.errors():
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error.get("loc", ()))
        return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# --------------------------------------------------------------------------- runs page


class RunRow(View):
    """One run as the runs page lists it."""

    id: str
    definition_name: str
    status: str
    """As stored."""
    state: str
    """As users see it: a running run whose worker is gone is 'interrupted'."""
    ended: str | None = None
    """How it ended (its stop reason or error), or what it found; None while it runs."""
    iteration: int
    iterations_total: int | None = None
    best_solution_id: str | None = None
    best_latency_ms: float | None = None
    best_over_reference: str | None = None
    """The best kernel's speedup over the task's reference with its interval, against what."""
    best_over_reference_x: float | None = None
    best_over_initial: str | None = None
    percent_of_peak: float | None = None
    """The best kernel's percent of the roofline (roofline_pct_of_peak), where known."""
    llm_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    wall_s: float | None = None
    backend: str | None = None
    hardware: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    problems: list[str] = Field(default_factory=list)


class RunList(View):
    runs: list[RunRow]
    tasks: list[str]
    """Every task (definition) among the listed runs, for the filter."""
    statuses: list[str]


def _wall_s(read: ReadRun, alive: bool) -> float | None:
    checkpoint = read.checkpoint
    elapsed = checkpoint.elapsed_before_s
    if checkpoint.started_at is not None:
        until = time.time() if alive else (checkpoint.saved_at or checkpoint.started_at)
        elapsed += max(0.0, until - checkpoint.started_at)
    return elapsed if elapsed > 0 else None


def _best_profile(profiles: Iterable[StoredProfile], hardware: str | None) -> StoredProfile | None:
    """The profile a node is shown by: on the run's hardware, passed and trusted first, then
    the fastest, then the newest."""

    def rank(p: StoredProfile) -> tuple[int, int, int, float]:
        return (
            0 if hardware is None or p.eval_hardware == hardware else 1,
            0 if p.eval_status == "PASSED" else 1,
            0 if p.trusted else 1,
            p.latency_ms if p.latency_ms is not None else math.inf,
        )

    found = sorted(profiles, key=rank)
    return found[0] if found else None


def _percent(profile: StoredProfile | None) -> float | None:
    if profile is None:
        return None
    value = profile.evaluation.hardware_counters.get(PCT_COUNTER)
    return value if value is not None and math.isfinite(value) else None


def run_row(store: KernelStore, run: RunRecord, read: ReadRun | None = None) -> RunRow:
    read = read or read_leniently(store, run)
    checkpoint, spec = read.checkpoint, read.spec
    alive = holder_alive(run, checkpoint)
    state = run_state(run, checkpoint)
    settings = run.config.get("optimize") if isinstance(run.config, dict) else None
    backend = spec.optimize.backend if spec else None
    if backend is None and isinstance(settings, dict):
        backend = settings.get("backend") if isinstance(settings.get("backend"), str) else None
    row = RunRow(
        id=run.id,
        definition_name=run.definition_name,
        status=run.status,
        state=state,
        iteration=run.current_iteration,
        iterations_total=spec.optimize.iterations if spec else None,
        best_solution_id=run.best_solution_id,
        best_latency_ms=run.best_latency_ms,
        tokens_in=run.tokens_in,
        tokens_out=run.tokens_out,
        cost_usd=run.cost_usd,
        wall_s=_wall_s(read, alive),
        backend=backend,
        hardware=checkpoint.hardware,
        created_at=run.created_at,
        updated_at=run.updated_at,
        problems=list(read.problems),
    )
    if state not in ("running", "pending"):
        if checkpoint.initial is not None:
            row.ended = result_text(run, checkpoint)
        said = checkpoint.stop_reason or run.error
        if said:
            row.ended = f"{said}; {row.ended}" if row.ended else said
    confidence = spec.optimize.benchmark.confidence if spec else 0.95
    best = best_figures(checkpoint, run.best_solution_id, confidence)
    if best is not None:
        if best.over_reference is not None:
            row.best_over_reference = figure_text(best.over_reference, "the reference")
            row.best_over_reference_x = best.over_reference.estimate
        if best.is_initial:
            row.best_over_initial = "the initial kernel itself (nothing beat it)"
        elif best.over_initial is not None:
            row.best_over_initial = figure_text(best.over_initial, "the initial kernel")
    if run.best_solution_id:
        profile = _best_profile(
            store.list_profiles(solution_id=run.best_solution_id), checkpoint.hardware
        )
        row.percent_of_peak = _percent(profile)
        perf = profile.evaluation.performance if profile is not None else None
        if row.best_over_reference is None and profile is not None and perf is not None:
            # The checkpoint did not keep it (an older run): the best kernel's own profile.
            row.best_over_reference = comparing.reference_speedup_text(profile.evaluation)
            row.best_over_reference_x = perf.speedup_factor or None
    row.llm_calls = sum(t.calls for t in store.llm_totals(run.id))
    if checkpoint.initial is None and run.status not in ("pending",):
        row.problems.append("the run has no initial kernel recorded: it never profiled its start")
    return row


FINISHED = frozenset({"completed", "failed", "cancelled", "budget_exhausted", "llm_unavailable"})
"""Stored statuses after which a run's row no longer changes unless the run row does."""


def list_runs(
    store: KernelStore,
    *,
    task: str | None = None,
    status: str | None = None,
    limit: int = 200,
    finished_rows: dict[tuple[str, str], RunRow] | None = None,
) -> RunList:
    """The runs page: newest first, filtered by task (definition) and by displayed state
    (a stored status, or 'interrupted'). finished_rows: rows of finished runs kept by the
    caller between calls, by (id, updated_at): a finished run is read once, not on every
    refresh of the page (a run of hundreds of attempts takes a while to read)."""
    stored_status = status if status not in (None, "", "interrupted") else None
    rows = []
    for run in store.list_runs(definition_name=task or None, status=stored_status, limit=limit):
        key = (run.id, str(run.updated_at))
        row = finished_rows.get(key) if finished_rows is not None else None
        if row is None:
            row = run_row(store, run)
            if finished_rows is not None and run.status in FINISHED:
                if len(finished_rows) > 5000:
                    finished_rows.clear()
                finished_rows[key] = row
        if status == "interrupted" and row.state != "interrupted":
            continue
        if stored_status is not None and row.state != stored_status:
            continue
        rows.append(row)
    return RunList(
        runs=rows,
        tasks=sorted({r.definition_name for r in rows} | ({task} if task else set())),
        statuses=sorted({r.state for r in rows} | ({status} if status else set())),
    )


# --------------------------------------------------------------------------- run page

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
    verdict = None
    if low is not None:
        verdict = (
            "faster"
            if low > 1
            else "slower"
            if (high is not None and high < 1)
            else "indistinguishable"
        )
    return f"{text} ({how})", interval.estimate, verdict


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
    node.percent_of_peak = _percent(profile)
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
        _node_from_profile(node, _best_profile(profiles or [], checkpoint.hardware))
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
            IterationPoint(
                iteration=summary.iteration,
                best_latency_ms=summary.best_latency_ms,
                best_solution_id=head,
                percent_of_peak=node.percent_of_peak if node else None,
                attempts=summary.attempts,
                passed=summary.passed,
                flagged=summary.flagged,
                experiences_added=summary.experiences_added,
                wall_s=summary.wall_s,
                beam=list(summary.beam),
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
    return TieView(
        iteration=tie.iteration,
        place=tie.place,
        slot=tie.slot,
        placed=tie.placed,
        challenger=tie.challenger,
        kept=tie.kept,
        reason=tie.reason,
        verdict=outcome.verdict if outcome is not None else None,
        text=tie.describe(),
    )


# --------------------------------------------------------------------------- node panel


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


class LessonView(View):
    id: str
    title: str
    strategy: str
    pseudocode: str
    namespace: str
    speedup: float | None = None
    iteration: int | None = None
    slow_solution_id: str | None = None
    fast_solution_id: str | None = None
    removed: bool = False


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
        percent_of_peak=_percent(profile),
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


def _lesson(item: ExperienceRecord) -> LessonView:
    return LessonView(
        id=item.id,
        title=item.title,
        strategy=item.strategy,
        pseudocode=item.pseudocode,
        namespace=item.namespace,
        speedup=item.speedup,
        iteration=item.iteration,
        slow_solution_id=item.slow_solution_id,
        fast_solution_id=item.fast_solution_id,
        removed=item.removed,
    )


def _call(call: LlmCallRecord) -> CallView:
    return CallView(
        id=call.id,
        role=call.role,
        model=call.model,
        purpose=call.purpose,
        status=call.status,
        tokens_in=call.tokens_in,
        tokens_out=call.tokens_out,
        cost_usd=call.cost_usd,
        latency_s=call.latency_s,
        error=call.error,
        started_at=call.started_at,
    )


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
        _call(c)
        for c in store.list_llm_calls(run.id, limit=MAX_SCAN)
        if _made_it(c.purpose, slot_key, plan_key)
    ]
    items = store.recent_experiences(run_id=run.id, limit=MAX_SCAN)
    detail.lessons_produced = [
        _lesson(i) for i in items if solution.id in (i.fast_solution_id, i.slow_solution_id)
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
        detail.lessons_shown = [_lesson(i) for i in memory.working_set(iteration)]
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
    view = _call(call)
    return CallDetail(
        **view.model_dump(),
        run_id=call.run_id,
        messages=[{"role": m.role, "content": m.content} for m in call.messages]
        if call.messages is not None
        else None,
        reply=call.reply,
    )


# --------------------------------------------------------------------------- memory, suites


class MemoryPage(View):
    namespaces: dict[str, int]
    """Items (not removed) per namespace, among those read."""
    items: list[LessonView]
    text: str | None = None
    namespace: str | None = None
    error: str | None = None


def memory_page(
    store: KernelStore, *, namespace: str | None = None, text: str | None = None, limit: int = 500
) -> MemoryPage:
    everything = store.search_experiences(limit=MAX_SCAN)
    counts: dict[str, int] = {}
    for item in everything:
        counts[item.namespace] = counts.get(item.namespace, 0) + 1
    page = MemoryPage(
        namespaces=dict(sorted(counts.items())), items=[], text=text, namespace=namespace
    )
    try:
        found = store.search_experiences(
            text=text or None, namespace=namespace or None, limit=limit
        )
    except ValueError as exc:  # UnsearchableTextError: only stop words
        page.error = str(exc)
        return page
    page.items = [_lesson(i) for i in found]
    return page


class SuitesPage(View):
    suites: list[dict[str, Any]]
    """id, name, source, backend, status, created_at."""
    table: dict[str, Any] | None = None
    """The chosen suite's table: columns, rows, geomeans."""
    comparison: dict[str, Any] | None = None
    """Two suites side by side (suites.compare.compare_suites)."""
    error: str | None = None


def suites_page(store: KernelStore, a: str | None = None, b: str | None = None) -> SuitesPage:
    records = store.list_suites(limit=200)
    page = SuitesPage(
        suites=[
            {
                "id": r.id,
                "name": r.name,
                "source": r.source,
                "backend": r.backend,
                "status": r.status,
                "created_at": r.created_at.isoformat() if r.created_at else None,
            }
            for r in records
        ]
    )
    first = store.get_suite(a) if a else (records[0] if records else None)
    if a and first is None:
        page.error = f"no suite {a!r}"
        return page
    if first is not None:
        try:
            spec = spec_of(first)
            baseline_only = spec.baseline_only
            shown = columns(baseline_only)
            page.table = {
                "suite": first.id,
                "columns": [str(c) for c in shown],
                "rows": [
                    [row_cells(c, baseline_only=baseline_only).get(col, "") for col in shown]
                    for c in spec.cases
                ],
                "geomeans": [
                    geomean_cells(
                        geomeans(spec.cases, baseline_only=baseline_only),
                        baseline_only=baseline_only,
                    ).get(col, "")
                    for col in shown
                ],
            }
        except (ValidationError, ValueError, KeyError) as exc:
            page.error = f"suite {first.id} could not be read: {_first_error(exc)}"
    if first is not None and b:
        second = store.get_suite(b)
        if second is None:
            page.error = f"no suite {b!r}"
        else:
            try:
                page.comparison = compare_suites(first, second).model_dump(mode="json")
            except (ValidationError, ValueError, KeyError) as exc:
                page.error = f"the suites could not be compared: {_first_error(exc)}"
    return page
