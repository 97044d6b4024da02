"""The one "interrupted" rule and the one speedup formula that jobs, `runs list/show` and the
live view share."""

from __future__ import annotations

import os
import socket

from accelopt_mcp.engine.checkpoint import Checkpoint
from accelopt_mcp.engine.runs import process_start_token, run_state, speedup
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


def test_speedup_is_baseline_over_latency_and_none_when_unknown() -> None:
    assert speedup(2.0, 0.5) == 4.0
    assert speedup(None, 0.5) is None
    assert speedup(2.0, None) is None
    assert speedup(0.0, 1.0) is None
