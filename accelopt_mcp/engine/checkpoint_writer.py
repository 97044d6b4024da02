"""Writing a run's row: its checkpoint (runs.config) and figures, one write at a time."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from accelopt_mcp.engine.checkpoint import EntryKind, RunSpec, run_config
from accelopt_mcp.engine.live_run import LiveRun
from accelopt_mcp.llm import Budget
from accelopt_mcp.store.base import KernelStore, RunUpdate

log = logging.getLogger(__name__)


class CheckpointWriter:
    """`save` writes the checkpoint's config part (checkpoint.py: everything but the
    per-attempt entries); `save_entry` one entry. Both write the run's spending and best
    kernel so far along. Writes are serialized, so the row always ends with the newest
    snapshot."""

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
            checkpoint = self.state.checkpoint
            checkpoint.saved_at = time.time()
            update = RunUpdate(
                config=run_config(self.spec, checkpoint), **self._figures(budget, fields)
            )
            await self._write(lambda: self.store.update_run(self.run_id, update))

    async def save_entry(
        self, budget: Budget | None, kind: EntryKind, key: str, **fields: Any
    ) -> None:
        """Write the checkpoint's entry (kind, key) as it is now, and the run's figures."""
        async with self._lock:
            data = self.state.checkpoint.entry_data(kind, key)
            if data is None:
                raise KeyError(f"the checkpoint has no {kind} {key!r} to write")
            update = RunUpdate(**self._figures(budget, fields))

            def write() -> None:
                self.store.put_run_entry(self.run_id, kind, key, data)
                self.store.update_run(self.run_id, update)

            await self._write(write)

    async def move_inline_entries(self) -> int:
        """Write as entries what a run from before entries kept in its config (once, before
        the config is written without them); how many."""
        moved = self.state.checkpoint.inline_entries()
        if not moved:
            return 0
        async with self._lock:

            def write() -> None:
                for kind, key, data in moved:
                    self.store.put_run_entry(self.run_id, kind, key, data)

            await self._write(write)
            self.state.checkpoint.entries_moved()
        return len(moved)

    def _figures(self, budget: Budget | None, fields: dict[str, Any]) -> dict[str, Any]:
        if budget is not None:
            usage = budget.usage()
            fields.setdefault("tokens_in", usage.tokens_in)
            fields.setdefault("tokens_out", usage.tokens_out)
            fields.setdefault("cost_usd", usage.cost_usd)
        best = self.state.best
        if best is not None:
            fields.setdefault("best_solution_id", best.solution_id)
            fields.setdefault("best_latency_ms", best.latency_ms)
        return fields

    async def _write(self, write: Callable[[], object]) -> None:
        # Stores are synchronous; a round trip must not stall the event loop.
        task = asyncio.ensure_future(asyncio.to_thread(write))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            # The write goes on in its thread; keep the lock until it lands so that an older
            # snapshot can never overwrite a later one.
            await task
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
