"""The small values the iteration loop's modules (iterations.py, planning.py, attempts.py)
pass around: a beam kernel as one iteration's prompts see it (BeamKernel), the place of one
attempt in the run (Slot), and the live handles every chain of the run shares (LoopScope)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accelopt_mcp.engine.context import RunContext
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.engine.llm_health import LlmHealth
from accelopt_mcp.engine.run_control import RunControl
from accelopt_mcp.engine.selection import AttemptRecord, BeamEntry, slot_key
from accelopt_mcp.models import Evaluation, Solution


@dataclass(frozen=True)
class Slot:
    """Where one attempt goes: iteration, beam kernel b, plan sample p, attempt a."""

    iteration: int
    b: int
    p: int
    a: int

    @property
    def key(self) -> str:
        """'iteration/b/p/a': how the checkpoint files the slot (selection.slot_key)."""
        return slot_key(self.iteration, self.b, self.p, self.a)

    def kernel_name(self, ctx: RunContext, repair: int | None = None) -> str:
        """The name the slot's kernel (or its `repair`-th fix) is stored under."""
        name = (
            f"{ctx.task.definition.name}-{ctx.run_id[:8]}-"
            f"i{self.iteration}b{self.b}p{self.p}a{self.a}"
        )
        return name if repair is None else f"{name}r{repair}"

    def meta(self, ctx: RunContext, plan: str) -> dict[str, Any]:
        """What every kernel of the slot is stored with (its evolve_metadata)."""
        return {
            "run_id": ctx.run_id,
            "iteration": self.iteration,
            "beam_index": self.b,
            "plan_index": self.p,
            "plan": plan,
            "attempt_index": self.a,
            "models": ctx.models,
        }

    def record(self, entry: BeamEntry, status: str, **fields: Any) -> AttemptRecord:
        """The slot's finished attempt, from the beam kernel `entry` it started from."""
        return AttemptRecord(
            iteration=self.iteration,
            beam_index=self.b,
            plan_index=self.p,
            attempt_index=self.a,
            parent_id=entry.solution_id,
            parent_latency_ms=entry.latency_ms,
            status=status,
            **fields,
        )


@dataclass(frozen=True)
class BeamKernel:
    """A beam kernel as its iteration's prompts see it, with its place in the iteration."""

    iteration: int
    b: int
    entry: BeamEntry
    solution: Solution
    profile: Evaluation | None
    """Its stored profile on this task and settings (None: not found)."""
    hardware: str
    """The hardware block of its prompts: the run's one text (Checkpoint.prompt_hardware)."""

    @property
    def plans_key(self) -> str:
        """'iteration/b': how the checkpoint files this kernel's plans."""
        return f"{self.iteration}/{self.b}"

    def slot(self, p: int, a: int) -> Slot:
        return Slot(self.iteration, self.b, p, a)


@dataclass(frozen=True)
class LoopScope:
    """What every chain of a started run shares: its context, live state, stop control and
    the health of its LLM."""

    ctx: RunContext
    state: LiveRun
    control: RunControl
    health: LlmHealth

    def llm_failed(self, role: str, exc: Exception) -> None:
        """A call failed for good: stop the run once the LLM looks gone (llm_health)."""
        # LlmCallFailed.attempts: the requests it sent, each a row of the ledger.
        reason = self.health.failed(role, str(exc), requests=getattr(exc, "attempts", 1))
        if reason is not None:
            self.control.request_stop("llm_unavailable", reason)
