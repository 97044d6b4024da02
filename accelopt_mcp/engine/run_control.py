"""Stopping a run: why it stops, and the tasks to cancel when it does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, NamedTuple, TypeVar

from accelopt_mcp.llm import BudgetExceeded

log = logging.getLogger(__name__)
T = TypeVar("T")


class StopRequest(NamedTuple):
    status: str
    """The status the run ends with, e.g. cancelled or budget_exhausted."""
    reason: str


class RunControl:
    """The first stop request wins; work spawned here is cancelled when one comes."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.stop: StopRequest | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def stopping(self) -> bool:
        return self.stop is not None

    def request_stop(self, status: str, reason: str) -> None:
        """Stop soon: work in flight is abandoned, everything stored so far stays."""
        if self.stop is None:
            self.stop = StopRequest(status, reason)
        for task in list(self._tasks):
            task.cancel()

    def budget_ran_out(self, reason: str) -> None:
        """Stop starting work; what is in flight finishes (no cancellation)."""
        if self.stop is None:
            self.stop = StopRequest("budget_exhausted", reason)

    def call_refused(self, exc: BudgetExceeded) -> None:
        """An LLM call was refused for the budget: the run stops like budget_ran_out."""
        if self.stop is None:
            log.info("run %s: %s", self.run_id, exc.reason)
        self.budget_ran_out(exc.reason)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A task that a stop request cancels."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
