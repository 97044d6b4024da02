"""Sending one run's progress events, each with the run's figures at that moment."""

from __future__ import annotations

import logging

from accelopt_mcp.engine.checkpoint import RunSpec
from accelopt_mcp.engine.events import EngineEvent, EventKind, EventSink
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.engine.runs import run_progress
from accelopt_mcp.llm import Budget

log = logging.getLogger(__name__)


class RunEvents:
    def __init__(
        self,
        sink: EventSink | None,
        run_id: str,
        spec: RunSpec,
        state: LiveRun,
        budget: Budget,
    ) -> None:
        """sink: where events go; None: nowhere."""
        self.sink = sink
        self.run_id = run_id
        self.spec = spec
        self.state = state
        self.budget = budget

    def emit(self, kind: EventKind, iteration: int, message: str) -> None:
        if self.sink is None:
            return
        progress = run_progress(self.spec, self.state.checkpoint, running=True)
        usage = self.budget.usage()
        best = self.state.best
        event = EngineEvent(
            run_id=self.run_id,
            kind=kind,
            iteration=iteration,
            message=message,
            best_latency_ms=best.latency_ms if best else None,
            initial_latency_ms=progress.initial_latency_ms,
            attempts_done=progress.attempts_done,
            attempts_passed=progress.attempts_passed,
            attempts_failed=progress.attempts_failed,
            iterations_total=self.spec.optimize.iterations,
            progress=progress.progress,
            cost_usd=usage.cost_usd,
            tokens_in=usage.tokens_in,
            tokens_out=usage.tokens_out,
        )
        try:
            self.sink(event)
        except Exception:  # a broken display must not stop a run
            log.exception("progress callback failed")
