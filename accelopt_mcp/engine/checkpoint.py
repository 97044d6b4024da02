"""What a run keeps so that it can resume after any crash.

Layout of runs.config: {"request": ..., "optimize": OptimizeConfig, "task": Task,
"initial_solution": Solution, "checkpoint": Checkpoint without its per-attempt parts}. Those
parts are rows of their own (the store's run entries, one small row per change): "slot" (a
finished attempt, AttemptRecord), "pending" (an attempt whose kernel is stored but not yet
recorded, PendingAttempt) and "plans" (one beam kernel's N plans). So a finished attempt writes
one row, not the whole growing checkpoint; the config is rewritten when the run starts, when
an iteration ends and when the run ends. Profiles, solutions and experiences are rows too,
written before the checkpoint mentions them.

Runs written before entries existed hold slots, pending attempts and plans in the config
itself; they load as they are, and their first worker moves them into entries
(`Checkpoint.inline_entries`) before it writes the config again.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from accelopt_mcp.engine.config import OptimizeConfig
from accelopt_mcp.engine.selection import AttemptRecord, BeamEntry, TieDecision
from accelopt_mcp.models import Solution, Task
from accelopt_mcp.store.base import RunEntry, RunRecord

EntryKind = Literal["slot", "pending", "plans"]
ENTRY_FIELDS: tuple[str, ...] = ("slots", "pending", "plans")
"""The Checkpoint fields kept as run entries, not in runs.config."""

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
    plan_diversity: float | None = None
    """Mean over the beam kernels of planner.plan_diversity of their plans (0: identical
    plans, 1: no shared content word); None when no kernel had two plans."""
    repaired: int = 0
    """Attempts that passed after at least one repair try."""


class PendingAttempt(BaseModel):
    """An executor's kernel that is stored but not yet profiled (or whose profile is not yet
    in the slot): a resumed run profiles this kernel, or takes its stored profile, instead of
    asking the executor again (a second reply is another kernel, and the first one's result
    would be lost)."""

    solution_id: str
    source_hash: str
    repairs: int = 0
    """Repair tries made so far: this kernel is the executor's fix number `repairs`."""
    repaired_from: list[str] = Field(default_factory=list)
    """The failed kernels before it, oldest first (the first is the executor's own attempt)."""


class Checkpoint(BaseModel):
    completed_iteration: int = 0
    initial: BeamEntry | None = None
    beam: list[BeamEntry] = Field(default_factory=list)
    seed_experience_ids: list[str] | None = None
    """None until the run has chosen its seeds (possibly none)."""
    plans: dict[str, list[str | None]] = Field(default_factory=dict)
    """"iteration/beam_index" -> the N plans (None: the planner failed for that sample)."""
    slots: dict[str, AttemptRecord] = Field(default_factory=dict)
    """Finished attempts by slot key ("iteration/beam/plan/attempt")."""
    pending: dict[str, PendingAttempt] = Field(default_factory=dict)
    """Slots whose kernel is stored but whose attempt has not finished (see PendingAttempt)."""
    history: list[IterationSummary] = Field(default_factory=list)
    ties: list[TieDecision] = Field(default_factory=list)
    """Beam decisions that were ties (selection.next_beam), oldest first; a finished iteration
    adds its own with its beam, in the same write."""
    hardware: str | None = None
    prompt_hardware: str | None = None
    """The hardware block every prompt of the run shows (hardware_block.describe_hardware of
    the initial kernel's evaluation, with the pool's cores), built once when the run starts:
    every role, every iteration and every resume show this one text."""
    prompt_contract: str | None = None
    """The contract every prompt of the run shows (contract.contract_lines with the run's
    benchmark settings and the pool's cores), built with prompt_hardware."""
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

    _inline: list[tuple[EntryKind, str]] = PrivateAttr(default_factory=list)

    def inline_entries(self) -> list[tuple[EntryKind, str, dict[str, Any]]]:
        """(kind, key, data) of the per-attempt parts this checkpoint was read with from the
        config itself (a run written before entries existed): to be written as entries."""
        found: list[tuple[EntryKind, str, dict[str, Any]]] = []
        for kind, key in self._inline:
            data = self.entry_data(kind, key)
            if data is not None:
                found.append((kind, key, data))
        return found

    def entries_moved(self) -> None:
        self._inline.clear()

    def entry_data(self, kind: EntryKind, key: str) -> dict[str, Any] | None:
        """The entry (kind, key) as stored: a slot, a pending attempt or a kernel's plans."""
        if kind == "slot":
            slot = self.slots.get(key)
            return slot.model_dump(mode="json") if slot is not None else None
        if kind == "pending":
            pending = self.pending.get(key)
            return pending.model_dump(mode="json") if pending is not None else None
        plans = self.plans.get(key)
        return {"plans": list(plans)} if plans is not None else None

    def read_entry(self, entry: RunEntry) -> bool:
        """Takes in a stored entry (entry_data's inverse): a slot, a pending attempt or a
        kernel's plans; False for a kind this version does not know (left out). An entry that
        does not validate raises what validating it raises."""
        if entry.kind == "slot":
            self.slots[entry.key] = AttemptRecord.model_validate(entry.data)
        elif entry.kind == "pending":
            self.pending[entry.key] = PendingAttempt.model_validate(entry.data)
        elif entry.kind == "plans":
            self.plans[entry.key] = list(entry.data.get("plans") or [])
        else:
            return False
        return True

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


