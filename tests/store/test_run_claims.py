"""Claiming a run with a lease: one conditional update in every store (contract)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from accelopt_mcp.store.base import (
    KernelStore,
    LeaseLostError,
    RunRecord,
    RunUpdate,
    UnknownReferenceError,
)
from tests.store.samples import make_definition

DEF = "claims_def"
LIVE = ("pending", "running")


@pytest.fixture
def run_id(store: KernelStore) -> str:
    store.upsert_definition(make_definition(DEF))
    return store.create_run(RunRecord(id="run-claim", definition_name=DEF, status="running"))


def test_a_free_run_is_claimed_with_a_lease_by_the_database_clock(
    store: KernelStore, run_id: str
) -> None:
    before = datetime.now(UTC)
    run = store.claim_run(run_id, "host-a|1|1", lease_s=30, statuses=LIVE)
    assert run is not None
    assert run.worker_id == "host-a|1|1"
    assert run.lease_expires_at is not None
    # Allow a little skew between this process and the database server.
    assert 25 < (run.lease_expires_at - before).total_seconds() < 35
    stored = store.get_run(run_id)
    assert stored is not None and stored.worker_id == "host-a|1|1"


def test_a_held_run_is_refused_to_others_and_given_again_to_its_holder(
    store: KernelStore, run_id: str
) -> None:
    assert store.claim_run(run_id, "a", lease_s=30, statuses=LIVE) is not None
    assert store.claim_run(run_id, "b", lease_s=30, statuses=LIVE) is None
    assert store.claim_run(run_id, "a", lease_s=30, statuses=LIVE) is not None
    # A holder the claimer saw dead can be displaced at once; a wrong guess cannot.
    assert store.claim_run(run_id, "b", lease_s=30, statuses=LIVE, steal_from="c") is None
    taken = store.claim_run(run_id, "b", lease_s=30, statuses=LIVE, steal_from="a")
    assert taken is not None and taken.worker_id == "b"


def test_an_expired_lease_is_free_for_any_worker(store: KernelStore, run_id: str) -> None:
    # 2 s: a stall of the host between the two calls must not expire the lease under the test.
    assert store.claim_run(run_id, "a", lease_s=2, statuses=LIVE) is not None
    assert store.claim_run(run_id, "b", lease_s=30, statuses=LIVE) is None
    time.sleep(2.5)
    taken = store.claim_run(run_id, "b", lease_s=30, statuses=LIVE)
    assert taken is not None and taken.worker_id == "b"
    # The old holder finds out at its next renewal, and its fenced writes are refused.
    assert store.renew_run_lease(run_id, "a", lease_s=30) is False
    with pytest.raises(LeaseLostError, match="held by worker b"):
        store.update_run(run_id, RunUpdate(current_iteration=3), holder="a")
    stored = store.get_run(run_id)
    assert stored is not None and stored.current_iteration == 0


def test_a_released_run_is_free_at_once(store: KernelStore, run_id: str) -> None:
    assert store.claim_run(run_id, "a", lease_s=30, statuses=LIVE) is not None
    assert store.release_run(run_id, "b") is False
    assert store.release_run(run_id, "a") is True
    stored = store.get_run(run_id)
    assert stored is not None and stored.lease_expires_at is None
    assert store.claim_run(run_id, "b", lease_s=30, statuses=LIVE) is not None


def test_claims_follow_the_run_status(store: KernelStore, run_id: str) -> None:
    assert store.claim_run(run_id, "a", lease_s=30, statuses=["pending"]) is None
    store.update_run(run_id, RunUpdate(status="completed"))
    assert store.claim_run(run_id, "a", lease_s=30, statuses=LIVE) is None
    assert store.claim_run(run_id, "a", lease_s=30, statuses=["completed"]) is not None
    with pytest.raises(UnknownReferenceError):
        store.claim_run("no-such-run", "a", lease_s=30, statuses=LIVE)


def test_renewal_and_fenced_writes_stop_once_the_run_is_ended_elsewhere(
    store: KernelStore, run_id: str
) -> None:
    assert store.claim_run(run_id, "a", lease_s=30, statuses=LIVE) is not None
    assert store.renew_run_lease(run_id, "a", lease_s=30) is True
    assert store.renew_run_lease(run_id, "b", lease_s=30) is False
    written = store.update_run(run_id, RunUpdate(current_iteration=2), holder="a")
    assert written.current_iteration == 2
    # Another server cancels it (an unfenced write): the holder may neither renew nor write.
    store.update_run(run_id, RunUpdate(status="cancelled", error="cancelled on request"))
    assert store.renew_run_lease(run_id, "a", lease_s=30) is False
    with pytest.raises(LeaseLostError, match="cancelled"):
        store.update_run(run_id, RunUpdate(status="completed"), holder="a")
    stored = store.get_run(run_id)
    assert stored is not None and stored.status == "cancelled"
    with pytest.raises(UnknownReferenceError):
        store.update_run("no-such-run", RunUpdate(current_iteration=1), holder="a")


@pytest.mark.parametrize("lease_s", [0, -1, 10**9])
def test_a_lease_out_of_range_is_refused(store: KernelStore, run_id: str, lease_s: float) -> None:
    with pytest.raises(ValueError, match="lease_s must be between"):
        store.claim_run(run_id, "a", lease_s=lease_s, statuses=LIVE)


def _race(store: KernelStore, run_id: str, workers: list[str]) -> list[str]:
    """Every worker claims the run at the same moment; the ones that got it."""
    gate = threading.Barrier(len(workers))
    won: list[str] = []
    errors: list[BaseException] = []

    def claim(worker: str) -> None:
        try:
            gate.wait()
            if store.claim_run(run_id, worker, lease_s=30, statuses=LIVE) is not None:
                won.append(worker)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(worker,)) for worker in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return won


def test_of_many_simultaneous_claimers_exactly_one_wins(store: KernelStore, run_id: str) -> None:
    for trial in range(5):
        won = _race(store, run_id, [f"t{trial}-{n}" for n in range(6)])
        assert len(won) == 1, won
        stored = store.get_run(run_id)
        assert stored is not None and stored.worker_id == won[0]
        assert store.release_run(run_id, won[0])


def test_a_worker_taking_a_stopped_run_marks_it_running_in_the_claim(
    store: KernelStore, run_id: str
) -> None:
    store.update_run(run_id, RunUpdate(status="budget_exhausted"))
    statuses = ["budget_exhausted", "failed", "pending", "running"]
    taken = store.claim_run(run_id, "a", lease_s=30, statuses=statuses, set_status="running")
    assert taken is not None and taken.status == "running"
    # Now its fenced writes go through; a queue hold (no set_status) leaves the status as is.
    store.update_run(run_id, RunUpdate(current_iteration=1), holder="a")
    store.update_run(run_id, RunUpdate(status="pending"))
    assert store.release_run(run_id, "a")
    held = store.claim_run(run_id, "queue", lease_s=30, statuses=["pending"])
    assert held is not None and held.status == "pending"
