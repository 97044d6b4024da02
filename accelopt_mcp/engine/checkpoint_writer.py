"""Writing a run's row: its checkpoint (runs.config) and figures, one write at a time."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from accelopt_mcp.engine.checkpoint import RunSpec, run_config
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.llm import Budget
from accelopt_mcp.store.base import KernelStore, RunUpdate

log = logging.getLogger(__name__)


class CheckpointWriter:
    """Each save writes the whole checkpoint with the run's spending and best kernel so far.
    Saves are serialized, so the row always ends with the newest snapshot."""

    def __init__(self, store: KernelStore, run_id: str, spec: RunSpec, state: LiveRun) -> None:
        self.store = store
        self.run_id = run_id
        self.spec = spec
        self.state = state
        self._lock = asyncio.Lock()

    async def save(self, budget: Budget | None, **fields: Any) -> None:
        """fields: RunUpdate fields to write along. budget: the run's, once it has one (None:
        the row keeps its spending figures)."""
        async with self._lock:
            if budget is not None:
                usage = budget.usage()
                fields.setdefault("tokens_in", usage.tokens_in)
                fields.setdefault("tokens_out", usage.tokens_out)
                fields.setdefault("cost_usd", usage.cost_usd)
            best = self.state.best
            if best is not None:
                fields.setdefault("best_solution_id", best.solution_id)
                fields.setdefault("best_latency_ms", best.latency_ms)
            checkpoint = self.state.checkpoint
            checkpoint.saved_at = time.time()
            update = RunUpdate(config=run_config(self.spec, checkpoint), **fields)
            # Stores are synchronous; a round trip must not stall the event loop.
            write = asyncio.ensure_future(
                asyncio.to_thread(self.store.update_run, self.run_id, update)
            )
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # The write goes on in its thread; keep the lock until it lands so that an
                # older snapshot can never overwrite a later one.
                await write
                raise

    async def record_failure(self, exc: BaseException, budget: Budget | None) -> None:
        """The run ended with exc: record it as cancelled or failed, with the reason."""
        if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
            status, message = "cancelled", "cancelled"
        else:
            status, message = "failed", f"{type(exc).__name__}: {exc}"
        checkpoint = self.state.checkpoint
        checkpoint.stop_reason = message
        checkpoint.stop_clock()
        try:
            await asyncio.shield(self.save(budget, status=status, error=message[:2000]))
        except Exception:  # the store itself may be what failed
            log.exception("run %s: could not record the failure", self.run_id)
