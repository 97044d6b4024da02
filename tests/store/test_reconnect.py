"""The PostgreSQL and Supabase stores ride out a database outage (store/_retry.py): a real
server of this module's own, really stopped and restarted; a real PostgREST stand-in with
faults injected; a real TCP proxy that loses COMMIT answers. Permanent errors still fail at
once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing

import psycopg
import pytest

from accelopt_mcp.models import LlmCallIn
from accelopt_mcp.store.base import (
    ConflictError,
    ExperienceIn,
    RunRecord,
    StoreOutageError,
    StoreUnavailableError,
    UnknownReferenceError,
)
from accelopt_mcp.store.postgres import PostgresStore
from accelopt_mcp.store.supabase import SupabaseStore
from tests.pg_server import PostgresServer, create_database, private_server
from tests.postgrest_standin.launcher import RunningStandIn
from tests.store.pg_fault_proxy import LostCommitProxy
from tests.store.samples import (
    make_definition,
    make_evaluation,
    make_solution,
    make_workload,
)
from tests.store.supabase_fixture import fresh_schema_database, serve

pytestmark = pytest.mark.postgres

SOURCE = "def run(x):\n    return x + 0\n"
HANG_BOUND_S = 120
"""Far above any wait here: only bounds a hang, says nothing about speed."""


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with private_server() as started:
        yield started


@pytest.fixture
def dsn(server: PostgresServer) -> str:
    """A fresh database with the schema, on the module's own server (up again if a test left
    it down)."""
    _ensure_up(server)
    name = f"reconnect_{uuid.uuid4().hex[:12]}"
    created = create_database(server.dsn, name)
    PostgresStore(created, init_schema=True).close()
    return created


def _ensure_up(server: PostgresServer) -> None:
    try:
        with psycopg.connect(server.dsn, connect_timeout=2):
            return
    except psycopg.OperationalError:
        server.resume()


def _resume_later(server: PostgresServer, after_s: float) -> threading.Thread:
    def resume() -> None:
        time.sleep(after_s)
        server.resume()

    thread = threading.Thread(target=resume)
    thread.start()
    return thread


def _fill_pool(store: PostgresStore, threads: int = 6) -> None:
    """Several calls at once, so that the pool holds several connections (all of which a
    restart breaks)."""
    workers = [
        threading.Thread(target=lambda: [store.list_definitions() for _ in range(10)])
        for _ in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def _run(run_id: str, definition: str) -> RunRecord:
    return RunRecord(id=run_id, definition_name=definition, status="running", config={})


# --------------------------------------------------------------------------- PostgreSQL


def test_a_long_lived_store_keeps_working_across_an_immediate_restart(
    server: PostgresServer, dsn: str
) -> None:
    with closing(PostgresStore(dsn)) as store:
        store.upsert_definition(make_definition("before"))
        _fill_pool(store)
        server.restart(mode="immediate")
        # Every pooled connection is dead now; each call gets a working one.
        for n in range(6):
            store.upsert_definition(make_definition(f"after-{n}"))
        names = {d.name for d in store.list_definitions()}
        assert store.get_definition("before") is not None
        assert store.stats().counts["definitions"] == 7
    assert names == {"before", *(f"after-{n}" for n in range(6))}


def test_a_call_made_while_the_server_is_down_succeeds_once_it_is_back(
    server: PostgresServer, dsn: str
) -> None:
    with closing(PostgresStore(dsn)) as store:
        store.upsert_definition(make_definition("silu"))
        _fill_pool(store)
        server.halt("immediate")
        comeback = _resume_later(server, 3)
        try:
            started = time.monotonic()
            stored = store.upsert_workload("silu", make_workload(uuid_="w-during-outage"))
            waited = time.monotonic() - started
        finally:
            comeback.join()
        assert waited < HANG_BOUND_S
        assert stored == "w-during-outage"
        assert [w.uuid for w in store.list_workloads("silu")] == ["w-during-outage"]
    # Really stored in the server, not only answered.
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM workloads").fetchone()
    assert row is not None and row[0] == 1


def test_an_outage_longer_than_the_window_raises_a_store_outage_error(
    server: PostgresServer, dsn: str
) -> None:
    secret = "pw-" + uuid.uuid4().hex[:8]  # the server trusts the login; the DSN carries one
    with_password = dsn.replace("postgres@", f"postgres:{secret}@")
    with closing(PostgresStore(with_password, retry_s=2)) as store:
        store.upsert_definition(make_definition("silu"))
        server.halt("immediate")
        started = time.monotonic()
        with pytest.raises(StoreOutageError) as caught:
            store.get_definition("silu")
        assert time.monotonic() - started < HANG_BOUND_S
        message = str(caught.value)
        assert isinstance(caught.value, StoreUnavailableError)
        assert "\n" not in message
        assert store.location in message and "did not answer" in message
        assert secret not in message and secret not in store.location
        assert caught.value.location == store.location and caught.value.retry_s == 2
        # Back up: the same store works again, nothing lost.
        server.resume()
        definition = store.get_definition("silu")
    assert definition is not None and definition.name == "silu"


def test_retry_window_comes_from_the_environment(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELOPT_STORE_RETRY_S", "7.5")
    with closing(PostgresStore(dsn)) as store:
        assert store.retry_s == 7.5
    with closing(PostgresStore(dsn, retry_s=0)) as store:
        assert store.retry_s == 0
    monkeypatch.setenv("ACCELOPT_STORE_RETRY_S", "soon")
    with pytest.raises(Exception, match="ACCELOPT_STORE_RETRY_S='soon' is not a number"):
        PostgresStore(dsn)


def test_permanent_errors_are_not_retried(dsn: str) -> None:
    # A 30 s window: any of these retried would take that long.
    with closing(PostgresStore(dsn, retry_s=30)) as store:
        store.upsert_definition(make_definition("silu"))
        started = time.monotonic()
        with pytest.raises(UnknownReferenceError):
            store.upsert_workload("not-stored", make_workload(uuid_="w1"))
        store.create_run(_run("r1", "silu"))
        with pytest.raises(ConflictError, match="exists already"):
            store.create_run(_run("r1", "silu"))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE experiences CASCADE")
        with pytest.raises(StoreUnavailableError, match="schema") as caught:
            store.recent_experiences(limit=5)
        assert not isinstance(caught.value, StoreOutageError)
        assert time.monotonic() - started < 15


def test_a_database_dropped_under_a_store_fails_at_once(server: PostgresServer, dsn: str) -> None:
    # Dropping it ends the store's connections (SQLSTATE 57P01, which is retried); the retry
    # then finds that the database is gone, which waiting will not mend.
    with closing(PostgresStore(dsn, retry_s=30)) as store:
        _fill_pool(store, threads=3)
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{dsn.rsplit("/", 1)[1]}" WITH (FORCE)')
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="does not exist") as caught:
            store.list_definitions()
        assert time.monotonic() - started < 15
        assert not isinstance(caught.value, StoreOutageError)


def test_a_password_changed_under_a_store_fails_at_once(server: PostgresServer, dsn: str) -> None:
    hba = server.data / "pg_hba.conf"
    original = hba.read_text()
    dbname = dsn.rsplit("/", 1)[1]
    try:
        hba.write_text(
            "local all all trust\nhost all postgres 127.0.0.1/32 trust\n"
            "host all all 127.0.0.1/32 scram-sha-256\n"
        )
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("DROP ROLE IF EXISTS bob")
            conn.execute("CREATE ROLE bob LOGIN SUPERUSER PASSWORD 'first-pw-1'")
            conn.execute("SELECT pg_reload_conf()")
        bob = f"postgresql://bob:first-pw-1@127.0.0.1:{server.port}/{dbname}"
        with closing(PostgresStore(bob, retry_s=30)) as store:
            assert store.list_definitions() == []
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                conn.execute("ALTER ROLE bob PASSWORD 'second-pw-2'")
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'bob'"
                )
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="rejected the login") as caught:
                store.list_definitions()
            assert time.monotonic() - started < 15
            assert not isinstance(caught.value, StoreOutageError)
            assert "first-pw-1" not in str(caught.value)
    finally:
        hba.write_text(original)
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")


# --------------------------------------------------------------------------- lost COMMIT answers


@pytest.fixture
def proxy(server: PostgresServer) -> Iterator[LostCommitProxy]:
    _ensure_up(server)
    started = LostCommitProxy(server.port)
    yield started
    started.close()


def test_writes_whose_commit_answer_was_lost_are_stored_once(
    dsn: str, proxy: LostCommitProxy
) -> None:
    # The proxy lets each COMMIT through, then cuts the connection before its answer: the
    # store retries a transaction that is in fact stored, and must not store it twice.
    with closing(PostgresStore(proxy.dsn(dsn.rsplit("/", 1)[1]))) as store:
        store.upsert_definition(make_definition("silu"))
        store.upsert_workload("silu", make_workload(uuid_="w1"))
        solution_id = store.upsert_solution(make_solution("silu", SOURCE))

        proxy.arm()
        store.create_run(_run("r-lost", "silu"))
        proxy.arm()
        item = ExperienceIn(run_id="r-lost", definition_name="silu", title="t", strategy="s")
        experience_id = store.add_experience(item)
        proxy.arm()
        call_id = store.add_llm_call(LlmCallIn(run_id="r-lost", role="planner", model="m"))
        proxy.arm()
        profile_id = store.upsert_profile(
            "w1", solution_id, make_evaluation(latency_ms=1.5), {"seeds": [0]}
        )
        proxy.arm()
        again = store.upsert_solution(make_solution("silu", SOURCE))

        assert proxy.lost == 5
        assert again == solution_id
        assert [r.id for r in store.list_runs()] == ["r-lost"]
        assert [e.id for e in store.recent_experiences(run_id="r-lost", limit=10)] == [
            experience_id
        ]
        assert [c.id for c in store.list_llm_calls("r-lost")] == [call_id]
        assert len(store.list_measurements(profile_id)) == 1
        counts = store.stats().counts
    assert counts["solutions"] == 1 and counts["profiles"] == 1


def test_a_lost_answer_does_not_excuse_a_later_duplicate(dsn: str, proxy: LostCommitProxy) -> None:
    with closing(PostgresStore(proxy.dsn(dsn.rsplit("/", 1)[1]))) as store:
        store.upsert_definition(make_definition("silu"))
        proxy.arm()
        store.create_run(_run("r1", "silu"))  # retried after the lost answer: its own run
        assert proxy.lost == 1
        # Another call, not a retry: the run it would create exists.
        with pytest.raises(ConflictError, match="exists already"):
            store.create_run(_run("r1", "silu"))
        assert [r.id for r in store.list_runs()] == ["r1"]


# --------------------------------------------------------------------------- Supabase


@pytest.fixture
def served(pg_admin_dsn: str, request: pytest.FixtureRequest) -> RunningStandIn:
    return serve(fresh_schema_database(pg_admin_dsn), request)


@pytest.fixture
def supabase(served: RunningStandIn) -> Iterator[SupabaseStore]:
    opened = SupabaseStore(served.url, key=served.key, timeout_s=5, retry_s=30)
    yield opened
    opened.close()


@pytest.mark.parametrize("fault", ["503", "502", "drop"])
def test_supabase_rides_out_a_transient_fault(
    supabase: SupabaseStore, served: RunningStandIn, fault: str
) -> None:
    supabase.upsert_definition(make_definition("silu"))
    served.inject(fault, count=3)
    supabase.upsert_workload("silu", make_workload(uuid_="w1"))
    assert served.clear_faults() == 3
    assert [w.uuid for w in supabase.list_workloads("silu")] == ["w1"]


def test_supabase_writes_whose_answer_was_lost_are_stored_once(
    supabase: SupabaseStore, served: RunningStandIn
) -> None:
    supabase.upsert_definition(make_definition("silu"))
    supabase.upsert_workload("silu", make_workload(uuid_="w1"))
    solution_id = supabase.upsert_solution(make_solution("silu", SOURCE))
    # Each insert below is run and committed by the stand-in, whose answer is then cut off.
    served.inject("drop_after", method="POST", path="/runs")
    supabase.create_run(_run("r1", "silu"))
    assert served.clear_faults() == 1
    served.inject("drop_after", method="POST", path="/experiences")
    item = ExperienceIn(run_id="r1", definition_name="silu", title="t", strategy="s")
    experience_id = supabase.add_experience(item)
    assert served.clear_faults() == 1
    served.inject("drop_after", method="POST", path="/measurements")
    evaluation = make_evaluation(latency_ms=1.5)
    profile_id = supabase.upsert_profile("w1", solution_id, evaluation, {"seeds": [0]})
    assert served.clear_faults() == 1
    served.inject("drop_after", method="POST", path="/solutions")
    assert supabase.upsert_solution(make_solution("silu", "def run(x):\n    return x * 1\n"))
    assert served.clear_faults() == 1

    assert [r.id for r in supabase.list_runs()] == ["r1"]
    assert [e.id for e in supabase.recent_experiences(run_id="r1", limit=10)] == [experience_id]
    assert len(supabase.list_measurements(profile_id)) == 1
    profile = supabase.get_profile(profile_id)
    assert profile is not None and profile.latency_ms == 1.5
    assert supabase.stats().counts["solutions"] == 2


def test_supabase_a_persistent_fault_ends_in_a_store_outage_error(
    served: RunningStandIn,
) -> None:
    with closing(SupabaseStore(served.url, key=served.key, timeout_s=5, retry_s=1.5)) as store:
        store.upsert_definition(make_definition("silu"))
        served.inject("503", count=-1)
        started = time.monotonic()
        with pytest.raises(StoreOutageError) as caught:
            store.get_definition("silu")
        assert time.monotonic() - started < HANG_BOUND_S
        hits = served.clear_faults()
        message = str(caught.value)
        assert hits >= 2  # it was retried
        assert "\n" not in message and served.url in message and "503" in message
        assert served.key not in message
        # The fault over, the same store works again.
        definition = store.get_definition("silu")
    assert definition is not None


def test_supabase_permanent_errors_are_not_retried(
    supabase: SupabaseStore, served: RunningStandIn
) -> None:
    started = time.monotonic()
    with pytest.raises(UnknownReferenceError):
        supabase.upsert_workload("not-stored", make_workload(uuid_="w1"))
    with psycopg.connect(served.dsn, autocommit=True) as conn:
        conn.execute("DROP VIEW solution_profiles")
    with pytest.raises(StoreUnavailableError, match="schema") as caught:
        supabase.list_profiles()
    assert not isinstance(caught.value, StoreOutageError)
    assert time.monotonic() - started < 15


def test_supabase_rides_out_a_restart_of_the_database_behind_it(
    server: PostgresServer, dsn: str, request: pytest.FixtureRequest
) -> None:
    running = serve(dsn, request)
    with closing(SupabaseStore(running.url, key=running.key, timeout_s=5)) as store:
        store.upsert_definition(make_definition("silu"))
        server.halt("immediate")
        comeback = _resume_later(server, 2)
        try:
            # The stand-in answers 503 while the database is down, then loses its
            # connections' first use: both are retried.
            store.upsert_workload("silu", make_workload(uuid_="w1"))
        finally:
            comeback.join()
        assert [w.uuid for w in store.list_workloads("silu")] == ["w1"]