def read_run(run: RunRecord, entries: list[RunEntry] | None = None) -> tuple[RunSpec, Checkpoint]:
    """The run's spec and checkpoint: its config, with its entries (store.run_entries) over
    what the config itself holds of slots, pending attempts and plans."""
    config = dict(run.config)
    if "optimize" not in config or "task" not in config:
        raise ValueError(
            f"run {run.id} was not created by the optimization engine (its config has no "
            "optimize/task sections); it cannot be resumed"
        )
    fields = {
        key: config[key]
        for key in ("optimize", "task", "initial_solution", "request")
        if key in config
    }
    if isinstance(fields.get("optimize"), dict):
        # A run stored before these settings existed goes on as it started: the paper's
        # independent plans, no repairs, a FIFO memory (the new defaults would change it
        # halfway through).
        fields["optimize"] = {**_SETTINGS_BEFORE_THEY_EXISTED, **fields["optimize"]}
    spec = RunSpec.model_validate(fields)
    checkpoint = Checkpoint.model_validate(config.get("checkpoint") or {})
    inline: list[tuple[EntryKind, str]] = [
        *(("slot", key) for key in checkpoint.slots),
        *(("pending", key) for key in checkpoint.pending),
        *(("plans", key) for key in checkpoint.plans),
    ]
    newest: float | None = None
    for entry in entries or []:
        if not checkpoint.read_entry(entry):
            continue
        stamp = _timestamp(entry.updated_at)
        if stamp is not None and (newest is None or stamp > newest):
            newest = stamp
    # A pending attempt whose slot has since finished is done with (its entry stays as it
    # was: clearing it would cost a write per attempt); an unfinished slot (LLM_FAILED, tried
    # again) does not end it.
    for key in list(checkpoint.pending):
        slot = checkpoint.slots.get(key)
        if slot is not None and slot.status in FINAL_SLOT_STATES:
            del checkpoint.pending[key]
    stored = {(entry.kind, entry.key) for entry in entries or []}
    checkpoint._inline = [item for item in inline if item not in stored]
    if newest is not None and (checkpoint.saved_at is None or newest > checkpoint.saved_at):
        # Entries are written between config writes: the worker was alive until the last.
        checkpoint.saved_at = newest
    return spec, checkpoint


_SETTINGS_BEFORE_THEY_EXISTED: dict[str, Any] = {
    "plan_mode": "independent",
    "repair_tries": 0,
    "memory_policy": "fifo",
}


def _timestamp(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def run_config(spec: RunSpec, checkpoint: Checkpoint) -> dict[str, Any]:
    """runs.config: the spec and the checkpoint without the parts kept as entries, except
    those a run from before entries still keeps inline (not yet moved: writing the config
    without them would lose them)."""
    data = checkpoint.model_dump(mode="json", exclude=set(ENTRY_FIELDS))
    inline: dict[str, dict[str, Any]] = {"slots": {}, "pending": {}, "plans": {}}
    field_of = {"slot": "slots", "pending": "pending", "plans": "plans"}
    for kind, key, entry in checkpoint.inline_entries():
        inline[field_of[kind]][key] = entry["plans"] if kind == "plans" else entry
    data.update({name: found for name, found in inline.items() if found})
    return {**spec.model_dump(mode="json"), "checkpoint": data}
