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
from accelopt_mcp.store.base import KernelStore, LeaseLostError, RunUpdate, StoreOutageError

log = logging.getLogger(__name__)


class CheckpointWriter:
    """`save` writes the checkpoint's config part (checkpoint.py: everything but the
    per-attempt entries); `save_entry` one entry. Both write the run's spending and best
    kernel so far along. Writes are serialized, so the row always ends with the newest
    snapshot."""

    def __init__(
        self,
        store: KernelStore,
        run_id: str,
        spec: RunSpec,
        state: LiveRun,
        *,
        holder: str | None = None,
        on_final: Callable[[], None] | None = None,
        lost: Callable[[], bool] = lambda: False,
    ) -> None:
        """holder: the worker holding the run; its writes of the run's row are fenced by it
        (LeaseLostError once another worker has the run)."""
        self.store = store
        self.run_id = run_id
        self.spec = spec
        self.state = state
        self.holder = holder
        # Told before a final status is written (the lease keeper stops renewing then).
        self._on_final = on_final
        # True once the worker has lost the run: nothing more is written to it.
        self._lost = lost
        self._lock = asyncio.Lock()

    async def save(self, budget: Budget | None, **fields: Any) -> None:
        """fields: RunUpdate fields to write along. budget: the run's, once it has one (None:
        the row keeps its spending figures)."""
        if fields.get("status") not in (None, "pending", "running") and self._on_final:
            self._on_final()
        checkpoint = self.state.checkpoint
        checkpoint.saved_at = time.time()
        update = RunUpdate(
            config=run_config(self.spec, checkpoint), **self._figures(budget, fields)
        )
        await self._submit(lambda: self.store.update_run(self.run_id, update, holder=self.holder))

    async def save_entry(
        self, budget: Budget | None, kind: EntryKind, key: str, **fields: Any
    ) -> None:
        """Write the checkpoint's entry (kind, key) as it is now, and the run's figures."""
        data = self.state.checkpoint.entry_data(kind, key)
        if data is None:
            raise KeyError(f"the checkpoint has no {kind} {key!r} to write")
        update = RunUpdate(**self._figures(budget, fields))

        def write() -> None:
            # The fenced row update first: a worker that lost the run stops there, before it
            # can replace an entry its successor wrote.
            self.store.update_run(self.run_id, update, holder=self.holder)
            self.store.put_run_entry(self.run_id, kind, key, data)

        await self._submit(write)

    async def move_inline_entries(self) -> int:
        """Write as entries what a run from before entries kept in its config (once, before
        the config is written without them); how many."""
        moved = self.state.checkpoint.inline_entries()
        if not moved:
            return 0

        def write() -> None:
            for kind, key, data in moved:
                self.store.put_run_entry(self.run_id, kind, key, data)

        await self._submit(write)
        self.state.checkpoint.entries_moved()
        return len(moved)

    async def _submit(self, write: Callable[[], object]) -> None:
        """Run `write` (a snapshot taken when the save was asked for) after the writes before
        it. A caller cancelled meanwhile (a stop request) does not cancel the write: waiting
        for the lock and the write itself go on, so a finished attempt is never left only in
        memory, and the lock's order keeps an older snapshot from landing after a newer one."""
        task = asyncio.ensure_future(self._locked(write))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await task
            raise

    async def _locked(self, write: Callable[[], object]) -> None:
        async with self._lock:
            # Stores are synchronous; a round trip must not stall the event loop.
            await asyncio.to_thread(write)

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

    async def record_failure(self, exc: BaseException, budget: Budget | None) -> None:
        """The run ended with exc: record it as cancelled or failed, with the reason."""
        if self._lost() or isinstance(exc, StoreOutageError | LeaseLostError):
            # The database did not answer for the whole retry window (writing now would wait
            # as long again), or another worker has the run: the run stays as stored, to be
            # resumed (interrupted), and this worker writes nothing more.
            log.warning("run %s: not recording the end (%s)", self.run_id, exc)
            return
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
