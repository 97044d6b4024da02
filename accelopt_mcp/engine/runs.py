"""Creating a run row and reading a run's progress back from the store."""

from __future__ import annotations

import math
import os
import socket
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, computed_field

from accelopt_mcp.engine.checkpoint import Checkpoint, RunSpec, read_run, run_config
from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.selection import LLM_FAILED, NO_CODE, NO_PLAN, BeamEntry
from accelopt_mcp.isolation.sandbox import proc_stat_fields
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.stats import Interval, Verdict, finite_or_none, ratio_of_independent, verdict
from accelopt_mcp.store.base import KernelStore, RunRecord, RunStatus, RunUpdate
from accelopt_mcp.store.url import default_sqlite_path


class RunNotFound(KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "run not found"


def default_output_dir() -> Path:
    """Where run outputs (winning kernel, plot, events) go: next to the default database."""
    return default_sqlite_path().parent / "runs"


def prepare_run(
    store: KernelStore,
    task: Task,
    initial_solution: Solution,
    config: OptimizeConfig,
    *,
    request: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> str:
    """Store the task and a pending run row holding everything needed to (re)start it."""
    if initial_solution.definition != task.definition.name:
        raise ValueError(
            f"the kernel is for definition {initial_solution.definition!r} but the task is "
            f"{task.definition.name!r}; pass the kernel and task that belong together"
        )
    store.upsert_definition(task.definition)
    store.upsert_workload(task.definition.name, task.workload)
    spec = RunSpec(
        optimize=config, task=task, initial_solution=initial_solution, request=request or {}
    )
    run = RunRecord(
        id=run_id or str(uuid.uuid4()),
        definition_name=task.definition.name,
        status="pending",
        config=run_config(spec, Checkpoint()),
    )
    return store.create_run(run)


def load_run(store: KernelStore, run_id: str) -> tuple[RunRecord, RunSpec, Checkpoint]:
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(
            f"no run {run_id!r} in {store.stats().location}; list runs with `accelopt runs list`"
        )
    spec, checkpoint = read_run(run, store.run_entries(run_id))
    return run, spec, checkpoint


def process_start_token(pid: int) -> str | None:
    """The kernel's start time of a process, so a recycled pid is not taken for the worker."""
    fields = proc_stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return None  # dead, only not yet reaped by its parent
    return fields[19] if len(fields) > 19 else None


WORKER_HOST_ENV = "ACCELOPT_WORKER_HOST"
"""The host name a worker gives in its id (default: the machine's); two containers sharing a
host name must set distinct ones."""


def local_host() -> str:
    return os.environ.get(WORKER_HOST_ENV) or socket.gethostname()


QUEUE_HOLD = "queue"
"""The last part of the id under which a job manager holds the runs it has queued (their
worker is not started yet): host|pid|start token|queue-<random>."""


def worker_id_of(pid: int, *, queue: bool = False) -> str:
    """The id a process claims runs under: host|pid|start token, which a process on the same
    host can check (a recycled pid has another start token); with queue, a job manager's hold
    on the runs it queued (one per manager, even with several in one process)."""
    found = f"{local_host()}|{pid}|{process_start_token(pid) or ''}"
    return f"{found}|{QUEUE_HOLD}-{uuid.uuid4().hex[:8]}" if queue else found


def _parts(worker_id: str | None) -> list[str]:
    return (worker_id or "").split("|")


def local_worker_pid(worker_id: str | None) -> int | None:
    """The pid of a worker process of this host that the id names; None for another host's,
    a job manager's queue hold, or a malformed id."""
    parts = _parts(worker_id)
    if len(parts) != 3 or parts[0] != local_host() or not parts[1].isdigit():
        return None
    return int(parts[1])


def local_worker_gone(worker_id: str | None) -> bool:
    """True when the id names a process of this host (a worker, or a job manager holding it
    queued) that is no longer running."""
    parts = _parts(worker_id)
    if len(parts) < 3 or parts[0] != local_host() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if not parts[2]:
        # No start token (a host without /proc, e.g. macOS): the pid's existence says.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    return process_start_token(pid) != parts[2]


def holder_alive(run: RunRecord, checkpoint: Checkpoint, now: datetime | None = None) -> bool:
    """Does a live worker hold this run? By its lease; a holder on this host also by its
    process, so a killed local worker frees its run at once rather than when its lease ends
    (another host's cannot be checked: its lease says). A run from before leases: by the
    worker its checkpoint names."""
    if run.worker_id is None:
        return worker_alive(checkpoint)
    now = now or datetime.now(UTC)
    if run.lease_expires_at is None or run.lease_expires_at <= now:
        return False
    return not local_worker_gone(run.worker_id)


def worker_alive(checkpoint: Checkpoint) -> bool:
    """Is the process that last ran this run still running (on this host)? For runs from
    before leases, whose checkpoint named their worker."""
    if checkpoint.worker_pid is None or checkpoint.worker_host is None:
        return False
    host, _, start = checkpoint.worker_host.partition("|")
    if host != socket.gethostname():
        return True  # another host's worker: assume alive, it cannot be checked from here
    token = process_start_token(checkpoint.worker_pid)
    return token is not None and token == start


RunState = RunStatus | Literal["interrupted"]
"""A stored run status, or "interrupted" (see run_state)."""


def run_state(
    run: RunRecord, checkpoint: Checkpoint, *, ours_alive: bool = False, queued: bool = False
) -> RunState:
    """The run's status as users see it: a run stored as running (or pending) whose worker is
    gone, and that no one here is about to start, is "interrupted" (resume it)."""
    if run.status not in ("running", "pending"):
        return run.status
    if ours_alive or holder_alive(run, checkpoint):
        return run.status
    if run.status == "pending" and queued:
        return run.status
    return "interrupted"


def speedup(baseline_ms: float | None, latency_ms: float | None) -> float | None:
    """How many times faster `latency_ms` is than `baseline_ms` (None when either is unknown)."""
    if not baseline_ms or not latency_ms:
        return None
    return baseline_ms / latency_ms


class SpeedupFigure(BaseModel):
    """A speedup with its interval, and how that interval was had."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    estimate: float
    low: float | None = None
    """None: no interval (a point estimate)."""
    high: float | None = None
    """None with a lower end: unbounded."""
    measured: Literal["same_rounds", "apart", "point"]
    """'same_rounds': both timed in the same interleaved rounds; 'apart': timed in separate
    measurements, at other times (their intervals combined as independent errors, wider; no
    interval when either lacks one); 'point': no interval known."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> Verdict | None:
        """'faster' / 'slower' when the whole interval is above / below 1, else
        'indistinguishable'; None without an interval (a point estimate decides nothing)."""
        if self.low is None:
            return None
        high = math.inf if self.high is None else self.high
        return verdict(Interval(self.estimate, self.low, high))

    @classmethod
    def of(cls, interval: Interval, measured: Literal["same_rounds", "apart"]) -> SpeedupFigure:
        return cls(
            estimate=interval.estimate,
            low=interval.low,
            high=finite_or_none(interval.high),
            measured=measured,
        )


def figure_text(figure: SpeedupFigure, against: str) -> str:
    """How a speedup reads: '2.10x [2.05, 2.16] over the reference (same rounds), faster';
    '1.62x [1.31, 2.01] over the parent (timed apart), faster'; '1.62x over the parent (timed
    apart, no interval)'; '1.62x over the reference (no interval)'."""
    how = {"same_rounds": "same rounds", "apart": "timed apart"}.get(figure.measured)
    if figure.low is None:
        said = f"{how}, no interval" if how else "no interval"
        return f"{figure.estimate:.3g}x over {against} ({said})"
    high = "inf" if figure.high is None else f"{figure.high:.3g}"
    text = f"{figure.estimate:.3g}x [{figure.low:.3g}, {high}] over {against}"
    if how:
        text += f" ({how})"
    return f"{text}, {figure.verdict}"


class BestFigures(BaseModel):
    """The run's best kernel and how much faster it is, with intervals, against what."""

    solution_id: str
    latency_ms: float
    is_initial: bool
    """The initial kernel is still the best (nothing beat it)."""
    over_reference: SpeedupFigure | None = None
    """Against the task's reference, timed in the same rounds as the kernel."""
    over_initial: SpeedupFigure | None = None
    """Against the run's initial kernel (None when it is the initial kernel)."""


def _entry_of(checkpoint: Checkpoint, solution_id: str) -> BeamEntry | None:
    """What the checkpoint knows of a kernel's figures: as a beam entry, an attempt or the
    initial kernel."""
    for entry in checkpoint.beam:
        if entry.solution_id == solution_id:
            return entry
    for slot in checkpoint.slots.values():
        found = slot.as_beam_entry()
        if found is not None and found.solution_id == solution_id:
            return found
    initial = checkpoint.initial
    return initial if initial is not None and initial.solution_id == solution_id else None


def best_figures(
    checkpoint: Checkpoint, best_solution_id: str | None, confidence: float = 0.95
) -> BestFigures | None:
    """The best kernel's speedups over the reference and over the initial kernel with their
    intervals; None when the checkpoint does not know the kernel."""
    if best_solution_id is None:
        return None
    entry = _entry_of(checkpoint, best_solution_id)
    if entry is None:
        return None
    initial = checkpoint.initial
    figures = BestFigures(
        solution_id=entry.solution_id,
        latency_ms=entry.latency_ms,
        is_initial=initial is not None and initial.solution_id == entry.solution_id,
    )
    reference = entry.reference_interval
    if reference is not None:
        figures.over_reference = SpeedupFigure.of(reference, "same_rounds")
    elif entry.reference_speedup is not None:
        figures.over_reference = SpeedupFigure(estimate=entry.reference_speedup, measured="point")
    if initial is not None and not figures.is_initial and entry.latency_ms > 0:
        theirs, ours = initial.latency_interval, entry.latency_interval
        if theirs is not None and ours is not None:
            ratio = ratio_of_independent(theirs, ours, confidence)
            figures.over_initial = SpeedupFigure.of(ratio, "apart")
        else:
            figures.over_initial = SpeedupFigure(
                estimate=initial.latency_ms / entry.latency_ms, measured="point"
            )
    return figures


class RunProgress(BaseModel):
    attempts_done: int
    attempts_passed: int
    attempts_failed: int
    iteration: int
    iterations_total: int
    progress: float
    initial_latency_ms: float | None
    elapsed_s: float


def run_progress(spec: RunSpec, checkpoint: Checkpoint, *, running: bool) -> RunProgress:
    cfg = spec.optimize
    slots = list(checkpoint.slots.values())
    passed = sum(1 for s in slots if s.passed)
    current = [s for s in slots if s.iteration == checkpoint.completed_iteration + 1]
    fraction = min(1.0, len(current) / max(1, cfg.attempts_per_iteration))
    progress = min(1.0, (checkpoint.completed_iteration + fraction) / cfg.iterations)
    elapsed = checkpoint.elapsed_before_s
    if running and checkpoint.started_at is not None:
        elapsed += max(0.0, time.time() - checkpoint.started_at)
    return RunProgress(
        attempts_done=len(slots),
        attempts_passed=passed,
        attempts_failed=len(slots) - passed,
        iteration=checkpoint.completed_iteration,
        iterations_total=cfg.iterations,
        progress=progress,
        initial_latency_ms=checkpoint.initial.latency_ms if checkpoint.initial else None,
        elapsed_s=elapsed,
    )


def change_settings(store: KernelStore, run_id: str, **changes: Any) -> OptimizeConfig:
    """Change a stored run's settings before resuming it (e.g. a larger budget, more
    iterations, another cluster). Only budget, iteration and where-to-profile fields may
    change: the rest shaped what is stored."""
    allowed = {"iterations", "budget_usd", "budget_tokens", "budget_wall_s", "cluster", "workers"}
    unknown = set(changes) - allowed
    if unknown:
        raise ValueError(
            f"cannot change {sorted(unknown)} of an existing run; only {sorted(allowed)}"
        )
    _, spec, checkpoint = load_run(store, run_id)
    if "iterations" in changes and changes["iterations"] < checkpoint.completed_iteration:
        raise ValueError(
            f"run {run_id} already finished {checkpoint.completed_iteration} iterations; "
            "iterations cannot be set lower than that"
        )
    settings = OptimizeConfig.model_validate({**spec.optimize.model_dump(), **changes})
    spec = spec.model_copy(update={"optimize": settings})
    store.update_run(run_id, RunUpdate(config=run_config(spec, checkpoint)))
    return settings


def result_text(run: RunRecord, checkpoint: Checkpoint) -> str:
    """What the run found: its best kernel against the initial one, or why none beat it."""
    initial = checkpoint.initial
    attempts = list(checkpoint.slots.values())
    improved = (
        initial is not None
        and run.best_solution_id is not None
        and run.best_solution_id != initial.solution_id
        and run.best_latency_ms is not None
    )
    if improved:
        assert initial is not None and run.best_latency_ms is not None
        ratio = speedup(initial.latency_ms, run.best_latency_ms)
        against = [f"{ratio:.2f}x over the initial kernel"] if ratio else []
        figures = best_figures(checkpoint, run.best_solution_id)
        if figures is not None and figures.over_reference is not None:
            against.append(f"{figures.over_reference.estimate:.2f}x over the reference")
        shown = f" ({', '.join(against)})" if against else ""
        return f"best {run.best_latency_ms:.4g} ms{shown}"
    failures = _failures_text(attempts)
    passed = sum(1 for a in attempts if a.passed)
    start = f" ({initial.latency_ms:.4g} ms)" if initial is not None else ""
    if not attempts:
        return f"but no attempt was made: the initial kernel{start} is still the best"
    if passed == 0:
        return f"but no attempt passed: the initial kernel{start} is still the best ({failures})"
    flagged = sum(1 for a in attempts if a.passed and not a.trusted)
    untrusted = f", {flagged} of them flagged untrusted" if flagged else ""
    failed_text = f"; {failures}" if failures else ""
    return f"but no attempt beat the initial kernel{start}: {passed} passed{untrusted}{failed_text}"


NO_KERNEL = frozenset({LLM_FAILED, NO_PLAN, NO_CODE})
"""Attempt states in which no kernel was written: the LLM call failed (a failed planner call
leaves every attempt of its plans so, with one call in the ledger), gave no plan, or answered
without code."""


def _failures_text(attempts: list[Any]) -> str:
    """'2 kernels failed: 2 RUNTIME_ERROR; 6 attempts got no kernel from the LLM: 6
    LLM_FAILED': kernels that ran and failed apart from attempts that never had one, so that
    the counts are not read as LLM calls (list_llm_calls counts those)."""

    def listing(statuses: Counter[str]) -> str:
        return ", ".join(f"{n} {status}" for status, n in statuses.most_common())

    ran = Counter(a.status for a in attempts if not a.passed and a.status not in NO_KERNEL)
    none = Counter(a.status for a in attempts if not a.passed and a.status in NO_KERNEL)
    parts = []
    if ran:
        count = sum(ran.values())
        parts.append(f"{count} kernel{'s' if count != 1 else ''} failed: {listing(ran)}")
    if none:
        count = sum(none.values())
        parts.append(
            f"{count} attempt{'s' if count != 1 else ''} got no kernel from the LLM: "
            f"{listing(none)}"
        )
    return "; ".join(parts)
