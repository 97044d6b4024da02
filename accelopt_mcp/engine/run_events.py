"""Sending one run's progress events, each with the run's figures at that moment."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from accelopt_mcp.engine.checkpoint import RunSpec
from accelopt_mcp.engine.events import (
    Activity,
    ActivityWatcher,
    EngineEvent,
    EventKind,
    EventSink,
)
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
        *,
        llm_in_flight: Callable[[], Mapping[str, int]] | None = None,
        profiling_busy: Callable[[], int] | None = None,
        devices: int = 0,
        devices_where: str = "",
    ) -> None:
        """sink: where events go; None: nowhere. llm_in_flight: LLM calls in flight per role
        (LlmClient.in_flight); profiling_busy: attempts being profiled right now (the profiling
        pool's busy slots), of `devices` (EvaluationPool.size, at `devices_where`). Both
        callables are read for every event and, by a sink that watches the run's activity
        (ActivityWatcher, e.g. the CLI's live display), from its own thread between events; a
        callable that fails counts as nothing in flight."""
        self.sink = sink
        self.run_id = run_id
        self.spec = spec
        self.state = state
        self.budget = budget
        self._llm_in_flight = llm_in_flight
        self._profiling_busy = profiling_busy
        self._devices = devices
        self._devices_where = devices_where
        if isinstance(sink, ActivityWatcher):
            try:
                sink.watch_activity(self.activity)
            except Exception:  # a broken display must not stop a run
                log.exception("progress display refused the activity source")

    def activity(self) -> Activity:
        """The LLM calls in flight per role and the attempts being profiled, now."""
        return Activity(
            llm_waiting=self._waiting(),
            profiling=self._profiling(),
            devices=self._devices,
            devices_where=self._devices_where,
        )

    def _waiting(self) -> dict[str, int]:
        if self._llm_in_flight is None:
            return {}
        # Another thread may read this while the event loop changes the counts: a copy that
        # races a change is taken again, and a source that keeps failing means "none known".
        for _ in range(3):
            try:
                counts = dict(self._llm_in_flight())
            except RuntimeError:
                continue
            except Exception:
                log.debug("llm_in_flight failed", exc_info=True)
                return {}
            return {role: int(n) for role, n in counts.items() if n > 0}
        return {}

    def _profiling(self) -> int:
        if self._profiling_busy is None:
            return 0
        try:
            return max(0, int(self._profiling_busy()))
        except Exception:
            log.debug("profiling_busy failed", exc_info=True)
            return 0

    def emit(self, kind: EventKind, iteration: int, message: str) -> None:
        if self.sink is None:
            return
        progress = run_progress(self.spec, self.state.checkpoint, running=True)
        usage = self.budget.usage()
        best = self.state.best
        activity = self.activity()
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
            llm_waiting=activity.llm_waiting,
            profiling=activity.profiling,
            devices=activity.devices,
            devices_where=activity.devices_where,
        )
        try:
            self.sink(event)
        except Exception:  # a broken display must not stop a run
            log.exception("progress callback failed")
