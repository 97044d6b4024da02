"""Progress events the engine emits while a run goes on, and what the run is busy with between
them (the LLM calls it waits on, per role, and the attempts being profiled)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

EventKind = Literal[
    "run_started",
    "iteration_started",
    "attempt_profiled",
    "attempt_repaired",
    "best_improved",
    "experience_added",
    "experience_refused",
    "tie_decided",
    "iteration_finished",
    "run_finished",
    "run_interrupted",
]


class Activity(BaseModel):
    """What a run is doing at one moment."""

    model_config = ConfigDict(frozen=True)

    llm_waiting: dict[str, int] = Field(default_factory=dict)
    """LLM calls in flight per role (planner, executor, summarizer); roles with none left out."""
    profiling: int = 0
    """Attempts being profiled (profiling slots busy)."""
    devices: int = 0
    """Profiling devices the run has (0: not known)."""
    devices_where: str = ""
    """Where those devices are, e.g. "4 CPU on the Ray cluster at head:6379"."""

    def describe(self) -> str:
        """E.g. "waiting on planner (3 calls), executor (1 call); profiling 2 attempts on 2/4
        devices"; "idle" when nothing is in flight."""
        return describe_activity(self.llm_waiting, self.profiling, self.devices)


def describe_activity(llm_waiting: Mapping[str, int], profiling: int, devices: int = 0) -> str:
    parts = []
    calls = [(role, n) for role, n in llm_waiting.items() if n > 0]
    if calls:
        parts.append(
            "waiting on "
            + ", ".join(f"{role} ({n} call{'' if n == 1 else 's'})" for role, n in calls)
        )
    if profiling > 0:
        shown = f"profiling {profiling} attempt{'' if profiling == 1 else 's'}"
        if devices:
            shown += f" on {min(profiling, devices)}/{devices} devices"
        parts.append(shown)
    return "; ".join(parts) or "idle"


ActivitySource = Callable[[], Activity]


class EngineEvent(BaseModel):
    run_id: str
    kind: EventKind
    iteration: int
    message: str
    best_latency_ms: float | None = None
    initial_latency_ms: float | None = None
    attempts_done: int = 0
    attempts_passed: int = 0
    attempts_failed: int = 0
    iterations_total: int = 0
    progress: float = Field(default=0.0, ge=0.0, le=1.0)
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    llm_waiting: dict[str, int] = Field(default_factory=dict)
    """LLM calls in flight per role when the event was sent (roles with none left out)."""
    profiling: int = 0
    """Attempts being profiled when the event was sent."""
    devices: int = 0
    """Profiling devices the run has (0: not known)."""
    devices_where: str = ""
    """Where they are: this host's cores, or a Ray cluster's devices."""
    at: float = Field(default_factory=time.time)

    @property
    def activity(self) -> Activity:
        return Activity(
            llm_waiting=self.llm_waiting,
            profiling=self.profiling,
            devices=self.devices,
            devices_where=self.devices_where,
        )


EventSink = Callable[[EngineEvent], None]


@runtime_checkable
class ActivityWatcher(Protocol):
    """A sink that also shows what the run is doing between events (a live display): the
    engine hands it a callable that returns the current Activity, safe to call from any
    thread, at any time while the run goes on."""

    def __call__(self, event: EngineEvent) -> None: ...

    def watch_activity(self, source: ActivitySource) -> None: ...
