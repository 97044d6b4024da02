"""Claiming a run: exactly one live worker runs a run at a time, across processes and hosts.

The claim is the store's: `claim_run`, one conditional update that sets the worker's id and a
lease by the database's clock. While it runs, the worker renews the lease (LeaseKeeper), and
every write of the run's row is fenced by it (`update_run(..., holder=)`), so a worker that
lost the run — cut off from the database past its lease, or cancelled from another server —
cannot overwrite whoever has it now. A run whose worker vanished is free again when its lease
ends; at once when that worker was a process of this host that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from typing import get_args

from accelopt_mcp.engine.runs import load_run, local_worker_gone, worker_alive, worker_id_of
from accelopt_mcp.store.base import KernelStore, RunRecord, RunStatus

log = logging.getLogger(__name__)

LEASE_ENV = "ACCELOPT_LEASE_S"
DEFAULT_LEASE_S = 60.0
"""How long a claim holds without renewal: a run whose host vanished waits this long before
another worker may take it. Renewed every quarter of it."""

LOST_AT = 0.9
"""The part of the lease after which a worker that could not renew gives the run up."""

RESUMABLE: frozenset[str] = frozenset(get_args(RunStatus)) - {"completed"}
"""What a run may be taken from when no statuses are named: anything but completed (a
completed run is reopened first, by raising its iterations)."""


class RunNotRunnable(RuntimeError):
    """This process must leave the run alone; nothing was written to it."""


class RunBusy(RunNotRunnable):
    """Another live worker holds this run; this one leaves it alone."""


class RunTakenOver(RunNotRunnable):
    """This worker lost the run while running it (its lease ran out and another worker took
    it, or it was ended from elsewhere); it stopped without writing more. outage: the lease
    ran out because the database could not be reached (the run is interrupted, to be resumed
    once it answers), not because someone else took or ended the run."""

    def __init__(self, message: str, *, outage: bool = False) -> None:
        super().__init__(message)
        self.outage = outage


def lease_seconds() -> float:
    """The lease length: $ACCELOPT_LEASE_S, else DEFAULT_LEASE_S."""
    raw = os.environ.get(LEASE_ENV)
    if not raw:
        return DEFAULT_LEASE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.5 <= value <= 3600:
        raise ValueError(
            f"{LEASE_ENV}={raw!r} is not a lease length; give seconds between 0.5 and 3600 "
            f"(default {DEFAULT_LEASE_S:g})"
        )
    return value


def this_worker() -> str:
    """This process's worker id."""
    return worker_id_of(os.getpid())


def claim(
    store: KernelStore,
    run_id: str,
    worker_id: str,
    *,
    statuses: Collection[str] | None,
    lease_s: float,
    handed_over_by: str | None = None,
) -> RunRecord:
    """Take the run for worker_id, or raise RunNotRunnable (RunBusy when another live worker
    holds it) having written nothing. statuses: the states it may be taken from; None: any.
    handed_over_by: the job manager that queued the run and started this worker (it holds
    the run until the worker takes it)."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotRunnable(f"run {run_id} is not stored")
    wanted = sorted(statuses if statuses is not None else RESUMABLE)
    if run.worker_id is None:
        # A run from before leases names its worker in its checkpoint only.
        _, _, checkpoint = load_run(store, run_id)
        if run.status == "running" and worker_alive(checkpoint):
            raise RunBusy(
                f"run {run_id} is still being run by process {checkpoint.worker_pid}; wait "
                "for it, or stop it"
            )
    # The manager that queued it hands it over; a holder of this host whose process is gone
    # is displaced at once; any other holder only once its lease has passed (the store
    # decides, atomically).
    steal = None
    if handed_over_by is not None and run.worker_id == handed_over_by:
        steal = handed_over_by
    elif local_worker_gone(run.worker_id):
        steal = run.worker_id
    # A worker taking a stopped run (a resume) marks it running in the same update, so its
    # fenced writes (which need the run pending or running) go through.
    claimed = store.claim_run(
        run_id,
        worker_id,
        lease_s=lease_s,
        statuses=wanted,
        steal_from=steal,
        set_status="running",
    )
    if claimed is not None:
        return claimed
    now = store.get_run(run_id) or run
    if now.status not in wanted:
        raise RunNotRunnable(f"run {run_id} is {now.status}, not {' or '.join(wanted)}")
    until = now.lease_expires_at.strftime("%H:%M:%S UTC") if now.lease_expires_at else "?"
    raise RunBusy(
        f"run {run_id} is held by worker {now.worker_id} (lease until {until}); wait for it, "
        "or cancel it"
    )


class LeaseKeeper:
    """Renews a worker's lease while the run is worked on; when the store says the lease is
    lost, or renewal has failed for longer than the lease (another worker may have it by now),
    it calls `on_lost` once with the reason."""

    def __init__(
        self,
        store: KernelStore,
        run_id: str,
        worker_id: str,
        lease_s: float,
        on_lost: asyncio.Future[str] | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.worker_id = worker_id
        self.lease_s = lease_s
        self.lost: asyncio.Future[str] = on_lost or asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._standing_down = False
        self.lost_to_outage = False
        """Set with `lost` when renewals failed (the database unreachable) rather than being
        refused."""

    def stand_down(self) -> None:
        """This worker is writing the run's final status: from now on a renewal would fail by
        design (the run is no longer running), which is no loss, so renewing stops."""
        self._standing_down = True

    async def __aenter__(self) -> LeaseKeeper:
        # A thread of its own: renewals never wait behind the run's other store calls in the
        # shared default executor (a slow database must not expire a healthy run's lease).
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelopt-lease")
        self._task = asyncio.ensure_future(self._renew_forever())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._thread.shutdown(wait=False)

    async def _renew_forever(self) -> None:
        # The lease runs from when the database took the last renewal, which is no earlier
        # than when it was sent: counting from the send keeps this side's deadline early.
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.lease_s / 4)
            if self._standing_down:
                return
            sent = time.monotonic()
            try:
                held = await asyncio.get_running_loop().run_in_executor(
                    self._thread,
                    functools.partial(
                        self.store.renew_run_lease,
                        self.run_id,
                        self.worker_id,
                        lease_s=self.lease_s,
                    ),
                )
            except Exception as exc:
                # The database may be back before the lease ends; near its end someone else
                # may take the run, so this worker must not go on as if it held it.
                if time.monotonic() - renewed >= self.lease_s * LOST_AT:
                    self.lost_to_outage = True
                    self._lose(
                        f"could not renew the lease for {self.lease_s:g} s ({exc}); another "
                        "worker may take the run over"
                    )
                    return
                log.warning("run %s: lease renewal failed, retrying: %s", self.run_id, exc)
                continue
            if not held and not self._standing_down:
                self._lose(
                    "the run was taken over by another worker or ended elsewhere (e.g. "
                    "cancelled from another server)"
                )
                return
            renewed = sent

    def _lose(self, reason: str) -> None:
        log.warning("run %s: worker %s lost the run: %s", self.run_id, self.worker_id, reason)
        if not self.lost.done():
            self.lost.set_result(reason)
