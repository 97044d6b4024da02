"""Progress events the engine emits while a run goes on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field

EventKind = Literal[
    "run_started",
    "iteration_started",
    "attempt_profiled",
    "best_improved",
    "experience_added",
    "tie_decided",
    "iteration_finished",
    "run_finished",
]


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
    at: float = Field(default_factory=time.time)


EventSink = Callable[[EngineEvent], None]
