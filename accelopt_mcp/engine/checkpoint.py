"""What a run keeps in its row (runs.config) so that it can resume after any crash.

Layout of runs.config: {"request": ..., "optimize": OptimizeConfig, "task": Task,
"initial_solution": Solution, "checkpoint": Checkpoint}. The checkpoint is rewritten after every
finished attempt and every planner reply; profiles, solutions and experiences are rows of their
own, written before the checkpoint mentions them.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.selection import AttemptRecord, BeamEntry, TieDecision
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import RunRecord

FINAL_SLOT_STATES = frozenset(
    {
        "PASSED",
        "INCORRECT_SHAPE",
        "INCORRECT_NUMERICAL",
        "INCORRECT_DTYPE",
        "RUNTIME_ERROR",
        "COMPILE_ERROR",
        "TIMEOUT",
        "NO_CODE",
    }
)
"""Slot states a resumed run keeps. LLM_FAILED slots are tried again: nothing was stored."""


class IterationSummary(BaseModel):
    iteration: int
    best_latency_ms: float | None
    attempts: int
    passed: int
    """Attempts that passed (flagged ones included)."""
    failed: int
    flagged: int = 0
    """Attempts that passed with an untrusted flag: stored, but never beam, pair or best."""
    experiences_added: int
    beam: list[str] = Field(default_factory=list)
    wall_s: float = 0.0


class Checkpoint(BaseModel):
    completed_iteration: int = 0
    initial: BeamEntry | None = None
    beam: list[BeamEntry] = Field(default_factory=list)
    seed_experience_ids: list[str] | None = None
    """None until the run has chosen its seeds (possibly none)."""
    plans: dict[str, list[str | None]] = Field(default_factory=dict)
    """"iteration/beam_index" -> the N plans (None: the planner failed for that sample)."""
    slots: dict[str, AttemptRecord] = Field(default_factory=dict)
    history: list[IterationSummary] = Field(default_factory=list)
    ties: list[TieDecision] = Field(default_factory=list)
    """Beam decisions that were ties (selection.next_beam), oldest first; a finished iteration
    adds its own with its beam, in the same write."""
    hardware: str | None = None
    worker_pid: int | None = None
    worker_host: str | None = None
    stop_reason: str | None = None
    output_dir: str | None = None
    winning_kernel_path: str | None = None
    started_at: float | None = None
    """Unix time the current worker started; elapsed time adds up over resumes."""
    elapsed_before_s: float = 0.0
    saved_at: float | None = None
    """Unix time of the worker's last checkpoint write: a worker that died without finishing
    (started_at still set) had run until at least then."""

    def slots_of(self, iteration: int) -> list[AttemptRecord]:
        return [s for s in self.slots.values() if s.iteration == iteration]

    def ties_of(self, iteration: int) -> list[TieDecision]:
        return [t for t in self.ties if t.iteration == iteration]

    def best_so_far(self) -> BeamEntry:
        """The run's best kernel as the checkpoint knows it: the head of the beam (its first
        place was settled when the last iteration finished, ties re-measured), unless an
        attempt of the iteration under way has a lower median (provisional until that
        iteration settles its beam). Flagged attempts never count. For checkpoints written
        before ties were settled this is the fastest correct, trusted kernel, as it was."""
        assert self.initial is not None
        settled = self.beam[0] if self.beam else self.initial
        later = [
            entry
            for slot in self.slots.values()
            if slot.iteration > self.completed_iteration
            and (entry := slot.as_beam_entry()) is not None
        ]
        return min([settled, *later], key=lambda e: e.latency_ms)

    def start_clock(self) -> None:
        """A worker starts (or resumes) the run now."""
        if self.started_at is not None and self.saved_at is not None:
            # The last worker died without finishing (SIGKILL, crash): its time counts too,
            # up to its last checkpoint, or a wall budget would start afresh after every crash.
            self.elapsed_before_s += max(0.0, self.saved_at - self.started_at)
        self.started_at = time.time()

    def stop_clock(self) -> None:
        """The worker is done with the run: its time so far joins elapsed_before_s."""
        started = self.started_at or time.time()
        self.elapsed_before_s += time.time() - started
        self.started_at = None


class RunSpec(BaseModel):
    """The parts of runs.config that never change after the run is created."""

    optimize: OptimizeConfig
    task: Task
    initial_solution: Solution
    request: dict[str, Any] = Field(default_factory=dict)


def read_run(run: RunRecord) -> tuple[RunSpec, Checkpoint]:
    config = dict(run.config)
    if "optimize" not in config or "task" not in config:
        raise ValueError(
            f"run {run.id} was not created by the optimization engine (its config has no "
            "optimize/task sections); it cannot be resumed"
        )
    spec = RunSpec.model_validate(
        {
            key: config[key]
            for key in ("optimize", "task", "initial_solution", "request")
            if key in config
        }
    )
    checkpoint = Checkpoint.model_validate(config.get("checkpoint") or {})
    return spec, checkpoint


def run_config(spec: RunSpec, checkpoint: Checkpoint) -> dict[str, Any]:
    return {**spec.model_dump(mode="json"), "checkpoint": checkpoint.model_dump(mode="json")}
