"""The one "interrupted" rule and the one speedup formula that jobs, `runs list/show` and the
live view share."""

from __future__ import annotations

import os
import socket
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.runs import (
    WORKER_HOST_ENV,
    local_worker_pid,
    process_start_token,
    run_state,
    speedup,
    worker_id_of,
)
from accelopt_mcp.store.base import RunRecord


def _run(status: str) -> RunRecord:
    return RunRecord(id="r", definition_name="d", status=status)  # type: ignore[arg-type]


def test_a_running_or_pending_run_without_a_live_worker_is_interrupted() -> None:
    gone = Checkpoint(worker_pid=2**22 + 7, worker_host=f"{socket.gethostname()}|0")
    me = Checkpoint(
        worker_pid=os.getpid(),
        worker_host=f"{socket.gethostname()}|{process_start_token(os.getpid())}",
    )
    for status in ("running", "pending"):
        assert run_state(_run(status), gone) == "interrupted"
        assert run_state(_run(status), Checkpoint()) == "interrupted"
        assert run_state(_run(status), me) == status
        assert run_state(_run(status), gone, ours_alive=True) == status
    # Queued here: about to start, so not interrupted; a queued *running* run is a stale row.
    assert run_state(_run("pending"), gone, queued=True) == "pending"
    assert run_state(_run("running"), gone, queued=True) == "interrupted"
    for final in ("completed", "failed", "cancelled", "budget_exhausted"):
        assert run_state(_run(final), gone) == final


def _held(status: str, worker_id: str, lease_s: float) -> RunRecord:
    return RunRecord(
        id="r",
        definition_name="d",
        status=status,  # type: ignore[arg-type]
        worker_id=worker_id,
        lease_expires_at=datetime.now(UTC) + timedelta(seconds=lease_s),
    )


def test_a_run_is_held_while_its_lease_runs_and_its_local_worker_lives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(WORKER_HOST_ENV, raising=False)
    me = worker_id_of(os.getpid())
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = worker_id_of(gone.pid)
    elsewhere = "another-host|1234|99"
    empty = Checkpoint()
    assert run_state(_held("running", me, 30), empty) == "running"
    assert run_state(_held("running", elsewhere, 30), empty) == "running"
    # A local holder whose process is gone frees the run at once; any holder when its lease
    # has passed.
    assert run_state(_held("running", dead, 30), empty) == "interrupted"
    assert run_state(_held("running", elsewhere, -1), empty) == "interrupted"
    assert run_state(_held("pending", me, -1), empty) == "interrupted"
    released = _held("running", me, 30).model_copy(update={"lease_expires_at": None})
    assert run_state(released, empty) == "interrupted"
    # A job manager's hold on a queued run counts as its process.
    queued = worker_id_of(os.getpid(), queue=True)
    assert queued.startswith(me + "|queue")
    assert run_state(_held("pending", queued, 30), empty) == "pending"
    assert local_worker_pid(queued) is None and local_worker_pid(me) == os.getpid()
    # Another host name (containers sharing one must set distinct ones) is not checked here.
    monkeypatch.setenv(WORKER_HOST_ENV, "box-2")
    assert run_state(_held("running", dead, 30), empty) == "running"
    assert local_worker_pid(me) is None


def test_speedup_is_baseline_over_latency_and_none_when_unknown() -> None:
    assert speedup(2.0, 0.5) == 4.0
    assert speedup(None, 0.5) is None
    assert speedup(2.0, None) is None
    assert speedup(0.0, 1.0) is None
