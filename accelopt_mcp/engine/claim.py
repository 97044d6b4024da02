"""Claiming a run: only one live process may run a run at a time.

Two guards: an exclusive flock on <output_dir>/<run>/worker.lock for processes sharing an output
folder, and the worker recorded in the checkpoint for those that do not (another output folder
or host). A process that may not run the run raises before it writes anything to it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.runs import process_start_token, worker_alive
from accelopt_mcp.store.base import RunRecord


class RunNotRunnable(RuntimeError):
    """This process must leave the run alone; nothing was written to it."""


class RunBusy(RunNotRunnable):
    """Another live process is already running this run; this one leaves it alone."""


@contextlib.contextmanager
def worker_lock(output_dir: Path | None, run_id: str) -> Iterator[None]:
    """Hold an exclusive lock on <output_dir>/<run>/worker.lock for the whole run, so two
    processes (e.g. two job managers resuming the same interrupted run) never run it at once.
    Raises RunBusy, touching nothing, when another process holds it."""
    if output_dir is None:
        yield
        return
    folder = Path(output_dir) / run_id
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "worker.lock").open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunBusy(
                f"run {run_id} is already being run by another process "
                f"(it holds {folder / 'worker.lock'}); wait for it or cancel it"
            ) from None
        yield


def ensure_runnable(
    run: RunRecord, checkpoint: Checkpoint, statuses: frozenset[str] | None
) -> None:
    """Raise RunNotRunnable unless this process may run the run (checked under its lock).
    statuses: the states it may be run from; None: any."""
    if statuses is not None and run.status not in statuses:
        raise RunNotRunnable(f"run {run.id} is {run.status}, not {' or '.join(sorted(statuses))}")
    if (
        run.status == "running"
        and checkpoint.worker_pid != os.getpid()
        and worker_alive(checkpoint)
    ):
        # Its worker wrote elsewhere (another output dir or host) but is still at work.
        # (A pending run's recorded worker, if any, finished it before it was reopened.)
        raise RunBusy(
            f"run {run.id} is still being run by process {checkpoint.worker_pid} "
            f"({(checkpoint.worker_host or '').partition('|')[0]}); wait for it or cancel it"
        )


def record_worker(checkpoint: Checkpoint) -> None:
    """Name this process as the run's worker, so that others see it is taken."""
    pid = os.getpid()
    checkpoint.worker_pid = pid
    checkpoint.worker_host = f"{socket.gethostname()}|{process_start_token(pid)}"
