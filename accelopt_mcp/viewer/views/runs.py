"""The runs page: every run as one row (its state as users see it, how it ended, its best
kernel's figures worded by `comparing`, what it cost), newest first, filtered by task and
state."""

from __future__ import annotations

import time
from datetime import datetime

from pydantic import Field

from accelopt_mcp import comparing
from accelopt_mcp.engine.runs import (
    best_figures,
    figure_text,
    holder_alive,
    result_text,
    run_state,
)
from accelopt_mcp.models import from_record
from accelopt_mcp.store.base import KernelStore, RunRecord
from accelopt_mcp.viewer.views.base import (
    ReadRun,
    View,
    best_profile,
    percent_of_peak,
    read_leniently,
)


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


def run_row(store: KernelStore, run: RunRecord, read: ReadRun | None = None) -> RunRow:
    read = read or read_leniently(store, run)
    checkpoint, spec = read.checkpoint, read.spec
    alive = holder_alive(run, checkpoint)
    state = run_state(run, checkpoint)
    settings = run.config.get("optimize") if isinstance(run.config, dict) else None
    backend = spec.optimize.backend if spec else None
    if backend is None and isinstance(settings, dict):
        backend = settings.get("backend") if isinstance(settings.get("backend"), str) else None
    row = from_record(
        RunRow,
        run,
        state=state,
        iteration=run.current_iteration,
        iterations_total=spec.optimize.iterations if spec else None,
        wall_s=_wall_s(read, alive),
        backend=backend,
        hardware=checkpoint.hardware,
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
        profile = best_profile(
            store.list_profiles(solution_id=run.best_solution_id), checkpoint.hardware
        )
        row.percent_of_peak = percent_of_peak(profile)
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
